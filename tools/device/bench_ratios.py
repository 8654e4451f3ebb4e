#!/usr/bin/env python3
"""Ratios of memlake's microbenchmarks against the CUDA allocators.

Reads the JSON that memlake_bench writes (--benchmark_format=json, or
--benchmark_out=FILE --benchmark_out_format=json) and prints, per operation
and argument, the time of each allocator and the ratios memlake / cuda_async
and memlake / cuda_malloc (below 1: memlake is faster; the other memlake
variants are shown but not in the ratios), as a Markdown table,
followed by the project's targets and whether the run met them. Benchmark
names have the shape <operation>/<allocator>/<argument>[/...]. With
repetitions, the median is used. Standard library only.

usage: bench_ratios.py bench.json
"""
import json
import sys

UNIT_NS = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}
ALLOCATORS = [
    "memlake", "memlake_noworker", "memlake_1g_chunks",
    "cuda_async", "cuda_malloc", "memlake_host",
]
OPS = ["cached", "new", "stitch", "stitch_cached", "stitch_host"]
WHAT = {
    "cached": "alloc+free pair, cached, one stream",
    "new": "allocation that needs new memory",
    "stitch": "N x 2 MiB from N free 2 MiB pieces",
    "stitch_cached": "N x 2 MiB again, stitched range kept mapped",
    "stitch_host": "stitch on the HostBackend",
}


def load(path):
    with open(path) as f:
        data = json.load(f)
    times = {}  # (op, arg, allocator) -> ns
    medians = set()
    for b in data.get("benchmarks", []):
        if b.get("error_occurred"):
            continue
        run_type = b.get("run_type", "iteration")
        if run_type == "aggregate" and b.get("aggregate_name") != "median":
            continue
        parts = b.get("run_name", b["name"]).split("/")
        if len(parts) < 3:
            continue
        key = (parts[0], int(parts[2]), parts[1])
        ns = float(b["real_time"]) * UNIT_NS[b.get("time_unit", "ns")]
        if run_type == "aggregate":
            medians.add(key)
            times[key] = ns
        elif key not in medians:
            # Without repetitions there is one iteration run per benchmark;
            # with repetitions but no aggregates, keep the fastest.
            times[key] = min(ns, times.get(key, ns))
    return data.get("context", {}), times


def fmt_size(op, arg):
    if op.startswith("stitch"):
        return f"N={arg}"
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if arg >= div and arg % div == 0:
            return f"{arg // div} {unit}"
    return f"{arg} B"


def fmt_ns(ns):
    if ns is None:
        return "-"
    if ns >= 1e6:
        return f"{ns / 1e6:.2f} ms"
    if ns >= 1e3:
        return f"{ns / 1e3:.1f} us"
    return f"{ns:.0f} ns"


def ratio(a, b):
    return None if a is None or b is None or b == 0 else a / b


def fmt_ratio(r):
    return "-" if r is None else f"{r:.3g}"


def main(argv):
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    context, times = load(argv[1])
    if not times:
        print("no benchmark results (all skipped?)")
        return 1
    print(f"host: {context.get('host_name', '?')}, {context.get('num_cpus', '?')} CPUs, "
          f"date {context.get('date', '?')}, library build {context.get('library_build_type', '?')}")
    print()
    print("| operation | size | " + " | ".join(ALLOCATORS)
          + " | memlake / cuda_async | memlake / cuda_malloc |")
    print("| --- | --- |" + " ---: |" * (len(ALLOCATORS) + 2))
    keys = sorted({(op, arg) for op, arg, _ in times},
                  key=lambda k: (OPS.index(k[0]) if k[0] in OPS else len(OPS), k[0], k[1]))
    for op, arg in keys:
        t = {a: times.get((op, arg, a)) for a in ALLOCATORS}
        print(f"| {op} ({WHAT.get(op, op)}) | {fmt_size(op, arg)} | "
              + " | ".join(fmt_ns(t[a]) for a in ALLOCATORS)
              + f" | {fmt_ratio(ratio(t['memlake'], t['cuda_async']))}"
              + f" | {fmt_ratio(ratio(t['memlake'], t['cuda_malloc']))} |")
    print()
    print("targets:")
    for op, arg in keys:
        if op != "cached":
            continue
        m = times.get((op, arg, "memlake"))
        r_async = ratio(m, times.get((op, arg, "cuda_async")))
        r_malloc = ratio(m, times.get((op, arg, "cuda_malloc")))
        if r_async is not None:
            print(f"  cached {fmt_size(op, arg)}: memlake / cuda_async = {r_async:.3f} "
                  f"(target <= 1.0): {'met' if r_async <= 1.0 else 'NOT met'}")
        if r_malloc is not None:
            print(f"  cached {fmt_size(op, arg)}: cuda_malloc / memlake = {1 / r_malloc:.1f}x "
                  f"(target >= 10x): {'met' if r_malloc <= 0.1 else 'NOT met'}")
    for alloc, how in (("memlake", "default config"), ("memlake_noworker", "worker off")):
        s = times.get(("stitch", 512, alloc))
        if s is not None:
            print(f"  1 GiB from 512 free 2 MiB chunks, {how}, on the allocating thread: "
                  f"{fmt_ns(s)} (target < 1 ms): {'met' if s < 1e6 else 'NOT met'}")
    c = times.get(("stitch_cached", 512, "memlake"))
    if c is not None:
        print(f"  (for comparison) 1 GiB again from its cached stitched range: {fmt_ns(c)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
