"""Loads libmemlake.so and declares the C functions the package calls."""

import ctypes
import os
from pathlib import Path

_lib = None
_path = None


def candidates():
    """Where the library is looked for, in order."""
    places = []
    if os.environ.get("MEMLAKE_LIBRARY"):
        places.append(Path(os.environ["MEMLAKE_LIBRARY"]))
    here = Path(__file__).resolve().parent
    places.append(here / "libmemlake.so")  # installed next to the package
    places.append(here.parent.parent / "build" / "libmemlake.so")  # a source tree's build
    return places


def _declare(lib):
    c = ctypes
    lib.memlake_malloc.restype = c.c_void_p
    lib.memlake_malloc.argtypes = [c.c_size_t, c.c_int, c.c_void_p]
    lib.memlake_free.restype = None
    lib.memlake_free.argtypes = [c.c_void_p, c.c_size_t, c.c_int, c.c_void_p]
    lib.memlake_empty_cache.restype = c.c_int
    lib.memlake_empty_cache.argtypes = [c.c_int]
    lib.memlake_get_stats_json.restype = c.c_int
    lib.memlake_get_stats_json.argtypes = [c.c_int, c.c_char_p, c.c_size_t]
    lib.memlake_reset_peak_stats.restype = None
    lib.memlake_reset_peak_stats.argtypes = [c.c_int]
    lib.memlake_last_error.restype = c.c_char_p
    lib.memlake_last_error.argtypes = []
    lib.memlake_config_check.restype = c.c_int
    lib.memlake_config_check.argtypes = [c.c_char_p]
    lib.memlake_options_print.restype = None
    lib.memlake_options_print.argtypes = []


def load(library=None):
    """The loaded library; `library` (a path) is used if given and nothing is loaded yet."""
    global _lib, _path
    if _lib is not None:
        if library is not None and Path(library).resolve() != _path:
            raise RuntimeError(
                "memlake: %s is loaded already; cannot load %s as well" % (_path, library))
        return _lib
    places = [Path(library)] if library is not None else candidates()
    for place in places:
        if place.is_file():
            lib = ctypes.CDLL(str(place), mode=ctypes.RTLD_GLOBAL)
            _declare(lib)
            _lib, _path = lib, place.resolve()
            return lib
    raise FileNotFoundError(
        "memlake: libmemlake.so not found; looked at %s (build it with cmake, or set "
        "MEMLAKE_LIBRARY to its path)" % ", ".join(str(p) for p in places))


def path():
    """The path of the loaded library (loading it if needed)."""
    load()
    return _path


def last_error():
    return load().memlake_last_error().decode()


def function_address(name):
    """The address of a C function of the library, as PyTorch's hooks take it."""
    return ctypes.cast(getattr(load(), name), ctypes.c_void_p).value
