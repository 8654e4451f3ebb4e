#!/usr/bin/env python3
"""What profiling costs a replay (docs/benchmarks.md, "Profiling overhead").

Replays a trace with memlake-replay under each configuration, interleaved
round by round so that a busy machine slows all of them alike, and reports
per configuration the median and the fastest of the replay loop's seconds
(memlake-replay's "seconds": allocate and deallocate of every event, the
timeline's recording included, its writing not) and of the host time inside
allocate/deallocate ("allocator_ns_total").

With --callgrind TRACE it also counts the instructions executed inside
memlake::Allocator::allocate and ::deallocate under valgrind's callgrind,
which the machine's load does not change: the cost of the observer calls
themselves, and (with --reference, another build's memlake-replay, e.g. the
main branch's) of the hooks when profiling is off. Valgrind's address space
is smaller than the host backend's mappings of a whole bundled trace: give
it a prefix of one (zcat trace.csv.gz | head -20000 > prefix.csv).

usage: tools/profiling_overhead.py [--rounds N] [--callgrind TRACE] [--reference OTHER_REPLAY]
                                   REPLAY TRACE
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

CONFIGS = [
    ("off", []),
    ("timeline", ["--conf", "timeline:/dev/null"]),
    ("nvtx (no tool attached)", ["--conf", "nvtx:true"]),
]


def replay(binary, trace, extra):
    out = subprocess.run([binary, trace, "--json", "--no-progress"] + extra, check=True,
                         capture_output=True, text=True).stdout
    d = json.loads(out.splitlines()[0])
    return d["seconds"], d["allocator_ns_total"] / 1e9, d["peak_reserved_bytes"]


def callgrind(binary, trace, extra):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "cg.out")
        r = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=" + out,
                            "--toggle-collect=memlake::Allocator::allocate*",
                            "--toggle-collect=memlake::Allocator::deallocate*",
                            binary, trace, "--no-progress", "--policy", "memlake"] + extra,
                           capture_output=True, text=True, check=True)
        m = re.search(r"Collected : (\d+)", r.stderr)
        return int(m.group(1))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("replay")
    p.add_argument("trace")
    p.add_argument("--rounds", type=int, default=11)
    p.add_argument("--callgrind", metavar="TRACE", help="count instructions replaying TRACE")
    p.add_argument("--reference", help="another build's memlake-replay, profiling off")
    a = p.parse_args()
    runs = [(name, a.replay, extra) for name, extra in CONFIGS]
    if a.reference:
        runs.insert(0, ("reference build, off", a.reference, []))
    seconds = {name: [] for name, _, _ in runs}
    inside = {name: [] for name, _, _ in runs}
    peaks = {}
    for _ in range(a.rounds):
        for name, binary, extra in runs:
            s, ns, peak = replay(binary, a.trace, extra)
            seconds[name].append(s)
            inside[name].append(ns)
            peaks[name] = peak
    if len(set(peaks.values())) != 1:
        sys.exit("the configurations replayed to different peaks: %s" % peaks)
    base = statistics.median(seconds["off"])
    print("%s, %d interleaved rounds; peak reserved %d bytes in every configuration"
          % (os.path.basename(a.trace), a.rounds, peaks["off"]))
    print("| configuration | replay s (median) | fastest | vs off (median) | inside allocator s (median) |")
    print("| --- | --- | --- | --- | --- |")
    for name, _, _ in runs:
        med = statistics.median(seconds[name])
        print("| %s | %.4f | %.4f | %+.1f%% | %.4f |" % (name, med, min(seconds[name]),
                                                       100 * (med / base - 1),
                                                       statistics.median(inside[name])))
    if a.callgrind:
        print()
        print("%s under callgrind:" % os.path.basename(a.callgrind))
        print("| configuration | instructions inside allocate/deallocate | vs off |")
        print("| --- | --- | --- |")
        counts = {name: callgrind(binary, a.callgrind, extra) for name, binary, extra in runs}
        for name, _, _ in runs:
            print("| %s | %d | %+.2f%% |" % (name, counts[name],
                                             100 * (counts[name] / counts["off"] - 1)))


if __name__ == "__main__":
    main()
