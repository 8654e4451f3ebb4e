"""Child processes of train.py: one run per allocator and round, and the
tables of --compare and --summarize (peak reserved, median step time and its
spread over interleaved rounds, mean step time, losses against the reference, and whether
memlake meets its targets)."""

import json
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from train import (ALLOCATORS, GIB, allocator_list, int_range, mean_after_warmup,
                   median_after_warmup, split_variant)

TRAIN = Path(__file__).resolve().with_name("train.py")


# ---------------------------------------------------------------- child processes

def child_command(args, allocator, batch=None):
    base, options = split_variant(allocator)
    cmd = [sys.executable, str(TRAIN), "--allocator", base,
           "--model", args.model, "--steps", str(args.steps), "--warmup", str(args.warmup),
           "--batch", str(args.batch if batch is None else batch), "--max-seq", str(args.max_seq),
           "--seq-len", str(args.seq_len), "--seed", str(args.seed),
           "--new-tokens", args.new_tokens, "--init-device", args.init_device]
    conf = ",".join(c for c in (args.memlake_conf, options) if c)
    if conf:
        cmd += ["--memlake-conf", conf]
    if options:
        cmd += ["--label", allocator]
    if args.memory_cap_gib > 0:
        cmd += ["--memory-cap-gib", repr(args.memory_cap_gib)]
    return cmd


def run_child(cmd, timeout=None):
    """{"rc", "record" (the last JSON line of its stdout, or None), "stderr", "seconds"}:
    rc None when it ran past timeout (and was killed)."""
    t0 = time.monotonic()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
        return {"rc": None, "record": None, "seconds": time.monotonic() - t0,
                "stderr": err[-3000:] + "\n(killed after %.0f s: the time budget)" % timeout}
    record = None
    for line in reversed(proc.stdout.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                record = json.loads(line)
                break
            except ValueError:
                continue
    return {"rc": proc.returncode, "record": record, "stderr": proc.stderr[-3000:],
            "seconds": time.monotonic() - t0}


def emit(record):
    print("JSON " + json.dumps(record), flush=True)


class Clock:
    """The --time-budget: how long is left, and whether a child of the
    longest duration seen so far would still end in time."""

    def __init__(self, budget):
        self.budget, self.start, self.longest = budget, time.monotonic(), 0.0
        self.lock = threading.Lock()

    def left(self):
        if not self.budget:
            return None
        return self.budget - (time.monotonic() - self.start)

    def room_for_one(self):
        left = self.left()
        return left is None or (left > 5 and left > self.longest * 1.15)

    def ran(self, seconds):
        with self.lock:
            self.longest = max(self.longest, seconds)


# ---------------------------------------------------------------- --compare

def compare(args):
    allocators = allocator_list(args.allocators)
    clock = Clock(args.time_budget)
    runs, failures, stopped = [], 0, False
    for r in range(args.rounds):
        k = r % len(allocators)
        for allocator in allocators[k:] + allocators[:k]:
            if not clock.room_for_one():
                print("time budget: stopped before round %d %s" % (r + 1, allocator), flush=True)
                stopped = True
                break
            res = run_child(child_command(args, allocator), timeout=clock.left())
            clock.ran(res["seconds"])
            record = res["record"]
            if res["rc"] != 0 or not record or "losses" not in record:
                failures += 1
                print(res["stderr"], file=sys.stderr, flush=True)
                print("round %d %s: FAILED (exit %s)" % (r + 1, allocator, res["rc"]), flush=True)
                emit({"kind": "run-failed", "round": r + 1, "allocator": allocator,
                      "model": args.model, "rc": res["rc"], "stderr": res["stderr"][-1500:]})
                continue
            record.update(kind="run", round=r + 1, wall_seconds=round(res["seconds"], 2))
            print("round %d %-10s peak reserved %.2f GiB, median step %.1f ms, run %.0f s" % (
                r + 1, allocator, record["peak_reserved_bytes"] / GIB,
                record["median_step_seconds"] * 1e3, res["seconds"]), flush=True)
            emit(record)
            runs.append(record)
        if stopped:
            break
    ok = True
    for text, summary, group_ok in run_tables(runs):
        print(text)
        emit(summary)
        ok = ok and group_ok
    return 0 if ok and not failures and runs else 1


def workload_key(r):
    return (r.get("model"), r.get("seq_len", 0), r.get("batch"), r.get("steps"),
            r.get("max_seq"), r.get("new_tokens"), r.get("memory_cap_gib"))


def workload_title(r, rounds):
    model, seq = r.get("model"), r.get("seq_len", 0)
    if model == "decode":
        shape = ("prompt %d tokens" % seq if seq else
                 "prompts 16..%d tokens" % (r.get("max_seq", 1024) // 2))
        lo, hi = int_range(r.get("new_tokens", "128:512"))
        shape += ", %s new tokens" % (hi if seq else "%d..%d" % (lo, hi))
    else:
        shape = ("sequence length %d" % seq if seq else
                 "sequence lengths 128..%d" % r.get("max_seq", 1024))
    title = "%s, %s steps, batch %s, %s, %d round%s" % (
        model, r.get("steps"), r.get("batch"), shape, rounds, "" if rounds == 1 else "s")
    if r.get("memory_cap_gib"):
        title += ", memory cap %g GiB" % r["memory_cap_gib"]
    return title


def run_tables(runs):
    """[(text, summary dict, losses ok)] for the runs, one per workload."""
    groups = {}
    for r in runs:
        groups.setdefault(workload_key(r), []).append(r)
    return [run_table(group) for group in groups.values()]


def _fmt_ratio(x):
    return "%.3f" % x if x == x else "n/a"


def table_order(runs):
    """The allocators of `runs`: the stock ones and memlake in ALLOCATORS' order, then memlake
    with options of its own in the order they first ran."""
    seen = list(dict.fromkeys(r["allocator"] for r in runs))
    return [n for n in ALLOCATORS if n in seen] + [n for n in seen if n not in ALLOCATORS]


def run_table(runs):
    by = {}
    for name in table_order(runs):
        by[name] = sorted((r for r in runs if r["allocator"] == name),
                          key=lambda r: r.get("round", 0))
    reference = by["native"][0] if "native" in by else runs[0]
    rounds = max(len(rs) for rs in by.values())
    lines = [workload_title(reference, rounds)]
    lines.append("  %-10s %13s %11s %6s %14s %19s %12s  %s" % (
        "allocator", "peak reserved", "peak live", "util", "step ms median", "spread (rounds)",
        "step ms mean", "losses vs %s round 1" % reference["allocator"]))
    stats, worst = {}, 0.0
    for name, rs in by.items():
        peaks = [r["peak_reserved_bytes"] for r in rs]
        live = max(r["peak_allocated_bytes"] or 0 for r in rs)
        medians = [r.get("median_step_seconds") or
                   median_after_warmup(r["step_seconds"], r.get("warmup", 3)) for r in rs]
        means = [mean_after_warmup(r["step_seconds"], r.get("warmup", 3)) for r in rs]
        abs_diff = rel_diff = 0.0
        bitwise = True
        for r in rs:
            if len(r["losses"]) != len(reference["losses"]):
                bitwise, abs_diff, rel_diff = False, float("inf"), float("inf")
                continue
            for a, b in zip(r["losses"], reference["losses"]):
                if a != b:
                    bitwise = False
                    abs_diff = max(abs_diff, abs(a - b))
                    rel_diff = max(rel_diff, abs(a - b) / max(abs(b), 1e-30))
            if r.get("tokens_checksums") != reference.get("tokens_checksums"):
                bitwise = False
        worst = max(worst, rel_diff)
        s = {"rounds": len(rs), "peak_reserved_bytes": max(peaks),
             "peak_reserved_by_round": peaks, "peak_allocated_bytes": live,
             "median_step_seconds": statistics.median(medians),
             "step_seconds_spread": [min(medians), max(medians)],
             "run_medians": medians, "mean_step_seconds": statistics.median(means),
             "run_means": means, "losses_bitwise_equal": bitwise,
             "loss_max_abs_diff": abs_diff, "loss_max_rel_diff": rel_diff}
        if split_variant(name)[0] == "memlake":
            w = rs[0].get("warmup", 3)
            s["critical_vmm_after_warmup"] = max(sum(r["critical_vmm_by_step"][w:]) for r in rs)
            s["critical_vmm_total"] = max(sum(r["critical_vmm_by_step"]) for r in rs)
            s["worker_vmm_total"] = max(sum(r["worker_vmm_by_step"]) for r in rs)
            s["host_waits"] = max(r.get("host_waits", 0) for r in rs)
            s["stitches"] = max(r.get("stitches", 0) for r in rs)
        if name == "async":
            sources = {(r.get("mempool") or {}).get("source", "?") for r in rs}
            s["mempool_source"] = sorted(sources)
        stats[name] = s
        varies = "" if len(set(peaks)) == 1 else " (rounds %s GiB)" % "/".join(
            "%.2f" % (p / GIB) for p in peaks)
        losses = ("reference" if rs[0] is reference and len(rs) == 1 else
                  "identical" if bitwise else "max abs diff %.3g, rel %.3g" % (abs_diff, rel_diff))
        lines.append("  %-10s %9.2f GiB %7.2f GiB %6.3f %14.1f %8.1f-%-6.1f(%d) %12.1f  %s%s" % (
            name, max(peaks) / GIB, live / GIB, live / max(max(peaks), 1),
            s["median_step_seconds"] * 1e3, min(medians) * 1e3, max(medians) * 1e3, len(rs),
            s["mean_step_seconds"] * 1e3, losses, varies))
    if "async" in stats:
        for source in stats["async"]["mempool_source"]:
            if source.startswith("unavailable"):
                lines.append("  async peak reserved from torch.cuda.max_memory_reserved(): "
                             "default mempool %s" % source)
    targets = {}
    if "memlake" in stats:
        m = stats["memlake"]
        lines.append("  memlake: critical-path VMM calls after warm-up %d (all steps %d), worker "
                     "VMM calls %d, host waits %d, stitches %d" % (
                         m["critical_vmm_after_warmup"], m["critical_vmm_total"],
                         m["worker_vmm_total"], m["host_waits"], m["stitches"]))
        others = [n for n in stats if n in ALLOCATORS and n != "memlake"]
        ratios = {n: m["peak_reserved_bytes"] / stats[n]["peak_reserved_bytes"] for n in others}
        missing = [n for n in ALLOCATORS if n != "memlake" and n not in stats]
        peak_met = bool(others) and all(x < 1 for x in ratios.values()) and not missing
        lines.append("  target peak reserved below every other: %s (memlake / %s)%s" % (
            "MET" if peak_met else "MISSED",
            ", ".join("%s %.3f" % (n, x) for n, x in ratios.items()),
            " (not measured: %s)" % ", ".join(missing) if missing else ""))
        targets["peak_reserved_below_all"] = peak_met
        targets["peak_reserved_ratio"] = ratios
        fast = [n for n in ("native", "expandable") if n in stats]
        if fast:
            best = min(fast, key=lambda n: stats[n]["median_step_seconds"])
            ratio = m["median_step_seconds"] / stats[best]["median_step_seconds"]
            time_met = ratio <= 1.01
            best_mean = min(fast, key=lambda n: stats[n]["mean_step_seconds"])
            mean_ratio = m["mean_step_seconds"] / stats[best_mean]["mean_step_seconds"]
            lines.append("  target step time <= 1.01x the faster of native/expandable (%s): %s "
                         "(%s; mean step %s %s)" % (
                             best, "MET" if time_met else "MISSED", _fmt_ratio(ratio),
                             _fmt_ratio(mean_ratio), best_mean))
            targets["step_time_ratio"] = ratio
            targets["step_time_ratio_mean"] = mean_ratio
            targets["step_time_met"] = time_met
        for name in (n for n in stats if n not in ALLOCATORS):
            v = stats[name]
            line = "  %s: peak reserved %.3fx memlake's" % (
                name, v["peak_reserved_bytes"] / m["peak_reserved_bytes"])
            if fast:
                ratio = v["median_step_seconds"] / stats[best]["median_step_seconds"]
                mean_ratio = v["mean_step_seconds"] / stats[best_mean]["mean_step_seconds"]
                line += ", step time %.3fx %s's (mean step %.3fx %s's)" % (
                    ratio, best, mean_ratio, best_mean)
                targets.setdefault("step_time_ratio_by_variant", {})[name] = ratio
                targets.setdefault("step_time_ratio_mean_by_variant", {})[name] = mean_ratio
            line += ", critical-path VMM calls %d, worker VMM calls %d" % (
                v["critical_vmm_total"], v["worker_vmm_total"])
            lines.append(line)
        r0 = by["memlake"][0]
        lines.append("  memlake critical-path VMM calls by step (round 1): %s"
                     % r0["critical_vmm_by_step"])
        lines.append("  memlake ms inside allocate by step (round 1): %s"
                     % r0.get("allocate_ms_by_step"))
    # Deterministic kernels give bit-identical losses whatever the addresses;
    # an op without a deterministic kernel may differ in the last bits.
    ok = worst < 1e-3
    identical = all(s["losses_bitwise_equal"] for s in stats.values())
    lines.append("  losses %s" % ("identical under every allocator and round" if identical else
                                  "within %.2g of the reference" % worst if ok else "DIFFER"))
    summary = {"kind": "summary", "workload": workload_title(reference, rounds),
               "model": reference.get("model"), "seq_len": reference.get("seq_len"),
               "batch": reference.get("batch"), "allocators": stats, "targets": targets,
               "losses_ok": ok}
    return "\n".join(lines), summary, ok


# ---------------------------------------------------------------- --summarize

def summarize(paths):
    from batch_search import batch_tables
    runs, probes = [], []
    for path in paths:
        try:
            text = Path(path).read_text(errors="replace")
        except OSError as e:
            print("%s: unreadable (%s)" % (path, e))
            continue
        for line in text.splitlines():
            if not line.startswith("JSON "):
                continue
            try:
                record = json.loads(line[5:])
            except ValueError:
                continue
            if not isinstance(record, dict):
                continue
            if record.get("kind") == "run":
                runs.append(record)
            elif record.get("kind") == "probe":
                probes.append(record)
    for text, _, _ in run_tables(runs):
        print(text)
    for text, _ in batch_tables(probes):
        print(text)
    if not runs and not probes:
        print("%s: no runs recorded" % ", ".join(paths))
    return 0
