"""memlake: a GPU memory allocator that stitches scattered free memory into
contiguous blocks with CUDA's virtual memory API.

With PyTorch, one call (or none: see memlake-run and MEMLAKE_ENABLE)::

    import memlake.torch
    memlake.torch.enable()          # before the first CUDA tensor

Without PyTorch, the functions here use libmemlake.so's C API: one allocator
per device, created on its first allocation from MEMLAKE_CONF::

    p = memlake.allocate(64 << 20, device=0, stream=0)   # an address (int)
    ...
    memlake.free(p, 64 << 20, device=0, stream=0)
    memlake.stats(0)["reserved_bytes"]["peak"]

Profiling (docs/profiling.md), with MEMLAKE_CONF=timeline:PATH::

    memlake.dump_timeline("timeline.json")        # Perfetto, chrome://tracing
    memlake.dump_snapshot("snapshot.pickle")      # pytorch.org/memory_viz
"""

import ctypes as _ctypes
import json as _json
import os as _os

from . import _native

__all__ = [
    "allocate", "begin_allocate_to_pool", "check_config", "dump_snapshot", "dump_timeline",
    "empty_cache", "end_allocate_to_pool", "exclusive_group", "exclusive_group_bytes",
    "exclusive_pool_handle", "free", "graph_pool_handle", "library_path", "pool_stats",
    "record_stream", "release_pool", "reset_peak_stats", "snapshot", "stat_fields", "stats",
]

_MAX_DEVICES = 64


def library_path():
    """Path of the libmemlake.so in use (MEMLAKE_LIBRARY, inside the package, or build/)."""
    return str(_native.path())


def _check_int(function, name, value, low=0, high=None):
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError("memlake.%s: %s must be an int, not %s" % (function, name,
                                                                  type(value).__name__))
    if value < low or (high is not None and value > high):
        bounds = "%d to %d" % (low, high) if high is not None else ">= %d" % low
        raise ValueError("memlake.%s: %s %d is out of range (%s)" % (function, name, value,
                                                                   bounds))
    return value


def _device(function, device):
    return _check_int(function, "device", device, 0, _MAX_DEVICES - 1)


def _stream(function, stream):
    """A stream as the C API takes it: cudaStream_t as an int (0 or None: default stream)."""
    if stream is None:
        return None
    _check_int(function, "stream", stream)
    return stream or None


def check_config(conf=None):
    """Raises ValueError naming the bad key or value of `conf` ("key:value,...",
    as in MEMLAKE_CONF); with None, checks the environment."""
    if conf is not None and not isinstance(conf, str):
        raise TypeError("memlake.check_config: conf must be a str (\"key:value,...\") or None, "
                        "not %s" % type(conf).__name__)
    raw = None if conf is None else conf.encode()
    if _native.load().memlake_config_check(raw) != 0:
        raise ValueError(_native.last_error())


def allocate(nbytes, device=0, stream=0):
    """Allocates `nbytes` from the device's memlake allocator, in the order of
    `stream` (a cudaStream_t as an int; 0 is the default stream) and returns
    the address as an int. The block is usable on `stream` at once; another
    stream that uses it needs record_stream() before free().

    Raises MemoryError with memlake's report (requested, live, reserved,
    largest free block, capacity) when the request cannot be served,
    ValueError/TypeError for bad arguments, RuntimeError for other failures.
    """
    _check_int("allocate", "nbytes", nbytes)
    device = _device("allocate", device)
    stream = _stream("allocate", stream)
    lib = _native.load()
    p = lib.memlake_malloc(nbytes, device, stream)
    if p is None:
        error = _native.last_error()
        if "out of memory" in error:
            raise MemoryError(error)
        raise RuntimeError(error)
    return p


def free(ptr, nbytes=0, device=0, stream=0):
    """Frees a block of allocate(), in the order of `stream`: work queued on
    `stream` before this call may still use it. `nbytes` is the size given to
    allocate(), or 0 to skip that check. Raises ValueError for a pointer this
    device's allocator did not hand out (nothing changes then)."""
    _check_int("free", "ptr", ptr, 1)
    _check_int("free", "nbytes", nbytes)
    device = _device("free", device)
    stream = _stream("free", stream)
    lib = _native.load()
    lib.memlake_free(ptr, nbytes, device, stream)
    error = _native.last_error()
    if error:
        raise ValueError(error)


def record_stream(ptr, stream, device=0):
    """The block is also used on `stream`: its memory is reused elsewhere only
    after the work queued on `stream` up to its free() has completed."""
    _check_int("record_stream", "ptr", ptr, 1)
    device = _device("record_stream", device)
    stream = _stream("record_stream", stream)
    if _native.load().memlake_record_stream(ptr, device, stream) != 0:
        raise ValueError(_native.last_error())


def stat_fields():
    """The library's statistics in order, as (name, kind, help) tuples; kind
    is "gauge" (a current value and a peak) or "counter"."""
    lib = _native.load()
    out = []
    for i in range(lib.memlake_stat_count()):
        out.append((lib.memlake_stat_name(i).decode(), lib.memlake_stat_kind(i).decode(),
                    lib.memlake_stat_help(i).decode()))
    return out


def stats(device=0):
    """Every statistic of the device's allocator as a dict (gauges as
    {"current": .., "peak": ..}, counters as ints); zeros before its first
    allocation. stat_fields() says what each one means."""
    device = _device("stats", device)
    lib = _native.load()
    need = lib.memlake_get_stats_json(device, None, 0)
    if need < 0:
        raise ValueError(_native.last_error())
    buf = _ctypes.create_string_buffer(need + 1)
    if lib.memlake_get_stats_json(device, buf, len(buf)) < 0:
        raise ValueError(_native.last_error())
    return _json.loads(buf.value.decode())


def empty_cache(device=None):
    """Returns cached memory of one device (or of every device) to the driver."""
    lib = _native.load()
    devices = range(_MAX_DEVICES) if device is None else [_device("empty_cache", device)]
    for d in devices:
        if lib.memlake_empty_cache(d) != 0:
            raise ValueError(_native.last_error())


def reset_peak_stats(device=0):
    """Sets every peak of the device's statistics to its current value."""
    device = _device("reset_peak_stats", device)
    lib = _native.load()
    lib.memlake_reset_peak_stats(device)
    error = _native.last_error()
    if error:
        raise ValueError(error)


def dump_timeline(path, device=0):
    """Writes the device's timeline (the last events and the memory counters)
    as Chrome Trace Event JSON, which ui.perfetto.dev and chrome://tracing
    open. Needs the timeline option (MEMLAKE_CONF=timeline:PATH, which also
    writes it there at exit); RuntimeError says what is missing."""
    device = _device("dump_timeline", device)
    if not isinstance(path, (str, bytes)) and not hasattr(path, "__fspath__"):
        raise TypeError("memlake.dump_timeline: path must be a path, not %s"
                        % type(path).__name__)
    raw = _os.fsencode(path)
    if _native.load().memlake_timeline_dump(device, raw) != 0:
        raise RuntimeError(_native.last_error())


def snapshot(device=None):
    """The memory snapshot of one device, or of every device that records a
    timeline, as the dictionary torch.cuda.memory._snapshot() returns
    (segments with their blocks, device_traces); memlake/memory_snapshot.py
    describes it. Needs the timeline option."""
    from . import memory_snapshot as _snapshot_module
    if device is not None:
        device = _device("snapshot", device)
    return _snapshot_module.snapshot(device)


def dump_snapshot(filename="dump_snapshot.pickle", device=None):
    """Pickles snapshot(device) to `filename` for pytorch.org/memory_viz (and
    torch.cuda._memory_viz); returns the file name."""
    from . import memory_snapshot as _snapshot_module
    if device is not None:
        device = _device("dump_snapshot", device)
    return _snapshot_module.dump_snapshot(filename, device)


_dump_snapshot = dump_snapshot  # torch.cuda.memory's name for it


# --- graph pools (docs/graphs.md) ----------------------------------------------
# What a stream allocates while it captures a CUDA graph must come from a
# graph pool, whose memory stays the graph's until the pool is released.
# Pools are named by (first, second) tuples, as PyTorch names them
# (torch.cuda.graph_pool_handle()); memlake.torch plugs these in for
# torch.cuda.graph by itself.

_filters = {}  # (device, pool) -> the ctypes callbacks of its open routes


def _pool(function, pool):
    if (not isinstance(pool, tuple) or len(pool) != 2
            or not all(isinstance(x, int) and not isinstance(x, bool) for x in pool)):
        raise TypeError("memlake.%s: pool must be a (first, second) tuple of ints, not %r"
                        % (function, pool))
    return _native.PoolId(*pool)


def _ok(status):
    if status != 0:
        raise ValueError(_native.last_error())


def graph_pool_handle(device=0):
    """A new pool id, as a (first, second) tuple; the pool is made by its
    first begin_allocate_to_pool()."""
    out = _native.PoolId()
    _ok(_native.load().memlake_graph_pool_handle(_device("graph_pool_handle", device),
                                                 _ctypes.byref(out)))
    return (out.first, out.second)


def exclusive_group(device=0, check=False):
    """A new exclusive group: its pools share physical memory, so their graphs
    must never run at the same time."""
    out = _ctypes.c_uint64()
    _ok(_native.load().memlake_exclusive_group(_device("exclusive_group", device), int(check),
                                               _ctypes.byref(out)))
    return out.value


def exclusive_pool_handle(group, device=0):
    """A new pool id in `group` (exclusive_group())."""
    out = _native.PoolId()
    _ok(_native.load().memlake_exclusive_pool_handle(_device("exclusive_pool_handle", device),
                                                     group, _ctypes.byref(out)))
    return (out.first, out.second)


def begin_allocate_to_pool(pool, device=0, streams=None):
    """Allocations go to `pool` until end_allocate_to_pool(): from every
    stream, or, with `streams` (a callable taking a stream as an int and
    returning a bool), from those it accepts. It is called with memlake's
    lock held and must not call memlake."""
    device = _device("begin_allocate_to_pool", device)
    if streams is not None and not callable(streams):
        raise TypeError("memlake.begin_allocate_to_pool: streams must be callable or None")
    accept = streams or (lambda stream: True)
    callback = _native.STREAM_FILTER(lambda context, stream: 1 if accept(stream or 0) else 0)
    _ok(_native.load().memlake_begin_allocate_to_pool(
        device, _pool("begin_allocate_to_pool", pool), callback, None))
    _filters.setdefault((device, pool), []).append(callback)


def end_allocate_to_pool(pool, device=0):
    device = _device("end_allocate_to_pool", device)
    _ok(_native.load().memlake_end_allocate_to_pool(device, _pool("end_allocate_to_pool", pool)))
    routes = _filters.get((device, pool))
    if routes:
        routes.pop(0)


def release_pool(pool, device=0):
    """One user of the pool is done; the last one frees it (once none of its
    blocks is live)."""
    _ok(_native.load().memlake_release_pool(_device("release_pool", device),
                                            _pool("release_pool", pool)))


def pool_stats(pool, device=0):
    """The pool's group, reserved/mapped/live/retired bytes, live blocks,
    allocations, users, whether it is allocated to or released, and
    kept_bytes (chunks of its own under blocks kept after a capture into an
    exclusive pool)."""
    out = _native.PoolStats()
    _ok(_native.load().memlake_get_pool_stats(_device("pool_stats", device),
                                              _pool("pool_stats", pool), _ctypes.byref(out)))
    return {name: (bool(getattr(out, name)) if name in ("allocating", "released")
                   else getattr(out, name))
            for name, _ in out._fields_ if name != "reserved_"}


def exclusive_group_bytes(group, device=0):
    """Physical bytes the chunks of an exclusive group take."""
    out = _ctypes.c_uint64()
    _ok(_native.load().memlake_exclusive_group_bytes(_device("exclusive_group_bytes", device),
                                                     group, _ctypes.byref(out)))
    return out.value
