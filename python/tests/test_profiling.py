"""Profiling from Python without a GPU (docs/profiling.md): the C API's
allocators with the timeline option over the host backend.

- memlake.dump_timeline writes Chrome Trace Event JSON whose counters equal
  memlake.stats();
- memlake.dump_snapshot writes the pickle pytorch.org/memory_viz reads: the
  keys and types PyTorch's readers use (torch/cuda/_memory_viz.py,
  torch/utils/viz/MemoryViz.js), checked with the standard library's pickle,
  and with torch.cuda._memory_viz itself where torch is installed;
- memlake.torch.oom_errors() turns memlake's out-of-memory RuntimeError into
  torch.OutOfMemoryError (the real torch, else the stand-in in fake_torch/).
"""

import json
import os
import pickle
import subprocess
import sys
import tempfile
import textwrap
import unittest
from pathlib import Path

TMP = tempfile.mkdtemp(prefix="memlake-profiling-")
os.environ["MEMLAKE_CONF"] = ("backend:host,capacity:256M,worker:inline,timeline:%s/exit-{device}.json"
                              % TMP)

import support  # noqa: E402
import memlake  # noqa: E402

MiB = 1 << 20

try:
    import torch as _real_torch  # noqa: F401
    from torch.cuda import _memory_viz
    HAVE_TORCH = True
except ImportError:
    HAVE_TORCH = False


def workload():
    """Blocks on two devices, a third of them freed; returns the live ones."""
    live = []
    for device in (0, 1):
        blocks = []
        for i in range(24):
            size = (i % 5 + 1) * MiB // 3 + 4096 * i
            blocks.append((memlake.allocate(size, device=device), size, device))
        for j, (p, size, d) in enumerate(blocks):
            if j % 3 == 0:
                memlake.free(p, size, device=d, stream=0)
            else:
                live.append((p, size, d))
    return live


LIVE = workload()


class Timeline(unittest.TestCase):
    def test_dump_timeline_counters_equal_the_stats(self):
        path = Path(TMP) / "timeline.json"
        memlake.dump_timeline(str(path), device=1)
        doc = json.loads(path.read_text())
        self.assertEqual(doc["otherData"]["device"], 1)
        last = {}
        names = {}
        for e in doc["traceEvents"]:
            for key in ("ph", "pid", "name"):
                self.assertIn(key, e)
            if e["ph"] != "M":
                self.assertGreaterEqual(e["ts"], 0)
            if e["ph"] == "C":
                last[e["name"]] = e["args"]["bytes"]
            if e["ph"] == "X":
                self.assertGreaterEqual(e["dur"], 0)
            names[e["name"]] = names.get(e["name"], 0) + 1
        stats = memlake.stats(1)
        self.assertEqual(last["live bytes"], stats["live_bytes"]["current"])
        self.assertEqual(last["reserved bytes"], stats["reserved_bytes"]["current"])
        self.assertEqual(last["mapped bytes"], stats["mapped_bytes"]["current"])
        self.assertEqual(sum(n for k, n in names.items() if k.startswith("alloc ")),
                         stats["allocs"])
        self.assertEqual(names["free"], stats["frees"])

    def test_bad_arguments_are_errors(self):
        with self.assertRaises(TypeError):
            memlake.dump_timeline(42)
        with self.assertRaises(ValueError):
            memlake.dump_timeline("x.json", device=64)
        with self.assertRaises(RuntimeError) as e:
            memlake.dump_timeline("/nonexistent-dir/t.json")
        self.assertIn("/nonexistent-dir/t.json", str(e.exception))
        with self.assertRaises(RuntimeError) as e:
            memlake.dump_timeline(str(Path(TMP) / "t.json"), device=7)
        self.assertIn("device 7 has no allocator yet", str(e.exception))


class Snapshot(unittest.TestCase):
    def load(self):
        path = Path(TMP) / "snapshot.pickle"
        self.assertEqual(memlake.dump_snapshot(str(path)), str(path))
        with open(path, "rb") as f:
            return pickle.load(f)

    def test_keys_and_types_are_those_pytorchs_readers_use(self):
        data = self.load()
        self.assertIsInstance(data, dict)
        self.assertIsInstance(data["segments"], list)
        self.assertIsInstance(data["device_traces"], list)
        self.assertEqual(len(data["device_traces"]), 2, "devices 0 and 1")
        for seg in data["segments"]:
            for key, kind in (("device", int), ("address", int), ("total_size", int),
                              ("allocated_size", int), ("active_size", int),
                              ("requested_size", int), ("stream", int), ("segment_type", str),
                              ("segment_pool_id", tuple), ("blocks", list), ("frames", list),
                              ("is_expandable", bool)):
                self.assertIsInstance(seg[key], kind, key)
            self.assertIn(seg["segment_type"], ("small", "large"))
            addr = seg["address"]
            for b in seg["blocks"]:  # MemoryViz.js's annotate_snapshot walks them so
                self.assertEqual(b["address"], addr)
                for key in ("size", "requested_size", "address"):
                    self.assertIsInstance(b[key], int)
                self.assertIsInstance(b["frames"], list)
                self.assertIn(b["state"], ("active_allocated", "inactive"))
                addr += b["size"]
            self.assertEqual(addr, seg["address"] + seg["total_size"])
        for device, trace in enumerate(data["device_traces"]):
            for e in trace:
                self.assertIn(e["action"], ("alloc", "free_requested", "free_completed",
                                            "segment_map", "segment_unmap", "oom"))
                for key in ("addr", "size", "stream", "time_us"):
                    self.assertIsInstance(e[key], int, key)
                self.assertIsInstance(e["frames"], list)

    def test_it_holds_the_live_blocks_and_the_stats(self):
        data = self.load()
        active = {}
        for seg in data["segments"]:
            for b in seg["blocks"]:
                if b["state"] == "active_allocated":
                    active[(seg["device"], b["address"])] = b["requested_size"]
        self.assertEqual(active, {(d, p): size for p, size, d in LIVE})
        for device in (0, 1):
            stats = memlake.stats(device)
            segs = [s for s in data["segments"] if s["device"] == device]
            self.assertEqual(sum(s["allocated_size"] for s in segs),
                             stats["live_bytes"]["current"])
            self.assertEqual(sum(s["total_size"] for s in segs),
                             stats["mapped_bytes"]["current"])
            trace = data["device_traces"][device]
            self.assertEqual(sum(e["action"] == "alloc" for e in trace), stats["allocs"])
            self.assertEqual(sum(e["action"] == "free_completed" for e in trace),
                             stats["frees"])

    def test_one_device(self):
        data = memlake.snapshot(device=1)
        self.assertEqual({s["device"] for s in data["segments"]}, {1})
        self.assertEqual(data["device_traces"][0], [])

    def test_without_the_timeline_option_the_error_says_so(self):
        code = textwrap.dedent("""
            import memlake
            memlake.free(memlake.allocate(1 << 20), 1 << 20)
            try:
                memlake.snapshot()
            except RuntimeError as e:
                print("error:", e)
        """)
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           env=support.child_env(MEMLAKE_CONF="backend:host,capacity:64M"),
                           timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("needs the timeline option", r.stdout)

    @unittest.skipUnless(HAVE_TORCH, "needs torch (torch.cuda._memory_viz)")
    def test_pytorchs_own_readers_take_it(self):
        data = self.load()
        text = _memory_viz.segsum(data)
        self.assertIn("total_reserved", text)
        self.assertIn("entries", _memory_viz.trace(data))
        self.assertIn("snapshot.pickle", _memory_viz.trace_plot(data))


class TorchOutOfMemory(unittest.TestCase):
    """The mapping runs in a child with the real torch where it is
    installed, else with the stand-in (which defines torch.OutOfMemoryError as
    PyTorch does: a RuntimeError subclass)."""

    def test_oom_errors_raises_torch_out_of_memory_error(self):
        code = textwrap.dedent("""
            import memlake, memlake.torch, torch
            try:
                memlake.allocate(1 << 40)
            except MemoryError as e:
                report = str(e)   # what PyTorch's RuntimeError carries
            assert "memlake: out of memory" in report, report
            try:
                with memlake.torch.oom_errors():
                    raise RuntimeError(report)
            except torch.OutOfMemoryError as e:
                assert str(e) == report
                assert isinstance(e, RuntimeError)
                assert isinstance(e.__cause__, RuntimeError)
                print("mapped")

            @memlake.torch.oom_errors()
            def step():
                raise RuntimeError(report)
            try:
                step()
            except torch.cuda.OutOfMemoryError:
                print("decorated")

            try:
                with memlake.torch.oom_errors():
                    raise RuntimeError("shape mismatch")
            except torch.OutOfMemoryError:
                print("wrongly mapped")
            except RuntimeError:
                print("other errors pass")
            assert memlake.torch.torch_oom_error(ValueError(report)) is None
        """)
        extra = () if HAVE_TORCH else (support.FAKE_TORCH_DIR,)
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           env=support.child_env(extra, MEMLAKE_CONF="backend:host,capacity:64M"),
                           timeout=120)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(r.stdout.split(), ["mapped", "decorated", "other", "errors", "pass"])


if __name__ == "__main__":
    support.main()
