"""train.py --find-batch: the largest batch that trains under a memory cap,
for each allocator, each try a child process (see train.py's docstring for
what fits)."""

import threading
from concurrent.futures import ThreadPoolExecutor

from compare import Clock, child_command, emit, run_child, table_order
from train import ALLOCATORS, GIB, OOM_EXIT, allocator_list, int_range


# ---------------------------------------------------------------- --find-batch

def find_batch(args):
    allocators = allocator_list(args.allocators)
    lo0, hi0 = int_range(args.batch_range)
    per = max(1, args.jobs // len(allocators))  # tries at a time for each allocator
    clock = Clock(args.time_budget)
    pool = ThreadPoolExecutor(max_workers=per * len(allocators))
    probes = []
    lock = threading.Lock()

    def probe(allocator, batch):
        res = run_child(child_command(args, allocator, batch), timeout=clock.left())
        clock.ran(res["seconds"])
        p = probe_record(args, allocator, batch, res)
        with lock:
            probes.append(p)
            print("%-10s batch %3d: %s" % (allocator, batch, probe_outcome(p)), flush=True)
            emit(p)
        return p

    def search(allocator):
        lo, hi = lo0 - 1, hi0 + 1  # largest that fits, smallest that does not
        while hi - lo > 1:
            if not clock.room_for_one():
                with lock:
                    print("%s: time budget spent with the answer in [%d, %d)" % (
                        allocator, max(lo, 0), hi), flush=True)
                return
            inside = hi - lo - 1
            if inside <= per:
                points = list(range(lo + 1, hi))
            else:
                points = sorted({lo + int(round(i * (hi - lo) / (per + 1)))
                                 for i in range(1, per + 1)})
            results = list(pool.map(lambda b: probe(allocator, b), points))
            if any(p["rc"] is None for p in results):
                return  # killed by the time budget: no verdict
            if any(not p["completed"] and not p["oom"] for p in results):
                with lock:
                    print("%s: a try failed other than by running out of memory: search stopped"
                          % allocator, flush=True)
                return
            failing = [p["batch"] for p in results if not p["fits"]]
            if failing:
                hi = min(hi, min(failing))
            fitting = [p["batch"] for p in results if p["fits"] and p["batch"] < hi]
            if fitting:
                lo = max(lo, max(fitting))

    threads = [threading.Thread(target=search, args=(a,)) for a in allocators]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    pool.shutdown()
    ok = True
    for text, summary in batch_tables(probes):
        print(text)
        emit(summary)
        ok = ok and summary["complete"]
    return 0 if ok else 1


def probe_record(args, allocator, batch, res):
    record = res["record"] or {}
    completed = res["rc"] == 0 and "losses" in record
    cap = record.get("memory_cap_bytes")
    reserved = record.get("peak_reserved_bytes")
    # 2 MiB of slack: one VMM granule, against rounding in the allocators' own caps.
    within = bool(completed and cap and reserved is not None and reserved <= cap + (2 << 20))
    p = {"kind": "probe", "allocator": allocator, "model": args.model, "seq_len": args.seq_len,
         "steps": args.steps, "memory_cap_gib": args.memory_cap_gib,
         "batch_range": args.batch_range, "batch": batch, "rc": res["rc"],
         "completed": completed, "oom": res["rc"] == OOM_EXIT, "within_cap": within,
         "fits": within, "peak_reserved_bytes": reserved,
         "peak_allocated_bytes": record.get("peak_allocated_bytes"),
         "memory_cap_bytes": cap, "seconds": round(res["seconds"], 2),
         "median_step_seconds": record.get("median_step_seconds")}
    if p["oom"]:
        p["oom_step"] = record.get("oom_step")
        p["message"] = (record.get("message") or "")[:300]
    elif not completed:
        p["error"] = res["stderr"][-800:]
    if allocator == "async" and record.get("mempool"):
        p["mempool"] = record["mempool"]
    return p


def probe_outcome(p):
    if p["fits"]:
        return "fits, peak reserved %.2f GiB" % (p["peak_reserved_bytes"] / GIB)
    if p["completed"]:
        return "completed but reserved %.2f GiB, above the cap" % (p["peak_reserved_bytes"] / GIB)
    if p["oom"]:
        return "out of memory at step %s" % p.get("oom_step")
    if p["rc"] is None:
        return "killed (time budget)"
    last = (p.get("error") or "").strip().splitlines()
    return "FAILED (exit %s): %s" % (p["rc"], last[-1] if last else "")


def batch_tables(probes):
    """[(text, summary)] per (model, sequence length, cap) searched."""
    groups = {}
    for p in probes:
        groups.setdefault((p["model"], p["seq_len"], p["memory_cap_gib"], p["steps"]),
                          []).append(p)
    return [batch_table(group) for group in groups.values()]


def batch_table(probes):
    first = probes[0]
    lo0, hi0 = int_range(first.get("batch_range", "1:64"))
    lines = ["%s, sequence length %d, %d steps, memory cap %g GiB "
             "(set_per_process_memory_fraction), batches %d..%d" % (
                 first["model"], first["seq_len"], first["steps"], first["memory_cap_gib"],
                 lo0, hi0)]
    lines.append("  %-10s %8s %15s %22s  %s" % (
        "allocator", "largest", "smallest failing", "peak reserved largest", "tries"))
    results = {}
    for name in table_order(probes):
        ps = sorted((p for p in probes if p["allocator"] == name), key=lambda p: p["batch"])
        if not ps:
            continue
        decided = [p for p in ps if p["rc"] is not None]
        failing = [p["batch"] for p in decided if not p["fits"]]
        hi = min(failing) if failing else hi0 + 1
        fitting = [p for p in decided if p["fits"] and p["batch"] < hi]
        lo = max(p["batch"] for p in fitting) if fitting else lo0 - 1
        at_lo = [p for p in fitting if p["batch"] == lo]
        exact = hi - lo == 1
        nonmonotonic = any(p["fits"] and p["batch"] > hi for p in decided)
        completed = [p["batch"] for p in decided if p["completed"]]
        r = {"largest_batch": lo if lo >= lo0 else 0,
             "smallest_failing": hi if hi <= hi0 else None, "exact": exact,
             "nonmonotonic": nonmonotonic, "largest_completed": max(completed, default=0),
             "peak_reserved_at_largest": at_lo[0]["peak_reserved_bytes"] if at_lo else None,
             "tries": [[p["batch"], probe_outcome(p)] for p in ps]}
        results[name] = r
        notes = []
        if not exact:
            notes.append("NOT RESOLVED: between %d and %d" % (max(lo, lo0 - 1) + 1, hi - 1))
        if hi > hi0:
            notes.append("fits at the top of the range")
        if nonmonotonic:
            notes.append("a larger batch fitted too (non-monotonic)")
        over = [p["batch"] for p in decided if p["completed"] and not p["fits"]]
        if over:
            notes.append("completed but over the cap at %s" % over)
        errors = [p["batch"] for p in decided if not p["completed"] and not p["oom"]]
        if errors:
            notes.append("FAILED (not OOM) at %s" % errors)
        lines.append("  %-10s %8s %15s %22s  %s%s" % (
            name, r["largest_batch"], hi if hi <= hi0 else "-",
            "%.2f GiB" % (r["peak_reserved_at_largest"] / GIB)
            if r["peak_reserved_at_largest"] else "-",
            " ".join("%d%s" % (p["batch"], "+" if p["fits"] else "o" if p["oom"] else "!"
                               if not p["completed"] else "^") for p in ps),
            ("  " + "; ".join(notes)) if notes else ""))
    lines.append("  (tries: + fits, o out of memory, ^ completed above the cap, ! failed)")
    if "async" in results:
        lines.append("  async: PyTorch's cudaMallocAsync backend caps the bytes of live "
                     "allocations, not the pool; a try fits only if the pool's reserved peak "
                     "stayed within the cap (largest completed: %d)"
                     % results["async"]["largest_completed"])
    target = None
    if "memlake" in results:
        m = results["memlake"]["largest_batch"]
        others = {n: r["largest_batch"] for n, r in results.items()
                  if n in ALLOCATORS and n != "memlake"}
        missing = [n for n in ALLOCATORS if n != "memlake" and n not in results]
        complete = all(r["exact"] for r in results.values())
        if complete and others and not missing:
            target = all(m > x for x in others.values())
        verdict = {True: "MET", False: "MISSED", None: "UNDECIDED"}[target]
        lines.append("  target larger batch than every stock allocator: %s (memlake %d; %s)%s" % (
            verdict, m, ", ".join("%s %d" % kv for kv in others.items()),
            " (not measured: %s)" % ", ".join(missing) if missing else
            "" if complete else " (not every search resolved)"))
    complete = all(r["exact"] for r in results.values())
    summary = {"kind": "batch-summary", "model": first["model"], "seq_len": first["seq_len"],
               "memory_cap_gib": first["memory_cap_gib"], "allocators": results,
               "target_met": target, "complete": complete}
    return "\n".join(lines), summary
