"""Loads libmemlake.so and declares the C functions the package calls.

Where the library comes from, in order: MEMLAKE_LIBRARY if it is set (an
error naming the path if nothing loads from there: no other place is tried),
else the libmemlake.so installed inside this package (pip install), else the
build/ folder of the source tree this package sits in.
"""

import ctypes
import os
from pathlib import Path

_lib = None
_path = None

_HERE = Path(__file__).resolve().parent


def candidates():
    """Where the library is looked for, in order."""
    if os.environ.get("MEMLAKE_LIBRARY"):
        return [Path(os.environ["MEMLAKE_LIBRARY"])]
    places = [_HERE / "libmemlake.so"]  # installed inside the package
    source_root = _HERE.parent.parent
    if (source_root / "CMakeLists.txt").is_file():  # python/memlake in a source tree
        places.append(source_root / "build" / "libmemlake.so")
    return places


class PoolId(ctypes.Structure):
    """memlake_pool_id: PyTorch's MempoolId_t."""
    _fields_ = [("first", ctypes.c_uint64), ("second", ctypes.c_uint64)]


class PoolStats(ctypes.Structure):
    """memlake_pool_stats."""
    _fields_ = [(name, ctypes.c_uint64) for name in (
        "group", "reserved_bytes", "mapped_bytes", "live_bytes", "live_blocks", "retired_bytes",
        "allocations")] + [(name, ctypes.c_int32) for name in (
            "users", "allocating", "released", "reserved_")] + [("kept_bytes", ctypes.c_uint64)]


# memlake_stream_filter: int (*)(void* context, void* stream).
STREAM_FILTER = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)


def _declare(lib):
    c = ctypes
    signatures = {
        "memlake_malloc": (c.c_void_p, [c.c_size_t, c.c_int, c.c_void_p]),
        "memlake_free": (None, [c.c_void_p, c.c_size_t, c.c_int, c.c_void_p]),
        "memlake_record_stream": (c.c_int, [c.c_void_p, c.c_int, c.c_void_p]),
        "memlake_empty_cache": (c.c_int, [c.c_int]),
        "memlake_get_stats_json": (c.c_int, [c.c_int, c.c_char_p, c.c_size_t]),
        "memlake_reset_peak_stats": (None, [c.c_int]),
        "memlake_stat_count": (c.c_int, []),
        "memlake_stat_name": (c.c_char_p, [c.c_int]),
        "memlake_stat_kind": (c.c_char_p, [c.c_int]),
        "memlake_stat_help": (c.c_char_p, [c.c_int]),
        "memlake_last_error": (c.c_char_p, []),
        "memlake_config_check": (c.c_int, [c.c_char_p]),
        "memlake_options_print": (None, []),
        "memlake_timeline_dump": (c.c_int, [c.c_int, c.c_char_p]),
        "memlake_memory_snapshot_json": (c.c_int, [c.c_int, c.c_char_p, c.c_size_t]),
        "memlake_graph_pool_handle": (c.c_int, [c.c_int, c.POINTER(PoolId)]),
        "memlake_exclusive_group": (c.c_int, [c.c_int, c.c_int, c.POINTER(c.c_uint64)]),
        "memlake_exclusive_pool_handle": (c.c_int, [c.c_int, c.c_uint64, c.POINTER(PoolId)]),
        "memlake_begin_allocate_to_pool": (c.c_int, [c.c_int, PoolId, STREAM_FILTER, c.c_void_p]),
        "memlake_end_allocate_to_pool": (c.c_int, [c.c_int, PoolId]),
        "memlake_release_pool": (c.c_int, [c.c_int, PoolId]),
        "memlake_get_pool_stats": (c.c_int, [c.c_int, PoolId, c.POINTER(PoolStats)]),
        "memlake_exclusive_group_bytes": (c.c_int, [c.c_int, c.c_uint64, c.POINTER(c.c_uint64)]),
    }
    for name, (restype, argtypes) in signatures.items():
        function = getattr(lib, name)
        function.restype = restype
        function.argtypes = argtypes


def _open(place, named_by):
    try:
        lib = ctypes.CDLL(str(place), mode=ctypes.RTLD_GLOBAL)
        _declare(lib)
    except (OSError, AttributeError) as e:
        raise OSError("memlake: cannot load %s (%s): %s" % (place, named_by, e)) from None
    return lib


def load(library=None):
    """The loaded library; `library` (a path) is used if given and nothing is loaded yet."""
    global _lib, _path
    if _lib is not None:
        if library is not None and Path(library).resolve() != _path:
            raise RuntimeError(
                "memlake: %s is loaded already; cannot load %s as well" % (_path, library))
        return _lib
    if library is not None:
        places, named_by = [Path(library)], "the library argument"
    elif os.environ.get("MEMLAKE_LIBRARY"):
        places, named_by = candidates(), "MEMLAKE_LIBRARY"
    else:
        places, named_by = candidates(), None
    for place in places:
        if place.is_file():
            lib = _open(place, named_by or "found at %s" % place.parent)
            _lib, _path = lib, place.resolve()
            return lib
    if named_by is not None:
        raise FileNotFoundError(
            "memlake: %s names %s, which does not exist" % (named_by, places[0]))
    raise FileNotFoundError(
        "memlake: libmemlake.so not found; looked at %s (install the package with pip, "
        "build it with cmake, or set MEMLAKE_LIBRARY to its path)"
        % ", ".join(str(p) for p in places))


def path():
    """The path of the loaded library (loading it if needed)."""
    load()
    return _path


def last_error():
    return load().memlake_last_error().decode()


def function_address(name):
    """The address of a C function of the library, as PyTorch's hooks take it."""
    return ctypes.cast(getattr(load(), name), ctypes.c_void_p).value
