#!/usr/bin/env python3
"""Writes memlake-trace v1 files that meet the host's limit on memory
mappings (vm.max_map_count) when replayed through memlake (issue 28), with
the standard library only:

  tests/limits/limit_traces.py --kind fsdp -o /tmp/fsdp.csv.gz
  tests/limits/limit_traces.py --kind longctx --steps 14 --scale 4.2 -o /tmp/longctx.csv.gz

Kinds:
  fsdp     3 streams (compute, all-gather, reduce-scatter), 48 layers, a
           footprint that grows every step; 10 steps: 122,132 events,
           47.7 GiB peak live
  longctx  one stream, a packed length that changes every step: many medium
           activations (2 MiB chunks) and large buffers that stitch their
           free chunks; 14 steps at scale 4.2: 51,136 events, 35.7 GiB peak
"""
import argparse
import gzip
import random

MIB = 1 << 20
GIB = 1 << 30


class Trace:
    def __init__(self):
        self.rows, self.live = [], {}
        self.next_id = self.ts = self.cur = self.peak = 0

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
        with gzip.open(path, "wt") as f:
            f.write(f"# memlake-trace v1 workload={workload} source=tests/limits/limit_traces.py\n")
            f.write(f"# peak_live_bytes={self.peak}\n")
            f.write("ts_us,op,id,bytes,stream\n" + "\n".join(self.rows) + "\n")


def tail(rng, granules):
    return rng.randint(0, granules) * 512


def fsdp(t, rng, steps, scale):
    layers = 48
    shard = [int(rng.randint(40, 90) * MIB * scale) for _ in range(layers)]
    for x in shard:
        t.alloc(x, 0)  # parameters
    for x in shard:
        t.alloc(2 * x, 0)  # optimizer state
    for step in range(steps):
        t.alloc(int(rng.randint(300, 600) * MIB * scale), 0)  # kept: the footprint grows
        acts = []
        for layer in range(layers):
            batch = (0.55 + 0.05 * step) * rng.uniform(0.7, 1.3)
            full = t.alloc(shard[layer] * 3 + tail(rng, 4096), 1)  # all-gathered weights
            act = t.alloc(int(rng.randint(500, 900) * MIB * batch * scale) + tail(rng, 2047), 0)
            tmps = [t.alloc(int(rng.randint(8, 200) * MIB * batch * scale) + tail(rng, 4095), 0)
                    for _ in range(6)]
            smalls = [t.alloc(rng.randint(1, 2048) * 512, rng.choice([0, 0, 1])) for _ in range(46)]
            for x in tmps + smalls:
                t.free(x)
            t.free(full)
            acts.append(act)
        grads = []
        for layer in reversed(range(layers)):
            full = t.alloc(shard[layer] * 3 + tail(rng, 4096), 1)
            rec = [t.alloc(int(rng.randint(20, 300) * MIB * batch * scale) + tail(rng, 4095), 0)
                   for _ in range(4)]
            grad = t.alloc(shard[layer] * 3, 0)
            smalls = [t.alloc(rng.randint(1, 2048) * 512, rng.choice([0, 2])) for _ in range(66)]
            for x in rec + smalls:
                t.free(x)
            t.free(full)
            t.free(acts[layer])
            shard_grad = t.alloc(shard[layer], 2)  # reduce-scattered
            t.free(grad)
            grads.append(shard_grad)
        for g in grads:
            t.free(g)


def longctx(t, rng, steps, scale):
    layers = 32
    for _ in range(layers):
        t.alloc(rng.randint(100, 300) * MIB, 0)
    for _ in range(steps):
        seq = rng.choice([8, 12, 16, 20, 24, 28, 32]) * 1024 + rng.randint(0, 255) * 16
        f = seq / 32768 * scale
        acts = []
        for _layer in range(layers):
            keep = [t.alloc(int(rng.randint(4, 60) * MIB * f) + tail(rng, 4095)) for _ in range(6)]
            big = t.alloc(int(rng.randint(300, 1500) * MIB * f) + tail(rng, 4095))
            tmp = [t.alloc(int(rng.randint(2, 40) * MIB * f) + tail(rng, 4095)) for _ in range(8)]
            small = [t.alloc(rng.randint(1, 4096) * 512) for _ in range(20)]
            rng.shuffle(tmp)
            for x in tmp + small:
                t.free(x)
            t.free(big)
            acts.append(keep)
        grads = []
        for layer in reversed(range(layers)):
            big = t.alloc(int(rng.randint(300, 1500) * MIB * f) + tail(rng, 4095))
            grads.append(t.alloc(rng.randint(20, 100) * MIB))
            for x in [t.alloc(rng.randint(1, 4096) * 512) for _ in range(20)]:
                t.free(x)
            t.free(big)
            for x in acts[layer]:
                t.free(x)
        for g in grads:
            t.free(g)


KINDS = {"fsdp": fsdp, "longctx": longctx}


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kind", choices=sorted(KINDS), required=True)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("-o", "--output", required=True)
    args = ap.parse_args()
    t = Trace()
    KINDS[args.kind](t, random.Random(args.seed), args.steps, args.scale)
    for i in list(t.live):
        t.free(i)
    t.write(args.output, f"limits_{args.kind}_seed{args.seed}")
    print(f"{args.output}: {len(t.rows)} events, peak live {t.peak / GIB:.1f} GiB")


if __name__ == "__main__":
    main()
