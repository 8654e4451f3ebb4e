"""Distributed training under torchrun with memlake switched on by one call,
beside PyTorch's caching allocator: same losses, peak reserved per rank.

    python samples/distributed/train_distributed.py --compare --nproc 2 --mode ddp
    python samples/distributed/train_distributed.py --compare --nproc 2 --mode pipeline
    torchrun --nproc-per-node 2 samples/distributed/train_distributed.py --allocator memlake

Modes:
  ddp       DistributedDataParallel: every rank holds the whole model and
            trains on its own batches; gradients are all-reduced (NCCL).
  pipeline  two stages: rank 0 holds the embedding and the first half of
            the layers, rank 1 the second half and the head; micro-batches
            cross between them with torch.distributed send/recv (GPipe
            schedule: all forwards, then all backwards).

The model is a causal transformer language model built from torch.nn
(nothing is downloaded) with activation recomputation, under bf16
autocast; every step has a different sequence length, so activations come
in irregular sizes. Rank r runs on GPU r % device_count. With more ranks
than GPUs (one GPU, two ranks) NCCL cannot be used (it refuses two ranks on
one device): the ranks then talk through gloo with tensors staged in host
memory, which checks the schedule and the allocator in two processes but
not NCCL.

Each rank reports its losses and peak reserved (torch.cuda.max_memory_reserved()
or memlake.torch.max_memory_reserved()); rank 0 prints one JSON line with
all ranks'. --compare runs torchrun once per allocator and compares.
"""

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

# Before CUDA starts (importing torch does not start it; memlake.torch.enable()
# must come before the first allocation, in train()).
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.utils.checkpoint import checkpoint  # noqa: E402

ALLOCATORS = ("native", "memlake")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--allocator", choices=ALLOCATORS, default="memlake")
    p.add_argument("--mode", choices=("ddp", "pipeline"), default="ddp")
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--microbatches", type=int, default=4)
    p.add_argument("--max-seq", type=int, default=1024)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--width", type=int, default=1024)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--memlake-conf", default="", help="options for memlake.torch.enable()")
    p.add_argument("--compare", action="store_true",
                   help="run torchrun once per allocator and compare")
    p.add_argument("--nproc", type=int, default=2, help="with --compare: ranks")
    return p.parse_args()


VOCAB = 32000


class Stage(torch.nn.Module):
    """The whole model, or one stage of it (stage 0: embedding and the first
    half of the layers; stage 1: the rest and the head)."""

    def __init__(self, args, stage=None):
        super().__init__()
        torch.manual_seed(args.seed)  # every rank builds the same weights
        embed = torch.nn.Embedding(VOCAB, args.width)
        layers = torch.nn.ModuleList(
            torch.nn.TransformerEncoderLayer(args.width, nhead=args.width // 64,
                                             dim_feedforward=4 * args.width, dropout=0.0,
                                             batch_first=True, norm_first=True)
            for _ in range(args.layers))
        norm = torch.nn.LayerNorm(args.width)
        head = torch.nn.Linear(args.width, VOCAB, bias=False)
        half = args.layers // 2
        self.embed = embed if stage in (None, 0) else None
        self.layers = {None: layers, 0: layers[:half], 1: layers[half:]}[stage]
        self.norm = norm if stage in (None, 1) else None
        self.head = head if stage in (None, 1) else None

    def forward(self, ids=None, h=None, labels=None):
        if self.embed is not None:
            h = self.embed(ids)
        mask = torch.nn.Transformer.generate_square_subsequent_mask(h.shape[1], device=h.device)
        for layer in self.layers:  # recomputed in backward
            h = checkpoint(layer, h, mask, None, True, use_reentrant=False)
        if self.head is None:
            return h.float()  # what crosses to the next stage: float32, whatever autocast made
        logits = self.head(self.norm(h))
        return torch.nn.functional.cross_entropy(
            logits[:, :-1].reshape(-1, VOCAB).float(), labels[:, 1:].reshape(-1))


def batches(args, rank_stream):
    """Per step: the sequence length (the same on every rank) and token ids
    (per `rank_stream`, so DDP ranks see different data)."""
    lengths = torch.Generator().manual_seed(args.seed + 1)
    data = torch.Generator().manual_seed(args.seed + 100 + rank_stream)
    for _ in range(args.steps):
        seq = int(torch.randint(2, args.max_seq // 64 + 1, (1,), generator=lengths)) * 64
        yield seq, torch.randint(0, VOCAB, (args.batch, seq), generator=data)


class Link:
    """send/recv of activations and their gradients between the two stages:
    NCCL on GPU tensors, or gloo through host memory."""

    def __init__(self, backend):
        self.host = backend == "gloo"

    def send(self, t, peer):
        dist.send(t.detach().cpu() if self.host else t.detach().contiguous(), peer)

    def recv(self, shape, peer):
        buf = torch.empty(shape, dtype=torch.float32, device="cpu" if self.host else "cuda")
        dist.recv(buf, peer)
        return buf.cuda() if self.host else buf


def train_ddp(args, rank):
    model = Stage(args).cuda().train()
    ddp = torch.nn.parallel.DistributedDataParallel(model,
                                                    device_ids=[torch.cuda.current_device()])
    optim = torch.optim.AdamW(ddp.parameters(), lr=1e-4)
    losses = []
    for _, ids in batches(args, rank):
        ids = ids.cuda()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = ddp(ids=ids, labels=ids)
        loss.backward()  # DDP all-reduces the gradients during backward
        optim.step()
        optim.zero_grad(set_to_none=True)
        losses.append(loss.item())
    return losses


def train_pipeline(args, rank, link):
    model = Stage(args, stage=rank).cuda().train()
    optim = torch.optim.AdamW(model.parameters(), lr=1e-4)
    peer = 1 - rank
    losses = []
    m = args.microbatches
    for seq, ids in batches(args, 0):  # one data stream through both stages
        shape = (args.batch // m, seq, args.width)
        outputs, inputs, step_loss = [], [], 0.0
        for mb in ids.cuda().chunk(m):  # all forwards
            with torch.autocast("cuda", dtype=torch.bfloat16):
                if rank == 0:
                    h = model(ids=mb)
                    link.send(h, peer)
                    outputs.append(h)
                else:
                    h = link.recv(shape, peer).requires_grad_()
                    inputs.append((h, model(h=h, labels=mb) / m))
        for i in range(m):  # all backwards
            if rank == 1:
                h, loss = inputs[i]
                loss.backward()
                link.send(h.grad, peer)
                step_loss += loss.item()
            else:
                outputs[i].backward(link.recv(shape, peer))
        optim.step()
        optim.zero_grad(set_to_none=True)
        losses.append(step_loss)  # rank 0 does not see the loss: 0
    return losses


def train(args):
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if args.allocator == "memlake":  # before set_device, which starts PyTorch's allocator
        sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
        import memlake.torch
        memlake.torch.enable(args.memlake_conf or None)
    gpus = torch.cuda.device_count()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)) % gpus)
    backend = "nccl" if world <= gpus else "gloo"
    dist.init_process_group(backend)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    if args.mode == "pipeline":
        if world != 2:
            raise SystemExit("--mode pipeline needs exactly 2 ranks")
        losses = train_pipeline(args, rank, Link(backend))
    else:
        if backend != "nccl":
            raise SystemExit("--mode ddp needs a GPU per rank (NCCL)")
        losses = train_ddp(args, rank)
    torch.cuda.synchronize()
    if args.allocator == "memlake":
        import memlake.torch
        reserved = memlake.torch.max_memory_reserved()
        allocated = memlake.torch.max_memory_allocated()
        host_waits = memlake.torch.stats()["host_waits"]
    else:
        reserved = torch.cuda.max_memory_reserved()
        allocated = torch.cuda.max_memory_allocated()
        host_waits = 0
    mine = {"rank": rank, "device": torch.cuda.current_device(), "losses": losses,
            "peak_reserved_bytes": reserved, "peak_allocated_bytes": allocated,
            "host_waits": host_waits}
    every = [None] * world
    dist.all_gather_object(every, mine)
    dist.destroy_process_group()
    if rank == 0:
        print("JSON " + json.dumps({"allocator": args.allocator, "mode": args.mode,
                                    "backend": backend, "ranks": every}))


def compare(args):
    results = {}
    for allocator in ALLOCATORS:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               "--nproc-per-node", str(args.nproc), __file__, "--allocator", allocator,
               "--mode", args.mode, "--steps", str(args.steps), "--batch", str(args.batch),
               "--microbatches", str(args.microbatches), "--max-seq", str(args.max_seq),
               "--layers", str(args.layers), "--width", str(args.width), "--seed", str(args.seed)]
        if args.memlake_conf and allocator == "memlake":
            cmd += ["--memlake-conf", args.memlake_conf]
        run = subprocess.run(cmd, capture_output=True, text=True)
        lines = [l for l in run.stdout.splitlines() if l.startswith("JSON ")]
        if run.returncode != 0 or not lines:
            print(run.stdout[-3000:] + run.stderr[-5000:], file=sys.stderr)
            raise SystemExit("%s run failed (exit %d)" % (allocator, run.returncode))
        results[allocator] = json.loads(lines[-1][5:])
    native, mem = results["native"], results["memlake"]
    gib = 1 << 30
    print("%s, %d ranks (%s), %d steps, batch %d, sequence lengths 128..%d" % (
        args.mode, args.nproc, mem["backend"], args.steps, args.batch, args.max_seq))
    worst, ok = 0.0, True
    for n, m in zip(native["ranks"], mem["ranks"]):
        pairs = [(a, b) for a, b in zip(m["losses"], n["losses"]) if b != 0]
        diff = max((abs(a - b) / abs(b) for a, b in pairs), default=0.0)
        worst = max(worst, diff)
        ratio = m["peak_reserved_bytes"] / max(n["peak_reserved_bytes"], 1)
        print("  rank %d (GPU %d): peak reserved native %.2f GiB, memlake %.2f GiB (%.3f); "
              "peak live %.2f / %.2f GiB; host waits %d; max rel dloss %.3g" % (
                  n["rank"], m["device"], n["peak_reserved_bytes"] / gib,
                  m["peak_reserved_bytes"] / gib, ratio, n["peak_allocated_bytes"] / gib,
                  m["peak_allocated_bytes"] / gib, m["host_waits"], diff))
        ok &= m["host_waits"] == 0
    # Deterministic kernels give the same losses whatever the addresses; an
    # op without a deterministic kernel may differ in the last bits.
    ok &= worst < 1e-3
    print("  losses %s" % ("identical under both allocators" if worst == 0 else
                           "within %.2g of native's" % worst if worst < 1e-3 else "DIFFER"))
    print("JSON " + json.dumps(results))
    return 0 if ok else 1


def main():
    args = parse_args()
    if args.compare:
        return compare(args)
    train(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
