#!/usr/bin/env python3
"""Replays allocation traces (traces/FORMAT.md) through PyTorch's allocator
interface on the GPU, to measure what each allocator costs the allocating
thread where a training program calls it: torch's raw_alloc / raw_delete,
which reach PyTorch's caching allocator (native), its expandable segments,
cudaMallocAsync, or memlake through the pluggable-allocator path, exactly
as a tensor's allocation and its deleter do. No kernels run, so the numbers
are the allocator's host time alone, free of the step-to-step noise of a
training run.

    python3 tools/device/torch_replay.py --trace traces/gpt2_dynamic_h100.csv.gz \\
        --allocators native,expandable,memlake --rounds 3

Each allocator replays in its own process (an allocator is chosen once per
process), in interleaved rounds (A B C A B C ...). `null` replays the same
loop with a no-op in place of the allocator: the loop's own cost, to read
the others against. Per allocator and trace it prints, after warm-up (the
trace's second half, --warmup-fraction): the sum of the time inside the
allocate and free calls, allocate and free median / p99 / max, and the peak
reserved; for memlake also the time its own counters saw inside allocate and
free (allocate_ns + deallocate_ns + lock_wait_ns), so what PyTorch's
pluggable path adds shows.
--json-out writes one JSON record per process.

Two builds of memlake side by side: `memlake+TAG` (with /KEY:VALUE options
after it as usual) loads the library that MEMLAKE_LIBRARY_TAG names, e.g.
MEMLAKE_LIBRARY_old=/tmp/old/libmemlake.so --allocators native,memlake+old,memlake
"""
import argparse
import gzip
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "samples", "pytorch_training"))
from train import select_allocator  # noqa: E402  (the environment each allocator needs)

ALLOCATORS = ("null", "native", "expandable", "async", "memlake")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trace", action="append", required=True, help="a trace; repeat for more")
    p.add_argument("--allocators", default="null,native,expandable,memlake",
                   help="comma-separated, from %s; memlake variants as memlake/KEY:VALUE"
                   % ", ".join(ALLOCATORS))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--warmup-fraction", type=float, default=0.5,
                   help="the share of events before the measured part")
    p.add_argument("--json-out", help="append one JSON record per process here")
    p.add_argument("--child", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def read_trace(path):
    """The events as four lists: is-alloc, id, bytes, stream id."""
    ops, ids, sizes, streams = [], [], [], []
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        for line in f:
            if line.startswith("#") or line.startswith("ts_us"):
                continue
            _, op, ident, size, stream = line.rstrip("\n").split(",")
            ops.append(op == "alloc")
            ids.append(int(ident))
            sizes.append(int(size))
            streams.append(int(stream))
    return ops, ids, sizes, streams


def percentile(sorted_values, q):
    if not sorted_values:
        return 0
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def summary(times):
    times = sorted(times)
    return {"count": len(times), "median_ns": percentile(times, 0.5),
            "p99_ns": percentile(times, 0.99), "max_ns": times[-1] if times else 0,
            "sum_ns": sum(times)}


def allocator_name(label):
    """The allocator of a label: "memlake+old/worker:off" -> ("memlake", "old")."""
    name, _, tag = label.partition("/")[0].partition("+")
    return name, tag


def replay(label, path, warmup_fraction):
    conf = label.partition("/")[2]
    name, tag = allocator_name(label)
    if tag:
        os.environ["MEMLAKE_LIBRARY"] = os.environ["MEMLAKE_LIBRARY_" + tag]
    select_allocator(name)
    import torch
    if name == "memlake":
        import memlake.torch
        memlake.torch.enable(conf or None)
    torch.cuda.init()
    stream_handles = {0: torch.cuda.current_stream().cuda_stream}
    ops, ids, sizes, streams = read_trace(path)
    for s in set(streams):
        if s not in stream_handles:
            stream_handles[s] = torch.cuda.Stream().cuda_stream
    if name == "null":
        counter = iter(range(1, len(ops) + 1))

        def raw_alloc(size, stream):
            return next(counter)

        def raw_delete(ptr):
            return None
    else:
        raw_alloc = torch._C._cuda_cudaCachingAllocator_raw_alloc
        raw_delete = torch._C._cuda_cudaCachingAllocator_raw_delete
        raw_delete(raw_alloc(512, stream_handles[0]))  # the first call's set-up
    clock = time.perf_counter_ns
    warm_start = int(len(ops) * warmup_fraction)

    def counters():
        if name != "memlake":
            return 0
        s = memlake.torch.stats()
        return s["allocate_ns"] + s["deallocate_ns"] + s["lock_wait_ns"]

    live = {}
    alloc_times, free_times = [], []
    inside_before = 0
    start = warm_clock = clock()
    for i in range(len(ops)):
        if i == warm_start:
            inside_before = counters()
            warm_clock = clock()
        if ops[i]:
            stream = stream_handles[streams[i]]
            t0 = clock()
            ptr = raw_alloc(sizes[i], stream)
            t1 = clock()
            live[ids[i]] = ptr
            if i >= warm_start:
                alloc_times.append(t1 - t0)
        else:
            ptr = live.pop(ids[i], None)
            if ptr is None:
                raise SystemExit("%s: free of unknown id %d (event %d)" % (path, ids[i], i))
            if ptr == 0:  # a 0-byte request: nothing was allocated (cudaMallocAsync refuses it)
                continue
            t0 = clock()
            raw_delete(ptr)
            t1 = clock()
            if i >= warm_start:
                free_times.append(t1 - t0)
    end = clock()
    inside_after = counters()
    torch.cuda.synchronize()
    if name == "memlake":
        reserved = memlake.torch.max_memory_reserved()
    elif name == "null":
        reserved = 0
    else:
        reserved = torch.cuda.max_memory_reserved()
    for ptr in live.values():
        if ptr != 0:
            raw_delete(ptr)
    record = {"allocator": label, "trace": os.path.basename(path), "events": len(ops),
              "measured_events": len(ops) - warm_start, "wall_ns": end - start,
              "measured_wall_ns": end - warm_clock, "allocate": summary(alloc_times),
              "free": summary(free_times), "peak_reserved": reserved,
              "torch": torch.__version__}
    record["calls_ns"] = record["allocate"]["sum_ns"] + record["free"]["sum_ns"]
    if name == "memlake":
        record["memlake_inside_ns"] = inside_after - inside_before
        s = memlake.torch.stats()
        record["critical_path_vmm_calls"] = s["critical_path_vmm_calls"]
    return record


def run_child(args):
    label, path = args.child.split("@", 1)
    print("JSON " + json.dumps(replay(label, path, args.warmup_fraction)), flush=True)


def compare(args):
    labels = [a for a in args.allocators.split(",") if a]
    for label in labels:
        name, tag = allocator_name(label)
        if name not in ALLOCATORS or (tag and name != "memlake"):
            raise SystemExit("unknown allocator %r" % label)
        if tag and not os.environ.get("MEMLAKE_LIBRARY_" + tag):
            raise SystemExit("%s: set MEMLAKE_LIBRARY_%s to its libmemlake.so" % (label, tag))
    records = []
    for path in args.trace:
        for round_index in range(args.rounds):
            for label in labels:
                cmd = [sys.executable, os.path.abspath(__file__), "--child", label + "@" + path,
                       "--trace", path, "--warmup-fraction", str(args.warmup_fraction)]
                done = subprocess.run(cmd, capture_output=True, text=True)
                lines = [x for x in done.stdout.splitlines() if x.startswith("JSON ")]
                if done.returncode != 0 or not lines:
                    print("%s %s round %d failed (rc %d): %s" % (
                        os.path.basename(path), label, round_index + 1, done.returncode,
                        done.stderr.strip()[-400:]), flush=True)
                    continue
                record = json.loads(lines[-1][5:])
                record["round"] = round_index + 1
                records.append(record)
                if args.json_out:
                    with open(args.json_out, "a") as f:
                        f.write(json.dumps(record) + "\n")
        print_table(path, labels, records)
    return records


def median(values):
    values = sorted(values)
    return values[len(values) // 2] if values else 0


def print_table(path, labels, records):
    trace = os.path.basename(path)
    mine = [r for r in records if r["trace"] == trace]
    print("\n%s (after warm-up, median over rounds; us unless named)" % trace)
    print("%-28s %11s %9s %15s %15s %11s %11s" % (
        "allocator", "calls ms", "rounds", "alloc med/p99", "free med/p99", "alloc max",
        "reserved"))
    for label in labels:
        rs = [r for r in mine if r["allocator"] == label]
        if not rs:
            print("%-28s %11s" % (label, "failed"))
            continue
        calls = [r["calls_ns"] / 1e6 for r in rs]
        line = "%-28s %11.2f %9d %7.2f/%-7.2f %7.2f/%-7.2f %11.1f %8.2f GiB" % (
            label, median(calls), len(rs),
            median([r["allocate"]["median_ns"] for r in rs]) / 1e3,
            median([r["allocate"]["p99_ns"] for r in rs]) / 1e3,
            median([r["free"]["median_ns"] for r in rs]) / 1e3,
            median([r["free"]["p99_ns"] for r in rs]) / 1e3,
            median([r["allocate"]["max_ns"] for r in rs]) / 1e3,
            max(r["peak_reserved"] for r in rs) / 2**30)
        if "memlake_inside_ns" in rs[0]:
            line += "  (inside memlake %.2f ms)" % (
                median([r["memlake_inside_ns"] for r in rs]) / 1e6)
        print(line, flush=True)


def main(argv=None):
    args = parse_args(argv)
    if args.child:
        run_child(args)
    else:
        compare(args)


if __name__ == "__main__":
    main()
