"""Training with memlake switched on by one call, beside PyTorch's own
allocators on the same run: same losses, less memory reserved.

    python samples/pytorch_training/train.py --compare            # all three, one after another
    python samples/pytorch_training/train.py --allocator memlake  # one run, JSON on stdout

The model is built from a configuration (nothing is downloaded): a GPT-2
with activation recomputation (gradient checkpointing), or a Llama-style
model trained with LoRA adapters (peft), both under bf16 autocast. Batches
have a different sequence length at every step, as with dynamic shapes and
packed variable-length data: the irregular sizes that fragment a caching
allocator. With --seq-len every step has that length instead (fixed shapes,
as in pretraining on packed sequences): the steady state in which memlake
should make no VMM call on the training thread after the first steps.

Allocators: `native` (PyTorch's caching allocator), `expandable`
(PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True), `memlake`
(memlake.torch.enable()). Each run is its own process: PyTorch picks its
allocator once per process. Peak reserved is torch.cuda.max_memory_reserved()
for PyTorch's allocators and memlake.torch.max_memory_reserved() for memlake.
Deterministic algorithms are on, so every allocator must give the same losses.
"""

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ALLOCATORS = ("native", "expandable", "memlake")
MODELS = ("gpt2-recompute", "llama-lora")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--allocator", choices=ALLOCATORS, default="memlake")
    p.add_argument("--model", choices=MODELS, default="gpt2-recompute")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--max-seq", type=int, default=1024)
    p.add_argument("--seq-len", type=int, default=0, help="every step this length (fixed shapes)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--memlake-conf", default="", help="options for memlake.torch.enable()")
    p.add_argument("--compare", action="store_true",
                   help="run every allocator in a child process and compare")
    return p.parse_args()


def build_model(name, torch):
    import transformers
    if name == "gpt2-recompute":
        cfg = transformers.GPT2Config(n_layer=12, n_embd=768, n_head=12, n_positions=1024,
                                      vocab_size=50257)
        model = transformers.GPT2LMHeadModel(cfg)
        model.gradient_checkpointing_enable()
        return model, cfg.vocab_size
    import peft
    cfg = transformers.LlamaConfig(hidden_size=1536, intermediate_size=4096, num_hidden_layers=12,
                                   num_attention_heads=12, num_key_value_heads=12,
                                   vocab_size=32000, max_position_embeddings=2048)
    model = transformers.LlamaForCausalLM(cfg)
    model.gradient_checkpointing_enable()
    model.enable_input_require_grads()
    lora = peft.LoraConfig(r=16, lora_alpha=32, target_modules=["q_proj", "v_proj"],
                           lora_dropout=0.0, task_type="CAUSAL_LM")
    return peft.get_peft_model(model, lora), cfg.vocab_size


def train(args):
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    if args.allocator == "expandable":
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
    import torch
    if args.allocator == "memlake":
        sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
        import memlake.torch
        memlake.torch.enable(args.memlake_conf or None)
    torch.manual_seed(args.seed)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    model, vocab = build_model(args.model, torch)
    model = model.cuda().train()
    params = [p for p in model.parameters() if p.requires_grad]
    optim = torch.optim.AdamW(params, lr=1e-4)
    gen = torch.Generator().manual_seed(args.seed + 1)
    step_seqs = torch.randint(2, args.max_seq // 64 + 1, (args.steps,), generator=gen) * 64
    if args.seq_len:
        step_seqs.fill_(args.seq_len)
    losses = []
    step_seconds = []
    # memlake, per step: VMM calls on the training thread and on its mapping
    # worker, host milliseconds in allocations that missed the same-stream
    # cache, waiting for the allocator's lock, in VMM and event calls.
    counters = ("critical_path_vmm_calls", "worker_vmm_calls", "allocate_ns", "lock_wait_ns",
                "critical_path_vmm_ns", "critical_path_event_ns", "worker_vmm_ns")
    by_step = {name: [] for name in counters}

    def read_counters():
        if args.allocator != "memlake":
            return {name: 0 for name in counters}
        import memlake.torch
        s = memlake.torch.stats()
        return {name: s[name] for name in counters}

    torch.cuda.synchronize()
    start = time.perf_counter()
    for step in range(args.steps):
        t0, before = time.perf_counter(), read_counters()
        seq = int(step_seqs[step])
        ids = torch.randint(0, vocab, (args.batch, seq), generator=gen).cuda()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optim.step()
        optim.zero_grad(set_to_none=True)
        losses.append(loss.item())
        step_seconds.append(time.perf_counter() - t0)
        after = read_counters()
        for name in counters:
            by_step[name].append(after[name] - before[name])
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    if args.allocator == "memlake":
        import memlake.torch
        reserved = memlake.torch.max_memory_reserved()
        allocated = memlake.torch.max_memory_allocated()
        stats = memlake.torch.stats()
        extra = {"host_waits": stats["host_waits"], "stitches": stats["stitches"],
                 "critical_path_vmm_calls": stats["critical_path_vmm_calls"]}
    else:
        reserved = torch.cuda.max_memory_reserved()
        allocated = torch.cuda.max_memory_allocated()
        extra = {}
    return {"allocator": args.allocator, "model": args.model, "steps": args.steps,
            "losses": losses, "peak_reserved_bytes": reserved, "peak_allocated_bytes": allocated,
            "seconds": seconds, "step_seconds": step_seconds,
            "critical_vmm_by_step": by_step["critical_path_vmm_calls"],
            "worker_vmm_by_step": by_step["worker_vmm_calls"],
            **{name[:-3] + "_ms_by_step": [round(ns / 1e6, 2) for ns in by_step[name]]
               for name in counters if name.endswith("_ns")},
            **extra}


def compare(args):
    results = {}
    for allocator in ALLOCATORS:
        cmd = [sys.executable, __file__, "--allocator", allocator, "--model", args.model,
               "--steps", str(args.steps), "--batch", str(args.batch), "--max-seq",
               str(args.max_seq), "--seq-len", str(args.seq_len), "--seed", str(args.seed)]
        if args.memlake_conf:
            cmd += ["--memlake-conf", args.memlake_conf]
        run = subprocess.run(cmd, capture_output=True, text=True)
        if run.returncode != 0:
            print(run.stderr[-4000:], file=sys.stderr)
            raise SystemExit("%s run failed (exit %d)" % (allocator, run.returncode))
        results[allocator] = json.loads(run.stdout.strip().splitlines()[-1])
    native = results["native"]
    gib = 1 << 30
    print("%s, %d steps, batch %d, %s" % (
        args.model, args.steps, args.batch, "sequence length %d" % args.seq_len if args.seq_len
        else "sequence lengths 128..%d" % args.max_seq))
    print("  %-11s %14s %14s %12s %10s %14s" % (
        "allocator", "peak reserved", "peak live", "utilization", "seconds", "max rel dloss"))
    worst = 0.0
    for name, r in results.items():
        diff = max(abs(a - b) / abs(b) for a, b in zip(r["losses"], native["losses"]))
        print("  %-11s %10.2f GiB %10.2f GiB %12.3f %10.2f %14.3g" % (
            name, r["peak_reserved_bytes"] / gib, r["peak_allocated_bytes"] / gib,
            r["peak_allocated_bytes"] / r["peak_reserved_bytes"], r["seconds"], diff))
        worst = max(worst, diff)
    m = results["memlake"]

    for base in ("native", "expandable"):
        print("  memlake / %-10s peak reserved %.3f, time %.3f (steps after 5: %.3f)" % (
            base, m["peak_reserved_bytes"] / results[base]["peak_reserved_bytes"],
            m["seconds"] / results[base]["seconds"],
            sum(m["step_seconds"][5:]) / max(sum(results[base]["step_seconds"][5:]), 1e-9)))
    print("  memlake critical-path VMM calls by step: %s" % m["critical_vmm_by_step"])
    print("  memlake ms inside allocate by step: %s" % m["allocate_ms_by_step"])
    print("  memlake ms waiting for its lock by step: %s" % m["lock_wait_ms_by_step"])
    print("  memlake host waits %d, stitches %d" % (m["host_waits"], m["stitches"]))
    # Deterministic kernels give bit-identical losses whatever the addresses;
    # an op without a deterministic kernel may differ in the last bits.
    ok = worst < 1e-3
    print("  losses %s" % ("identical under every allocator" if worst == 0 else
                           "within %.2g of native's" % worst if ok else "DIFFER"))
    print("JSON " + json.dumps(results))
    return 0 if ok else 1


def main():
    args = parse_args()
    if args.compare:
        return compare(args)
    print(json.dumps(train(args)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
