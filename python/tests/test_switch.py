"""Switching a program to memlake without editing it, on a machine without
PyTorch: memlake-run (and python -m memlake.run) and MEMLAKE_ENABLE's
start-up hook over the stand-in torch (python/tests/fake_torch), which
records what memlake plugs in; enable()'s graph_trees choices where the
allocator for CUDA graph trees cannot be built (the stand-in has no C++
library); and the messages when torch is missing.
test_torch_gpu.py runs the same switches against the real PyTorch."""

import os
import subprocess
import sys
import tempfile
import textwrap
import unittest
from pathlib import Path

import support
import memlake

INSTALLED = os.environ.get("MEMLAKE_TEST_INSTALLED") == "1"

# The program being switched: it reports, before anything else, whether its
# `import torch` already found memlake plugged in, then its argv.
PROGRAM = textwrap.dedent("""
    import sys
    import torch
    a = torch.cuda.memory.current_allocator
    print("plugged", a is not None and a.alloc_fn_name, a is not None and a.path)
    if a is not None:
        hooks = a.allocator()
        print("hooks", all((hooks.record_stream_fn, hooks.reset_fn, hooks.memory_fraction_fn)))
        print("graph hooks", all((hooks.begin_allocate_to_pool_fn, hooks.end_allocate_to_pool_fn,
                                  hooks.release_pool_fn)))
        import torch._inductor.config
        print("inductor graph trees", torch._inductor.config.triton.cudagraph_trees)
    print("argv", sys.argv)
    print("name", __name__)
""")


def run(args, extra_paths=(support.FAKE_TORCH_DIR,), cwd=None, **variables):
    return subprocess.run(args, capture_output=True, text=True, timeout=120, cwd=cwd,
                          env=support.child_env(extra_paths, **variables))


class Switch(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.program = Path(self.tmp.name) / "train.py"
        self.program.write_text(PROGRAM)
        (Path(self.tmp.name) / "trainmod.py").write_text(PROGRAM)

    def assert_switched(self, r, argv):
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("plugged memlake_torch_malloc", r.stdout)
        self.assertIn("libmemlake.so", r.stdout)
        self.assertIn("hooks True", r.stdout)
        self.assertIn("graph hooks True", r.stdout)
        self.assertIn("inductor graph trees True", r.stdout)  # left as PyTorch has it
        self.assertIn("argv %r" % (argv,), r.stdout)
        self.assertIn("name __main__", r.stdout)

    def test_memlake_run_runs_the_script_with_its_argv(self):
        r = run([sys.executable, "-m", "memlake.run", str(self.program), "--lr", "3", "-m", "x"])
        self.assert_switched(r, [str(self.program), "--lr", "3", "-m", "x"])

    def test_enable_can_select_inductors_plain_graphs(self):
        r = run([sys.executable, "-c", textwrap.dedent("""
            import memlake.torch, torch._inductor.config as config
            memlake.torch.enable(plain_inductor_graphs=True)
            print("inductor graph trees", config.triton.cudagraph_trees)
        """)])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("inductor graph trees False", r.stdout)

    def test_exclusive_plain_graphs_put_inductors_captures_in_one_group(self):
        r = run([sys.executable, "-c", textwrap.dedent("""
            import memlake, memlake.torch, torch
            import torch._inductor.config as config, torch._inductor.compile_fx as fx
            own_graph = torch.cuda.graph
            memlake.torch.enable(plain_inductor_graphs="exclusive")
            assert config.triton.cudagraph_trees is False
            assert memlake.torch.inductor_graph_group() is None
            a = fx.cudagraphify_impl(None, [])
            b = fx.cudagraphify_impl(None, [])
            assert torch.cuda.graph is own_graph, "torch.cuda.graph not put back"
            assert isinstance(a, own_graph) and a.capture_stream == "capture stream"
            assert a.pool is not None and b.pool is not None and a.pool != b.pool
            group = memlake.torch.inductor_graph_group()
            assert group, group
            for pool in (a.pool, b.pool):  # a pool is made at its first capture
                memlake.begin_allocate_to_pool(pool)
                memlake.end_allocate_to_pool(pool)
                assert memlake.pool_stats(pool)["group"] == group, memlake.pool_stats(pool)
            mine = torch.cuda.graph(object(), pool=(7, 7))  # a user's capture: untouched
            assert mine.pool == (7, 7) and not isinstance(mine, type(a))
            # Each replay of a graph of the group waits, GPU-side, for the
            # group's last replay, on whatever stream it runs.
            log = []
            class Event:
                def record(self, stream): log.append(("record", stream, self)); self.on = stream
            class Stream:
                def __init__(self, name): self.name = name
                def wait_event(self, e): log.append(("wait", self, e))
            s1, s2 = Stream("s1"), Stream("s2")
            current = [s1]
            torch.cuda.Event, torch.cuda.current_stream = Event, lambda device=None: current[0]
            a.cuda_graph.replay()
            current[0] = s2
            b.cuda_graph.replay()
            a.cuda_graph.replay()
            assert fx.CUDAGraph.replays == [a.cuda_graph, b.cuda_graph, a.cuda_graph]
            kinds = [entry[0] for entry in log]
            assert kinds == ["record", "wait", "record", "wait", "record"], kinds
            assert log[1] == ("wait", s2, log[0][2]) and log[3] == ("wait", s2, log[2][2]), log
            print("one group", group)
        """)])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("one group", r.stdout)

    # The allocator with the calls of CUDA graph trees is compiled against
    # the installed torch (memlake/_torch_build.py): the stand-in torch has
    # no C++ library, so its build always fails here.

    GRAPH_TREES = textwrap.dedent("""
        import sys, warnings, torch, memlake.torch
        kwargs = eval(sys.argv[1])
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                memlake.torch.enable(**kwargs)
            except (RuntimeError, ValueError) as e:
                print("raised", type(e).__name__, str(e).replace("\\n", " "))
        a = torch.cuda.memory.current_allocator
        print("plugged", a is not None and a.alloc_fn_name)
        for w in caught:
            print("warning", w.category.__name__, str(w.message).replace("\\n", " "))
    """)

    def graph_trees(self, kwargs="{}", **variables):
        r = run([sys.executable, "-c", self.GRAPH_TREES, kwargs],
                MEMLAKE_CACHE_DIR=self.tmp.name, **variables)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        return r.stdout

    def test_enable_warns_and_plugs_memlake_in_when_the_build_fails(self):
        out = self.graph_trees()
        self.assertIn("plugged memlake_torch_malloc", out)
        self.assertIn("warning RuntimeWarning memlake:", out)
        self.assertIn("_GLIBCXX_USE_CXX11_ABI", out)  # why it failed
        self.assertIn("PyTorch refuses CUDA graph trees", out)
        self.assertIn("plain_inductor_graphs=True", out)

    def test_graph_trees_true_raises_the_failure(self):
        out = self.graph_trees("{'graph_trees': True}")
        self.assertIn("raised BuildError memlake:", out)
        self.assertIn("_GLIBCXX_USE_CXX11_ABI", out)
        self.assertIn("plugged False", out)
        out = self.graph_trees(MEMLAKE_GRAPH_TREES="1")
        self.assertIn("raised BuildError memlake:", out)

    def test_graph_trees_off_builds_nothing_and_says_nothing(self):
        for kwargs, variables in (("{'graph_trees': False}", {}),
                                  ("{}", {"MEMLAKE_GRAPH_TREES": "0"})):
            out = self.graph_trees(kwargs, **variables)
            self.assertIn("plugged memlake_torch_malloc", out)
            self.assertNotIn("warning", out)
        self.assertEqual(list(Path(self.tmp.name).glob("torch_allocator-*")), [])

    def test_graph_trees_takes_three_values(self):
        out = self.graph_trees("{'graph_trees': 'yes'}")
        self.assertIn("raised ValueError graph_trees:", out)
        out = self.graph_trees(MEMLAKE_GRAPH_TREES="maybe")
        self.assertIn("raised ValueError memlake: MEMLAKE_GRAPH_TREES='maybe'", out)

    def test_plain_inductor_graphs_takes_three_values(self):
        r = run([sys.executable, "-c", textwrap.dedent("""
            import memlake.torch
            try:
                memlake.torch.enable(plain_inductor_graphs="shared")
            except ValueError as e:
                print("refused:", e)
        """)])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("refused: plain_inductor_graphs", r.stdout)
        self.assertIn("'shared'", r.stdout)

    def test_memlake_run_runs_a_module(self):
        r = run([sys.executable, "-m", "memlake.run", "-m", "trainmod", "a", "b"],
                extra_paths=(support.FAKE_TORCH_DIR, self.tmp.name))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("plugged memlake_torch_malloc", r.stdout)
        self.assertIn("'a', 'b']", r.stdout)

    def test_memlake_run_adds_its_options_and_marks_the_environment(self):
        self.program.write_text("import os, torch\nprint(os.environ['MEMLAKE_CONF'], "
                                "os.environ['MEMLAKE_ENABLE'])\n")
        r = run([sys.executable, "-m", "memlake.run", "--conf", "capacity:1G", str(self.program)],
                MEMLAKE_CONF="backend:host")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("backend:host,capacity:1G 1", r.stdout)

    def test_memlake_run_names_a_bad_option(self):
        r = run([sys.executable, "-m", "memlake.run", "--conf", "capacty:1G", str(self.program)])
        self.assertEqual(r.returncode, 2)
        self.assertIn("memlake-run:", r.stderr)
        self.assertIn("capacty", r.stderr)
        self.assertNotIn("plugged", r.stdout)

    def test_memlake_run_usage_errors(self):
        for args, message in [([], "no program to run"), (["--conf"], "--conf needs a value"),
                              (["--bogus", "x.py"], "unknown option --bogus")]:
            r = run([sys.executable, "-m", "memlake.run"] + args)
            self.assertEqual(r.returncode, 2, args)
            self.assertIn(message, r.stderr)
        r = run([sys.executable, "-m", "memlake.run", "/nonexistent/train.py"])
        self.assertEqual(r.returncode, 2)
        self.assertIn("/nonexistent/train.py: no such file", r.stderr)

    def test_memlake_run_without_torch_says_so(self):
        r = run([sys.executable, "-m", "memlake.run", str(self.program)],
                extra_paths=(support.NO_TORCH_DIR,))
        self.assertEqual(r.returncode, 2)
        self.assertIn("memlake.torch needs PyTorch", r.stderr)
        self.assertIn("No module named 'torch'", r.stderr)

    @unittest.skipUnless(INSTALLED, "the console script exists once installed")
    def test_the_console_script(self):
        script = str(Path(sys.executable).parent / "memlake-run")
        r = run([script, str(self.program), "--x"])
        self.assert_switched(r, [str(self.program), "--x"])

    # The start-up hook. In the source tree memlake.pth is not installed, so
    # these run its line themselves; with the package installed, the real one
    # runs at start-up (test_installed_hook_*).

    def hook_line(self):
        return support.HOOK_FILE.read_text().strip()

    def test_hook_line_does_nothing_when_unset(self):
        code = self.hook_line() + "\nimport sys\nprint(sorted(m for m in sys.modules if m.split('.')[0] in ('memlake', 'torch')))\n"
        for value in (None, "", "0"):
            r = run([sys.executable, "-c", code], MEMLAKE_ENABLE=value)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(r.stdout.strip(), "[]", value)

    def test_hook_line_enables_memlake_when_torch_is_imported(self):
        code = self.hook_line() + "\n" + PROGRAM
        r = run([sys.executable, "-c", code, "--steps", "2"], MEMLAKE_ENABLE="1")
        self.assert_switched(r, ["-c", "--steps", "2"])

    def test_hook_does_not_import_torch_by_itself(self):
        code = self.hook_line() + "\nimport sys\nprint('torch' in sys.modules)\n"
        r = run([sys.executable, "-c", code], MEMLAKE_ENABLE="1")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.strip(), "False")

    def test_hook_with_a_bad_value_stops_with_a_message(self):
        r = run([sys.executable, "-c", self.hook_line() + "\nprint('ran')"], MEMLAKE_ENABLE="maybe")
        self.assertEqual(r.returncode, 2)
        self.assertIn("MEMLAKE_ENABLE='maybe' is not understood", r.stderr)
        self.assertNotIn("ran", r.stdout)

    def test_hook_failure_to_enable_fails_the_import_of_torch(self):
        # The allocator has started (torch.cuda.set_device at import): too late.
        late = Path(self.tmp.name) / "late"
        (late / "torch").mkdir(parents=True)
        fake = support.FAKE_TORCH_DIR / "torch"
        (late / "torch" / "__init__.py").write_text((fake / "__init__.py").read_text() +
                                                    "\ncuda.set_device(0)\n")
        (late / "torch" / "cuda").symlink_to(fake / "cuda", target_is_directory=True)
        r = run([sys.executable, "-c", self.hook_line() + "\nimport torch\nprint('ran')"],
                extra_paths=(late,), MEMLAKE_ENABLE="1")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("MEMLAKE_ENABLE is set, but memlake cannot be enabled", r.stderr)
        self.assertIn("must run before the first CUDA tensor", r.stderr)
        self.assertNotIn("ran", r.stdout)

    @unittest.skipUnless(INSTALLED, "needs the installed memlake.pth")
    def test_installed_hook_does_nothing_when_unset(self):
        r = run([sys.executable, "-c", "import sys; print(sorted(m for m in sys.modules "
                 "if m.split('.')[0] in ('memlake', 'torch')))"], MEMLAKE_ENABLE=None)
        self.assertEqual(r.stdout.strip(), "[]", r.stderr)

    @unittest.skipUnless(INSTALLED, "needs the installed memlake.pth")
    def test_installed_hook_enables_memlake(self):
        r = run([sys.executable, str(self.program), "x"], MEMLAKE_ENABLE="1")
        self.assert_switched(r, [str(self.program), "x"])


if __name__ == "__main__":
    support.main()
