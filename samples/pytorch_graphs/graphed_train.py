"""Whole training steps captured with torch.cuda.graph, one graph per
sequence-length bucket, replayed in turn: what PyTorch's own allocator and
memlake reserve for them, and whether they compute the same.

    python samples/pytorch_graphs/graphed_train.py --compare          # every setup, a table
    python samples/pytorch_graphs/graphed_train.py --allocator memlake --pools exclusive

A step is a stack of transformer encoder layers (no dropout) on a batch of
one bucket's length, an MSE loss, backward and AdamW(capturable=True), all
captured after three eager warm-up steps per bucket on a side stream, as
torch.cuda.graph wants. Graph pools:
  separate   each graph its own private pool (torch.cuda.graph(g));
  shared     every graph in the first one's pool (pool=first.pool()), which
             PyTorch allows for graphs that never run at the same time;
  exclusive  memlake only: one pool per graph, the pools of one exclusive
             group sharing physical chunks (memlake.torch.exclusive_pool_handles,
             captured with memlake.torch.graph, replayed with memlake.torch.replay);
  compiled   no capture by hand: the model under torch.compile(mode=
             "reduce-overhead"), whose CUDA graphs Inductor records and replays
             in its graph trees, one pool for all (under memlake,
             enable(graph_trees=True): memlake's allocator with the calls graph
             trees need, compiled against the installed torch), gradients set
             to None before each step;
  compiled_plain  memlake only: the same on Inductor's plain CUDA graphs
             (enable(plain_inductor_graphs=True)), a pool per graph;
  compiled_exclusive  memlake only: plain graphs with the pools of all of
             Inductor's graphs in one exclusive group
             (enable(plain_inductor_graphs="exclusive")).
Each run prints one JSON line: peak reserved (torch.cuda.max_memory_reserved,
or memlake.torch.max_memory_reserved), the loss of every replay, the
replays' time, and, for exclusive pools, the blocks each pool still holds
after its capture (the loss, and anything else that outlives the capture)
and the bytes of the chunks memlake gave them, the pool's alone. --compare runs native and memlake
under each pool setup in child processes (PyTorch picks its allocator once
per process) and tables them against native's separate pools, with the
largest difference of any loss from that run's.
"""

import argparse
import json
import os
import subprocess
import sys
import time

SETUPS = (("native", "separate"), ("native", "shared"), ("memlake", "separate"),
          ("memlake", "shared"), ("memlake", "exclusive"), ("native", "compiled"),
          ("memlake", "compiled"), ("memlake", "compiled_plain"), ("memlake", "compiled_exclusive"))
POOLS = ("separate", "shared", "exclusive", "compiled", "compiled_plain", "compiled_exclusive")
MEMLAKE_ONLY = ("exclusive", "compiled_plain", "compiled_exclusive")
COMPILED = ("compiled", "compiled_plain", "compiled_exclusive")
GIB = 1 << 30


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--allocator", choices=("native", "memlake"), default="memlake")
    p.add_argument("--pools", choices=POOLS, default="shared")
    p.add_argument("--only", default=",".join(POOLS),
                   help="with --compare: the pool setups to run, comma-separated")
    p.add_argument("--buckets", default="128,256,384,512", help="sequence lengths, one graph each")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--replays", type=int, default=200)
    p.add_argument("--compare", action="store_true", help="every setup in a child process")
    args = p.parse_args(argv)
    if args.pools in MEMLAKE_ONLY and args.allocator != "memlake":
        p.error("--pools %s needs --allocator memlake" % args.pools)
    unknown = set(args.only.split(",")) - set(POOLS)
    if unknown:
        p.error("--only: unknown pool setups %s" % ", ".join(sorted(unknown)))
    return args


def buckets_of(text):
    lengths = [int(x) for x in text.split(",") if x.strip()]
    if not lengths or min(lengths) < 1:
        raise SystemExit("--buckets: positive sequence lengths, comma-separated")
    return lengths


def run(args):
    if args.allocator == "memlake":
        import memlake.torch
        # Reduce-overhead on graph trees needs memlake's allocator with their
        # calls: a failed build fails the run, rather than graph trees later.
        plain = {"compiled_plain": True, "compiled_exclusive": "exclusive"}.get(args.pools, False)
        memlake.torch.enable(plain_inductor_graphs=plain,
                             graph_trees=True if args.pools == "compiled" else "auto")
    import torch
    import torch.nn.functional as F

    torch.manual_seed(0)
    d = args.hidden
    model = torch.nn.Sequential(*[
        torch.nn.TransformerEncoderLayer(d, 8, 4 * d, dropout=0.0, batch_first=True)
        for _ in range(args.layers)]).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, capturable=True)
    lengths = buckets_of(args.buckets)
    gen = torch.Generator(device="cuda").manual_seed(1)
    xs = {n: torch.randn(args.batch, n, d, device="cuda", generator=gen) for n in lengths}
    ys = {n: torch.randn(args.batch, n, d, device="cuda", generator=gen) for n in lengths}

    def step(n):
        opt.zero_grad(set_to_none=False)
        loss = F.mse_loss(model(xs[n]), ys[n])
        loss.backward()
        opt.step()
        return loss

    if args.pools in COMPILED:
        return run_compiled(args, torch, model, opt, F, xs, ys, lengths)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for n in lengths:
            for _ in range(3):
                step(n)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()

    graphs, losses, pools = {}, {}, {}
    if args.pools == "exclusive":
        handles = memlake.torch.exclusive_pool_handles(len(lengths))
        pools = dict(zip(lengths, handles))
    for n in lengths:
        g = torch.cuda.CUDAGraph()
        if args.pools == "exclusive":
            context = memlake.torch.graph(g, pool=pools[n])
        elif args.pools == "shared" and graphs:
            context = torch.cuda.graph(g, pool=graphs[lengths[0]].pool())
        else:
            context = torch.cuda.graph(g)
        with context:
            losses[n] = step(n)
        graphs[n] = g

    # What each exclusive pool still holds after its capture (the loss, and
    # anything else made during the capture and kept, like a library's
    # cache), and the chunks of its own memlake gave them.
    kept = None
    if args.pools == "exclusive":
        kept = {}
        for n in lengths:
            st = memlake.pool_stats(pools[n])
            kept[str(n)] = [st["live_blocks"], st["live_bytes"], st["kept_bytes"]]

    record = torch.zeros(args.replays, device="cuda")
    torch.cuda.synchronize()
    start = time.perf_counter()
    for i in range(args.replays):
        n = lengths[i % len(lengths)]
        if args.pools == "exclusive":
            memlake.torch.replay(graphs[n], pools[n])
        else:
            graphs[n].replay()
        record[i].copy_(losses[n])
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    return result(args, torch, lengths, seconds, record, kept)


def result(args, torch, lengths, seconds, record, kept=None):
    if args.allocator == "memlake":
        import memlake
        import memlake.torch
        reserved = memlake.torch.max_memory_reserved()
        graph_bytes = memlake.stats()["graph_pool_bytes"]
    else:
        reserved = torch.cuda.max_memory_reserved()
        graph_bytes = None
    return {"allocator": args.allocator, "pools": args.pools, "buckets": lengths,
            "peak_reserved_bytes": reserved, "graph_pool_bytes": graph_bytes,
            "replay_ms": seconds * 1e3 / args.replays, "losses": record.tolist(),
            "kept_after_capture": kept}


def run_compiled(args, torch, model, opt, F, xs, ys, lengths):
    """The same steps with the model under reduce-overhead: three per bucket
    first (compilation, Inductor's warm-up run and recording), as the
    captured setups warm up, then the timed ones in the same order."""
    compiled = torch.compile(model, mode="reduce-overhead")

    def step(n):
        torch.compiler.cudagraph_mark_step_begin()  # graph trees: last step's outputs are dead
        # Gradients set to None: a graph's gradient outputs live in buffers
        # its next replay overwrites, so they must not be accumulated into.
        opt.zero_grad(set_to_none=True)
        loss = F.mse_loss(compiled(xs[n]), ys[n])
        loss.backward()
        opt.step()
        return loss.detach()

    for n in lengths:
        for _ in range(3):
            step(n)
    record = torch.zeros(args.replays, device="cuda")
    torch.cuda.synchronize()
    start = time.perf_counter()
    for i in range(args.replays):
        record[i].copy_(step(lengths[i % len(lengths)]))
    torch.cuda.synchronize()
    return result(args, torch, lengths, time.perf_counter() - start, record)


def child_command(args, allocator, pools):
    return [sys.executable, os.path.abspath(__file__), "--allocator", allocator, "--pools", pools,
            "--buckets", args.buckets, "--batch", str(args.batch), "--hidden", str(args.hidden),
            "--layers", str(args.layers), "--replays", str(args.replays)]


def table(runs):
    """The lines of the table over run records, against native/separate (or
    the first native run, when that setup was left out)."""
    ok = [r for r in runs if "error" not in r]
    ref = next((r for r in ok if (r["allocator"], r["pools"]) == ("native", "separate")),
               next((r for r in ok if r["allocator"] == "native"), None))
    lines = ["%-8s %-18s %14s %10s %11s %16s" % ("allocator", "pools", "peak reserved",
                                                  "/ native", "replay ms", "max loss diff")]
    for r in runs:
        if "error" in r:
            lines.append("%-8s %-18s failed: %s" % (r["allocator"], r["pools"], r["error"]))
            continue
        ratio = diff = ""
        if ref is not None:
            ratio = "%.3f" % (r["peak_reserved_bytes"] / ref["peak_reserved_bytes"])
            diff = "%.3g" % max(abs(a - b) for a, b in zip(r["losses"], ref["losses"]))
        lines.append("%-8s %-18s %10.2f GiB %10s %11.3f %16s" % (
            r["allocator"], r["pools"], r["peak_reserved_bytes"] / GIB, ratio, r["replay_ms"],
            diff))
    for r in runs:
        if r.get("kept_after_capture"):
            lines.append("%s %s: blocks / bytes each pool kept after its capture (the loss, and "
                         "what else outlives the capture) / bytes of its own chunks: %s" % (
                             r["allocator"], r["pools"], ", ".join(
                                 "%s: %s" % (n, " / ".join(str(x) for x in v))
                                 for n, v in r["kept_after_capture"].items())))
    return lines


def compare(args):
    runs = []
    for allocator, pools in SETUPS:
        if pools not in args.only.split(","):
            continue
        r = subprocess.run(child_command(args, allocator, pools), capture_output=True, text=True)
        lines = [l for l in r.stdout.splitlines() if l.startswith("{")]
        if r.returncode != 0 or not lines:
            last = (r.stderr.strip().splitlines() or ["exit status %d" % r.returncode])[-1]
            runs.append({"allocator": allocator, "pools": pools, "error": last[:300]})
        else:
            runs.append(json.loads(lines[-1]))
            print("JSON " + lines[-1], flush=True)
    print("\n".join(table(runs)))
    return 0 if all("error" not in r for r in runs) else 1


def main():
    args = parse_args()
    if args.compare:
        return compare(args)
    print(json.dumps(run(args)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
