"""memlake: a GPU memory allocator that stitches scattered free memory into
contiguous blocks with CUDA's virtual memory API.

    import memlake.torch
    memlake.torch.enable()          # before the first CUDA tensor

Without PyTorch, the functions here read the stats of the allocators that
libmemlake.so's C API created in this process.
"""

import ctypes as _ctypes
import json as _json

from . import _native

__all__ = ["check_config", "empty_cache", "library_path", "reset_peak_stats", "stats"]


def library_path():
    """Path of the libmemlake.so in use (MEMLAKE_LIBRARY, next to the package, or build/)."""
    return str(_native.path())


def check_config(conf=None):
    """Raises ValueError naming the bad key or value of `conf` ("key:value,...",
    as in MEMLAKE_CONF); with None, checks the environment."""
    raw = None if conf is None else conf.encode()
    if _native.load().memlake_config_check(raw) != 0:
        raise ValueError(_native.last_error())


def stats(device=0):
    """Every statistic of the device's allocator as a dict (gauges as
    {"current": .., "peak": ..}, counters as ints); zeros before its first
    allocation."""
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
    devices = range(64) if device is None else [device]
    for d in devices:
        if lib.memlake_empty_cache(d) != 0:
            raise ValueError(_native.last_error())


def reset_peak_stats(device=0):
    lib = _native.load()
    lib.memlake_reset_peak_stats(device)
    error = _native.last_error()
    if error:
        raise ValueError(error)
