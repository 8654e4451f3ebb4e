"""memlake's statistics under torch.cuda.memory_stats()'s keys: the mapping
over hand-made stats dicts, then over a live host-backend allocator (no
torch, no GPU), and memlake.torch's functions through the stand-in torch
(python/tests/fake_torch) in a child process."""

import os
import subprocess
import sys
import textwrap
import unittest

os.environ["MEMLAKE_CONF"] = "backend:host,capacity:256M"

import support  # noqa: E402
import memlake  # noqa: E402
from memlake.torch_stats import memory_stats_from, memory_summary_from  # noqa: E402

MiB = 1 << 20


def numbered_stats():
    """A stats dict shaped like memlake.stats(), each value distinct."""
    s = {"version": 1}
    for i, (name, kind, _) in enumerate(memlake.stat_fields()):
        s[name] = {"current": 100 + i, "peak": 1000 + i} if kind == "gauge" else 10 + i
    return s


class Mapping(unittest.TestCase):
    def test_torch_keys_come_from_their_memlake_statistics(self):
        s = numbered_stats()
        m = memory_stats_from(s)
        for key, name in [("allocated_bytes.all", "live_bytes"),
                          ("requested_bytes.all", "requested_bytes"),
                          ("reserved_bytes.all", "reserved_bytes"),
                          ("segment.all", "segments"),
                          ("active_bytes.all", "live_bytes"),
                          ("allocation.all", "live_blocks"),
                          ("active.all", "live_blocks")]:
            self.assertEqual(m[key + ".current"], s[name]["current"], key)
            self.assertEqual(m[key + ".peak"], s[name]["peak"], key)
        self.assertEqual(m["allocation.all.allocated"], s["allocs"])
        self.assertEqual(m["active.all.freed"], s["frees"])
        self.assertEqual(m["allocation.all.freed"], s["frees"])
        self.assertEqual(m["num_ooms"], s["ooms"])
        self.assertEqual(m["num_alloc_retries"], s["rung_reclaim_retry"])
        self.assertEqual(m["num_device_alloc"], s["chunks_created"])
        self.assertEqual(m["num_device_free"], s["chunks_released"])
        self.assertEqual(m["num_sync_all_streams"], s["host_waits"])
        self.assertEqual(list(m), sorted(m))

    def test_every_memlake_statistic_is_there_under_its_own_name(self):
        s = numbered_stats()
        m = memory_stats_from(s)
        for name, kind, _ in memlake.stat_fields():
            if kind == "gauge":
                self.assertEqual(m["memlake.%s.current" % name], s[name]["current"])
                self.assertEqual(m["memlake.%s.peak" % name], s[name]["peak"])
            else:
                self.assertEqual(m["memlake.%s" % name], s[name])
        self.assertNotIn("memlake.version", m)

    def test_what_memlake_does_not_keep_is_left_out(self):
        m = memory_stats_from(numbered_stats())
        for key in ("allocation.large_pool.current", "inactive_split.all.current",
                    "oversize_allocations.current", "allocated_bytes.all.allocated"):
            self.assertNotIn(key, m)

    def test_a_missing_statistic_leaves_its_keys_out(self):
        s = numbered_stats()
        del s["rung_reclaim_retry"], s["live_bytes"]
        m = memory_stats_from(s)
        self.assertNotIn("num_alloc_retries", m)
        self.assertNotIn("active_bytes.all.current", m)
        self.assertIn("num_ooms", m)


class LiveAllocator(unittest.TestCase):
    def test_stats_of_a_live_allocator(self):
        device = 3
        blocks = [(memlake.allocate(n, device=device), n) for n in (1000, 5 * MiB)]
        m = memory_stats_from(memlake.stats(device))
        self.assertEqual(m["requested_bytes.all.current"], 1000 + 5 * MiB)
        self.assertEqual(m["allocated_bytes.all.current"], 1024 + 5 * MiB)  # 512-byte rounding
        self.assertEqual(m["allocation.all.current"], 2)
        self.assertGreaterEqual(m["reserved_bytes.all.current"], 6 * MiB)
        with self.assertRaises(MemoryError):
            memlake.allocate(1 << 30, device=device)
        for p, n in blocks:
            memlake.free(p, n, device=device)
        m = memory_stats_from(memlake.stats(device))
        self.assertEqual(m["allocated_bytes.all.current"], 0)
        self.assertEqual(m["allocated_bytes.all.peak"], 1024 + 5 * MiB)
        self.assertEqual(m["allocation.all.freed"], 2)
        self.assertEqual(m["allocation.all.current"], 0)
        self.assertEqual(m["allocation.all.peak"], 2)
        self.assertEqual(m["num_ooms"], 1)
        text = memory_summary_from(memlake.stats(device), device)
        self.assertIn("memlake memory summary, device 3", text)
        self.assertIn("Allocated memory", text)
        self.assertIn("5.00 MiB", text)  # the peak of allocated memory
        self.assertRegex(text, r"Out of memory\s+1\n")


class TorchFunctions(unittest.TestCase):
    def test_memlake_torch_functions_over_the_stand_in_torch(self):
        code = textwrap.dedent("""
            import memlake, memlake.torch
            p = memlake.allocate(3 << 20, device=0)
            m = memlake.torch.memory_stats()
            assert m["requested_bytes.all.current"] == 3 << 20, m
            assert memlake.torch.memory_allocated() == 3 << 20
            assert memlake.torch.max_memory_allocated(0) == 3 << 20
            assert memlake.torch.memory_reserved("cuda:0") >= 3 << 20
            memlake.free(p, 3 << 20)
            memlake.torch.reset_peak_memory_stats()
            assert memlake.torch.max_memory_allocated() == 0
            print(memlake.torch.memory_summary())
        """)
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=120, env=support.child_env([support.FAKE_TORCH_DIR],
                                                              MEMLAKE_CONF="backend:host"))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("memlake memory summary, device 0", r.stdout)

    def test_graph_makes_the_capture_streams_workspaces_before_capturing(self):
        # Stand-ins for the torch calls memlake.torch.graph makes, logging
        # them: every matmul must run on the capture stream, and all of them
        # before the capture (torch.cuda.graph.__enter__) begins.
        code = textwrap.dedent("""
            import contextlib, torch, memlake.torch
            log, current = [], ["default"]
            class Stream:
                device = "cuda:0"
                def synchronize(self): log.append("sync")
            capture = Stream()
            class TorchGraph:
                def __init__(self, g, pool=None, stream=None, **kw):
                    self.capture_stream = stream or capture
                    log.append(("init", g, pool))
                def __enter__(self):
                    log.append("capture begins"); return self
                def __exit__(self, *a):
                    log.append("capture ends")
            @contextlib.contextmanager
            def stream(s):
                current[0] = s; yield; current[0] = "default"
            class T:
                def to(self, dtype): return T()
                def __getitem__(self, i): return T()
            def op(name):
                def run(*a): log.append((name, current[0] is capture)); return T()
                return run
            torch.cuda.graph, torch.cuda.stream = TorchGraph, stream
            torch.ones, torch.mm, torch.addmm = (lambda *a, **k: T()), op("mm"), op("addmm")
            torch.float16, torch.bfloat16 = "f16", "bf16"
            with memlake.torch.graph("g", pool=(0, 7)):
                log.append("body")
            begin = log.index("capture begins")
            ops = [e for e in log if isinstance(e, tuple) and e[0] in ("mm", "addmm")]
            assert log[0] == ("init", "g", (0, 7)), log
            assert len(ops) == 4 and all(on_capture for _, on_capture in ops), log
            assert max(log.index(e) for e in ops) < log.index("sync") < begin, log
            assert log[begin:] == ["capture begins", "body", "capture ends"], log
            print("warmed")
        """)
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=120, env=support.child_env([support.FAKE_TORCH_DIR],
                                                              MEMLAKE_CONF="backend:host"))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("warmed", r.stdout)


if __name__ == "__main__":
    support.main()
