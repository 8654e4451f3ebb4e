#!/usr/bin/env python3
"""Where a training step's time goes, from the Chrome traces that
`samples/pytorch_training/train.py --trace` records with torch.profiler.

    python3 tools/device/step_trace.py TRACE.json[.gz] [TRACE...]
    python3 tools/device/step_trace.py --ops N TRACE.json[.gz] [TRACE...]

Per traced step ("step N" ranges on the host) and per trace, in ms:
  host       the step's host time (the range), to the loss's .item();
  gpu busy   the union of the step's kernels, copies and sets on the GPU;
  gpu idle   the GPU's gaps between its first and last work of the step;
  launches   host time in cudaLaunchKernel (and the other launch calls);
  sync       host time in synchronizing calls (stream, event, device
             synchronize; cudaMemcpy to the host);
  alloc ops  host time in aten::empty and aten::empty_strided, the ATen
             ops that only allocate, where an allocator's own time shows
             (outputs that kernels make without the dispatcher are not in
             it);
  other rt   host time in every other CUDA runtime call.
A step whose host time is close to its GPU busy time is bound by the GPU;
one whose GPU idles while the host runs is bound by the host, and the host
columns say on what.

With --ops N: the host's self time (an event's time less its children's on
the same thread) per traced step, by event name (ATen ops, runtime calls,
the step ranges themselves: Python between ops), side by side for the
traces, the N names whose times differ most between the traces first. The
names where one allocator's step is longer than another's say where.
"""

import gzip
import json
import re
import sys

LAUNCH = re.compile(r"^(cudaLaunchKernel|cuLaunchKernel|cudaLaunchKernelExC|cuLaunchKernelEx)")
SYNC = re.compile(r"(Synchronize|^cudaMemcpy$|^cudaStreamWaitEvent$)")
ALLOC_OPS = {"aten::empty", "aten::empty_strided"}
GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}


def load(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        data = json.load(f)
    return data["traceEvents"] if isinstance(data, dict) else data


def union_length(intervals):
    total, end = 0.0, None
    for a, b in sorted(intervals):
        if end is None or a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total


def summarize(path):
    events = [e for e in load(path) if e.get("ph") == "X"]
    steps = sorted((e for e in events if re.match(r"^step \d+$", e.get("name", ""))
                    and e.get("cat") == "user_annotation"), key=lambda e: e["ts"])
    rows = []
    for i, s in enumerate(steps):
        start, end = s["ts"], s["ts"] + s["dur"]
        # GPU work launched in this step: from this step's start to the next's.
        limit = steps[i + 1]["ts"] if i + 1 < len(steps) else float("inf")
        gpu = [(e["ts"], e["ts"] + e["dur"]) for e in events
               if e.get("cat") in GPU_CATS and start <= e["ts"] < limit]
        host = [e for e in events if start <= e["ts"] < end]
        runtime = [e for e in host if e.get("cat") in ("cuda_runtime", "cuda_driver")]
        busy = union_length(gpu)
        span = (max(b for _, b in gpu) - min(a for a, _ in gpu)) if gpu else 0.0
        launches = sum(e["dur"] for e in runtime if LAUNCH.match(e["name"]))
        sync = sum(e["dur"] for e in runtime if SYNC.search(e["name"]))
        other = sum(e["dur"] for e in runtime) - launches - sync
        alloc = sum(e["dur"] for e in host
                    if e.get("cat") == "cpu_op" and e.get("name") in ALLOC_OPS)
        rows.append({"step": s["name"], "host": s["dur"] / 1e3, "gpu_busy": busy / 1e3,
                     "gpu_idle": (span - busy) / 1e3, "launches": launches / 1e3,
                     "sync": sync / 1e3, "alloc_ops": alloc / 1e3, "other_runtime": other / 1e3,
                     "kernels": len(gpu)})
    return rows


def self_times_per_step(path):
    """Host self time in ms per traced step, by event name."""
    events = [e for e in load(path) if e.get("ph") == "X" and "dur" in e]
    steps = [(e["ts"], e["ts"] + e["dur"]) for e in events
             if re.match(r"^step \d+$", e.get("name", "")) and e.get("cat") == "user_annotation"]
    # GPU-side ranges (gpu_user_annotation) and the profiler's own buffers
    # are not the host's work.
    host = [e for e in events if e.get("cat") not in GPU_CATS
            and not str(e.get("cat", "")).startswith(("gpu_", "overhead"))
            and e.get("name") != "Activity Buffer Request"
            and any(a <= e["ts"] < b for a, b in steps)]
    by_thread = {}
    for e in host:
        by_thread.setdefault((e.get("pid"), e.get("tid")), []).append(e)
    totals = {}
    for thread_events in by_thread.values():
        thread_events.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack, child_time = [], {}
        for e in thread_events:
            while stack and stack[-1]["ts"] + stack[-1]["dur"] <= e["ts"]:
                stack.pop()
            if stack:
                parent = id(stack[-1])
                child_time[parent] = child_time.get(parent, 0.0) + e["dur"]
            stack.append(e)
        for e in thread_events:
            name = re.sub(r"\d+", "N", e.get("name", "?")) if e.get("cat") == "user_annotation" \
                else e.get("name", "?")
            totals[name] = totals.get(name, 0.0) + e["dur"] - child_time.get(id(e), 0.0)
    return {name: t / 1e3 / max(len(steps), 1) for name, t in totals.items()}


def main_ops(count, paths):
    tables = [self_times_per_step(path) for path in paths]
    names = set().union(*tables)
    spread = lambda n: max(t.get(n, 0.0) for t in tables) - min(t.get(n, 0.0) for t in tables)
    print("host self ms per step, by name, the %d that differ most first" % count)
    print("%-48s " % "name" + " ".join("%12s" % p.split("/")[-1][:12] for p in paths))
    for name in sorted(names, key=spread, reverse=True)[:count]:
        print("%-48s " % name[:48] + " ".join("%12.2f" % t.get(name, 0.0) for t in tables))
    print("%-48s " % "(all)" + " ".join("%12.2f" % sum(t.values()) for t in tables))
    return 0


def main(paths):
    columns = ("host", "gpu_busy", "gpu_idle", "launches", "sync", "alloc_ops", "other_runtime")
    print("%-34s %-8s " % ("trace", "step") + " ".join("%10s" % c for c in columns)
          + " %8s" % "kernels")
    for path in paths:
        for row in summarize(path):
            print("%-34s %-8s " % (path.split("/")[-1][:34], row["step"])
                  + " ".join("%10.2f" % row[c] for c in columns) + " %8d" % row["kernels"])
    return 0


if __name__ == "__main__":
    if len(sys.argv) < 2 or (sys.argv[1] == "--ops" and len(sys.argv) < 4):
        print(__doc__)
        sys.exit(2)
    if sys.argv[1] == "--ops":
        sys.exit(main_ops(int(sys.argv[2]), sys.argv[3:]))
    sys.exit(main(sys.argv[1:]))
