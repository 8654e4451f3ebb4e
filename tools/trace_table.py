#!/usr/bin/env python3
"""Replays traces through one or more memlake-replay builds and prints a
markdown table per trace: one row per build and --conf, and a row with the
ratio of the last build to the first (NEW/OLD) per --conf. Standard library
only.

  tools/trace_table.py --replay old=../old/build/tools/memlake-replay \\
      --replay new=build/tools/memlake-replay \\
      --conf "" --conf host_simulate_latency:true --synth all traces/

Columns: peak live and peak reserved bytes, utilization, bytes beyond what
was needed (`beyond_needed_bytes`, newer builds), allocate p99 and
critical-path VMM calls after warm-up, the allocations that mapped after
warm-up (and of them those over reserved memory only), `allocator_ns_total` and
`critical_path_vmm_ns` (top level or in `stats`). A value a build does not
report shows as "-". Each trace runs in a process of its own, so a crash
costs one cell: its exit status and last stderr lines are printed under the
table, and this script then exits with status 1 (a trace that does not fit
--capacity, exit 1 of memlake-replay, is a result, not a crash).

--synth writes tools/synth_trace.py's families for unseen patterns (all, or
a comma list of kinds) with --seeds (default 1,2) at their default steps,
geometric_infer also with --small-live, into a temporary directory.
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import synth_trace  # noqa: E402

COLUMNS = [  # heading, JSON key, kind of value
    ("peak live", "peak_live_bytes", "bytes"),
    ("peak reserved", "peak_reserved_bytes", "bytes"),
    ("util", "utilization", "ratio"),
    ("beyond needed", "beyond_needed_bytes", "bytes"),
    ("alloc p99 (warm)", "alloc_ns_after_warmup.p99", "ns"),
    ("cp VMM (warm)", "critical_path_vmm_calls_after_warmup", "count"),
    ("allocs that mapped (warm)", "allocs_mapping_after_warmup", "count"),
    ("of them over reserved", "allocs_mapping_reserved_after_warmup", "count"),
    ("allocator ns", "allocator_ns_total", "ns"),
    ("cp VMM ns", "critical_path_vmm_ns", "ns"),
]


def lookup(result, key):
    """A dotted key at the top level, else in `stats` ({current, peak}
    counts give their current value); None when absent."""
    for scope in (result, result.get("stats", {})):
        value = scope
        for part in key.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        if isinstance(value, dict):
            value = value.get("current")
        if value is not None:
            return value
    return None


def show(value, kind):
    if value is None:
        return "-"
    if kind == "bytes":
        return f"{value / 2**30:.2f} GiB" if abs(value) >= 2**30 else f"{value / 2**20:.1f} MiB"
    if kind == "ns":
        for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
            if value >= scale:
                return f"{value / scale:.3g} {unit}"
        return f"{value} ns"
    if kind == "ratio":
        return f"{value:.3f}"
    return f"{value:,}"


def ratio(new, old):
    if new is None or old is None or old == 0:
        return "-"
    return f"{new / old:.2f}x"


def replay(binary, conf, trace, timeout):
    """One trace through one build: (JSON object or None, failure or None)."""
    cmd = [binary, "--json", "--no-progress"] + (["--conf", conf] if conf else []) + [trace]
    try:
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, f"timed out after {timeout} s"
    lines = [x for x in run.stdout.splitlines() if x.startswith("{")]
    result = json.loads(lines[-1]) if lines else None
    if run.returncode not in (0, 1) or result is None:
        last = [x.strip() for x in run.stderr.splitlines() if x.strip()][-2:] or ["(no stderr)"]
        status = f"exit {run.returncode}" if run.returncode >= 0 else f"{signal.Signals(-run.returncode).name}"
        return result, f"{status}: {' / '.join(last)}"
    return result, None


def synthesize(kinds, seeds, directory):
    paths = []
    for kind in kinds:
        for seed in seeds:
            for small_live in (False, True) if kind == "geometric_infer" else (False,):
                path = os.path.join(directory, f"{kind}{'_smalllive' * small_live}_s{seed}.csv.gz")
                synth_trace.write_trace(path, kind, seed, small_live=small_live)
                paths.append(path)
    return paths


def trace_files(args):
    files = []
    for path in args:
        if os.path.isdir(path):
            files += sorted(os.path.join(path, f) for f in os.listdir(path) if f.endswith((".csv.gz", ".csv")))
        else:
            files.append(path)
    return files


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("traces", nargs="*", help="trace files or directories of them")
    ap.add_argument("--replay", action="append", metavar="[NAME=]PATH",
                    help="a memlake-replay binary; repeat for before/after (default build/tools/memlake-replay)")
    ap.add_argument("--conf", action="append", metavar="KEY:VALUE,...",
                    help="a configuration to run every trace with; repeat for several ('' is the default)")
    ap.add_argument("--synth", metavar="all|KIND,...", help="also replay these synthetic families")
    ap.add_argument("--seeds", default="1,2", help="seeds for --synth (default 1,2)")
    ap.add_argument("--timeout", type=int, default=600, help="seconds per replay (default 600)")
    ap.add_argument("--raw", metavar="FILE", help="also write every JSON result, one per line, to FILE")
    args = ap.parse_args()

    builds = []
    for spec in args.replay or ["build/tools/memlake-replay"]:
        name, _, path = spec.rpartition("=")
        builds.append((name or path, path))
    for _, path in builds:
        if not os.access(path, os.X_OK):
            ap.error(f"{path}: not an executable")
    confs = args.conf or [""]
    with tempfile.TemporaryDirectory(prefix="trace_table.") as tmp:
        traces = trace_files(args.traces)
        if args.synth:
            kinds = synth_trace.UNSEEN if args.synth == "all" else args.synth.split(",")
            unknown = [k for k in kinds if k not in synth_trace.KINDS]
            if unknown:
                ap.error(f"unknown kinds: {', '.join(unknown)}")
            traces += synthesize(kinds, [int(s) for s in args.seeds.split(",")], tmp)
        if not traces:
            ap.error("no traces given")
        raw = open(args.raw, "w") if args.raw else None
        crashed = False
        for trace in traces:
            rows, failures, events = [], [], None
            for conf in confs:
                results = []
                for name, path in builds:
                    result, failure = replay(path, conf, trace, args.timeout)
                    results.append(result or {})
                    if failure:
                        crashed = True
                        failures.append(f"{name} `{conf or 'default'}`: {failure}")
                    if result:
                        events = result.get("events", events)
                        if raw:
                            raw.write(json.dumps(dict(result, build=name, conf=conf)) + "\n")
                    cells = [show(lookup(result or {}, key), kind) for _, key, kind in COLUMNS]
                    rows.append([name, conf or "default"] + cells)
                if len(builds) > 1:
                    old, new = results[0], results[-1]
                    cells = [ratio(lookup(new, key), lookup(old, key)) for _, key, _ in COLUMNS]
                    rows.append([f"{builds[-1][0]}/{builds[0][0]}", conf or "default"] + cells)
            name = os.path.basename(trace).replace(".csv.gz", "").replace(".csv", "")
            print(f"\n### {name}" + (f" ({events:,} events)" if events else ""))
            print("| build | conf | " + " | ".join(h for h, _, _ in COLUMNS) + " |")
            print("|---|---|" + "---:|" * len(COLUMNS))
            for row in rows:
                print("| " + " | ".join(row) + " |")
            for failure in failures:
                print(f"\nFAILED {failure}")
            sys.stdout.flush()
        if raw:
            raw.close()
    return 1 if crashed else 0


if __name__ == "__main__":
    sys.exit(main())
