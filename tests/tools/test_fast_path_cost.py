"""tools/fast_path_cost.py: the trace it cuts in half, the callgrind_annotate
rows it reads, and (where valgrind is installed; MEMLAKE_REPLAY names
memlake-replay) a run over a repeated trace."""

import os
import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import fast_path_cost  # noqa: E402

HEADER = ["# memlake-trace v1 workload=test source=test", "ts_us,op,id,bytes,stream"]


def repeated_steps(steps):
    """Each step: two blocks allocated, then freed in the order they came."""
    events, t = [], 0
    for step in range(steps):
        for k, size in enumerate((3 << 20, 5 << 20)):
            events.append("%d,alloc,%d,%d,0" % (t, 2 * step + k, size))
            t += 1
        for k, size in enumerate((3 << 20, 5 << 20)):
            events.append("%d,free,%d,%d,0" % (t, 2 * step + k, size))
            t += 1
    return events


class Trace(unittest.TestCase):
    def test_the_first_half_keeps_the_header_and_every_free_after_its_allocation(self):
        events = repeated_steps(3)
        half = fast_path_cost.first_half(HEADER, events)
        self.assertEqual(half[:2], HEADER)
        self.assertEqual(half[2:], events[:6])
        allocated = set()
        for e in half[2:]:
            _, op, ident, _, _ = e.split(",")
            if op == "alloc":
                allocated.add(ident)
            else:
                self.assertIn(ident, allocated)
        # Events 6-11: the last two frees of step 2, then step 3.
        self.assertEqual(fast_path_cost.count_ops(events[6:]), {"allocate": 2, "deallocate": 4})


class Annotate(unittest.TestCase):
    TEXT = """--------------------------------------------------------------------------------
Ir                   D1mr               D1mw               Dw
--------------------------------------------------------------------------------
108,632,849 (100.0%) 5,458,432 (100.0%) 1,337,544 (100.0%) 9,000 (100.0%)  PROGRAM TOTALS
68,801,787 (63.33%) 3,475,460 (63.67%)   896,778 (67.05%) 100 (1.0%)  ???:memlake::Allocator::allocate(unsigned long, void*) [/x/memlake-replay]
 4,419,602  331,005  28,062  0  ./src/lake.cpp:memlake::lake::Lake::free(unsigned long, memlake::FenceId, bool) [/x/memlake-replay]
 1,424,940 (1.31%) 166,180 (3.04%) 9,090 (0.68%) 5 (0.1%)  ./nptl/pthread_mutex_trylock.c:pthread_mutex_trylock@@GLIBC_2.34 [/usr/lib/libc.so.6]
"""

    def test_rows_are_by_function_without_file_and_object(self):
        rows = fast_path_cost.parse_annotate(self.TEXT)
        self.assertEqual(rows["memlake::Allocator::allocate(unsigned long, void*)"],
                         (68801787, 3475460, 896778))
        self.assertEqual(rows["memlake::lake::Lake::free(unsigned long, memlake::FenceId, bool)"],
                         (4419602, 331005, 28062))
        self.assertIn("pthread_mutex_trylock@@GLIBC_2.34", rows)
        self.assertEqual(len(rows), 3)  # not the totals
        self.assertEqual(fast_path_cost.entry(rows, "allocate"), (68801787, 3475460, 896778))
        self.assertEqual(fast_path_cost.entry(rows, "deallocate"), (0, 0, 0))

    def test_the_difference_is_the_second_half(self):
        whole = {"f": (10, 6, 2), "g": (5, 1, 1)}
        half = {"f": (4, 2, 1)}
        self.assertEqual(fast_path_cost.difference(whole, half), {"f": (6, 4, 1), "g": (5, 1, 1)})


class UnderCallgrind(unittest.TestCase):
    def test_a_repeated_trace_costs_instructions_and_lines_in_both_calls(self):
        replay = os.environ.get("MEMLAKE_REPLAY", "")
        if not shutil.which("valgrind") or not shutil.which("callgrind_annotate"):
            self.skipTest("valgrind is not installed")
        if not os.access(replay, os.X_OK):
            self.skipTest("MEMLAKE_REPLAY does not name memlake-replay")
        with tempfile.TemporaryDirectory() as d:
            trace = os.path.join(d, "t.csv")
            Path(trace).write_text("\n".join(HEADER + repeated_steps(200)) + "\n")
            out = subprocess.run([sys.executable, str(ROOT / "tools" / "fast_path_cost.py"),
                                  "--top", "5", replay, trace],
                                 check=True, capture_output=True, text=True).stdout
        self.assertIn("second half: 200 allocations, 200 frees", out)
        table = {}
        for line in out.splitlines():
            cells = [c.strip() for c in line.strip("|").split("|")]
            if cells[0] in ("allocate", "deallocate"):
                table[cells[0]] = [float(c) for c in cells[1:]]
        self.assertEqual(set(table), {"allocate", "deallocate"})
        for op, (instructions, read, written) in table.items():
            self.assertGreater(instructions, 100, op)
            self.assertGreater(read + written, 1, op)
            # A repeated step's call is bounded: not the warm-up's mapping work.
            self.assertLess(instructions, 20000, op)
        self.assertIn("memlake::", out.split("by function")[1])


if __name__ == "__main__":
    result = unittest.main(exit=False, verbosity=2).result
    if not result.wasSuccessful():
        sys.exit(1)
    sys.exit(77 if result.testsRun and len(result.skipped) == result.testsRun else 0)
