"""memlake.torch on a GPU: each test runs a child Python process (PyTorch
picks its allocator once per process) that switches to memlake, with
enable(), memlake-run or MEMLAKE_ENABLE, and checks what the program sees.
Skips without torch or a GPU (exit status 77: ctest reports it skipped)."""

import subprocess
import sys
import tempfile
import textwrap
import unittest
from pathlib import Path

import support

try:
    import torch
    HAVE_GPU = torch.cuda.is_available()
except ImportError:
    HAVE_GPU = False


def run_child(body, env=None, args=()):
    return subprocess.run([sys.executable, "-c", textwrap.dedent(body)] + list(args),
                          capture_output=True, text=True, env=support.child_env(**(env or {})),
                          timeout=300)


# A training step that knows nothing of memlake; it checks, through memlake's
# statistics, that memlake served its tensors, and prints its argv.
UNCHANGED_PROGRAM = textwrap.dedent("""
    import sys
    import torch
    x = torch.arange(1 << 22, device="cuda", dtype=torch.float32)
    w = torch.randn(1024, 1024, device="cuda", requires_grad=True)
    loss = (x[: 1 << 20].view(1024, 1024) @ w).square().mean()
    loss.backward()
    torch.cuda.synchronize()
    assert int(x[-1]) == (1 << 22) - 1
    import memlake, memlake.torch
    assert memlake.torch.is_enabled()
    m = memlake.torch.memory_stats()
    assert m["allocated_bytes.all.current"] >= (16 << 20) + (4 << 20), m
    assert m["allocation.all.allocated"] >= 3, m
    assert memlake.stats(torch.cuda.current_device())["allocs"] >= 3
    print("served by memlake, argv", sys.argv[1:])
""")


@unittest.skipUnless(HAVE_GPU, "needs torch with a CUDA GPU")
class TorchOnMemlake(unittest.TestCase):
    def check(self, body, env=None, args=()):
        r = run_child(body, env, args)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        return r.stdout

    def test_tensors_read_back_intact_and_stats_follow(self):
        out = self.check("""
            import torch, memlake.torch
            memlake.torch.enable()
            n = 50_000_000
            x = torch.arange(n, device="cuda", dtype=torch.int64)
            assert memlake.torch.memory_allocated() >= 8 * n
            ys = [torch.full((1 << k,), k, device="cuda", dtype=torch.int32) for k in range(4, 26)]
            for k, y in zip(range(4, 26), ys):
                assert int(y.sum()) == k * (1 << k), k
            assert int(x.sum()) == n * (n - 1) // 2
            a = torch.randn(2048, 2048, device="cuda")
            b = torch.randn(2048, 2048, device="cuda")
            assert torch.allclose((a @ b).cpu(), a.cpu() @ b.cpu(), rtol=1e-3, atol=1e-2)
            s = memlake.torch.stats()
            assert s["host_waits"] == 0, s["host_waits"]
            print("reserved", memlake.torch.memory_reserved(), "peak", memlake.torch.max_memory_reserved())
        """)
        self.assertIn("reserved", out)

    def test_out_of_memory_is_a_runtime_error_and_memlake_stays_usable(self):
        self.check("""
            import torch, memlake.torch
            memlake.torch.enable("capacity:2G")
            keep = torch.ones(256 << 20, device="cuda", dtype=torch.uint8)
            try:
                torch.empty(4 << 30, device="cuda", dtype=torch.uint8)
                raise SystemExit("4 GiB fit in a 2 GiB memlake")
            except RuntimeError as e:
                assert "out of memory" in str(e), str(e)
                assert "capacity" in str(e), str(e)
            y = torch.full((512 << 20,), 3, device="cuda", dtype=torch.uint8)
            assert bool(torch.all(y == 3))
            assert bool(torch.all(keep == 1))
        """)

    def test_record_stream_keeps_a_block_until_the_other_stream_is_done(self):
        # The side stream sleeps, then adds 1 to x. x is freed on the default
        # stream meanwhile; y (same size) must not get x's memory before the
        # add ran, or y's 7s become 8s.
        self.check("""
            import torch, memlake.torch
            memlake.torch.enable()
            n = 64 << 20
            x = torch.zeros(n // 4, device="cuda", dtype=torch.int32)
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                torch.cuda._sleep(200_000_000)
                x.add_(1)
            x.record_stream(side)
            del x
            y = torch.full((n // 4,), 7, device="cuda", dtype=torch.int32)
            torch.cuda.synchronize()
            assert int((y == 7).sum()) == n // 4, "y was overwritten by the side stream's add"
            assert memlake.torch.stats()["host_waits"] == 0
        """)

    def test_empty_cache_returns_memory(self):
        self.check("""
            import torch, memlake.torch
            memlake.torch.enable()
            xs = [torch.empty(s << 20, device="cuda", dtype=torch.uint8) for s in (3, 70, 300)]
            del xs
            torch.cuda.synchronize()
            assert memlake.torch.memory_reserved() > 0
            torch.cuda.empty_cache()
            assert memlake.torch.memory_reserved() == 0, memlake.torch.memory_reserved()
        """)

    def test_memory_fraction_before_first_use_limits_capacity(self):
        self.check("""
            import torch, memlake.torch
            memlake.torch.enable()
            torch.cuda.set_per_process_memory_fraction(0.05)
            total = torch.cuda.get_device_properties(0).total_memory
            x = torch.empty(int(total * 0.03), device="cuda", dtype=torch.uint8)
            try:
                torch.empty(int(total * 0.04), device="cuda", dtype=torch.uint8)
                raise SystemExit("the fraction did not limit memlake")
            except RuntimeError as e:
                assert "out of memory" in str(e), str(e)
        """)

    def test_enable_after_cuda_use_explains_itself(self):
        r = run_child("""
            import torch, memlake.torch
            torch.ones(1, device="cuda")
            memlake.torch.enable()
        """)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("must run before the first CUDA tensor", r.stderr)

    def test_memory_stats_have_torch_keys_with_memlake_numbers(self):
        self.check("""
            import torch, memlake.torch
            memlake.torch.enable()
            a = torch.empty(1000, device="cuda", dtype=torch.uint8)
            b = torch.empty(3 << 20, device="cuda", dtype=torch.uint8)
            m = memlake.torch.memory_stats()
            assert m["requested_bytes.all.current"] == 1000 + (3 << 20), m
            assert m["allocated_bytes.all.current"] == 1024 + (3 << 20), m
            assert m["allocated_bytes.all.current"] == memlake.torch.memory_allocated()
            assert m["reserved_bytes.all.peak"] == memlake.torch.max_memory_reserved()
            assert m["num_ooms"] == 0 and m["num_sync_all_streams"] == 0, m
            del a, b
            torch.cuda.synchronize()
            assert memlake.torch.memory_stats()["allocated_bytes.all.current"] == 0
            print(memlake.torch.memory_summary())
        """)

    def test_torch_cuda_statistics_are_memlakes(self):
        # torch.cuda's own functions, which the plain pluggable allocator
        # refuses, answer from memlake's statistics under the compiled one.
        self.check("""
            import torch, memlake, memlake.torch
            memlake.torch.enable(graph_trees=True)
            a = torch.empty(1000, device="cuda", dtype=torch.uint8)
            b = torch.empty(3 << 20, device="cuda", dtype=torch.uint8)
            assert torch.cuda.memory_allocated() == 1024 + (3 << 20), torch.cuda.memory_allocated()
            assert torch.cuda.memory_allocated() == memlake.torch.memory_allocated()
            assert torch.cuda.memory_reserved() == memlake.torch.memory_reserved() > 0
            assert torch.cuda.max_memory_reserved() == memlake.torch.max_memory_reserved()
            m = torch.cuda.memory_stats()
            assert m["requested_bytes.all.current"] == 1000 + (3 << 20), m
            assert m["allocation.all.current"] == 2 and m["allocation.all.peak"] >= 2, m
            assert m["segment.all.current"] == memlake.stats()["segments"]["current"], m
            del b
            assert torch.cuda.max_memory_allocated() >= 1024 + (3 << 20)
            torch.cuda.reset_peak_memory_stats()
            assert torch.cuda.max_memory_allocated() == torch.cuda.memory_allocated() == 1024
            torch.cuda.reset_accumulated_memory_stats()
            assert torch.cuda.memory_stats()["allocation.all.allocated"] == 0
            c = torch.empty(5000, device="cuda", dtype=torch.uint8)
            m = torch.cuda.memory_stats()
            assert m["allocation.all.allocated"] == 1 and m["allocation.all.current"] == 2, m
            try:
                torch.empty(1 << 50, device="cuda", dtype=torch.uint8)
                raise AssertionError("a petabyte was served")
            except RuntimeError as e:
                assert "out of memory" in str(e), e
            assert torch.cuda.memory_stats()["num_ooms"] == 1
            summary = torch.cuda.memory_summary()
            assert "Allocated memory" in summary, summary
            print(summary)
        """)

    def test_cudnn_benchmark_convolutions_run_on_memlake(self):
        # cuDNN's benchmark mode bounds its workspace by the allocator's
        # cacheInfo, which the plain pluggable allocator refuses.
        self.check("""
            import torch, memlake.torch
            memlake.torch.enable(graph_trees=True)
            torch.manual_seed(0)
            conv = torch.nn.Conv2d(16, 32, 3, padding=1).cuda()
            x = torch.randn(8, 16, 64, 64, device="cuda", requires_grad=True)
            torch.backends.cudnn.benchmark = False
            y0 = conv(x)
            g0, = torch.autograd.grad(y0.square().sum(), x)
            torch.backends.cudnn.benchmark = True
            for _ in range(3):
                y = conv(x)
                g, = torch.autograd.grad(y.square().sum(), x)
            assert torch.allclose(y, y0, rtol=1e-3, atol=1e-3), (y - y0).abs().max()
            assert torch.allclose(g, g0, rtol=1e-3, atol=1e-2), (g - g0).abs().max()
            print("cudnn benchmark on memlake, largest difference", float((y - y0).abs().max()))
        """)

    def test_torch_memory_history_and_snapshot_are_memlakes(self):
        # torch.cuda.memory._record_memory_history / _snapshot / _dump_snapshot
        # (pytorch.org/memory_viz), which the plain pluggable allocator
        # refuses, record memlake's allocations with their Python stacks.
        with tempfile.TemporaryDirectory() as tmp:
            out = self.check("""
                import pickle, sys, torch, memlake.torch
                memlake.torch.enable(graph_trees=True)
                before = torch.empty(1 << 20, device="cuda")
                torch.cuda.memory._record_memory_history(max_entries=1000)

                def make_activation():
                    return torch.ones(3 << 20, device="cuda")

                a = make_activation()
                b = torch.empty(1000, device="cuda", dtype=torch.uint8)
                del b
                s = torch.cuda.memory._snapshot()
                dev = torch.cuda.current_device()
                trace = s["device_traces"][dev]
                actions = [(e["action"], e["addr"], e["size"]) for e in trace]
                assert ("alloc", a.data_ptr(), 3 << 22) in actions, actions
                frees = [e for e in trace if e["action"] == "free_completed"]
                assert len(frees) == 1 and frees[0]["size"] == 1000, frees
                alloc = next(e for e in trace if e["addr"] == a.data_ptr())
                names = [f["name"] for f in alloc["frames"]]
                assert "make_activation" in names, names
                assert all(t["time_us"] > 0 for t in trace)
                addresses = {seg["address"] for seg in s["segments"]}
                assert a.data_ptr() in addresses and before.data_ptr() in addresses, addresses
                seg = next(x for x in s["segments"] if x["address"] == a.data_ptr())
                assert seg["blocks"][0]["state"] == "active_allocated", seg
                assert seg["total_size"] == 3 << 22, seg
                torch.cuda.memory._dump_snapshot(sys.argv[1])
                with open(sys.argv[1], "rb") as f:
                    dumped = pickle.load(f)
                assert len(dumped["device_traces"][dev]) == len(trace), dumped.keys()
                from torch.cuda import _memory_viz
                assert "<html" in _memory_viz.trace_plot(dumped).lower()
                assert int(a[-1]) == 1  # the tensor's bytes, through all of it
                torch.cuda.memory._record_memory_history(enabled=None)
                c = torch.empty(4096, device="cuda")
                assert not torch.cuda.memory._snapshot()["device_traces"][dev]
                print("history entries", len(trace), "segments", len(s["segments"]))
            """, args=[str(Path(tmp) / "snapshot.pickle")])
        self.assertIn("history entries", out)

    def test_memlake_run_switches_an_unchanged_program(self):
        with tempfile.TemporaryDirectory() as tmp:
            program = Path(tmp) / "train.py"
            program.write_text(UNCHANGED_PROGRAM)
            r = subprocess.run([sys.executable, "-m", "memlake.run", str(program), "--lr", "1"],
                               capture_output=True, text=True, env=support.child_env(),
                               timeout=300)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("served by memlake, argv ['--lr', '1']", r.stdout)

    def test_memlake_enable_switches_an_unchanged_program(self):
        # In a source tree memlake.pth is not installed: run its line first,
        # as site.py does at start-up for an installed package.
        hook = support.HOOK_FILE.read_text()
        r = run_child(hook + "\nimport runpy, sys\nsys.argv[0] = 'train.py'\n" +
                      "exec(compile(%r, 'train.py', 'exec'))\n" % UNCHANGED_PROGRAM,
                      env={"MEMLAKE_ENABLE": "1"}, args=["--steps", "2"])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("served by memlake, argv ['--steps', '2']", r.stdout)

    def test_bad_option_is_a_value_error_naming_it(self):
        r = run_child("""
            import memlake.torch
            memlake.torch.enable("capacty:2G")
        """)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("ValueError", r.stderr)
        self.assertIn("capacty", r.stderr)


if __name__ == "__main__":
    support.main()
