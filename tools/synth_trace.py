#!/usr/bin/env python3
"""Writes synthetic memlake-trace v1 files (traces/FORMAT.md) shaped like
workloads the bundled traces do not cover, to check that memlake's results
hold on patterns it was not tuned on. Only the standard library is used; the
same kind, seed and step count give the same file.

  tools/synth_trace.py --kind decode --seed 1 -o /tmp/decode.csv.gz

Each family follows the tensors a real PyTorch program allocates for a real
model (the function of each kind names the model, its shapes and the code
it follows): sizes as requested (numel times element size, not rounded),
parameters allocated first, out-of-place ops whose input is freed once
their output exists, saved activations freed by the backward in reverse.
The header names the workload and the command (`source=synthetic ...`) and
gives `peak_live_bytes`. `--steps` defaults to a length that replays in
seconds; what a step is depends on the kind.

Kinds (default steps in brackets):
  dynamic         transformer steps whose sequence length changes every step,
                  with recomputation segments [12]
  moe, moe_large  mixture of experts: per-step random token counts per
                  expert; moe_large at hidden 4096 [12]
  offload         activations offloaded and prefetched back: big buffers
                  between bursts of small ones [12]
  pipeline        1F1B over 4 streams [12]
  decode          Llama-2-7B batched beam search (4 prompts x 4 beams): K/V
                  caches grow by one token per step by torch.cat, beams
                  reordered by index_select [200 tokens]
  gnn_sampling    GraphSAGE on ogbn-products with GPU neighbour sampling:
                  every mini-batch a new number of nodes and edges [100
                  mini-batches]
  optimizer_step  one step of Pythia-1.4B in fp32 whose AdamW state is
                  created inside the step; parameters and gradients live
                  before it [1]
  geometric_infer octree decoder inference: tensors double level by level
                  from ~100 MB to ~7 GB and never repeat; --small-live keeps
                  186 KB of small blocks live from the start [3 scenes]
  spiky_infer     Qwen2-0.5B chat inference: each prefill's logits, ~0.8 GiB,
                  on top of many small tensors, peak live ~1.7 GiB [8
                  requests]
  compiled_step   nanoGPT GPT-2 (124M) under torch.compile: inductor's large
                  buffers; the last micro-step's logits and batch freed
                  after this one's are allocated [8 steps]
  tiny_params     federated zeroth-order (MeZO) fine-tuning of OPT-125m: every
                  parameter, 3 KB or 150 MB, perturbed and reallocated 4
                  times per step [3 rounds]
  fsdp            Llama-2-7B, FSDP over 8 ranks on 3 streams (compute,
                  all-gather, reduce-scatter), the sequence growing every
                  step [10]
  long_context    Llama-3.2-1B long-context training, packed length new every
                  step, full recomputation, chunked loss [9]

With --repeat every step draws the same shapes as the first (fixed-shape
training: pretraining on packed sequences, a fixed batch of experts' tokens):
the steady state in which an allocator should stop mapping memory.
"""
import argparse
import gzip
import random

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30
HALF, F32, I64 = 2, 4, 8  # bytes per element: bf16/fp16, float32, int64


class Trace:
    def __init__(self):
        self.rows = []
        self.live = {}
        self.next_id = 0
        self.ts = 0
        self.cur = 0
        self.peak = 0
        self.repeat_seed = None

    def steps(self, rng, n):
        """The step loop; with --repeat each step replays the same draws."""
        for i in range(n):
            if self.repeat_seed is not None:
                rng.seed(self.repeat_seed)
            yield i

    def alloc(self, nbytes, stream=0):
        nbytes = max(1, int(nbytes))
        i = self.next_id
        self.next_id += 1
        self.live[i] = (nbytes, stream)
        self.cur += nbytes
        self.peak = max(self.peak, self.cur)
        self.ts += 3
        self.rows.append(f"{self.ts},alloc,{i},{nbytes},{stream}")
        return i

    def free(self, i, stream=None):
        """Frees on the allocation's stream unless `stream` names the one
        that used the block last (a stream-ordered free there)."""
        nbytes, own = self.live.pop(i)
        self.cur -= nbytes
        self.ts += 2
        self.rows.append(f"{self.ts},free,{i},{nbytes},{own if stream is None else stream}")

    def free_all(self, ids, stream=None):
        for i in ids:
            self.free(i, stream)

    def chain(self, sizes, src=None, stream=0):
        """Out-of-place ops one after the other, starting from `src` (freed
        too, when given): each output exists before its input is freed (the
        input's last reference goes when the output is assigned). Returns
        the last output."""
        prev = src
        for n in sizes:
            cur = self.alloc(n, stream)
            if prev is not None:
                self.free(prev)
            prev = cur
        return prev

    def scratch(self, sizes, stream=0):
        """Temporaries of one op: allocated in order, freed in reverse."""
        ids = [self.alloc(n, stream) for n in sizes]
        for i in reversed(ids):
            self.free(i)

    def write(self, path, workload, source, model=""):
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "wt") as f:
            f.write(f"# memlake-trace v1 workload={workload} source={source}\n")
            if model:
                f.write(f"# model {model}\n")
            f.write(f"# peak_live_bytes={self.peak}\n")
            f.write("ts_us,op,id,bytes,stream\n")
            f.write("\n".join(self.rows) + "\n")


def weights(t, rng, layers, hidden):
    return [t.alloc(hidden * hidden * 4 * rng.choice([1, 3, 4])) for _ in range(layers)]


def dynamic(t, rng, steps):
    layers, hidden = 24, 2048
    params = weights(t, rng, layers, hidden)
    grads = []
    for _ in t.steps(rng, steps):
        seq = rng.choice([512, 640, 768, 1024, 1536, 2048]) * rng.randint(1, 4)
        acts = []
        for layer in range(layers):
            keep = t.alloc(seq * hidden * 2 * (1 if layer % 4 else 3))
            tmp = [t.alloc(seq * hidden * rng.choice([2, 4, 8])) for _ in range(3)]
            small = [t.alloc(rng.randint(1, 64) * 1024) for _ in range(4)]
            for x in tmp + small:
                t.free(x)
            acts.append(keep)
        for layer in reversed(range(layers)):
            recompute = [t.alloc(seq * hidden * 4) for _ in range(2)]
            grads.append(t.alloc(hidden * hidden * 4))
            for x in recompute:
                t.free(x)
            t.free(acts[layer])
        for g in grads:
            t.free(g)
        grads = []


def moe(t, rng, steps, hidden=1536):
    experts = 16
    weights(t, rng, experts * 2, hidden)
    for _ in t.steps(rng, steps):
        live = []
        for _layer in range(12):
            for _e in range(experts):
                tokens = int(rng.expovariate(1 / (900 * hidden // 1536))) + 1
                live.append(t.alloc(tokens * hidden * 2))
                t.free(t.alloc(tokens * hidden * 8))
            while len(live) > 3 * experts:
                t.free(live.pop(rng.randrange(len(live))))
        for x in live:
            t.free(x)


def offload(t, rng, steps):
    weights(t, rng, 16, 3072)
    for _ in t.steps(rng, steps):
        on_device = []
        for _layer in range(20):
            big = t.alloc(rng.randint(60, 220) * MIB + rng.randint(0, MIB))
            burst = [t.alloc(rng.randint(1, 900) * 1024) for _ in range(rng.randint(5, 30))]
            for x in burst[::2]:
                t.free(x)
            on_device.append(big)
            if len(on_device) > 4:  # offloaded to the host
                t.free(on_device.pop(0))
            for x in burst[1::2]:
                t.free(x)
        for x in on_device:
            t.free(x)


def pipeline(t, rng, steps):
    stages, micro = 4, 8
    for s in range(stages):
        for _ in range(6):
            t.alloc(rng.randint(20, 90) * MIB, stream=s + 1)
    for _ in t.steps(rng, steps):
        inflight = {s: [] for s in range(stages)}
        for m in range(micro + stages - 1):
            for s in range(stages):
                if 0 <= m - s < micro:
                    size = rng.randint(8, 48) * MIB + rng.randint(0, 1024) * 512
                    inflight[s].append(t.alloc(size, stream=s + 1))
                    if len(inflight[s]) > stages - s:
                        t.free(inflight[s].pop(0))
        for s in range(stages):
            for x in inflight[s]:
                t.free(x)


def moe_large(t, rng, steps):
    moe(t, rng, steps, hidden=4096)


# ---------------------------------------------------------------------------
# Shapes of real models and the tensors their PyTorch code allocates.


class Decoder:
    """A decoder-only transformer's shapes, named as in its Hugging Face
    config (num_hidden_layers, hidden_size, heads, key/value heads,
    intermediate_size, vocab_size)."""

    def __init__(self, layers, hidden, heads, kv_heads, ffn, vocab, qkv_bias=False, tied=False):
        self.layers, self.hidden, self.heads, self.ffn, self.vocab = layers, hidden, heads, ffn, vocab
        self.head_dim = hidden // heads
        self.kv = kv_heads * self.head_dim  # width of K and of V
        self.qkv_bias, self.tied = qkv_bias, tied

    def layer_params(self):
        """Element counts of one decoder layer's parameters in module order:
        q, k, v (with their biases where the model has them), o, gate, up,
        down, the two RMSNorm weights."""
        h, kv, f = self.hidden, self.kv, self.ffn
        qkv = [h * h, h, h * kv, kv, h * kv, kv] if self.qkv_bias else [h * h, h * kv, h * kv]
        return qkv + [h * h, f * h, f * h, h * f, h, h]

    def params(self):
        """Element counts of every parameter in load order (embeddings, the
        layers, the final norm, lm_head unless tied to the embeddings)."""
        ps = [self.vocab * self.hidden]
        for _ in range(self.layers):
            ps += self.layer_params()
        ps.append(self.hidden)
        if not self.tied:
            ps.append(self.vocab * self.hidden)
        return ps


LLAMA2_7B = Decoder(32, 4096, 32, 32, 11008, 32000)
LLAMA32_1B = Decoder(16, 2048, 32, 8, 8192, 128256, tied=True)
QWEN2_05B = Decoder(24, 896, 14, 2, 4864, 151936, qkv_bias=True, tied=True)


def hf_rmsnorm(t, tokens, hidden):
    """LlamaRMSNorm in half precision, op by op: to(float32), pow(2), mean,
    + eps, rsqrt, multiply, to(half), times the weight."""
    x32 = t.alloc(tokens * hidden * F32)
    var = t.chain([tokens * hidden * F32, tokens * F32])
    rstd = t.chain([tokens * F32, tokens * F32], var)
    normed = t.alloc(tokens * hidden * F32)
    t.free(x32)
    t.free(rstd)
    return t.chain([tokens * hidden * HALF, tokens * hidden * HALF], normed)


def hf_rotary(t, x, nbytes):
    """apply_rotary_pos_emb on one of q, k: x * cos + rotate_half(x) * sin
    (rotate_half: a negated half and a cat). Frees x."""
    xcos = t.alloc(nbytes)
    neg = t.alloc(nbytes // 2)
    rot = t.alloc(nbytes)
    t.free(neg)
    rsin = t.alloc(nbytes)
    t.free(rot)
    out = t.alloc(nbytes)
    t.free(rsin)
    t.free(xcos)
    t.free(x)
    return out


def hf_layer(t, m, x, batch, q_len, cache):
    """One LlamaDecoderLayer / Qwen2DecoderLayer forward without autograd
    (SDPA attention, DynamicCache). The layer's K and V grow by torch.cat:
    buffers for the old length plus q_len are allocated and the old ones
    freed. Frees x, the residual input; returns the layer's output."""
    h, n = m.hidden, batch * q_len
    normed = hf_rmsnorm(t, n, h)
    q, k, v = t.alloc(n * h * HALF), t.alloc(n * m.kv * HALF), t.alloc(n * m.kv * HALF)
    t.free(normed)
    q = hf_rotary(t, q, n * h * HALF)
    k = hf_rotary(t, k, n * m.kv * HALF)
    keys, values, past = cache
    length = past + q_len
    if keys is None:  # the first update keeps the tensors themselves
        keys, values = k, v
    else:
        keys = t.chain([batch * length * m.kv * HALF], keys)
        values = t.chain([batch * length * m.kv * HALF], values)
        t.free(k)
        t.free(v)
    cache[:] = [keys, values, length]
    repeated = []
    if m.kv < h:  # repeat_kv: grouped K/V expanded to every head
        repeated = [t.alloc(batch * length * h * HALF) for _ in range(2)]
    attn = t.alloc(n * h * HALF)
    t.free_all(reversed(repeated))
    t.free(q)
    attn = t.chain([n * h * HALF, n * h * HALF], attn)  # transpose().contiguous(), o_proj
    resid = t.alloc(n * h * HALF)
    t.free(attn)
    t.free(x)
    normed = hf_rmsnorm(t, n, h)
    act = t.chain([n * m.ffn * HALF, n * m.ffn * HALF])  # gate_proj, SiLU
    up = t.alloc(n * m.ffn * HALF)
    prod = t.alloc(n * m.ffn * HALF)
    t.free(up)
    t.free(act)
    down = t.alloc(n * h * HALF)
    t.free(prod)
    t.free(normed)
    out = t.alloc(n * h * HALF)
    t.free(down)
    t.free(resid)
    return out


def hf_forward(t, m, batch, q_len, caches, logit_rows):
    """One model forward without autograd: cache_position, embeddings, the
    rotary cos/sin tables, every layer, the final norm and lm_head over
    `logit_rows` positions. Returns the half-precision logits."""
    n, hd = batch * q_len, m.head_dim
    position = t.alloc(q_len * I64)
    x = t.alloc(n * m.hidden * HALF)
    # LlamaRotaryEmbedding: positions as float, inv_freq @ positions, cat, cos and sin, to(half)
    emb = t.chain([q_len * F32, q_len * hd // 2 * F32, q_len * hd * F32])
    cos, sin = t.alloc(q_len * hd * F32), t.alloc(q_len * hd * F32)
    t.free(emb)
    cos = t.chain([q_len * hd * HALF], cos)
    sin = t.chain([q_len * hd * HALF], sin)
    for cache in caches:
        x = hf_layer(t, m, x, batch, q_len, cache)
    normed = hf_rmsnorm(t, n, m.hidden)
    t.free(x)
    logits = t.alloc(logit_rows * m.vocab * HALF)
    t.free(normed)
    t.free_all([sin, cos, position])
    return logits


def load_params(t, sizes, nbytes):
    """A model moved to the device: one block per parameter, in order."""
    return [t.alloc(n * nbytes) for n in sizes]


class Op:
    """One forward op of a layer as autograd sees it: its output's bytes,
    whether the backward needs it (saved until then), the parameter
    gradients its backward makes ((name, bytes) pairs), scratch it
    allocates and frees around its output, and blocks it allocates with its
    output and saves beside it (a norm's statistics, autocast's bf16
    copies)."""

    def __init__(self, out, save=True, grads=(), temps=(), extra=()):
        self.out, self.save, self.grads, self.temps, self.extra = out, save, grads, temps, extra


def run_forward(t, ops, save, stream=0):
    """Runs ops as a chain (an output not saved is freed once the next op's
    output exists). With save=False it is a forward under no_grad, as a
    checkpointed layer runs first: nothing is kept. The last op must not be
    saved: its output, the layer's, is returned with the saved blocks."""
    saved, prev = [], None
    for op in ops:
        extra = [t.alloc(n, stream) for n in op.extra]
        temps = [t.alloc(n, stream) for n in op.temps]
        out = t.alloc(op.out, stream)
        t.free_all(reversed(temps))
        if prev is not None:
            t.free(prev)
        keep = save and op.save
        if save:
            saved.append([out] + extra if keep else extra)
        else:
            t.free_all(extra)
        prev = None if keep else out
    return saved, out


def run_backward(t, ops, saved, grad, in_bytes, on_grad, stream=0):
    """The backward of run_forward's ops in reverse: each allocates the
    gradient of its input (the previous output's size, in_bytes for the
    first), has on_grad(name, bytes) make each of its parameter gradients,
    then frees the incoming gradient and what it saved. Returns the
    gradient of the layer's input."""
    for k in reversed(range(len(ops))):
        op = ops[k]
        temps = [t.alloc(n, stream) for n in op.temps]
        for name, nbytes in op.grads:
            on_grad(name, nbytes)
        grad_in = t.alloc(ops[k - 1].out if k else in_bytes, stream)
        t.free_all(reversed(temps))
        t.free(grad)
        t.free_all(saved[k])
        grad = grad_in
    return grad


def rmsnorm_ops(n, h, act, wbytes, autocast, name):
    """Hugging Face's eager RMSNorm over n tokens as autograd records it:
    to(float32) (none when the stream is float32 already), the variance and
    rsqrt (saved; pow, mean and + eps as scratch), the normalized values,
    to(act) (saved by the weight's multiply), times the weight. Under
    autocast the output is saved by the linear layers' bf16 copies instead."""
    ops = [] if act == F32 else [Op(n * h * F32)]
    ops += [Op(n * F32, temps=(n * h * F32, n * F32, n * F32)), Op(n * h * F32, save=False)]
    if act != F32:
        ops.append(Op(n * h * act))
    return ops + [Op(n * h * act, save=not autocast, grads=((name, h * wbytes),))]


def llama_ops(m, n, act, wbytes, autocast):
    """A Llama decoder layer's forward over n tokens as autograd records it:
    the RMSNorms above, rotary embeddings op by op, flash attention (output
    and logsumexp saved), SwiGLU MLP. act: bytes per element of the
    residual stream; wbytes: of the weights and their gradients. Under
    autocast (float32 weights) each linear layer saves a bf16 copy of its
    weight, and of its input when that is float32."""
    h, kv, f = m.hidden, m.kv, m.ffn
    wide = act == F32

    def linear(name, n_in, n_out, save=False, f32_in=False):
        extra = (n_in * n_out * HALF,) + ((n * n_in * HALF,) if f32_in else ()) if autocast else ()
        return Op(n * n_out * HALF, save, grads=((name, n_in * n_out * wbytes),), extra=extra)

    def rope(width):  # x * cos, rotate_half (a negated half as scratch, a cat), * sin, the sum (saved)
        return [Op(n * width * HALF, save=False), Op(n * width * HALF, save=False, temps=(n * width,)),
                Op(n * width * HALF, save=False), Op(n * width * HALF)]

    return (rmsnorm_ops(n, h, act, wbytes, autocast, "input_layernorm")
            + [linear("q_proj", h, h, f32_in=wide), linear("k_proj", h, kv, f32_in=wide),
               linear("v_proj", h, kv, True, wide)]
            + rope(h) + rope(kv)
            + [Op(m.heads * n * F32), Op(n * h * HALF), linear("o_proj", h, h), Op(n * h * act, save=False)]
            + rmsnorm_ops(n, h, act, wbytes, autocast, "post_attention_layernorm")
            + [linear("gate_proj", h, f, True, wide), Op(n * f * HALF), linear("up_proj", h, f, True, wide),
               Op(n * f * HALF), linear("down_proj", f, h), Op(n * h * act, save=False)])


def clip_grad_norm(t, grads, stream=0):
    """torch.nn.utils.clip_grad_norm_ (foreach): a norm per gradient, the
    norm of each, a stack, the total, the clip coefficient; the gradients
    are scaled in place."""
    norms = [t.alloc(F32, stream) for _ in grads]
    each = [t.alloc(F32, stream) for _ in grads]
    stacked = t.alloc(len(grads) * F32, stream)
    t.free_all(reversed(each))
    total = t.alloc(F32, stream)
    t.free(stacked)
    coef = t.chain([F32, F32, F32], stream=stream)  # total + eps, max_norm / that, clamp
    t.free(coef)
    t.free(total)
    t.free_all(reversed(norms))


def adamw_foreach(t, sizes, state, stream=0):
    """torch.optim.AdamW(foreach=True).step() over parameters of `sizes`
    bytes: on the first step exp_avg and exp_avg_sq are created per
    parameter (zeros_like, in order, kept in `state`); every step
    _foreach_sqrt(exp_avg_sqs) allocates one temporary per parameter, freed
    in reverse when the list goes (the other foreach ops work in place)."""
    if not state:
        for n in sizes:
            state += [t.alloc(n, stream), t.alloc(n, stream)]
    sqrt = [t.alloc(n, stream) for n in sizes]
    t.free_all(reversed(sqrt))


# ---------------------------------------------------------------------------
# The families.


def decode(t, rng, steps):
    """Batched beam search with Llama-2-7B in fp16 (Hugging Face generate
    with num_beams=4 over 4 prompts left-padded to the longest, 64-447
    tokens; SDPA attention with a 4D padding mask, DynamicCache): 32 layers,
    hidden 4096, 32 heads of 128, MLP 11008, vocabulary 32000; 16 sequences
    decode `steps` new tokens. Every step each layer's K and V grow by one
    token through torch.cat (buffers for n+1 tokens allocated, those for n
    freed: 128 KiB more per step, up to 85 MB each, 2-5 GiB in all beside
    12.6 GiB of weights) and are then index_selected into new buffers by
    the beam reordering; logits of the last position in float32,
    log_softmax, top-k over beams x vocabulary per prompt, the beam
    scorer's small tensors, input_ids and attention mask grown by a cat
    each."""
    m, prompts, beams = LLAMA2_7B, 4, 4
    seqs, v = prompts * beams, m.vocab
    load_params(t, m.params(), HALF)
    n = rng.randint(64, 447)
    ids, mask, scores = t.alloc(seqs * n * I64), t.alloc(seqs * n * I64), t.alloc(seqs * F32)
    caches = [[None, None, 0] for _ in range(m.layers)]
    for step in range(steps):
        q_len = n if step == 0 else 1
        # _prepare_4d_causal_attention_mask_with_cache_position: full, triu,
        # expanded to every sequence, the padding filled in
        causal = t.chain([q_len * n * HALF, q_len * n * HALF])
        padded = t.alloc(seqs * q_len * n * HALF)
        t.scratch([seqs * q_len * n])
        t.free(causal)
        logits = hf_forward(t, m, seqs, q_len, caches, seqs)
        t.free(padded)
        logits = t.chain([seqs * v * F32], logits)  # outputs.logits[:, -1, :].clone().float()
        logits = t.chain([seqs * v * F32, seqs * v * F32], logits)  # log_softmax, + beam_scores
        top = [t.alloc(2 * seqs * F32), t.alloc(2 * seqs * I64)]  # topk(2 * beams) per prompt
        t.free(logits)
        picks = [t.alloc(2 * seqs * I64), t.alloc(2 * seqs * I64)]  # beam index, token (div, mod)
        chosen = [t.alloc(seqs * F32), t.alloc(seqs * I64), t.alloc(seqs * I64)]  # scores, tokens, beam_idx
        t.free_all(reversed(picks + top))
        selected = t.alloc(seqs * n * I64)  # input_ids[beam_idx, :]
        ids = t.chain([seqs * (n + 1) * I64], ids)  # cat with the new tokens
        t.free(selected)
        mask = t.chain([seqs * (n + 1) * I64], mask)
        for cache in caches:  # reorder_cache(beam_idx)
            cache[0] = t.chain([seqs * cache[2] * m.kv * HALF], cache[0])
            cache[1] = t.chain([seqs * cache[2] * m.kv * HALF], cache[1])
        t.free(scores)
        scores = chosen[0]
        t.free_all(chosen[1:])
        n += 1


def spiky_infer(t, rng, steps):
    """Chat inference with Qwen2-0.5B-Instruct in bf16 (transformers 4.44
    generate with the model's sampling defaults: repetition penalty,
    temperature, top-k 20, top-p 0.8; SDPA): 24 layers, hidden 896, 14
    heads, 2 key/value heads, MLP 4864, vocabulary 151936, tied embeddings
    (0.92 GiB of weights). `steps` requests of 700-999 prompt tokens, each
    answered with 4-12 tokens (a judge or classifier prompt). The prefill
    computes logits for every prompt position and upcasts them
    (logits.float()): a bf16 and a float32 tensor of 0.25 and 0.5 GiB, the
    spike, on top of many small tensors; peak live about 1.7 GiB."""
    m = QWEN2_05B
    load_params(t, m.params(), HALF)
    v = m.vocab
    for _ in t.steps(rng, steps):
        n = rng.randint(700, 999)
        ids, mask = t.alloc(n * I64), t.alloc(n * I64)
        caches = [[None, None, 0] for _ in range(m.layers)]
        for token in range(rng.randint(4, 12)):
            rows = n if token == 0 else 1
            logits = hf_forward(t, m, 1, rows, caches, rows)
            logits = t.chain([rows * v * F32], logits)  # logits.float()
            scores = t.alloc(v * F32)  # outputs.logits[:, -1, :].clone()
            t.free(logits)
            # repetition penalty: gather, where, scatter
            picked = t.chain([n * F32, n * F32])
            scores = t.chain([v * F32], scores)
            t.free(picked)
            scores = t.chain([v * F32], scores)  # temperature
            kth = [t.alloc(20 * F32), t.alloc(20 * I64)]  # top-k 20
            drop = t.alloc(v)
            t.free_all(reversed(kth))
            scores = t.chain([v * F32], scores)  # masked_fill
            t.free(drop)
            ordered = [t.alloc(v * F32), t.alloc(v * I64)]  # top-p: sort
            cum = t.chain([v * F32, v * F32, v])  # softmax, cumsum, <= 1 - top_p
            drop = t.alloc(v)  # scatter back to vocabulary order
            t.free(cum)
            t.free_all(reversed(ordered))
            scores = t.chain([v * F32], scores)
            t.free(drop)
            probs = t.chain([v * F32], scores)  # softmax
            token_id = t.alloc(I64)  # multinomial
            t.free(probs)
            # next_tokens * unfinished + pad * (1 - unfinished), cat, stopping criteria
            t.scratch([I64, I64, I64])
            ids = t.chain([(n + 1) * I64], ids)
            mask = t.chain([(n + 1) * I64], mask)
            t.free(token_id)
            t.scratch([1, 1, 1])
            n += 1
        for cache in reversed(caches):
            t.free(cache[1])
            t.free(cache[0])
        t.free(mask)
        t.free(ids)


def gnn_sampling(t, rng, steps):
    """GraphSAGE on ogbn-products as in DGL's
    examples/pytorch/graphsage/node_classification.py (mode puregpu): the
    graph in CSC (2,449,029 nodes, 123,718,280 directed edges), 100 float32
    features, labels and the 196,615 training ids on the GPU; NeighborSampler
    with fan-out 10 per hop (three hops) from mini-batches of 1,024 seeds
    (the last of an epoch has 7), 3 SAGEConv layers (mean, hidden 256, 47
    classes), dropout 0.5, Adam (lr 1e-3, weight decay 5e-4, foreach).
    Every mini-batch samples a new number of nodes and edges per hop (about
    1,024 -> 9,500 -> 80,000 -> 530,000): the feature gather, the per-hop
    sampling buffers, the blocks and every activation take new sizes."""
    nodes, edges, feat, hidden, classes, train = 2449029, 123718280, 100, 256, 47, 196615
    for n in [(nodes + 1) * I64, edges * I64, nodes * feat * F32, nodes * I64, train * I64]:
        t.alloc(n)
    dims = [(feat, hidden), (hidden, hidden), (hidden, classes)]
    state, grads, perm, start = [], [], None, train
    for _ in t.steps(rng, steps):
        if start >= train:  # a new epoch: torch.randperm over the training ids
            if perm is not None:
                t.free(perm)
            perm, start = t.alloc(train * I64), 0
        seeds = min(1024, train - start)
        start += seeds
        # sampling, from the seeds outwards: per hop in-degrees, offsets,
        # cub scratch, the picked edges; to_block's hash table, unique
        # sources and relabelled edges; the block's CSC built for SpMM
        dst, blocks = seeds, []
        frontier = t.alloc(seeds * I64)
        for share in (rng.uniform(0.85, 0.95), rng.uniform(0.78, 0.86), rng.uniform(0.55, 0.65)):
            e = int(dst * 10 * rng.uniform(0.88, 0.97))
            src = dst + int(e * share)
            deg, ptr = t.alloc(dst * I64), t.alloc((dst + 1) * I64)
            t.scratch([dst * I64 + 767])
            picked = [t.alloc(e * I64) for _ in range(3)]  # rows, columns, edge ids
            t.free(deg)
            table = t.alloc((2 << (dst + e).bit_length()) * I64)  # keys and values
            block = [t.alloc(src * I64), t.alloc(e * I64), t.alloc(e * I64)]  # source ids, relabelled edges
            t.free(table)
            t.free_all(picked[:2])
            blocks.append((dst, src, e, block + [picked[2], ptr]))
            dst = src
        blocks.reverse()  # the input layer's block first
        x = t.alloc(dst * feat * F32)  # features[input_nodes]
        y = t.alloc(seeds * I64)  # labels[output_nodes]
        saved = []
        for layer, (nd, ns, e, block) in enumerate(blocks):
            fin, fout = dims[layer]
            keep = [t.alloc((nd + 1) * I64), t.alloc(e * I64), t.alloc(e * I64)]  # CSC for gspmm
            before = fin > fout  # lin_before_mp: fc_neigh on the sources first
            if before:
                keep.append(t.alloc(ns * fout * F32))
            width = fout if before else fin
            agg = t.alloc(nd * width * F32)  # copy_u + sum
            deg = t.chain([nd * I64, nd * F32, nd * F32])  # in_degrees, float, clamp
            mean = t.alloc(nd * width * F32)
            t.free(agg)
            t.free(deg)
            neigh = mean if before else t.alloc(nd * fout * F32)
            self_ = t.alloc(nd * fout * F32)
            out = t.alloc(nd * fout * F32)
            t.free(self_)
            if not before:
                t.free(neigh)
            keep += [mean, out]
            if layer < 2:  # ReLU, dropout (mask and output)
                relu = t.alloc(nd * fout * F32)
                keep += [relu, t.alloc(nd * fout), t.alloc(nd * fout * F32)]
            saved.append(keep)
        logp = t.alloc(seeds * classes * F32)  # cross_entropy: log_softmax, nll
        loss = t.chain([F32, F32])
        t.free_all(reversed(grads))  # opt.zero_grad(): last mini-batch's gradients
        grads = []
        grad = t.alloc(seeds * classes * F32)
        t.free(logp)
        for layer in reversed(range(3)):
            nd, ns, e, _ = blocks[layer]
            fin, fout = dims[layer]
            for _ in range(len(saved[layer]) - 3):  # element-wise backward over the saved tensors
                g = t.alloc(nd * fout * F32)
                t.free(grad)
                grad = g
            grads += [t.alloc(fin * fout * F32), t.alloc(fin * fout * F32), t.alloc(fout * F32)]
            if layer:  # the gradient of the sources: fc_self's rows plus gspmm's transpose
                g = t.alloc(ns * fin * F32)
                t.scratch([nd * fin * F32, ns * fin * F32])
                t.free(grad)
                grad = g
            t.free_all(reversed(saved[layer]))
        t.free(grad)
        # Adam with weight decay (foreach): grads + wd * params, state, sqrt
        sizes = [t.live[g][0] for g in grads]
        decayed = [t.alloc(n) for n in sizes]
        adamw_foreach(t, sizes, state)
        t.free_all(reversed(decayed))
        t.free(loss)
        t.free_all([y, x])
        for _, _, _, block in blocks:
            t.free_all(block)
        t.free(frontier)


class Grads:
    """Parameter gradients by name, as AccumulateGrad keeps them: the first
    gradient of a parameter becomes its .grad, later ones are added in
    place and freed."""

    def __init__(self, t, stream=0):
        self.t, self.stream, self.blocks = t, stream, {}

    def add(self, name, nbytes):
        if name in self.blocks:
            self.t.free(self.t.alloc(nbytes, self.stream))
        else:
            self.blocks[name] = self.t.alloc(nbytes, self.stream)

    def add_cast(self, name, nbytes):
        """A weight used through autocast's bf16 copy: the bf16 gradient,
        its float32 cast (ToCopyBackward), then AccumulateGrad."""
        half = self.t.alloc(nbytes // 2, self.stream)
        self.add(name, nbytes)
        self.t.free(half)

    def zero(self, order):
        """zero_grad(set_to_none=True): freed in parameter order."""
        self.t.free_all(self.blocks.pop(name) for name in order if name in self.blocks)


def optimizer_step(t, rng, steps):
    """One training step of Pythia-1.4B (GPT-NeoX: 24 layers, hidden 2048, 16
    heads of 128 with rotary on 32 dims, parallel residual, MLP 8192,
    vocabulary 50304, untied output; 1.41 B parameters) in float32 with
    eager attention, batch 4 of 512 to 1024 tokens (by seed). The
    parameters come first (module order, with each layer's 64-byte rotary
    inv_freq buffer), then the gradients of an earlier micro-batch, in the
    order its backward made them. The step: forward, backward adding into
    those gradients, clip_grad_norm_, AdamW (foreach), which creates
    exp_avg and exp_avg_sq for every parameter inside the step and then
    allocates a temporary per parameter, zero_grad. Further steps
    (--steps) find the state in place and make the gradients afresh."""
    layers, h, ffn, vocab, heads = 24, 2048, 8192, 50304, 16
    batch, seq = 4, rng.randrange(512, 1025, 64)
    n, scores = batch * seq, batch * heads * seq * seq * F32
    rope = (n * h, n * h // 2, n * h, n * h)  # on the rotary dims: x * cos, neg, cat, * sin

    def ln(name):  # native_layer_norm: the output saved with its mean and rstd
        grads = ((name + ".weight", h * F32), (name + ".bias", h * F32))
        return Op(n * h * F32, extra=(n * F32, n * F32), grads=grads)

    def linear(name, n_in, n_out, save=True):
        grads = ((name + ".weight", n_in * n_out * F32), (name + ".bias", n_out * F32))
        return Op(n * n_out * F32, save, grads=grads)

    ops = [ln("input_layernorm"), linear("query_key_value", h, 3 * h),
           Op(n * h * F32, temps=rope), Op(n * h * F32, temps=rope),  # rotary q and k
           Op(scores, save=False, temps=(scores,)), Op(scores, save=False), Op(scores),  # baddbmm, where, softmax
           Op(n * h * F32, save=False), Op(n * h * F32), linear("dense", h, h, save=False),  # @ v, merged heads
           ln("post_attention_layernorm"), linear("dense_h_to_4h", h, ffn), Op(n * ffn * F32),  # GELU
           linear("dense_4h_to_h", ffn, h, save=False), Op(n * h * F32, save=False), Op(n * h * F32, save=False)]
    layer = [("input_layernorm.weight", h), ("input_layernorm.bias", h), ("post_attention_layernorm.weight", h),
             ("post_attention_layernorm.bias", h), ("rotary_emb.inv_freq", 16), ("query_key_value.weight", 3 * h * h),
             ("query_key_value.bias", 3 * h), ("dense.weight", h * h), ("dense.bias", h),
             ("dense_h_to_4h.weight", ffn * h), ("dense_h_to_4h.bias", ffn), ("dense_4h_to_h.weight", h * ffn),
             ("dense_4h_to_h.bias", h)]
    names = ([("embed_in", vocab * h)] + [(f"{i}.{p}", x) for i in range(layers) for p, x in layer]
             + [("final_layer_norm.weight", h), ("final_layer_norm.bias", h), ("embed_out", vocab * h)])
    load_params(t, [x for _, x in names], F32)
    size = {p: x * F32 for p, x in names if not p.endswith("inv_freq")}
    grads = Grads(t)
    earlier = ["embed_out", "final_layer_norm.weight", "final_layer_norm.bias"]
    earlier += [f"{i}.{p}" for i in reversed(range(layers)) for op in reversed(ops) for p, _ in op.grads]
    for p in earlier + ["embed_in"]:
        grads.add(p, size[p])
    state = []
    for _ in t.steps(rng, steps):
        x = t.alloc(n * h * F32)  # embed_in
        inputs, saved = [], []
        for _ in range(layers):
            inputs.append(x)
            s, x = run_forward(t, ops, True)
            saved.append(s)
        final = [t.alloc(n * F32), t.alloc(n * F32), t.alloc(n * h * F32)]  # final_layer_norm
        logits = t.alloc(n * vocab * F32)  # embed_out; the outputs keep it until the step ends
        rows = batch * (seq - 1) * vocab * F32
        shifted = t.alloc(rows)  # lm_logits[:, :-1, :].contiguous()
        logp = t.alloc(rows)  # cross_entropy: log_softmax, nll
        t.free(shifted)
        loss = t.chain([F32, F32])
        grad = t.alloc(rows)
        t.free(logp)
        grad = t.chain([n * vocab * F32], grad)  # back into the logits' shape
        grads.add("embed_out", size["embed_out"])
        grad = t.chain([n * h * F32, n * h * F32], grad)  # embed_out's input, final_layer_norm's
        grads.add("final_layer_norm.weight", h * F32)
        grads.add("final_layer_norm.bias", h * F32)
        t.free_all(reversed(final))
        t.free(x)
        for li in reversed(range(layers)):
            grad = run_backward(t, ops, saved[li], grad, n * h * F32, lambda p, nb, li=li: grads.add(f"{li}.{p}", nb))
            t.free(inputs[li])
        grads.add("embed_in", size["embed_in"])  # embedding_dense_backward
        t.free(grad)
        clip_grad_norm(t, [grads.blocks[p] for p in size])
        adamw_foreach(t, list(size.values()), state)
        grads.zero(size)
        t.free(loss)
        t.free(logits)


def geometric_infer(t, rng, steps, small_live=False):
    """Shape generation with an octree decoder (O-CNN's octree-based decoder
    as in its completion and autoencoder networks, 64 float32 channels per
    octant), inference. At every level each octant splits into 8 children
    and the split classifier keeps about a quarter of them (24-26%), so the
    octant count, and every tensor of the level with it, doubles: features
    from ~100 MB at the first level to ~7 GB at the seventh. Per level: the
    neighbour table (27 int32 per octant, built through a hash of the keys),
    a bottleneck residual block (1x1, 3x3 with its im2col buffer of at most
    2e8 elements, 1x1; batch norm out of place, ReLU in place, the
    shortcut's add), the split logits and labels, the kept octants, the
    children's keys and upsampled features, and a few small octree
    tensors. Each of `steps` scenes starts from a new coarse octree, so no
    size repeats. small_live: four small blocks (186,368 bytes: a key
    lookup table, level offsets, the scene's transform and depth vector)
    are allocated first and stay live."""
    c = 64
    if small_live:
        for n in (131072, 49152, 6080, 64):
            t.alloc(n)
    for _ in t.steps(rng, steps):
        n = rng.randint(380_000, 420_000)
        keys, feat = t.alloc(n * I64), t.alloc(n * c * F32)
        t.scratch([I64, I64])
        for level in range(7):
            table = t.alloc(4 * n * I64)
            nbr = t.alloc(n * 27 * 4)
            t.free(table)
            a = t.chain([n * c // 4 * F32, n * c // 4 * F32])  # 1x1 conv, batch norm
            col = t.alloc(min(n * 27 * c // 4, 200_000_000) * F32)
            b = t.alloc(n * c // 4 * F32)
            t.free(col)
            b = t.chain([n * c // 4 * F32], b)
            t.free(a)
            d = t.chain([n * c * F32, n * c * F32], b)  # 1x1 conv back to c channels, batch norm
            out = t.alloc(n * c * F32)  # + shortcut, ReLU in place
            t.free(d)
            t.free(feat)
            t.free(nbr)
            feat = out
            if level == 6:
                break
            labels = t.chain([n * 2 * F32, n * I64])  # split logits, argmax
            kept = int(n * rng.uniform(0.24, 0.26))
            index = t.alloc(kept * I64)  # nonzero
            t.free(labels)
            children = [t.alloc(8 * kept * I64), t.alloc(8 * kept * c * F32)]  # keys, upsampled features
            t.free(index)
            t.free(feat)
            t.free(keys)
            keys, feat, n = children[0], children[1], 8 * kept
            t.scratch([8 * I64, I64, I64])
        out = t.alloc(n * 4 * F32)  # signed distance and normal per octant
        t.free(feat)
        t.free(keys)
        t.free(out)


def compiled_step(t, rng, steps):
    """nanoGPT's train.py on GPT-2 small (124M: 12 layers, n_embd 768, 12
    heads, block 1024, vocabulary 50304, biases; lm_head tied to wte) with
    compile=True (inductor, default mode), bf16 autocast, 5 micro-steps of
    gradient accumulation, batch 8 to 16 (by seed), grad_clip 1.0,
    fused AdamW (its state, with a step tensor per parameter on the device,
    created on the first step). The compiled forward allocates few, large
    buffers: per layer the bf16 weight copies, qkv, the attention output
    and logsumexp, the float32 residuals with their rstd and the MLP's 4x
    buffer are kept for the backward; layer-norm outputs and projections
    reuse one scratch buffer; the cross-entropy is fused. The backward graph
    returns every parameter's gradient at once, then AccumulateGrad keeps
    or adds them. Late frees, as nanoGPT's loop makes them: `logits, loss =
    model(X, Y)` frees the last micro-step's logits (0.8-1.6 GB) only after
    this one's exist, also across steps, and the prefetched next batch
    exists before the current one is freed. The first micro-step also
    autotunes: clones of buffers the benchmarked kernels mutate."""
    layers, c, vocab, block = 12, 768, 50304, 1024
    n = rng.randrange(8, 17, 2) * block
    heads_lse = n // block * 12 * block * F32
    layer = [("ln_1.weight", c), ("ln_1.bias", c), ("attn.c_attn.weight", 3 * c * c), ("attn.c_attn.bias", 3 * c),
             ("attn.c_proj.weight", c * c), ("attn.c_proj.bias", c), ("ln_2.weight", c), ("ln_2.bias", c),
             ("mlp.c_fc.weight", 4 * c * c), ("mlp.c_fc.bias", 4 * c), ("mlp.c_proj.weight", 4 * c * c),
             ("mlp.c_proj.bias", c)]
    names = ([("wte", vocab * c), ("wpe", block * c)] + [(f"{i}.{p}", x) for i in range(layers) for p, x in layer]
             + [("ln_f.weight", c), ("ln_f.bias", c)])
    size = {p: x * F32 for p, x in names}
    load_params(t, [x for _, x in names], F32)
    batch = [t.alloc(n * I64), t.alloc(n * I64)]
    grads, state, logits, loss = Grads(t), [], None, None
    for step in t.steps(rng, steps):
        for micro in range(5):
            tune = step == 0 and micro == 0
            x = t.alloc(n * c * F32)  # wte[idx] + wpe[pos], fused
            saved = []
            for _ in range(layers):
                scratch = t.alloc(n * c * HALF)  # ln_1 out, then c_proj out, ln_2 out, mlp c_proj out
                kept = [x, t.alloc(n * F32), t.alloc(3 * c * c * HALF), t.alloc(n * 3 * c * HALF),
                        t.alloc(n * c * HALF), t.alloc(heads_lse), t.alloc(c * c * HALF), t.alloc(n * c * F32),
                        t.alloc(n * F32), t.alloc(4 * c * c * HALF), t.alloc(n * 4 * c * HALF)]
                if tune:
                    t.scratch([n * c * F32, n * 4 * c * HALF])
                gelu = t.alloc(n * 4 * c * HALF)
                kept.append(t.alloc(4 * c * c * HALF))
                x = t.alloc(n * c * F32)
                t.free(gelu)
                t.free(scratch)
                saved.append(kept)
            final = [x, t.alloc(n * F32), t.alloc(n * c * HALF), t.alloc(vocab * c * HALF)]
            new_logits = t.alloc(n * vocab * HALF)
            lse = t.alloc(n * F32)
            new_loss = t.alloc(F32)
            if logits is not None:  # `logits, loss = model(X, Y)` rebinds: the last ones go now
                t.free(logits)
                t.free(loss)
            logits, loss = new_logits, new_loss
            used = batch
            batch = [t.alloc(n * I64), t.alloc(n * I64)]  # X, Y = get_batch('train'), prefetched
            t.free(used[0])
            # the backward graph
            out = {}

            def grad(name, bf16=True):
                if bf16:  # mm in bf16, then the float32 gradient
                    half = t.alloc(size[name] // 2)
                    out[name] = t.alloc(size[name])
                    t.free(half)
                else:
                    out[name] = t.alloc(size[name])

            g = t.alloc(n * vocab * HALF)  # softmax - one-hot, fused
            t.free(lse)
            grad("wte")
            gx = t.alloc(n * c * HALF)
            t.free(g)
            gres = t.alloc(n * c * F32)  # ln_f backward
            grad("ln_f.weight", False)
            grad("ln_f.bias", False)
            t.free(gx)
            t.free_all(reversed(final))
            for li in reversed(range(layers)):
                kept, p = saved[li], f"{li}."
                a = t.alloc(n * 4 * c * HALF)  # through mlp c_proj and GELU
                grad(p + "mlp.c_proj.weight")
                grad(p + "mlp.c_proj.bias", False)
                if tune:
                    t.scratch([4 * c * c * F32])
                t.free(kept.pop())
                b = t.alloc(n * c * HALF)  # through c_fc
                grad(p + "mlp.c_fc.weight")
                grad(p + "mlp.c_fc.bias", False)
                t.free(a)
                g2 = t.alloc(n * c * F32)  # ln_2 and the residual
                grad(p + "ln_2.weight", False)
                grad(p + "ln_2.bias", False)
                t.free(b)
                t.free_all(reversed(kept[7:]))
                t.free(gres)
                gres = g2
                a = t.alloc(n * c * HALF)  # through attn c_proj
                grad(p + "attn.c_proj.weight")
                grad(p + "attn.c_proj.bias", False)
                t.free(kept[6])
                dqkv = t.alloc(n * 3 * c * HALF)  # flash attention's backward
                t.scratch([heads_lse, n * c * F32])
                t.free(a)
                t.free_all(reversed(kept[3:6]))
                grad(p + "attn.c_attn.weight")
                grad(p + "attn.c_attn.bias", False)
                b = t.alloc(n * c * HALF)
                t.free(dqkv)
                g2 = t.alloc(n * c * F32)  # ln_1 and the residual
                grad(p + "ln_1.weight", False)
                grad(p + "ln_1.bias", False)
                t.free(b)
                t.free_all(reversed(kept[:3]))
                t.free(gres)
                gres = g2
            dense = t.alloc(size["wte"])  # embedding_dense_backward, summed with lm_head's
            t.free(dense)
            grad("wpe", False)
            t.free(gres)
            t.free(used[1])
            for name in reversed(list(out)):  # AccumulateGrad
                if name in grads.blocks:
                    t.free(out[name])
                else:
                    grads.blocks[name] = out[name]
        clip_grad_norm(t, [grads.blocks[p] for p in size])
        if not state:  # fused AdamW's state: step, exp_avg, exp_avg_sq per parameter
            for p in size:
                state += [t.alloc(F32), t.alloc(size[p]), t.alloc(size[p])]
        grads.zero(size)


def tiny_params(t, rng, steps):
    """Federated zeroth-order fine-tuning: MeZO's zo_step (princeton-nlp/MeZO,
    large_models/trainer.py: zo_perturb_parameters, zo_forward, zo_update)
    on OPT-125m in float32 (12 layers, hidden 768, MLP 3072, vocabulary
    50272, 196 parameters, 122 of them of 3-12 KB: biases and layer norms),
    FedAvg over 3 clients per round with 2 local steps each, simulated on
    one GPU as FedKSeed or FwdLLM do; SST-2 prompts in batches of 16 padded
    to 40-95 tokens. Each ZO step perturbs every parameter three times
    (+eps, -2 eps, +eps) and updates it once, each time drawing z =
    torch.normal(the parameter's shape), computing param.data + scale * z *
    eps out of place and rebinding param.data: a new block per parameter,
    from 3 KB to 154 MB, and the old one freed; z goes only when the next
    parameter's is drawn. Two forwards per step without autograd (full
    vocabulary logits and log_softmax, 0.1-0.3 GB each). The server's copy
    of the weights and the clients' summed deltas stay live."""
    h, f, vocab, layers, batch = 768, 3072, 50272, 12, 16
    layer = [("k_proj.weight", h * h), ("k_proj.bias", h), ("v_proj.weight", h * h), ("v_proj.bias", h),
             ("q_proj.weight", h * h), ("q_proj.bias", h), ("out_proj.weight", h * h), ("out_proj.bias", h),
             ("self_attn_layer_norm.weight", h), ("self_attn_layer_norm.bias", h), ("fc1.weight", f * h),
             ("fc1.bias", f), ("fc2.weight", h * f), ("fc2.bias", h), ("final_layer_norm.weight", h),
             ("final_layer_norm.bias", h)]
    names = ([("embed_tokens", vocab * h), ("embed_positions", 2050 * h), ("final_layer_norm.weight", h),
              ("final_layer_norm.bias", h)] + [(f"{i}.{p}", x) for i in range(layers) for p, x in layer])
    sizes = [x * F32 for _, x in names]
    decays = [not ("bias" in p or "layer_norm" in p) for p, _ in names]
    params = load_params(t, [x for _, x in names], F32)
    server = [t.alloc(x) for x in sizes]  # the global weights, cloned

    def perturb(weight_ops, other_ops):
        """One pass over the parameters: z drawn, out-of-place results (more
        for weights, which decay, than for biases and norms), the last
        becoming param.data, the old data freed."""
        z = None
        for k, nbytes in enumerate(sizes):
            fresh = t.alloc(nbytes)
            if z is not None:
                t.free(z)
            z = fresh
            new = t.chain([nbytes] * (weight_ops if decays[k] else other_ops))
            t.free(params[k])
            params[k] = new
        t.free(z)

    def forward(seq):
        n = batch * seq
        mask = t.chain([batch * seq * seq * F32] * 3)  # the 4D causal mask
        pos = t.chain([n * I64, n * I64, n * I64])  # cumsum, * mask, - 1
        x = t.alloc(n * h * F32)
        emb = t.alloc(n * h * F32)
        t.free(pos)
        x = t.chain([n * h * F32], x)
        t.free(emb)
        for _ in range(layers):
            normed = t.alloc(n * h * F32)
            t.scratch([n * F32, n * F32])
            qkv = [t.chain([n * h * F32, n * h * F32]) for _ in range(3)]  # projection, scaled or made contiguous
            t.free(normed)
            attn = t.chain([batch * 12 * seq * seq * F32] * 4)  # bmm, + mask, max with finfo.min, softmax
            out = t.alloc(n * h * F32)
            t.free(attn)
            t.free_all(reversed(qkv))
            out = t.chain([n * h * F32, n * h * F32], out)  # merge heads, out_proj
            x = t.chain([n * h * F32], x)
            t.free(out)
            normed = t.alloc(n * h * F32)
            t.scratch([n * F32, n * F32])
            mlp = t.chain([n * f * F32, n * f * F32, n * h * F32], normed)
            x = t.chain([n * h * F32], x)
            t.free(mlp)
        normed = t.chain([n * h * F32], x)
        logits = t.chain([n * vocab * F32], normed)
        logp = t.chain([n * vocab * F32], logits)
        loss = t.chain([batch * 2 * F32, batch * F32, F32], logp)  # option tokens' log-probs, the loss
        t.free(mask)
        return loss

    for _ in t.steps(rng, steps):
        deltas = None
        for _client in range(3):
            # the client starts from the server's weights (copied in place)
            for _ in range(2):
                seq = rng.randint(40, 95)
                ids = [t.alloc(batch * seq * I64) for _ in range(2)]  # input_ids, attention_mask
                perturb(3, 3)  # scale * z, * eps, param.data +
                loss1 = forward(seq)
                perturb(3, 3)
                loss2 = forward(seq)
                perturb(3, 3)
                pg = t.chain([F32, F32])  # (loss1 - loss2) / (2 * eps), then .item()
                t.free(pg)
                # zo_update: projected_grad * z (+ weight_decay * param.data), * lr, param.data -
                perturb(5, 3)
                t.free_all([loss2, loss1])
                t.free_all(reversed(ids))
            if deltas is None:
                deltas = [t.alloc(x) for x in sizes]  # zeros_like
            for nbytes in sizes:  # (local - global) / clients, added in place
                t.free(t.chain([nbytes, nbytes]))
        t.free_all(deltas)  # the server moved by them in place


def unshard(t, numel, ranks, stream):
    """FSDP's all-gather of one FlatParameter on `stream`: the bf16 copy of
    the rank's shard, the unsharded bf16 parameter; the copy freed."""
    mp = t.alloc(numel // ranks * HALF, stream)
    full = t.alloc(numel * HALF, stream)
    t.free(mp)
    return full


def fsdp(t, rng, steps):
    """Llama-2-7B trained with PyTorch FSDP (FULL_SHARD over 8 ranks, this
    trace one rank's): one FlatParameter per decoder layer and one for the
    root (embeddings, final norm, lm_head); bf16 mixed precision over
    float32 sharded weights and gradients; activation checkpointing per
    layer; BACKWARD_PRE prefetch; AdamW (foreach). Three streams: compute
    (0), all-gather (1: the bf16 shard copies and the unsharded
    FlatParameters), reduce-scatter (2: each sharded gradient and its
    float32 cast). A layer's unsharded parameters are freed on the compute
    stream after its forward and again after its backward; its unsharded
    gradient, made on the compute stream, is freed on the reduce-scatter
    stream, and its sharded gradient kept or, in the second micro-batch of
    the step's gradient accumulation, added in place. Sequence-length
    warm-up: step k (from 0) trains micro-batches of one sequence of about
    5632 * (k + 1) tokens, so each step needs more memory than the last
    (peak live ~46 GiB at step 10). Initialization first: per unit the
    float32 parameters, their flattening and the rank's shard."""
    m, ranks = LLAMA2_7B, 8
    compute, gather, reduce = 0, 1, 2
    h, vocab = m.hidden, m.vocab
    units = [m.layer_params()] * m.layers + [[vocab * h, h, vocab * h]]
    for unit in units:  # FSDP's init: move, flatten, keep the rank's shard
        params = load_params(t, unit, F32)
        flat = t.alloc(sum(unit) * F32)
        t.free_all(params)
        t.alloc(sum(unit) // ranks * F32)
        t.free(flat)
    numel = [sum(u) for u in units]
    state, sharded_grads = [], {}

    def reduce_scatter(k, flat_grad):
        """The sharded gradient, cast to float32, kept or added in place."""
        part = t.alloc(numel[k] // ranks * HALF, reduce)
        t.free(flat_grad, reduce)
        cast = t.alloc(numel[k] // ranks * F32, reduce)
        t.free(part)
        if k in sharded_grads:
            t.free(cast)
        else:
            sharded_grads[k] = cast

    for step in t.steps(rng, steps):
        n = 5632 * (step + 1) - rng.randrange(1024)  # packed, the remainder dropped
        ops = llama_ops(m, n, HALF, HALF, False)
        norm = rmsnorm_ops(n, h, HALF, HALF, False, "norm")
        norm[-1].save = False  # lm_head saves the output; freed after its backward
        for _micro in range(2):  # gradient accumulation
            inputs = [t.alloc(n * I64) for _ in range(3)]  # input_ids, labels, position_ids
            root = unshard(t, numel[-1], ranks, gather)
            x = t.alloc(n * h * HALF)  # embed_tokens
            emb = t.chain([n * F32, n * 64 * F32, n * 128 * F32])
            rotary = [t.alloc(n * 128 * F32), t.alloc(n * 128 * F32)]
            t.free(emb)
            rotary = [t.chain([n * 128 * HALF], r) for r in rotary]
            checkpoints = []
            for li in range(m.layers):
                gathered = unshard(t, numel[li], ranks, gather)
                checkpoints.append(x)
                _, x = run_forward(t, ops, False)
                t.free(gathered, compute)
            saved_norm, normed = run_forward(t, norm, True)
            logits = t.alloc(n * vocab * HALF)  # lm_head; the outputs keep it until the step ends
            wide = t.alloc(n * vocab * F32)  # loss_function: logits.float()
            logp = t.alloc(n * vocab * F32)  # cross_entropy: log_softmax, nll
            t.free(wide)
            loss = t.chain([F32, F32])
            root_grads = []
            grad = t.alloc(n * vocab * F32)
            t.free(logp)
            grad = t.chain([n * vocab * HALF], grad)
            root_grads.append(t.alloc(vocab * h * HALF))
            grad = t.chain([n * h * HALF], grad)
            t.free(normed)
            grad = run_backward(t, norm, saved_norm, grad, n * h * HALF, lambda p, nb: root_grads.append(t.alloc(nb)))
            t.free(x)
            full = {m.layers - 1: unshard(t, numel[-2], ranks, gather)}
            for li in reversed(range(m.layers)):
                if li:
                    full[li - 1] = unshard(t, numel[li - 1], ranks, gather)
                saved, out = run_forward(t, ops, True)  # recomputed from the checkpoint
                t.free(out)
                views = []
                grad = run_backward(t, ops, saved, grad, n * h * HALF, lambda p, nb: views.append(t.alloc(nb)))
                t.free(checkpoints[li])
                flat = t.alloc(numel[li] * HALF)  # the FlatParameter's gradient, its views' concatenated
                t.free_all(views)
                reduce_scatter(li, flat)
                t.free(full.pop(li), compute)
            root_grads.append(t.alloc(vocab * h * HALF))  # embedding_dense_backward
            t.free(grad)
            flat = t.alloc(numel[-1] * HALF)
            t.free_all(root_grads)
            reduce_scatter(len(units) - 1, flat)
            t.free(root, compute)
            t.free_all(rotary)
            t.free_all(inputs)
            t.free(loss)
            t.free(logits)
        sizes = [x // ranks * F32 for x in numel]
        clip_grad_norm(t, [sharded_grads[k] for k in range(len(units))])
        adamw_foreach(t, sizes, state)
        t.free_all(sharded_grads.pop(k) for k in range(len(units)))


def long_context(t, rng, steps):
    """Long-context fine-tuning of Llama-3.2-1B (16 layers, hidden 2048, 32
    heads, 8 key/value heads, MLP 8192, vocabulary 128256, tied embeddings;
    1.24 B parameters) on documents packed into one sequence of a new
    length every step (48-96 Ki tokens, 4-40 documents; flash attention's
    varlen with cu_seqlens), float32 weights under bf16 autocast, full
    activation checkpointing (each layer's input kept, the layer recomputed
    in the backward), Liger's fused linear cross entropy (logits in chunks
    of a power of two near T/63 tokens, the gradients made in the forward),
    clip_grad_norm_, AdamW (foreach), zero_grad."""
    m = LLAMA32_1B
    h, vocab = m.hidden, m.vocab
    names = ["embed_tokens"] + [f"{i}.{p}" for i in range(m.layers) for p in
                                ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj",
                                 "input_layernorm", "post_attention_layernorm")] + ["norm"]
    sizes = dict(zip(names, (x * F32 for x in m.params())))
    load_params(t, m.params(), F32)
    grads, state = Grads(t), []
    chunk_rows = -(-vocab // h)
    for _ in t.steps(rng, steps):
        n = rng.randint(48, 96) * 1024 - rng.randrange(2048)
        ops = llama_ops(m, n, F32, F32, True)
        norm = rmsnorm_ops(n, h, F32, F32, True, "norm")
        inputs = [t.alloc(n * I64) for _ in range(3)] + [t.alloc((rng.randint(4, 40) + 1) * 4)]
        x = t.alloc(n * h * F32)  # embed_tokens
        emb = t.chain([n * F32, n * 32 * F32, n * 64 * F32])
        rotary = [t.alloc(n * 64 * F32), t.alloc(n * 64 * F32)]
        t.free(emb)
        checkpoints = []
        for _ in range(m.layers):
            checkpoints.append(x)
            _, x = run_forward(t, ops, False)
        saved_norm, normed = run_forward(t, norm, True)
        chunk = 1 << (-(-n // chunk_rows) - 1).bit_length()
        grad = t.alloc(n * h * F32)  # Liger: grad_input, grad_weight, loss_1d
        weight_grad = t.alloc(vocab * h * F32)
        per_token = t.alloc(n * F32)
        for start in range(0, n, chunk):
            rows = min(chunk, n - start)
            logits = t.alloc(rows * vocab * F32)
            t.free(t.alloc(rows * h * F32))  # grad_logits_chunk @ weight, copied into grad_input
            t.free(logits)
        loss = t.alloc(F32)
        t.free(per_token)
        t.free(normed)
        t.scratch([F32])  # backward: grad_output compared with 1.0
        grads.blocks["embed_tokens"] = weight_grad
        grad = run_backward(t, norm, saved_norm, grad, n * h * F32, lambda p, nb: grads.add(p, nb))
        t.free(x)
        for li in reversed(range(m.layers)):
            saved, out = run_forward(t, ops, True)
            t.free(out)

            def on_grad(p, nbytes, li=li):
                if p.endswith("proj"):
                    grads.add_cast(f"{li}.{p}", nbytes)
                else:
                    grads.add(f"{li}.{p}", nbytes)

            grad = run_backward(t, ops, saved, grad, n * h * F32, on_grad)
            t.free(checkpoints[li])
        grads.add("embed_tokens", sizes["embed_tokens"])  # embedding_dense_backward into the tied weight's
        t.free(grad)
        t.free_all(rotary)
        t.free_all(inputs)
        clip_grad_norm(t, [grads.blocks[p] for p in names])
        adamw_foreach(t, list(sizes.values()), state)
        grads.zero(names)
        t.free(loss)


KINDS = {  # kind: (function, default --steps, the model for the header)
    "dynamic": (dynamic, 12, ""),
    "moe": (moe, 12, ""),
    "moe_large": (moe_large, 12, ""),
    "offload": (offload, 12, ""),
    "pipeline": (pipeline, 12, ""),
    "decode": (decode, 200, "Llama-2-7B fp16, Hugging Face beam search, 4 prompts x 4 beams, K/V grown by torch.cat"),
    "gnn_sampling": (gnn_sampling, 100, "GraphSAGE on ogbn-products, DGL puregpu neighbour sampling, fan-out 10x3"),
    "optimizer_step": (optimizer_step, 1, "Pythia-1.4B fp32, one step, AdamW (foreach) state created in the step"),
    "geometric_infer": (geometric_infer, 3, "O-CNN octree decoder inference, 64 channels, 7 levels doubling"),
    "spiky_infer": (spiky_infer, 8, "Qwen2-0.5B-Instruct bf16 chat, transformers 4.44 generate, sampling"),
    "compiled_step": (compiled_step, 8, "nanoGPT GPT-2 124M, torch.compile, bf16 autocast, 5 micro-steps"),
    "tiny_params": (tiny_params, 3, "OPT-125m fp32, MeZO zeroth-order steps, FedAvg over 3 clients"),
    "fsdp": (fsdp, 10, "Llama-2-7B, FSDP FULL_SHARD over 8 ranks (one rank), bf16, checkpointing, 3 streams"),
    "long_context": (long_context, 9, "Llama-3.2-1B fp32 + bf16 autocast, 48-96 Ki packed tokens, checkpointing"),
}
# The families that tools/trace_table.py --synth all generates, with its seeds.
UNSEEN = ["decode", "gnn_sampling", "optimizer_step", "geometric_infer", "spiky_infer", "compiled_step",
          "tiny_params", "fsdp", "long_context"]


def write_trace(path, kind, seed=1, steps=None, repeat=False, small_live=False):
    """Runs one kind and writes its trace to path; returns the workload name."""
    fn, default_steps, model = KINDS[kind]
    steps = default_steps if steps is None else steps
    rng = random.Random(seed)
    t = Trace()
    if repeat:
        t.repeat_seed = seed * 1000003 + 1
    if kind == "geometric_infer":
        fn(t, rng, steps, small_live)
    else:
        fn(t, rng, steps)
    for i in list(t.live):
        t.free(i)
    workload = f"synthetic_{kind}" + "_repeat" * repeat + "_smalllive" * small_live + f"_seed{seed}"
    command = f"tools/synth_trace.py --kind {kind} --seed {seed} --steps {steps}"
    command += " --repeat" * repeat + " --small-live" * small_live
    t.write(path, workload, "synthetic " + command, model)
    return workload


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kind", choices=sorted(KINDS), required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--steps", type=int, help="steps of the kind (default: the kind's, listed above)")
    ap.add_argument("--repeat", action="store_true", help="every step the same shapes")
    ap.add_argument("--small-live", action="store_true",
                    help="geometric_infer: small blocks live from the start")
    ap.add_argument("-o", "--output", required=True)
    args = ap.parse_args()
    if args.small_live and args.kind != "geometric_infer":
        ap.error("--small-live applies to --kind geometric_infer only")
    if args.steps is not None and args.steps < 1:
        ap.error("--steps must be at least 1")
    write_trace(args.output, args.kind, args.seed, args.steps, args.repeat, args.small_live)


if __name__ == "__main__":
    main()
