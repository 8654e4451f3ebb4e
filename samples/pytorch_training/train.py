"""Training with memlake switched on by one call, beside PyTorch's own
allocators on the same run: same losses, less memory reserved.

    python samples/pytorch_training/train.py --compare            # every allocator in turn
    python samples/pytorch_training/train.py --compare --rounds 3 # interleaved, median times
    python samples/pytorch_training/train.py --allocator memlake  # one run, JSON on stdout
    python samples/pytorch_training/train.py --find-batch --memory-cap-gib 8 --seq-len 512
                                                                  # largest batch under a cap
    python samples/pytorch_training/train.py --summarize LOG...   # the tables of JSON lines

This file is one run (one allocator, one model) and the command line;
compare.py runs the allocators as child processes and prints the tables,
batch_search.py searches the largest batch under a cap.

The model is built from a configuration (nothing is downloaded): a GPT-2
with activation recomputation (gradient checkpointing), or a Llama-style
model trained with LoRA adapters (peft), both under bf16 autocast, or
`decode`: the same GPT-2 in bf16, eval, under torch.no_grad(), generating
greedily with its key/value cache (transformers' DynamicCache, which grows
every layer's keys and values by torch.cat at every token) and the sequence
of generated tokens grown by torch.cat as generate() does. A decode step is
one batch of sequences: a prompt of random length, then a random number of
new tokens (--new-tokens MIN:MAX); its "loss" is a checksum of the last
logits, so allocators can be compared for equality.

Training batches have a different sequence length at every step, as with
dynamic shapes and packed variable-length data: the irregular sizes that
fragment a caching allocator. With --seq-len every step has that length
instead (fixed shapes, as in pretraining on packed sequences): the steady
state in which memlake should make no VMM call on the training thread after
the first steps. For decode, --seq-len fixes the prompt length and the new
tokens at MAX.

Allocators: `native` (PyTorch's caching allocator), `expandable`
(PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True), `async`
(PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync), `memlake`
(memlake.torch.enable()), and with --allocators memlake with options of its
own, `memlake/KEY:VALUE[/KEY:VALUE...]` (`memlake/worker:off`), run in the
same rounds and tabled after the others with its step time and peak
reserved against memlake's defaults. Each run is its own process: PyTorch picks its
allocator once per process (a PYTORCH_ALLOC_CONF or PYTORCH_CUDA_ALLOC_CONF
of the caller's is dropped, so `native` is PyTorch's default). Peak reserved
is torch.cuda.max_memory_reserved() for native and expandable,
memlake.torch.max_memory_reserved() for memlake, and for async the
high-water mark of the device's default memory pool
(cudaMemPoolAttrReservedMemHigh, read through libcudart with ctypes; PyTorch's
async backend allocates from that pool, sets its release threshold to
UINT64_MAX so freed memory stays in the pool, and reports the same attribute
as torch.cuda.max_memory_reserved(); both are in the JSON). Deterministic
algorithms are on, so every allocator must give the same losses.

--compare --rounds R runs the allocators R times in interleaved order (round
r starts r places further along the list), each run a child process, and
reports per allocator the peak reserved (the largest over rounds), the
median over rounds of each run's median step time after --warmup steps with
its spread (min-max), the median over rounds of each run's mean step time
after --warmup steps, and how far its losses are from native's. Every run's
JSON is printed on a line starting with "JSON ".

--find-batch searches, for each allocator, the largest --batch that trains
--steps steps at --seq-len under a memory cap of --memory-cap-gib GiB, set
by torch.cuda.set_per_process_memory_fraction(cap / total) before the first
allocation (memlake takes it through its memory-fraction hook, which must
come before the device's first allocation). Each try is a child process;
running out of memory ends it with exit status 3. A try fits when it
completes and its peak reserved stays within the cap: PyTorch's native and
expandable allocators and memlake never reserve beyond it, but PyTorch's
cudaMallocAsync backend applies the fraction to the bytes of live
allocations only (its setMemoryFraction sets a limit checked against the
sum of live allocation sizes; the pool itself may hold more), so an async
run can complete with the pool above the cap; it then does not fit.
"""

import argparse
import contextlib
import json
import os
import statistics
import sys
import time
from pathlib import Path

ALLOCATORS = ("native", "expandable", "async", "memlake")
MODELS = ("gpt2-recompute", "llama-lora", "decode")
GIB = 1 << 30
OOM_EXIT = 3  # a child that ran out of memory under --memory-cap-gib

# memlake, per step: VMM calls on the training thread and on its mapping
# worker, host milliseconds in allocations that missed the same-stream
# cache, waiting for the allocator's lock, in VMM and event calls.
COUNTERS = ("critical_path_vmm_calls", "worker_vmm_calls", "allocate_ns", "deallocate_ns",
            "lock_wait_ns", "critical_path_vmm_ns", "critical_path_event_ns", "worker_vmm_ns")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--allocator", choices=ALLOCATORS, default="memlake")
    p.add_argument("--allocators", default=",".join(ALLOCATORS),
                   help="for --compare and --find-batch: which, comma-separated; memlake with "
                        "options of its own as memlake/KEY:VALUE[/KEY:VALUE...] "
                        "(memlake/worker:off), run and tabled beside the others")
    p.add_argument("--label", default="",
                   help="the allocator's name in the JSON record (default: --allocator)")
    p.add_argument("--model", choices=MODELS, default="gpt2-recompute")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=3,
                   help="steps left out of the median step time")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--max-seq", type=int, default=1024)
    p.add_argument("--seq-len", type=int, default=0,
                   help="every step this length (fixed shapes); decode: the prompt length")
    p.add_argument("--new-tokens", default="128:512",
                   help="decode: new tokens per step, MIN:MAX (random in between, seeded)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--init-device", choices=("cpu", "cuda"), default="cpu",
                   help="where the model's weights are created and initialized (cuda: faster)")
    p.add_argument("--memlake-conf", default="", help="options for memlake.torch.enable()")
    p.add_argument("--memory-cap-gib", type=float, default=0,
                   help="torch.cuda.set_per_process_memory_fraction(this GiB / total memory)")
    p.add_argument("--compare", action="store_true",
                   help="run every allocator in a child process and compare")
    p.add_argument("--rounds", type=int, default=1, help="--compare: interleaved rounds")
    p.add_argument("--find-batch", action="store_true",
                   help="largest batch under --memory-cap-gib for each allocator")
    p.add_argument("--batch-range", default="1:64", help="--find-batch: LO:HI searched")
    p.add_argument("--jobs", type=int, default=4,
                   help="--find-batch: child processes at a time (all on the same GPU)")
    p.add_argument("--time-budget", type=float, default=0,
                   help="--compare/--find-batch: seconds; start no child that would not end "
                        "in time (0: no limit)")
    p.add_argument("--trace", default="",
                   help="one run: record the three steps after --warmup with torch.profiler "
                        "(host ops and GPU kernels) into this Chrome trace (.json or .json.gz)")
    p.add_argument("--summarize", nargs="+", metavar="LOG",
                   help="print the tables of the JSON lines in these logs")
    args = p.parse_args(argv)
    if args.find_batch:
        if args.memory_cap_gib <= 0:
            p.error("--find-batch needs --memory-cap-gib")
        if args.seq_len <= 0:
            p.error("--find-batch needs a fixed --seq-len")
    return args


def int_range(text):
    lo, _, hi = text.partition(":")
    lo, hi = int(lo), int(hi or lo)
    if lo < 1 or hi < lo:
        raise SystemExit("bad range %r: expected MIN:MAX with 1 <= MIN <= MAX" % text)
    return lo, hi


def split_variant(name):
    """("memlake", "worker:off,large_chunk:64M") for "memlake/worker:off/large_chunk:64M";
    (name, "") for a plain allocator."""
    base, *options = name.split("/")
    return base, ",".join(options)


def allocator_list(text):
    names = [x.strip() for x in text.split(",") if x.strip()]
    for name in names:
        base, options = split_variant(name)
        if base not in ALLOCATORS:
            raise SystemExit("unknown allocator %r (known: %s)" % (name, ", ".join(ALLOCATORS)))
        if options and base != "memlake":
            raise SystemExit("%r: only memlake takes options (memlake/KEY:VALUE)" % name)
        if "/" in name and not all(":" in o for o in name.split("/")[1:]):
            raise SystemExit("%r: options are KEY:VALUE, joined by /" % name)
    if len(set(names)) != len(names):
        raise SystemExit("an allocator is named twice in %r" % text)
    return names


# ---------------------------------------------------------------- one run

def select_allocator(allocator):
    """Environment for PyTorch's allocator: read when torch is imported."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    # PYTORCH_ALLOC_CONF wins over PYTORCH_CUDA_ALLOC_CONF in recent PyTorch.
    for key in ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF"):
        os.environ.pop(key, None)
    if allocator == "expandable":
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
    elif allocator == "async":
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "backend:cudaMallocAsync"


def build_model(args, torch):
    """(model, vocabulary size), weights created on --init-device."""
    place = torch.device("cuda") if args.init_device == "cuda" else contextlib.nullcontext()
    with place:
        return _build_model(args.model, torch)


def _build_model(name, torch):
    import transformers
    if name in ("gpt2-recompute", "decode"):
        cfg = transformers.GPT2Config(n_layer=12, n_embd=768, n_head=12, n_positions=1024,
                                      vocab_size=50257)
        if name == "decode":
            # Inference weights in bf16, created so (no fp32 copy on the GPU).
            previous = torch.get_default_dtype()
            torch.set_default_dtype(torch.bfloat16)
            try:
                model = transformers.GPT2LMHeadModel(cfg)
            finally:
                torch.set_default_dtype(previous)
            return model, cfg.vocab_size
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


def _cudart():
    """libcudart as a ctypes library: the copy this process has loaded (torch's),
    else one by name. (None, why) when there is none."""
    import ctypes
    import ctypes.util
    candidates = []
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                fields = line.split()
                if len(fields) >= 6 and os.path.basename(fields[-1]).startswith("libcudart"):
                    candidates.append(fields[-1])
    except OSError:
        pass
    candidates += ["libcudart.so.13", "libcudart.so.12", "libcudart.so"]
    found = ctypes.util.find_library("cudart")
    if found:
        candidates.append(found)
    errors = []
    for path in dict.fromkeys(candidates):
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            errors.append(str(e))
    return None, "no libcudart could be loaded (%s)" % "; ".join(errors)


# cudaMemPoolAttr (driver_types.h, CUDA 11.2 to 13): values are cuuint64_t.
_POOL_ATTRIBUTES = {"reserved_current": 5,  # cudaMemPoolAttrReservedMemCurrent
                    "reserved_high": 6,     # cudaMemPoolAttrReservedMemHigh
                    "used_current": 7,      # cudaMemPoolAttrUsedMemCurrent
                    "used_high": 8}         # cudaMemPoolAttrUsedMemHigh


def mempool_attributes(device):
    """The device's default memory pool's byte counts (the pool PyTorch's
    cudaMallocAsync backend allocates from), or {"source": "unavailable: ..."}.
    Never raises."""
    try:
        import ctypes
        lib, where = _cudart()
        if lib is None:
            return {"source": "unavailable: " + where}
        get_pool = lib.cudaDeviceGetDefaultMemPool
        get_pool.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int]
        get_pool.restype = ctypes.c_int
        get_attribute = lib.cudaMemPoolGetAttribute
        get_attribute.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
        get_attribute.restype = ctypes.c_int
        pool = ctypes.c_void_p()
        err = get_pool(ctypes.byref(pool), device)
        if err != 0:
            return {"source": "unavailable: cudaDeviceGetDefaultMemPool returned %d (%s)" % (
                err, where)}
        out = {"source": where}
        for name, attribute in _POOL_ATTRIBUTES.items():
            value = ctypes.c_uint64(0)
            err = get_attribute(pool, attribute, ctypes.byref(value))
            out[name] = value.value if err == 0 else None
        return out
    except Exception as e:  # a measurement, never a reason to fail the run
        return {"source": "unavailable: %s: %s" % (type(e).__name__, e)}


def read_peaks(allocator, torch):
    """(peak reserved, peak allocated, extra fields) of this process."""
    if allocator == "memlake":
        import memlake.torch
        stats = memlake.torch.stats()
        return (memlake.torch.max_memory_reserved(), memlake.torch.max_memory_allocated(),
                {"host_waits": stats["host_waits"], "stitches": stats["stitches"],
                 "critical_path_vmm_calls": stats["critical_path_vmm_calls"],
                 "worker_vmm_calls": stats["worker_vmm_calls"]})
    reserved = torch.cuda.max_memory_reserved()
    allocated = torch.cuda.max_memory_allocated()
    extra = {"torch_allocator_backend": allocator_backend(torch)}
    if allocator == "async":
        pool = mempool_attributes(torch.cuda.current_device())
        extra["mempool"] = pool
        extra["torch_max_memory_reserved"] = reserved
        extra["torch_max_memory_allocated"] = allocated
        if pool.get("reserved_high") is not None:
            reserved = pool["reserved_high"]
        if pool.get("used_high") is not None:
            allocated = pool["used_high"]
    return reserved, allocated, extra


def is_oom(error, torch):
    oom_type = getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError
    text = str(error)
    # memlake's errors reach Python as RuntimeError ("memlake: out of memory ...").
    return (isinstance(error, oom_type) or "out of memory" in text
            or "CUBLAS_STATUS_ALLOC_FAILED" in text)


def apply_memory_cap(args, torch):
    """Caps this process's CUDA memory at --memory-cap-gib, before the first
    allocation; returns the cap in bytes. The total is cudaMemGetInfo's, the one
    PyTorch's allocators (native, expandable, cudaMallocAsync) and memlake
    multiply the fraction by."""
    _, total = torch.cuda.mem_get_info(0)
    fraction = min(1.0, args.memory_cap_gib * GIB / total)
    torch.cuda.set_per_process_memory_fraction(float(fraction), 0)
    return int(fraction * total)


def allocator_backend(torch):
    backend = getattr(torch.cuda, "get_allocator_backend", None)
    return backend() if backend is not None else None


def median_after_warmup(step_seconds, warmup):
    measured = step_seconds[warmup:] if len(step_seconds) > warmup else step_seconds
    return statistics.median(measured) if measured else float("nan")


def mean_after_warmup(step_seconds, warmup):
    """With a new length every step, steps fall in two groups (shapes seen before, and new ones
    that pay for kernel selection), and the median lands on either; the mean counts both."""
    measured = step_seconds[warmup:] if len(step_seconds) > warmup else step_seconds
    return statistics.fmean(measured) if measured else float("nan")


def train(args):
    """One run in this process: (result dict, exit status)."""
    select_allocator(args.allocator)
    import torch
    if args.allocator == "memlake":
        sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
        import memlake.torch
        memlake.torch.enable(args.memlake_conf or None)
    elif args.allocator == "async" and allocator_backend(torch) not in (None, "cudaMallocAsync"):
        raise SystemExit("PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync did not take: backend %r"
                         % allocator_backend(torch))
    cap_bytes = apply_memory_cap(args, torch) if args.memory_cap_gib > 0 else 0
    torch.manual_seed(args.seed)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    common = {"allocator": args.label or args.allocator, "model": args.model, "steps": args.steps,
              "batch": args.batch, "seq_len": args.seq_len, "max_seq": args.max_seq,
              "warmup": args.warmup, "init_device": args.init_device,
              "torch_version": torch.__version__, "device": torch.cuda.get_device_name(0)}
    if args.model == "decode":
        common["new_tokens"] = args.new_tokens
    if cap_bytes:
        common["memory_cap_gib"] = args.memory_cap_gib
        common["memory_cap_bytes"] = cap_bytes
    progress = {"step": -1}
    try:
        result = run_steps(args, torch, progress)
    except Exception as e:
        if not (cap_bytes and is_oom(e, torch)):
            raise
        try:
            reserved, allocated, extra = read_peaks(args.allocator, torch)
        except Exception:
            reserved, allocated, extra = None, None, {}
        return ({"kind": "oom", **common, "oom": True, "oom_step": progress["step"],
                 "message": str(e)[:600], "peak_reserved_bytes": reserved,
                 "peak_allocated_bytes": allocated, **extra}, OOM_EXIT)
    reserved, allocated, extra = read_peaks(args.allocator, torch)
    result.update(common)
    result.update(peak_reserved_bytes=reserved, peak_allocated_bytes=allocated, **extra)
    return result, 0


def decode_sequence(model, torch, ids, new_tokens):
    """Greedy decoding of new_tokens tokens after the prompt ids:
    (checksum of the last logits, sum of the generated token ids)."""
    out = model(input_ids=ids, use_cache=True)
    past = out.past_key_values  # a DynamicCache: torch.cat per layer per token
    logits = out.logits[:, -1, :].float()  # a copy: the prompt's logits go with `out`
    del out
    tokens = logits.argmax(dim=-1, keepdim=True)
    generated = tokens
    for _ in range(new_tokens - 1):
        out = model(input_ids=tokens, past_key_values=past, use_cache=True)
        past = out.past_key_values
        logits = out.logits[:, -1, :].float()
        del out
        tokens = logits.argmax(dim=-1, keepdim=True)
        generated = torch.cat([generated, tokens], dim=1)
    return logits.sum().item(), int(generated.sum().item())


def start_profiler(torch):
    """torch.profiler over host ops and GPU kernels, from the next step on."""
    from torch.profiler import ProfilerActivity, profile
    profiler = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
    profiler.start()
    return profiler


def stop_profiler(profiler, path):
    """Ends the recording and writes its Chrome trace; gzips a .gz path."""
    profiler.stop()
    if not path.endswith(".gz"):
        profiler.export_chrome_trace(path)
        return
    import gzip
    import shutil
    plain = path[:-3]
    profiler.export_chrome_trace(plain)
    with open(plain, "rb") as src, gzip.open(path, "wb") as dst:
        shutil.copyfileobj(src, dst)
    os.remove(plain)


def run_steps(args, torch, progress):
    model, vocab = build_model(args, torch)
    decode = args.model == "decode"
    if decode:
        model = model.cuda().eval()
        optim = None
    else:
        model = model.cuda().train()
        params = [p for p in model.parameters() if p.requires_grad]
        optim = torch.optim.AdamW(params, lr=1e-4)
    gen = torch.Generator().manual_seed(args.seed + 1)
    if decode:
        positions = 1024  # the GPT-2's n_positions
        new_min, new_max = int_range(args.new_tokens)
        prompts = torch.randint(16, max(17, args.max_seq // 2 + 1), (args.steps,), generator=gen)
        news = torch.randint(new_min, new_max + 1, (args.steps,), generator=gen)
        if args.seq_len:
            prompts.fill_(args.seq_len)
            news.fill_(new_max)
        if int(prompts.max()) >= positions:
            raise SystemExit("decode: prompts must be shorter than %d tokens" % positions)
        news = torch.minimum(news, positions - prompts)
        step_seqs = prompts
    else:
        step_seqs = torch.randint(2, args.max_seq // 64 + 1, (args.steps,), generator=gen) * 64
        if args.seq_len:
            step_seqs.fill_(args.seq_len)
    losses = []
    tokens_checksums = []
    step_seconds = []
    by_step = {name: [] for name in COUNTERS}

    def read_counters():
        if args.allocator != "memlake":
            return {name: 0 for name in COUNTERS}
        import memlake.torch
        s = memlake.torch.stats()
        return {name: s[name] for name in COUNTERS}

    submit_seconds = []
    profiler = None
    torch.cuda.synchronize()
    start = time.perf_counter()
    for step in range(args.steps):
        progress["step"] = step
        if args.trace and step == args.warmup:
            profiler = start_profiler(torch)
        t0, before = time.perf_counter(), read_counters()
        marker = (torch.profiler.record_function("step %d" % step) if profiler is not None
                  else contextlib.nullcontext())
        with marker:
            seq = int(step_seqs[step])
            ids = torch.randint(0, vocab, (args.batch, seq), generator=gen).cuda()
            if decode:
                with torch.no_grad():
                    checksum, token_sum = decode_sequence(model, torch, ids, int(news[step]))
                losses.append(checksum)
                tokens_checksums.append(token_sum)
            else:
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    loss = model(input_ids=ids, labels=ids).loss
                loss.backward()
                optim.step()
                optim.zero_grad(set_to_none=True)
                submit_seconds.append(time.perf_counter() - t0)
                losses.append(loss.item())
        step_seconds.append(time.perf_counter() - t0)
        if profiler is not None and step == args.warmup + 2:
            stop_profiler(profiler, args.trace)
            profiler = None
        after = read_counters()
        for name in COUNTERS:
            by_step[name].append(after[name] - before[name])
    if profiler is not None:
        stop_profiler(profiler, args.trace)
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    result = {"losses": losses, "seconds": seconds, "step_seconds": step_seconds,
              "submit_seconds": submit_seconds,
              "median_step_seconds": median_after_warmup(step_seconds, args.warmup),
              "critical_vmm_by_step": by_step["critical_path_vmm_calls"],
              "worker_vmm_by_step": by_step["worker_vmm_calls"],
              **{name[:-3] + "_ms_by_step": [round(ns / 1e6, 2) for ns in by_step[name]]
                 for name in COUNTERS if name.endswith("_ns")}}
    if decode:
        result.update(tokens_checksums=tokens_checksums,
                      prompt_lengths=[int(x) for x in step_seqs],
                      new_tokens_by_step=[int(x) for x in news])
    else:
        result["seq_lens"] = [int(x) for x in step_seqs]
    return result


def main():
    args = parse_args()
    if args.summarize:
        from compare import summarize
        return summarize(args.summarize)
    if args.find_batch:
        from batch_search import find_batch
        return find_batch(args)
    if args.compare:
        from compare import compare
        return compare(args)
    result, status = train(args)
    print(json.dumps(result))
    return status


if __name__ == "__main__":
    sys.exit(main())
