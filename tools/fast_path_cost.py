#!/usr/bin/env python3
"""What one allocate and one deallocate cost once a trace's steps repeat, in
instructions and in cache lines touched, by function, under valgrind's
callgrind (counts that do not move with the machine's load).

    tools/fast_path_cost.py [--top N] [--lines L] REPLAY TRACE

REPLAY is a memlake-replay binary, TRACE a memlake-trace (a repeated one:
`tools/synth_trace.py --repeat`, or a fixed-shape run recorded with the
`record` option). The tool replays TRACE and its first half, each under
callgrind collecting inside memlake::Allocator::allocate and ::deallocate
only, and takes the difference: the second half alone, after warm-up.

Lines touched: the first-level data cache is simulated as L fully
associative lines (default 64, 4 KiB). Between two allocator calls a
training process runs the framework's own work, which leaves little of the
allocator's data in the nearest caches; a call's misses in so small a cache
count about the distinct lines it touches, each of which then comes from
farther away. On the GPU machine such misses, not instructions, are most of
the time a call takes through PyTorch.
"""

import argparse
import gzip
import os
import re
import subprocess
import sys
import tempfile

TOGGLES = ["--toggle-collect=memlake::Allocator::allocate*",
           "--toggle-collect=memlake::Allocator::deallocate*"]
ENTRY = {"allocate": "memlake::Allocator::allocate(",
         "deallocate": "memlake::Allocator::deallocate("}


def read_events(path):
    """(header lines, event lines) of a memlake-trace, gzip or plain."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        lines = f.read().splitlines()
    header = [l for l in lines if l.startswith("#") or l.startswith("ts_us")]
    events = [l for l in lines if l and not (l.startswith("#") or l.startswith("ts_us"))]
    return header, events


def first_half(header, events):
    """The trace cut after half its events: every free in it follows its
    allocation, so it is a valid trace of its own."""
    return header + events[:len(events) // 2]


def count_ops(events):
    ops = {"allocate": 0, "deallocate": 0}
    for e in events:
        op = e.split(",")[1]
        ops["allocate" if op == "alloc" else "deallocate"] += 1
    return ops


NUMBER = r"([\d,]+)(?:\s+\([^)]*\))?"
ROW = re.compile(r"^\s*" + r"\s+".join([NUMBER] * 4) + r"\s+(\S.*)$")


def parse_annotate(text):
    """callgrind_annotate --show=Ir,D1mr,D1mw,Dw output: by function name,
    (instructions, lines read, lines written)."""
    rows = {}
    for line in text.splitlines():
        m = ROW.match(line)
        if not m or "PROGRAM TOTALS" in line:
            continue
        ir, d1mr, d1mw, _ = (int(m.group(i).replace(",", "")) for i in range(1, 5))
        name = re.sub(r"^\S*?:", "", m.group(5), count=1)  # the file, often ???
        name = re.sub(r"\s+\[[^\]]*\]$", "", name)  # the object
        rows[name] = (ir, d1mr, d1mw)
    return rows


def run_callgrind(replay, trace, lines, inclusive):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "cg.out")
        cmd = ["valgrind", "--tool=callgrind", "--cache-sim=yes",
               "--D1=%d,%d,64" % (lines * 64, lines), "--callgrind-out-file=" + out] + TOGGLES + \
              [replay, trace, "--no-progress", "--policy", "memlake"]
        subprocess.run(cmd, check=True, capture_output=True)
        return [parse_annotate(subprocess.run(
            ["callgrind_annotate", "--inclusive=" + ("yes" if inc else "no"),
             "--show=Ir,D1mr,D1mw,Dw", "--threshold=100", out],
            check=True, capture_output=True, text=True).stdout) for inc in inclusive]


def difference(whole, half):
    return {k: tuple(a - b for a, b in zip(v, half.get(k, (0, 0, 0)))) for k, v in whole.items()}


def entry(rows, op):
    for name, v in rows.items():
        if name.startswith(ENTRY[op]):
            return v
    return (0, 0, 0)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("replay")
    p.add_argument("trace")
    p.add_argument("--top", type=int, default=20, help="functions listed (default 20)")
    p.add_argument("--lines", type=int, default=64,
                   help="cache lines of the simulated first-level cache (default 64)")
    a = p.parse_args()
    header, events = read_events(a.trace)
    ops = count_ops(events[len(events) // 2:])
    with tempfile.TemporaryDirectory() as tmp:
        half_path = os.path.join(tmp, "half.csv")
        with open(half_path, "w") as f:
            f.write("\n".join(first_half(header, events)) + "\n")
        whole_inc, whole_self = run_callgrind(a.replay, a.trace, a.lines, (True, False))
        half_inc, half_self = run_callgrind(a.replay, half_path, a.lines, (True, False))
    inclusive = difference(whole_inc, half_inc)
    own = difference(whole_self, half_self)
    print("%s, second half: %d allocations, %d frees; a %d-line first-level cache"
          % (os.path.basename(a.trace), ops["allocate"], ops["deallocate"], a.lines))
    print("| call | instructions | lines read | lines written |")
    print("| --- | ---: | ---: | ---: |")
    for op in ("allocate", "deallocate"):
        ir, rd, wr = entry(inclusive, op)
        n = max(ops[op], 1)
        print("| %s | %.0f | %.1f | %.1f |" % (op, ir / n, rd / n, wr / n))
    calls = max(ops["allocate"] + ops["deallocate"], 1)
    print("\nby function (its own), per call of either kind: lines touched, instructions")
    ranked = sorted(own.items(), key=lambda kv: -(kv[1][1] + kv[1][2]))
    for name, (ir, rd, wr) in ranked[:a.top]:
        print("%6.2f %7.0f  %s" % ((rd + wr) / calls, ir / calls, name[:100]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
