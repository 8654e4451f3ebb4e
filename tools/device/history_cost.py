#!/usr/bin/env python3
"""history_cost.py: what PyTorch's memory history costs per allocation, under
PyTorch's own allocator and under memlake, in interleaved rounds.

Each case runs in a child process (PyTorch picks its allocator once per
process): 20,000 tensors of eight sizes from 4 KiB to 16 MiB allocated and
freed, timed with the history off, then on with Python stacks
(stacks="python"), then on with Python and C++ stacks (stacks="all", the
default); microseconds per allocation and free, the median of three runs
in each child. Run on a GPU machine with MEMLAKE_LIBRARY and PYTHONPATH set
as for python/tests: python3 tools/device/history_cost.py [rounds]."""

import json
import subprocess
import sys

CHILD = r"""
import json, statistics, sys, time
import torch
if sys.argv[1] == "memlake":
    import memlake.torch
    memlake.torch.enable(graph_trees=True)
sizes = [1 << s for s in (12, 14, 16, 18, 20, 22, 23, 24)]
torch.empty(1, device="cuda")

def run(n=20000):
    torch.cuda.synchronize()
    t = time.perf_counter()
    for i in range(n):
        x = torch.empty(sizes[i % len(sizes)], device="cuda", dtype=torch.uint8)
        del x
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / n * 1e6

out = {}
for mode in ("off", "python", "all"):
    if mode != "off":
        torch.cuda.memory._record_memory_history(max_entries=100000, stacks=mode)
    run(2000)
    out[mode] = statistics.median(run() for _ in range(3))
    if mode != "off":
        torch.cuda.memory._record_memory_history(enabled=None)
print(json.dumps(out))
"""


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    results = {"pytorch": [], "memlake": []}
    for _ in range(rounds):
        for allocator in ("pytorch", "memlake"):
            r = subprocess.run([sys.executable, "-c", CHILD, allocator], capture_output=True,
                               text=True, timeout=300)
            if r.returncode != 0:
                sys.exit("%s failed:\n%s" % (allocator, r.stderr[-3000:]))
            results[allocator].append(json.loads(r.stdout.strip().splitlines()[-1]))
    print("us per allocation and free, each round; median over rounds")
    for allocator, runs in results.items():
        for mode in ("off", "python", "all"):
            values = sorted(run[mode] for run in runs)
            print("%-8s history %-6s %s  median %.2f" % (
                allocator, mode, " ".join("%.2f" % run[mode] for run in runs),
                values[len(values) // 2]))


if __name__ == "__main__":
    main()
