#!/usr/bin/env python3
"""Writes synthetic memlake-trace v1 files shaped like training workloads the
bundled traces do not cover, to check that memlake's results hold on
patterns it was not tuned on. Only the standard library is used.

  tools/synth_trace.py --kind dynamic --seed 1 -o /tmp/dynamic.csv.gz

Kinds:
  dynamic    transformer steps whose sequence length changes every step
             (activations scale with it), with recomputation segments
  moe        mixture-of-experts: per-step random token counts per expert
             (about 1 GiB at peak); moe_large: the same at hidden 4096
  offload    activations offloaded and prefetched back: big buffers that
             alternate with bursts of small ones
  pipeline   1F1B over 4 streams; activations freed on the producer's stream
             after the consumer is done (as record_stream makes them)

With --repeat every step draws the same shapes as the first (fixed-shape
training: pretraining on packed sequences, a fixed batch of experts' tokens):
the steady state in which an allocator should stop mapping memory.
"""
import argparse
import gzip
import random

MIB = 1 << 20


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

    def free(self, i):
        nbytes, stream = self.live.pop(i)
        self.cur -= nbytes
        self.ts += 2
        self.rows.append(f"{self.ts},free,{i},{nbytes},{stream}")

    def write(self, path, workload):
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "wt") as f:
            f.write(f"# memlake-trace v1 workload={workload} source=tools/synth_trace.py\n")
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


KINDS = {"dynamic": dynamic, "moe": moe, "moe_large": moe_large, "offload": offload, "pipeline": pipeline}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kind", choices=sorted(KINDS), required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--repeat", action="store_true", help="every step the same shapes")
    ap.add_argument("-o", "--output", required=True)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    t = Trace()
    if args.repeat:
        t.repeat_seed = args.seed * 1000003 + 1
    KINDS[args.kind](t, rng, args.steps)
    for i in list(t.live):
        t.free(i)
    repeat = "_repeat" if args.repeat else ""
    t.write(args.output, f"synthetic_{args.kind}{repeat}_seed{args.seed}")


if __name__ == "__main__":
    main()
