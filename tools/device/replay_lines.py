"""One line per trace of `memlake-replay --json` output (read from the files
named, or stdin): memlake's peak reserved and utilization beside
cudaMallocAsync's measured peak, and after warm-up the critical-path VMM
calls and allocate/free latency of both. Lines that are not JSON are skipped;
with several files each is named first."""

import json
import sys


def line_of(d):
    a = d.get("cuda_async_measured") or {}
    peak = a.get("peak_reserved_bytes")
    w = d.get("alloc_ns_after_warmup") or {}
    return ("  %-30s memlake %6.2f GiB util %.4f | cudaMallocAsync %s | after warm-up: critical VMM %s, "
            "alloc median/p99 %s/%s ns (cudaMallocAsync %s/%s ns), free median/p99 %s/%s ns | "
            "VMM by tenth %s" % (
                d["trace"][:30], d["peak_reserved_bytes"] / 2**30, d["utilization"],
                "%.2f GiB ratio %.3f" % (peak / 2**30, d["peak_reserved_bytes"] / peak)
                if peak else "n/a",
                d.get("critical_path_vmm_calls_after_warmup"), w.get("median"), w.get("p99"),
                a.get("alloc_ns_after_warmup_median", "?"), a.get("alloc_ns_after_warmup_p99", "?"),
                d.get("free_ns_median"), d.get("free_ns_p99"),
                d.get("critical_path_vmm_calls_by_tenth")))


def lines_of(stream):
    for line in stream:
        if line.startswith("{"):
            try:
                yield line_of(json.loads(line))
            except (ValueError, KeyError, TypeError) as e:
                yield "  (a record that could not be read: %s)" % e


def main(paths):
    if not paths:
        for line in lines_of(sys.stdin):
            print(line)
        return
    for path in paths:
        if len(paths) > 1:
            print(path.rsplit("/", 1)[-1])
        with open(path) as f:
            for line in lines_of(f):
                print(line)


if __name__ == "__main__":
    main(sys.argv[1:])
