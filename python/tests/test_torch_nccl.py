"""NCCL on memlake memory: two ranks under torchrun, one GPU each, each
switched to memlake with enable(). All-reduce, send/recv and all-gather run
on memlake tensors, among them a stitched one (made of chunks of blocks that
were freed apart), and every element is compared with what it must be.
The same program without its enable() call runs unchanged under
`torchrun -m memlake.run` and with MEMLAKE_ENABLE=1. Skips without torch or
with fewer than two GPUs (exit status 77: ctest reports it skipped)."""

import subprocess
import sys
import tempfile
import textwrap
import unittest
from pathlib import Path

import support

try:
    import torch
    GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0
except ImportError:
    GPUS = 0

RANK_PROGRAM = textwrap.dedent("""
    import os, torch, torch.distributed as dist, memlake.torch
    memlake.torch.enable()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    device = torch.device("cuda", rank)
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", device_id=device)
    MiB = 1 << 20

    def stitched_tensor(nbytes):
        # Blocks freed apart leave no single free piece of nbytes; the request
        # must be served by stitching their chunks.
        parts = [torch.empty(nbytes // 2, dtype=torch.uint8, device=device) for _ in range(8)]
        del parts[::2]
        before = memlake.torch.stats()
        t = torch.empty(nbytes // 4, dtype=torch.float32, device=device)
        after = memlake.torch.stats()
        stitched = after["rung_stitch"] - before["rung_stitch"]
        assert stitched == 1, ("not stitched", before, after)
        return t, parts

    # All-reduce over sizes from one element to a stitched 192 MiB buffer.
    big, keep = stitched_tensor(192 * MiB)
    sizes = [1, 1000, 3 * MiB // 4 + 5, 50 * MiB // 4]
    tensors = [torch.arange(n, dtype=torch.float32, device=device) * (rank + 1) for n in sizes]
    pattern = (torch.arange(big.numel(), dtype=torch.int32, device=device) % 4096).float()
    big.copy_(pattern * (rank + 1))
    for t in tensors + [big]:
        dist.all_reduce(t)
    factor = world * (world + 1) / 2
    for n, t in zip(sizes, tensors):
        want = torch.arange(n, dtype=torch.float32, device=device) * factor
        assert torch.equal(t, want), ("all_reduce", n)
    assert torch.equal(big, pattern * factor), "all_reduce stitched"

    # send/recv between neighbours, into a stitched receive buffer.
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    out = torch.arange(big.numel(), dtype=torch.int32, device=device).mul_(3).add_(rank)
    for work in dist.batch_isend_irecv([dist.P2POp(dist.isend, out, nxt),
                                        dist.P2POp(dist.irecv, big.view(torch.int32), prv)]):
        work.wait()
    want = torch.arange(big.numel(), dtype=torch.int32, device=device).mul_(3).add_(prv)
    assert torch.equal(big.view(torch.int32), want), "send/recv"

    # all-gather into one buffer.
    mine = torch.full((5 * MiB,), rank + 7, dtype=torch.int32, device=device)
    gathered = torch.empty(world * mine.numel(), dtype=torch.int32, device=device)
    dist.all_gather_into_tensor(gathered, mine)
    for r in range(world):
        assert bool((gathered[r * mine.numel():(r + 1) * mine.numel()] == r + 7).all()), r

    torch.cuda.synchronize()
    s = memlake.torch.stats()
    assert s["host_waits"] == 0, s["host_waits"]
    assert memlake.torch.memory_allocated() >= 192 * MiB
    print("rank", rank, "ok reserved", memlake.torch.max_memory_reserved(), "stitches", s["stitches"])
    dist.destroy_process_group()
""")


# The program unchanged: no memlake call before CUDA starts.
UNCHANGED_RANK_PROGRAM = RANK_PROGRAM.replace(
    "import os, torch, torch.distributed as dist, memlake.torch\nmemlake.torch.enable()\n",
    "import os, torch, torch.distributed as dist, memlake.torch\n"
    "assert memlake.torch.is_enabled(), 'memlake was not switched on'\n")
assert UNCHANGED_RANK_PROGRAM != RANK_PROGRAM


@unittest.skipUnless(GPUS >= 2, "needs torch with two CUDA GPUs")
class NcclOnMemlake(unittest.TestCase):
    def torchrun(self, program_text, launch=(), **variables):
        """Runs program_text on two ranks; `launch` goes between torchrun's
        options and the program (e.g. -m memlake.run)."""
        with tempfile.TemporaryDirectory() as tmp:
            program = Path(tmp) / "rank.py"
            program.write_text(program_text)
            env = support.child_env(NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1",
                                    **variables)
            r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                                "--nproc-per-node", "2"] + list(launch) + [str(program)],
                               capture_output=True, text=True, env=env, timeout=600)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        sys.stderr.write(r.stdout)
        for rank in (0, 1):
            self.assertIn("rank %d ok" % rank, r.stdout)

    def test_collectives_and_point_to_point_read_back_intact(self):
        self.torchrun(RANK_PROGRAM)

    def test_memlake_run_under_torchrun(self):
        self.torchrun(UNCHANGED_RANK_PROGRAM, launch=["-m", "memlake.run"])

    def test_memlake_enable_under_torchrun(self):
        # An installed package's memlake.pth enables memlake in each worker;
        # in a source tree, a launcher runs its line first, as site.py would.
        hook = support.HOOK_FILE.read_text()
        launcher = hook + "\nimport runpy, sys\nsys.argv = sys.argv[1:]\n" \
                          "runpy.run_path(sys.argv[0], run_name='__main__')\n"
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "with_hook.py"
            path.write_text(launcher)
            self.torchrun(UNCHANGED_RANK_PROGRAM, launch=[str(path)], MEMLAKE_ENABLE="1")


if __name__ == "__main__":
    support.main()
