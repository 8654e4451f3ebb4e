"""samples/pytorch_training's parts that need neither torch nor a GPU: the
allocator list (memlake with options of its own, memlake/KEY:VALUE), the
child command each run gets, the --compare table over hand-made runs,
tools/device/step_trace.py over a hand-made torch.profiler trace,
samples/pytorch_graphs/graphed_train.py's arguments and table, and
tools/device/torch_replay.py's replay loop over a stand-in torch."""

import gzip
import json
import sys
import tempfile
import types
import unittest
from unittest import mock
from pathlib import Path

import support

SAMPLE = Path(__file__).resolve().parents[2] / "samples" / "pytorch_training"
sys.path.insert(0, str(SAMPLE))

import compare  # noqa: E402
import train  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools" / "device"))
import step_trace  # noqa: E402
import torch_replay  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "samples" / "pytorch_graphs"))
import graphed_train  # noqa: E402


def run(allocator, step_ms, reserved_gib, rnd=1, cp=(5, 5, 0, 0), worker=(1, 1, 1, 1)):
    return {"kind": "run", "allocator": allocator, "model": "gpt2-recompute", "steps": 4,
            "batch": 8, "seq_len": 0, "max_seq": 1024, "warmup": 1, "round": rnd,
            "peak_reserved_bytes": int(reserved_gib * train.GIB),
            "peak_allocated_bytes": int(5 * train.GIB), "median_step_seconds": step_ms / 1e3,
            "step_seconds": [step_ms / 1e3] * 4, "losses": [2.0, 1.5, 1.25, 1.0],
            "critical_vmm_by_step": list(cp), "worker_vmm_by_step": list(worker),
            "host_waits": 0, "stitches": 3, "allocate_ms_by_step": [1.0] * 4}


class AllocatorList(unittest.TestCase):
    def test_memlake_takes_options_of_its_own(self):
        names = train.allocator_list("native, memlake ,memlake/worker:off/large_chunk:64M")
        self.assertEqual(names, ["native", "memlake", "memlake/worker:off/large_chunk:64M"])
        self.assertEqual(train.split_variant(names[2]), ("memlake", "worker:off,large_chunk:64M"))
        self.assertEqual(train.split_variant("native"), ("native", ""))

    def test_bad_names_are_refused_with_the_name(self):
        for text, says in [("native/worker:off", "only memlake"), ("memlake/worker", "KEY:VALUE"),
                           ("cuda", "unknown allocator"), ("memlake,memlake", "twice")]:
            with self.assertRaises(SystemExit) as e:
                train.allocator_list(text)
            self.assertIn(says, str(e.exception), text)


class ChildCommand(unittest.TestCase):
    def args(self, conf=""):
        return types.SimpleNamespace(model="gpt2-recompute", steps=4, warmup=1, batch=8,
                                     max_seq=1024, seq_len=0, seed=0, new_tokens="128:512",
                                     init_device="cuda", memlake_conf=conf, memory_cap_gib=0)

    def value_of(self, cmd, flag):
        return cmd[cmd.index(flag) + 1] if flag in cmd else None

    def test_a_variant_runs_memlake_with_its_options_and_its_name(self):
        cmd = compare.child_command(self.args("capacity:40G"), "memlake/worker:off")
        self.assertEqual(self.value_of(cmd, "--allocator"), "memlake")
        self.assertEqual(self.value_of(cmd, "--memlake-conf"), "capacity:40G,worker:off")
        self.assertEqual(self.value_of(cmd, "--label"), "memlake/worker:off")

    def test_a_plain_allocator_gets_no_label(self):
        cmd = compare.child_command(self.args(), "expandable")
        self.assertEqual(self.value_of(cmd, "--allocator"), "expandable")
        self.assertIsNone(self.value_of(cmd, "--label"))
        self.assertIsNone(self.value_of(cmd, "--memlake-conf"))


class CompareTable(unittest.TestCase):
    def test_variants_are_tabled_after_the_others_and_compared(self):
        runs = [run("memlake/worker:off", 110, 4.75), run("native", 100, 9.0),
                run("memlake", 120, 5.0), run("expandable", 105, 6.0),
                run("memlake/worker:off", 130, 4.75, rnd=2), run("native", 100, 9.0, rnd=2),
                run("memlake", 120, 5.0, rnd=2), run("expandable", 105, 6.0, rnd=2)]
        (text, summary, ok), = compare.run_tables(runs)
        self.assertTrue(ok, text)
        rows = [line.split()[0] for line in text.splitlines()[2:6]]
        self.assertEqual(rows, ["native", "expandable", "memlake", "memlake/worker:off"], text)
        self.assertIn("memlake/worker:off: peak reserved 0.950x memlake's, step time 1.200x "
                      "native's (mean step 1.200x native's), critical-path VMM calls 10, worker "
                      "VMM calls 4", text)
        targets = summary["targets"]
        # The variant stays out of memlake's own targets.
        self.assertEqual(sorted(targets["peak_reserved_ratio"]), ["expandable", "native"])
        self.assertAlmostEqual(targets["step_time_ratio"], 1.2)
        self.assertAlmostEqual(targets["step_time_ratio_by_variant"]["memlake/worker:off"], 1.2)
        self.assertEqual(summary["allocators"]["memlake/worker:off"]["run_medians"], [0.11, 0.13])

    def test_the_mean_step_counts_the_steps_the_median_leaves_out(self):
        # After one warm-up step: memlake's fast steps match native's, its slow
        # steps (new shapes) take longer; the medians tie, the means do not.
        def steps(name, slow_ms, rnd):
            r = run(name, 100, 5.0, rnd=rnd)
            r["step_seconds"] = [0.5, 0.1, 0.1, slow_ms / 1e3]
            r["median_step_seconds"] = 0.1
            return r
        runs = [steps("native", 400, 1), steps("memlake", 700, 1), steps("expandable", 400, 1),
                steps("native", 400, 2), steps("memlake", 700, 2), steps("expandable", 400, 2)]
        (text, summary, ok), = compare.run_tables(runs)
        targets = summary["targets"]
        self.assertAlmostEqual(targets["step_time_ratio"], 1.0)
        self.assertAlmostEqual(targets["step_time_ratio_mean"], 0.3 / 0.2)
        self.assertAlmostEqual(summary["allocators"]["memlake"]["mean_step_seconds"], 0.3)
        self.assertIn("mean step 1.500 native", text)


def x(cat, name, ts, dur):
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur}


class StepTrace(unittest.TestCase):
    # Two steps in microseconds, as torch.profiler writes them: the first
    # launches three kernels (two overlap, then a gap of 10 us), allocates,
    # and synchronizes; the second's kernel runs after its host range ended.
    EVENTS = [x("user_annotation", "step 4", 0, 100),
              x("cuda_runtime", "cudaLaunchKernel", 10, 5),
              x("cuda_runtime", "cudaLaunchKernel", 30, 4),
              x("cpu_op", "aten::empty_strided", 20, 7),
              x("cpu_op", "aten::addmm", 40, 9),
              x("cuda_runtime", "cudaStreamSynchronize", 80, 20),
              x("cuda_runtime", "cudaEventRecord", 60, 2),
              x("kernel", "gemm", 15, 30), x("kernel", "relu", 40, 20), x("kernel", "sum", 70, 10),
              {"ph": "i", "cat": "kernel", "name": "not a range", "ts": 50},
              x("user_annotation", "step 5", 200, 50),
              x("gpu_memcpy", "Memcpy HtoD", 260, 10)]

    def summarize(self, suffix):
        with tempfile.TemporaryDirectory() as d:
            path = str(Path(d) / ("t.json" + suffix))
            opener = gzip.open if suffix else open
            with opener(path, "wt") as f:
                json.dump({"traceEvents": self.EVENTS}, f)
            return step_trace.summarize(path)

    def test_each_step_gets_its_gpu_work_and_host_calls(self):
        for suffix in ("", ".gz"):
            first, second = self.summarize(suffix)
            self.assertEqual((first["step"], second["step"]), ("step 4", "step 5"))
            self.assertAlmostEqual(first["host"], 0.100)
            self.assertAlmostEqual(first["gpu_busy"], 0.055)  # 15-60 and 70-80
            self.assertAlmostEqual(first["gpu_idle"], 0.010)  # 60-70
            self.assertAlmostEqual(first["launches"], 0.009)
            self.assertAlmostEqual(first["sync"], 0.020)
            self.assertAlmostEqual(first["alloc_ops"], 0.007)
            self.assertAlmostEqual(first["other_runtime"], 0.002)
            self.assertEqual(first["kernels"], 3)
            # GPU work after the host range still belongs to its step.
            self.assertAlmostEqual(second["gpu_busy"], 0.010)
            self.assertEqual(second["kernels"], 1)

    def test_ops_are_the_hosts_self_time_per_step_by_name(self):
        # In step 5 an op nests another; the GPU's own range for the step
        # and kernels are not host time.
        nested = [x("cpu_op", "aten::linear", 210, 30), x("cpu_op", "aten::addmm", 215, 20),
                  x("gpu_user_annotation", "step 5", 205, 40)]
        with tempfile.TemporaryDirectory() as d:
            path = str(Path(d) / "t.json")
            with open(path, "w") as f:
                json.dump({"traceEvents": self.EVENTS + nested}, f)
            ops = step_trace.self_times_per_step(path)
        per_step = lambda us: us / 1e3 / 2  # two traced steps, ms per step
        self.assertAlmostEqual(ops["aten::addmm"], per_step(9 + 20))
        self.assertAlmostEqual(ops["aten::linear"], per_step(30 - 20))
        self.assertAlmostEqual(ops["cudaLaunchKernel"], per_step(5 + 4))
        # The step ranges keep what no op covers: 100 - 47 and 50 - 30 us.
        self.assertAlmostEqual(ops["step N"], per_step(53 + 20))
        self.assertNotIn("gemm", ops)
        self.assertAlmostEqual(sum(ops.values()), per_step(100 + 50))

    def test_train_takes_a_trace_path(self):
        args = train.parse_args(["--allocator", "native", "--trace", "/tmp/t.json.gz"])
        self.assertEqual(args.trace, "/tmp/t.json.gz")


class GraphedTrain(unittest.TestCase):
    def record(self, allocator, pools, gib, losses):
        return {"allocator": allocator, "pools": pools, "buckets": [128, 256],
                "peak_reserved_bytes": int(gib * graphed_train.GIB), "graph_pool_bytes": None,
                "replay_ms": 2.5, "losses": losses}

    def test_the_table_is_against_native_separate_pools(self):
        runs = [self.record("native", "separate", 4.0, [1.0, 0.5]),
                self.record("memlake", "exclusive", 3.0, [1.0, 0.25]),
                {"allocator": "memlake", "pools": "shared", "error": "RuntimeError: x"}]
        lines = graphed_train.table(runs)
        self.assertEqual(len(lines), 4)
        self.assertIn("1.000", lines[1])
        self.assertIn("0.750", lines[2])   # 3 GiB of 4
        self.assertIn("0.25", lines[2])    # the largest loss difference
        self.assertIn("failed: RuntimeError: x", lines[3])

    def test_without_native_separate_pools_the_first_native_run_is_the_reference(self):
        runs = [self.record("native", "compiled", 2.0, [1.0, 0.5]),
                self.record("memlake", "compiled", 1.5, [1.0, 0.375])]
        lines = graphed_train.table(runs)
        self.assertIn("0.750", lines[2])
        self.assertIn("0.125", lines[2])
        args = graphed_train.parse_args(["--compare", "--only", "compiled"])
        self.assertEqual(args.only, "compiled")
        with self.assertRaises(SystemExit):
            graphed_train.parse_args(["--only", "compiled,tiled"])

    def test_what_exclusive_pools_kept_after_capture_is_listed(self):
        kept = self.record("memlake", "exclusive", 3.0, [1.0, 0.25])
        kept["kept_after_capture"] = {"128": [1, 512, 2097152], "256": [3, 4608, 4194304]}
        lines = graphed_train.table([self.record("native", "separate", 4.0, [1.0, 0.5]), kept])
        self.assertEqual(len(lines), 4)
        self.assertIn("memlake exclusive: blocks / bytes each pool kept", lines[3])
        self.assertIn("128: 1 / 512 / 2097152, 256: 3 / 4608 / 4194304", lines[3])

    def test_exclusive_pools_need_memlake_and_buckets_are_lengths(self):
        for pools in ("exclusive", "compiled_plain", "compiled_exclusive"):
            with self.assertRaises(SystemExit):
                graphed_train.parse_args(["--allocator", "native", "--pools", pools])
        # reduce-overhead: graph trees under both allocators, plain graphs under memlake
        compiled = [s for s in graphed_train.SETUPS if s[1].startswith("compiled")]
        self.assertEqual(compiled, [("native", "compiled"), ("memlake", "compiled"),
                                    ("memlake", "compiled_plain"),
                                    ("memlake", "compiled_exclusive")])
        self.assertEqual(graphed_train.buckets_of("128, 256"), [128, 256])
        with self.assertRaises(SystemExit):
            graphed_train.buckets_of("0")
        args = graphed_train.parse_args(["--buckets", "64,128", "--replays", "10"])
        cmd = graphed_train.child_command(args, "native", "shared")
        self.assertEqual(cmd[cmd.index("--pools") + 1], "shared")
        self.assertEqual(cmd[cmd.index("--buckets") + 1], "64,128")


TRACE = """# memlake-trace v1 workload=tiny source=hand
ts_us,op,id,bytes,stream
0,alloc,1,4096,0
1,alloc,2,0,7
2,free,2,0,7
3,alloc,3,8192,0
4,free,1,4096,0
5,free,3,8192,0
"""


def stand_in_torch():
    """What torch_replay's replay touches of torch: streams and the sync."""
    class Stream:
        count = 0

        def __init__(self):
            Stream.count += 1
            self.cuda_stream = 100 + Stream.count

    cuda = types.SimpleNamespace(init=lambda: None, Stream=Stream, synchronize=lambda: None,
                                 current_stream=lambda: types.SimpleNamespace(cuda_stream=0))
    return types.SimpleNamespace(cuda=cuda, __version__="stand-in")


class TorchReplay(unittest.TestCase):
    def write(self, text):
        tmp = tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False)
        tmp.write(text)
        tmp.close()
        self.addCleanup(Path(tmp.name).unlink)
        return tmp.name

    def test_the_trace_is_read_in_order_without_its_comments(self):
        ops, ids, sizes, streams = torch_replay.read_trace(self.write(TRACE))
        self.assertEqual(ops, [True, True, False, True, False, False])
        self.assertEqual(ids, [1, 2, 2, 3, 1, 3])
        self.assertEqual(sizes, [4096, 0, 0, 8192, 4096, 8192])
        self.assertEqual(streams, [0, 7, 7, 0, 0, 0])

    def test_the_loop_times_every_call_after_warm_up(self):
        with mock.patch.dict(sys.modules, {"torch": stand_in_torch()}):
            record = torch_replay.replay("null", self.write(TRACE), 0.5)
        # Events 3-5 are measured: one allocation and two frees.
        self.assertEqual(record["measured_events"], 3)
        self.assertEqual(record["allocate"]["count"], 1)
        self.assertEqual(record["free"]["count"], 2)
        self.assertEqual(record["calls_ns"],
                         record["allocate"]["sum_ns"] + record["free"]["sum_ns"])
        self.assertGreaterEqual(record["allocate"]["max_ns"], record["allocate"]["median_ns"])

    def test_a_free_of_an_unknown_id_names_it(self):
        path = self.write(TRACE.replace("5,free,3,8192,0", "5,free,9,8192,0"))
        with mock.patch.dict(sys.modules, {"torch": stand_in_torch()}):
            with self.assertRaises(SystemExit) as e:
                torch_replay.replay("null", path, 0.0)
        self.assertIn("unknown id 9", str(e.exception))

    def test_percentiles_are_nearest_rank(self):
        s = torch_replay.summary(list(range(100, 0, -1)))
        self.assertEqual((s["count"], s["median_ns"], s["p99_ns"], s["max_ns"], s["sum_ns"]),
                         (100, 51, 100, 100, 5050))


if __name__ == "__main__":
    support.main()
