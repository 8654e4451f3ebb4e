"""memlake for PyTorch: one call switches a program's CUDA memory to memlake.

    import memlake.torch
    memlake.torch.enable()                     # before the first CUDA tensor
    ...                                        # the training code, unchanged
    print(memlake.torch.max_memory_reserved())

enable() installs libmemlake.so as PyTorch's CUDA allocator: a subclass of
PyTorch's CUDAPluggableAllocator with memlake's hooks for
Tensor.record_stream, torch.cuda.empty_cache,
torch.cuda.set_per_process_memory_fraction (before the device's first
allocation) and CUDA graph pools (torch.cuda.graph, with or without a shared
pool=, and torch.cuda.make_graphed_callables: docs/graphs.md), which also
answers the checkpoint and live-allocation calls of Inductor's CUDA graph
trees (torch.compile(mode="reduce-overhead")). The subclass is a small C++
file (memlake/_torch_allocator.cpp) compiled against the installed torch on
first use and cached (memlake/_torch_build.py); where it cannot be built,
enable() warns and installs torch.cuda.memory.CUDAPluggableAllocator itself,
under which reduce-overhead needs enable(plain_inductor_graphs=True) and
torch.cuda's statistics are refused (see below).

An allocation memlake cannot serve raises RuntimeError with memlake's
out-of-memory report (requested, live, reserved, largest free block,
capacity), and the allocator stays usable: PyTorch turns every error of a
pluggable allocator into RuntimeError. Code that catches
torch.OutOfMemoryError runs its block under oom_errors(), which raises that
type instead (a RuntimeError subclass, so other handlers still match).

With the timeline option (enable("timeline:/tmp/timeline-{device}.json")),
snapshot() and _dump_snapshot() give what torch.cuda.memory's do, for
pytorch.org/memory_viz, and dump_timeline() writes a Perfetto trace.

The subclass also answers torch.cuda's own statistics
(torch.cuda.memory_allocated(), max_memory_reserved(), memory_stats(),
memory_summary(), reset_peak_memory_stats(), ...) from memlake's,
cacheInfo, which cuDNN's benchmark mode sizes its workspace by, and
PyTorch's memory history (torch.cuda.memory._record_memory_history(),
_snapshot(), _dump_snapshot(), with Python stacks; docs/profiling.md). Under the
plain CUDAPluggableAllocator PyTorch refuses those calls; the functions here
give the same figures under the same names either way, and memory_stats()
under PyTorch's keys (memlake/torch_stats.py says which key comes from which
statistic).

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

import functools

from . import _native
from . import check_config
from . import dump_snapshot as _dump_snapshot_of
from . import dump_timeline as _dump_timeline_of
from . import snapshot as _snapshot_of
from . import stats as _stats
from .torch_stats import memory_stats_from, memory_summary_from

__all__ = [
    "OutOfMemoryError", "dump_timeline", "enable", "exclusive_pool_handles", "graph",
    "inductor_graph_group", "is_enabled",
    "memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved",
    "memory_stats", "memory_summary", "oom_errors", "replay", "reset_peak_memory_stats",
    "snapshot", "stats", "torch_oom_error",
]

_allocator = None


def is_enabled():
    return _allocator is not None


def enable(conf=None, library=None, plain_inductor_graphs=False, graph_trees="auto"):
    """Makes memlake PyTorch's CUDA allocator for this process.

    conf: memlake options, "key:value,..." (see docs/configuration.md); they
    are added to MEMLAKE_CONF for this process, after what it already holds.
    library: path of libmemlake.so (default: MEMLAKE_LIBRARY, next to this
    package, or the source tree's build/).
    graph_trees: whether memlake answers the calls of Inductor's CUDA graph
    trees (torch.compile(mode="reduce-overhead")'s default), torch.cuda's
    statistics, cuDNN's cacheInfo and the memory history, which PyTorch's
    CUDAPluggableAllocator refuses. "auto" (the default) compiles
    memlake/_torch_allocator.cpp against the installed torch on first use
    (memlake/_torch_build.py says where it is cached and which compiler
    runs) and installs it; if that fails, it warns (RuntimeWarning, with the
    reason) and installs the plain CUDAPluggableAllocator, under which those
    calls are refused. True raises the failure instead; False installs the
    plain CUDAPluggableAllocator without compiling anything. While the
    argument is "auto", MEMLAKE_GRAPH_TREES=0 (or 1) in the environment
    stands for False (or True), for programs switched with memlake-run or
    MEMLAKE_ENABLE.
    plain_inductor_graphs: True sets
    torch._inductor.config.triton.cudagraph_trees to False, so that
    torch.compile(mode="reduce-overhead") records Inductor's plain CUDA
    graphs (torch.cuda.graph, one pool per graph), which need only the pool
    hooks memlake sets. "exclusive" does the same and puts
    the pools of all of Inductor's graphs in one exclusive group
    (exclusive_pool_handles): their temporaries share physical memory, and
    what a graph keeps after its capture (its outputs) gets memory of its
    own. Each replay of one of them then waits, GPU-side, for the group's
    last replay, so two never run at the same time, whatever streams a
    program runs its compiled functions on (compiled functions on two
    streams lose their overlap). Plain graphs return their
    outputs in buffers the next replay overwrites, gradients included: a
    loop that keeps gradients between steps (zero_grad(set_to_none=False))
    then adds each step's gradient into the buffer the next replay writes;
    use zero_grad(), whose default sets them to None.

    Must run before the first CUDA tensor is created and before
    torch.cuda.set_device() (which starts PyTorch's allocator; under torchrun,
    call enable() first, then set the rank's device): PyTorch cannot change
    allocators after that. Calling it again does nothing (the first call's
    options stay). Returns the allocator installed (torch.cuda.memory's
    wrapper of it).
    """
    global _allocator
    if _allocator is not None:
        return _allocator
    if plain_inductor_graphs not in (False, True, "exclusive"):
        raise ValueError("plain_inductor_graphs: False, True or \"exclusive\", not %r"
                         % (plain_inductor_graphs,))
    if graph_trees not in (False, True, "auto"):
        raise ValueError("graph_trees: \"auto\", True or False, not %r" % (graph_trees,))
    if graph_trees == "auto":
        graph_trees = _graph_trees_from_environment()
    _native.load(library)
    if conf:
        merged = ",".join(x for x in (os.environ.get("MEMLAKE_CONF"), conf) if x)
        check_config(merged)
        os.environ["MEMLAKE_CONF"] = merged
    else:
        check_config()
    allocator = _graph_tree_allocator(required=graph_trees is True) if graph_trees else None
    if allocator is None:
        allocator = _pluggable_allocator(plain_inductor_graphs)
    elif plain_inductor_graphs:
        _use_plain_inductor_graphs(exclusive=plain_inductor_graphs == "exclusive")
    _allocator = allocator
    return allocator


_TOO_LATE = "Can't swap an already initialized allocator"


def _too_late(error):
    return RuntimeError(
        "memlake.torch.enable() must run before the first CUDA tensor is created "
        "and before torch.cuda.set_device() (PyTorch: %s)" % error)


def _graph_trees_from_environment():
    value = os.environ.get("MEMLAKE_GRAPH_TREES", "").strip().lower()
    if value in ("", "auto"):
        return "auto"
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ValueError("memlake: MEMLAKE_GRAPH_TREES=%r is not understood: auto, 1 or 0"
                     % os.environ["MEMLAKE_GRAPH_TREES"])


def _graph_tree_allocator(required):
    """Installs memlake's allocator with the graph-tree calls
    (memlake/_torch_build.py) and returns torch.cuda.memory's wrapper of it;
    None, after a warning, where it cannot be built or loaded and is not
    required."""
    from . import _torch_build
    try:
        _torch_build.install(_torch_build.build(torch), _native.function_address)
    except _torch_build.BuildError as e:
        if required:
            raise
        warnings.warn(
            "%s\nmemlake is installed through CUDAPluggableAllocator instead, under which "
            "PyTorch refuses CUDA graph trees: torch.compile(mode=\"reduce-overhead\") then "
            "needs memlake.torch.enable(plain_inductor_graphs=True) (docs/graphs.md), and "
            "torch.cuda's memory statistics, cuDNN's benchmark mode and "
            "torch.cuda.memory._record_memory_history raise (memlake.torch.memory_stats() "
            "gives the figures, memlake.torch.snapshot() with the timeline option the "
            "snapshot); "
            "graph_trees=False or MEMLAKE_GRAPH_TREES=0 skips the build" % e,
            RuntimeWarning, stacklevel=3)
        return None
    except RuntimeError as e:
        if _TOO_LATE in str(e):
            raise _too_late(e) from None
        raise
    return _current_allocator()


def _current_allocator():
    """torch.cuda.memory's wrapper of the allocator PyTorch now uses."""
    memory = torch.cuda.memory
    current = getattr(memory, "_get_current_allocator", None)
    if current is not None:
        return current()
    return memory._CUDAAllocator(torch._C._cuda_getAllocator())


def _pluggable_allocator(plain_inductor_graphs):
    """memlake through torch.cuda.memory.CUDAPluggableAllocator, with no
    graph-tree calls."""
    pluggable = torch.cuda.memory.CUDAPluggableAllocator(
        str(_native.path()), "memlake_torch_malloc", "memlake_torch_free")
    hooks = pluggable.allocator()
    hooks.set_record_stream_fn(_native.function_address("memlake_torch_record_stream"))
    hooks.set_reset_fn(_native.function_address("memlake_torch_empty_cache"))
    hooks.set_memory_fraction_fn(_native.function_address("memlake_torch_set_memory_fraction"))
    if _set_graph_hooks(hooks) and plain_inductor_graphs:
        _use_plain_inductor_graphs(exclusive=plain_inductor_graphs == "exclusive")
    try:
        torch.cuda.memory.change_current_allocator(pluggable)
    except RuntimeError as e:
        raise _too_late(e) from None
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
            RuntimeWarning, stacklevel=4)
        return False
    for setter, function in _GRAPH_HOOKS:
        getattr(hooks, setter)(_native.function_address(function))
    return True


def _use_plain_inductor_graphs(exclusive):
    """Reduce-overhead on Inductor's plain CUDA graphs (see enable()).
    Without Inductor, there is no reduce-overhead to set up."""
    try:
        import torch._inductor.config as inductor_config
    except ImportError:
        return
    inductor_config.triton.cudagraph_trees = False
    if exclusive:
        _capture_inductor_graphs_into_one_group()


_inductor_groups = {}  # device index -> the exclusive group of Inductor's graphs


def _capture_inductor_graphs_into_one_group():
    """Inductor's plain graphs are captured by cudagraphify_impl
    (torch._inductor.compile_fx), which compile_fx looks up when it compiles
    and which calls torch.cuda.graph(graph, stream=...) with no pool. While it
    runs, torch.cuda.graph gives each capture a new pool of the device's
    Inductor group instead, warmed as graph() does (captures are made on the
    thread that compiles; torch.cuda.graph is put back when it returns)."""
    try:
        import torch._inductor.compile_fx as compile_fx
    except ImportError:
        return
    original = getattr(compile_fx, "cudagraphify_impl", None)
    if original is None or getattr(original, "_memlake_group", False):
        return

    @functools.wraps(original)
    def cudagraphify_impl(*args, **kwargs):
        own = torch.cuda.graph

        def graph_in_group(cuda_graph, pool=None, stream=None, **graph_kwargs):
            if pool is None:
                pool = _inductor_pool()
                _replay_in_turn(cuda_graph)
            return _warmed(own)(cuda_graph, pool=pool, stream=stream, **graph_kwargs)

        torch.cuda.graph = graph_in_group
        try:
            return original(*args, **kwargs)
        finally:
            torch.cuda.graph = own

    cudagraphify_impl._memlake_group = True
    compile_fx.cudagraphify_impl = cudagraphify_impl


def _replay_in_turn(cuda_graph):
    """Inductor replays its graphs with graph.replay(): each replay of a
    graph of the group first waits, GPU-side, for the group's last one, so
    that two of them never run at the same time, whatever streams they are
    replayed on (what memlake.torch.replay does for graphs captured by hand)."""
    index = torch.cuda.current_device()
    group = _inductor_groups[index]
    replay = cuda_graph.replay

    def replay_after_the_group(*args, **kwargs):
        _in_turn(group, index, lambda: replay(*args, **kwargs))

    cuda_graph.replay = replay_after_the_group


def _inductor_pool():
    from . import exclusive_group, exclusive_pool_handle
    index = torch.cuda.current_device()
    if index not in _inductor_groups:
        _inductor_groups[index] = exclusive_group(index)
    return exclusive_pool_handle(_inductor_groups[index], index)


def inductor_graph_group(device=None):
    """The exclusive group of Inductor's graphs on `device` (enable(
    plain_inductor_graphs="exclusive")), or None before the first capture."""
    return _inductor_groups.get(_device_index(device))


def exclusive_pool_handles(n, device=None, check=False):
    """n graph pool handles for torch.cuda.graph(..., pool=h) whose pools share
    physical memory: the graphs captured into them must never run at the same
    time (replay() orders them). Blocks a capture keeps (outputs, a loss) get
    chunks of their pool alone. Capture into them with memlake.torch.graph,
    which keeps the libraries' workspaces out of the pools. With check,
    memlake counts overlaps it sees
    (graph_exclusive_overlaps) in graphs captured by memlake itself."""
    from . import exclusive_group, exclusive_pool_handle
    index = _device_index(device)
    group = exclusive_group(index, check)
    return [exclusive_pool_handle(group, index) for _ in range(n)]


def _warm_up_libraries(stream):
    """Makes cuBLAS's and cuBLASLt's workspaces for `stream` now, outside any
    graph pool. PyTorch keeps one workspace per (cuBLAS handle, stream) for
    the life of the process and makes it on the stream's first matmul; made
    inside a capture it lands in that graph's pool, and every later capture on
    the stream uses it: in an exclusive group it would take chunks of that
    pool alone, for as long as the pool lives."""
    with torch.cuda.stream(stream):
        a = torch.ones(16, 16, device=stream.device)
        torch.mm(a, a)
        torch.addmm(a[0], a, a)  # a bias: the cuBLASLt path
        for dtype in (torch.float16, torch.bfloat16):
            h = a.to(dtype)
            torch.addmm(h[0], h, h)
    stream.synchronize()


@functools.lru_cache(maxsize=None)
def _warmed(graph_class):
    """graph_class (torch.cuda.graph) whose capture first makes the libraries'
    workspaces for the capture stream (_warm_up_libraries)."""
    class WarmedGraph(graph_class):
        def __enter__(self):
            _warm_up_libraries(self.capture_stream)
            return super().__enter__()

    return WarmedGraph


def graph(cuda_graph, pool=None, stream=None, **kwargs):
    """torch.cuda.graph(cuda_graph, pool, stream, ...) for memlake's pools:
    the same arguments and behaviour, and before capturing it makes the
    libraries' per-stream workspaces on the capture stream outside the pool
    (see _warm_up_libraries). Use it to capture into exclusive pools;
    torch.cuda.graph is enough for private and shared pools."""
    return _warmed(torch.cuda.graph)(cuda_graph, pool=pool, stream=stream, **kwargs)


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
    _in_turn(group, index, graph.replay)


def _in_turn(group, index, launch):
    """launch() on the current stream after the last launch of `group`'s
    graphs made through here has finished, GPU-side."""
    stream = torch.cuda.current_stream(index)
    last = _last_replay.get(group)
    if last is not None:
        stream.wait_event(last)
    launch()
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


# torch.OutOfMemoryError (PyTorch >= 2.2), else torch.cuda.OutOfMemoryError.
OutOfMemoryError = getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError

_OOM_MARK = "memlake: out of memory"


def torch_oom_error(error):
    """The torch.OutOfMemoryError to raise for `error` when it is a
    RuntimeError carrying memlake's out-of-memory report (same message, the
    RuntimeError as its cause); None for any other error."""
    if isinstance(error, OutOfMemoryError) or not isinstance(error, RuntimeError):
        return None
    if _OOM_MARK not in str(error):
        return None
    oom = OutOfMemoryError(str(error))
    oom.__cause__ = error
    return oom


class oom_errors:
    """Runs a block (``with memlake.torch.oom_errors():``) or a function
    (``@memlake.torch.oom_errors()``) so that memlake running out of memory
    raises torch.OutOfMemoryError, as PyTorch's own allocator does, instead of
    the RuntimeError PyTorch makes of a pluggable allocator's errors. Other
    errors pass unchanged."""

    def __enter__(self):
        return self

    def __exit__(self, kind, error, traceback):
        oom = torch_oom_error(error) if error is not None else None
        if oom is not None:
            raise oom.with_traceback(traceback) from error
        return False

    def __call__(self, function):
        @functools.wraps(function)
        def run(*args, **kwargs):
            with oom_errors():
                return function(*args, **kwargs)
        return run


def snapshot(device=None):
    """memlake's memory snapshot, as torch.cuda.memory._snapshot() gives
    PyTorch's: segments with their blocks and device_traces (every device
    that records a timeline when `device` is None). Needs the timeline option."""
    return _snapshot_of(None if device is None else _device_index(device))


_snapshot = snapshot  # torch.cuda.memory's name


def _dump_snapshot(filename="dump_snapshot.pickle"):
    """Pickles snapshot() for pytorch.org/memory_viz, like
    torch.cuda.memory._dump_snapshot()."""
    return _dump_snapshot_of(filename)


def dump_timeline(path, device=None):
    """Writes the device's timeline as Chrome Trace Event JSON (Perfetto)."""
    _dump_timeline_of(path, _device_index(device))
