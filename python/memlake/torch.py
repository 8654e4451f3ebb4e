"""memlake for PyTorch: one call switches a program's CUDA memory to memlake.

    import memlake.torch
    memlake.torch.enable()                     # before the first CUDA tensor
    ...                                        # the training code, unchanged
    print(memlake.torch.max_memory_reserved())

enable() installs libmemlake.so as PyTorch's CUDA allocator through
torch.cuda.memory.CUDAPluggableAllocator, with memlake's hooks for
Tensor.record_stream, torch.cuda.empty_cache,
torch.cuda.set_per_process_memory_fraction (before the device's first
allocation) and CUDA graph pools (torch.cuda.graph, with or without a shared
pool=, and torch.cuda.make_graphed_callables: docs/graphs.md; not
torch.compile(mode="reduce-overhead"), which needs allocator calls the
pluggable interface refuses). An allocation memlake cannot serve raises RuntimeError with
memlake's out-of-memory report (requested, live, reserved, largest free
block, capacity), and the allocator stays usable.

PyTorch's own memory statistics (torch.cuda.memory_reserved() and the like)
do not cover pluggable allocators: the functions here give memlake's, under
the same names, and memory_stats() under PyTorch's keys (memlake/torch_stats.py
says which key comes from which statistic).

To switch a program without editing it: `memlake-run train.py args`, or
MEMLAKE_ENABLE=1 in its environment (memlake/_startup.py).
"""

import os
import warnings

try:
    import torch
except ImportError as _e:
    raise ImportError(
        "memlake.torch needs PyTorch (import torch failed: %s); memlake's own functions "
        "(memlake.allocate, memlake.free, memlake.stats) work without it" % _e) from _e

from . import _native
from . import check_config
from . import stats as _stats
from .torch_stats import memory_stats_from, memory_summary_from

__all__ = [
    "enable", "exclusive_pool_handles", "is_enabled", "replay", "memory_allocated", "max_memory_allocated", "memory_reserved",
    "max_memory_reserved", "memory_stats", "memory_summary", "reset_peak_memory_stats",
    "stats",
]

_allocator = None


def is_enabled():
    return _allocator is not None


def enable(conf=None, library=None):
    """Makes memlake PyTorch's CUDA allocator for this process.

    conf: memlake options, "key:value,..." (see docs/configuration.md); they
    are added to MEMLAKE_CONF for this process, after what it already holds.
    library: path of libmemlake.so (default: MEMLAKE_LIBRARY, next to this
    package, or the source tree's build/).

    Must run before the first CUDA tensor is created and before
    torch.cuda.set_device() (which starts PyTorch's allocator; under torchrun,
    call enable() first, then set the rank's device): PyTorch cannot change
    allocators after that. Calling it again does nothing (the first call's
    options stay).
    """
    global _allocator
    if _allocator is not None:
        return _allocator
    _native.load(library)
    if conf:
        merged = ",".join(x for x in (os.environ.get("MEMLAKE_CONF"), conf) if x)
        check_config(merged)
        os.environ["MEMLAKE_CONF"] = merged
    else:
        check_config()
    pluggable = torch.cuda.memory.CUDAPluggableAllocator(
        str(_native.path()), "memlake_torch_malloc", "memlake_torch_free")
    hooks = pluggable.allocator()
    hooks.set_record_stream_fn(_native.function_address("memlake_torch_record_stream"))
    hooks.set_reset_fn(_native.function_address("memlake_torch_empty_cache"))
    hooks.set_memory_fraction_fn(_native.function_address("memlake_torch_set_memory_fraction"))
    _set_graph_hooks(hooks)
    try:
        torch.cuda.memory.change_current_allocator(pluggable)
    except RuntimeError as e:
        raise RuntimeError(
            "memlake.torch.enable() must run before the first CUDA tensor is created "
            "and before torch.cuda.set_device() (PyTorch: %s)" % e) from None
    _allocator = pluggable
    return pluggable


# PyTorch's graph-pool hooks (2.3 and later), and memlake's functions for
# them: C++ functions with the exact types PyTorch casts the addresses to.
_GRAPH_HOOKS = (
    ("set_begin_allocate_to_pool", "memlake_torch_begin_allocate_to_pool"),
    ("set_end_allocate_to_pool_fn", "memlake_torch_end_allocate_to_pool"),
    ("set_release_pool", "memlake_torch_release_pool"),
)


def _set_graph_hooks(hooks):
    if not all(hasattr(hooks, setter) for setter, _ in _GRAPH_HOOKS):
        warnings.warn(
            "memlake: this PyTorch has no graph-pool hooks for pluggable allocators (PyTorch 2.3 "
            "adds them): with memlake enabled, do not capture CUDA graphs (torch.cuda.graph)",
            RuntimeWarning, stacklevel=3)
        return
    for setter, function in _GRAPH_HOOKS:
        getattr(hooks, setter)(_native.function_address(function))


def exclusive_pool_handles(n, device=None, check=False):
    """n graph pool handles for torch.cuda.graph(..., pool=h) whose pools share
    physical memory: the graphs captured into them must never run at the same
    time (replay() orders them). With check, memlake counts overlaps it sees
    (graph_exclusive_overlaps) in graphs captured by memlake itself."""
    from . import exclusive_group, exclusive_pool_handle
    index = _device_index(device)
    group = exclusive_group(index, check)
    return [exclusive_pool_handle(group, index) for _ in range(n)]


_last_replay = {}  # exclusive group -> torch.cuda.Event recorded after its last replay


def replay(graph, pool, device=None):
    """graph.replay() on the current stream, after the previous replay() of
    any graph of `pool`'s exclusive group has finished (a GPU-side wait, never
    a host one). Graphs of one group replayed only through this function never
    run at the same time, whatever streams they replay on."""
    from . import pool_stats
    index = _device_index(device)
    group = pool_stats(pool, index)["group"]
    if group == 0:
        graph.replay()
        return
    stream = torch.cuda.current_stream(index)
    last = _last_replay.get(group)
    if last is not None:
        stream.wait_event(last)
    graph.replay()
    done = torch.cuda.Event()
    done.record(stream)
    _last_replay[group] = done


def _device_index(device):
    if device is None:
        return torch.cuda.current_device()
    if isinstance(device, int):
        return device
    d = torch.device(device)
    return d.index if d.index is not None else torch.cuda.current_device()


def stats(device=None):
    """All of memlake's statistics for the device (default: the current one)."""
    return _stats(_device_index(device))


def memory_reserved(device=None):
    """Physical bytes memlake holds on the device (like torch.cuda.memory_reserved)."""
    return stats(device)["reserved_bytes"]["current"]


def max_memory_reserved(device=None):
    return stats(device)["reserved_bytes"]["peak"]


def memory_allocated(device=None):
    """Bytes of live tensors, each rounded to 512 bytes as PyTorch rounds them
    (like torch.cuda.memory_allocated); the bytes as requested are
    memory_stats()["requested_bytes.all.current"]."""
    return stats(device)["live_bytes"]["current"]


def max_memory_allocated(device=None):
    return stats(device)["live_bytes"]["peak"]


def memory_stats(device=None):
    """memlake's statistics under torch.cuda.memory_stats()'s keys
    ("allocated_bytes.all.current", "reserved_bytes.all.peak", "num_ooms", ...)
    plus every statistic of memlake as "memlake.<name>"."""
    return memory_stats_from(stats(device))


def memory_summary(device=None):
    """A text table of the device's memory, like torch.cuda.memory_summary()."""
    index = _device_index(device)
    return memory_summary_from(_stats(index), index)


def reset_peak_memory_stats(device=None):
    """Sets every peak of the device's statistics to its current value."""
    from . import reset_peak_stats
    reset_peak_stats(_device_index(device))
