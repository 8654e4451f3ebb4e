"""memlake's statistics under the keys of torch.cuda.memory_stats(), and a
text summary like torch.cuda.memory_summary(). Plain functions over the dict
memlake.stats() returns, so they need neither torch nor a GPU.

PyTorch key                          memlake statistic
allocated_bytes.all.{current,peak}   live_bytes (sizes rounded to 512 bytes, as PyTorch's)
requested_bytes.all.{current,peak}   requested_bytes (sizes as asked for)
reserved_bytes.all.{current,peak}    reserved_bytes (physical memory held)
active_bytes.all.{current,peak}      live_bytes (a freed block goes back at once, under its
                                     stream's fence: nothing stays freed-but-pending)
allocation.all.{current,peak}        live_blocks
active.all.{current,peak}            live_blocks
allocation.all.{allocated,freed}     allocs, frees
segment.all.{current,peak}           segments (mapped virtual ranges)
num_ooms                             ooms
num_alloc_retries                    rung_reclaim_retry (served after reclaiming cache and retrying)
num_device_alloc / num_device_free   chunks_created / chunks_released (physical chunks)
num_sync_all_streams                 host_waits (malloc/free waiting for the GPU: always 0)

Graph pools' blocks count in live_bytes, requested_bytes and live_blocks,
as PyTorch counts its private pools' blocks. Keys memlake cannot fill
truthfully are left out rather than guessed: the large_pool/small_pool
splits, inactive_split*, oversize_*, and the cumulative allocated/freed byte
totals. Every statistic
of memlake is also there as memlake.<name> (counters) or
memlake.<name>.current / .peak (gauges).
"""

from collections import OrderedDict

__all__ = ["memory_stats_from", "memory_summary_from"]

_GAUGES = [
    ("allocated_bytes.all", "live_bytes"),
    ("requested_bytes.all", "requested_bytes"),
    ("reserved_bytes.all", "reserved_bytes"),
    ("segment.all", "segments"),
    ("active_bytes.all", "live_bytes"),
    ("allocation.all", "live_blocks"),
    ("active.all", "live_blocks"),
]
_COUNTERS = [
    ("num_ooms", "ooms"),
    ("num_alloc_retries", "rung_reclaim_retry"),
    ("num_device_alloc", "chunks_created"),
    ("num_device_free", "chunks_released"),
    ("num_sync_all_streams", "host_waits"),
]


def _is_gauge(value):
    return isinstance(value, dict)


def memory_stats_from(stats):
    """torch.cuda.memory_stats()-shaped dict from a memlake.stats() dict
    (keys sorted, as PyTorch's are). A statistic missing from `stats` leaves
    its keys out."""
    out = {}
    for key, name in _GAUGES:
        if name in stats:
            out[key + ".current"] = stats[name]["current"]
            out[key + ".peak"] = stats[name]["peak"]
    if "allocs" in stats and "frees" in stats:
        for key in ("allocation.all", "active.all"):
            out[key + ".allocated"] = stats["allocs"]
            out[key + ".freed"] = stats["frees"]
    for key, name in _COUNTERS:
        if name in stats:
            out[key] = stats[name]
    for name, value in stats.items():
        if name == "version":
            continue
        if _is_gauge(value):
            out["memlake.%s.current" % name] = value["current"]
            out["memlake.%s.peak" % name] = value["peak"]
        else:
            out["memlake.%s" % name] = value
    return OrderedDict(sorted(out.items()))


def _size(n):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return ("%d %s" % (n, unit)) if unit == "B" else ("%.2f %s" % (n, unit))
        n /= 1024.0
    return str(n)


def memory_summary_from(stats, device=0):
    """A text table of the main figures, like torch.cuda.memory_summary()."""
    m = memory_stats_from(stats)
    rows = [
        ("Allocated memory", "allocated_bytes.all", _size),
        ("Requested memory", "requested_bytes.all", _size),
        ("Reserved memory", "reserved_bytes.all", _size),
        ("Mapped virtual ranges", "segment.all", str),
    ]
    width = 72
    lines = ["=" * width,
             " memlake memory summary, device %d" % device,
             "-" * width,
             " %-28s %20s %20s" % ("", "current", "peak"),
             "-" * width]
    for label, key, fmt in rows:
        if key + ".current" in m:
            lines.append(" %-28s %20s %20s" % (label, fmt(m[key + ".current"]),
                                              fmt(m[key + ".peak"])))
    if "active_bytes.all.current" in m:
        lines.append(" %-28s %20s %20s" % ("Active memory", _size(m["active_bytes.all.current"]),
                                          "-"))
    lines.append("-" * width)
    counts = [
        ("Allocations live", "allocation.all.current"),
        ("Allocations made", "allocation.all.allocated"),
        ("Out of memory", "num_ooms"),
        ("Served after reclaim", "num_alloc_retries"),
        ("Chunks created / released", None),
        ("Stitched ranges built", "memlake.stitches"),
        ("VMM calls on the caller", "memlake.critical_path_vmm_calls"),
        ("Host waits", "num_sync_all_streams"),
    ]
    for label, key in counts:
        if key is None:
            if "num_device_alloc" in m:
                value = "%d / %d" % (m["num_device_alloc"], m["num_device_free"])
            else:
                continue
        elif key in m:
            value = str(m[key])
        else:
            continue
        lines.append(" %-28s %20s" % (label, value))
    lines.append("=" * width)
    return "\n".join(lines) + "\n"
