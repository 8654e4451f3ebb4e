"""Builds and installs memlake's allocator for PyTorch (_torch_allocator.cpp):
CUDAPluggableAllocator with calls the pluggable allocator refuses, those of
CUDA graph trees (docs/graphs.md), torch.cuda's statistics, cacheInfo and
the memory history (docs/pytorch.md).

The source is compiled on first use against the installed torch, with the
C++ compiler of $CXX (else c++, else g++), into a per-user cache:
$MEMLAKE_CACHE_DIR, else $XDG_CACHE_HOME/memlake, else ~/.cache/memlake. The
file's name carries a hash of the source, torch's version, library folder and
C++ ABI, and Python's version, so a new torch gets a new build and every
later process loads the one made. A lock file makes concurrent processes
(torchrun's ranks) build it once, and the result appears under its name only
once complete (a rename). The build needs torch's headers and libraries and
CUDA's runtime headers, not libmemlake.so: every memlake function is handed
over as an address when the allocator is installed.
"""

import ctypes
import fcntl
import hashlib
import importlib
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

SOURCE = Path(__file__).resolve().with_name("_torch_allocator.cpp")
ENTRY_POINT = "memlake_torch_install_graph_tree_allocator"

# MemlakeFunctions in _torch_allocator.cpp, in its order: each field is the
# address of libmemlake.so's function "memlake_" + field.
FUNCTIONS = (
    "torch_malloc", "torch_free", "torch_record_stream", "torch_empty_cache",
    "torch_set_memory_fraction", "torch_begin_allocate_to_pool", "torch_end_allocate_to_pool",
    "torch_release_pool", "pool_blocks", "restore_pool", "last_error", "stat_count", "stat_name",
    "get_stat_values", "reset_peak_stats", "largest_available", "torch_free_block", "block_info",
    "live_blocks",
)

LIBRARIES = ("c10", "c10_cuda", "torch_cpu", "torch_cuda", "torch")

# Where CUDA's runtime headers come with pip's wheels, under site-packages.
WHEEL_CUDA_INCLUDES = ("nvidia/cuda_runtime/include", "nvidia/cu13/include",
                       "nvidia/cu12/include")

_STDERR_TAIL = 3000  # characters of a failed compiler's output in the error

# Leaves out the memory history (recordHistory, snapshot), whose interface
# changes between torch versions more than the rest: a torch whose interface
# the file does not fit still gets graph trees and statistics.
NO_HISTORY = "MEMLAKE_TORCH_NO_HISTORY"


class BuildError(RuntimeError):
    """The allocator could not be built or loaded; the message says why."""


class Functions(ctypes.Structure):
    _fields_ = [(name, ctypes.c_void_p) for name in FUNCTIONS]


# ---- what the build depends on -----------------------------------------------

def cache_dir(environ=None):
    environ = os.environ if environ is None else environ
    if environ.get("MEMLAKE_CACHE_DIR"):
        return Path(environ["MEMLAKE_CACHE_DIR"])
    if environ.get("XDG_CACHE_HOME"):
        return Path(environ["XDG_CACHE_HOME"]) / "memlake"
    return Path.home() / ".cache" / "memlake"


def cache_key(source_text, torch_version, abi, library_dir, python_version):
    """A short hash of everything the compiled file depends on."""
    text = "\0".join([source_text, str(torch_version), str(int(abi)), str(library_dir),
                      str(python_version)])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def torch_facts(torch):
    """(version, C++ ABI flag, library folder) of an imported torch."""
    abi = getattr(getattr(torch, "_C", None), "_GLIBCXX_USE_CXX11_ABI", None)
    if abi is None:
        raise BuildError("memlake: this torch has no torch._C._GLIBCXX_USE_CXX11_ABI (not a "
                         "build of PyTorch with its C++ library)")
    library_dir = Path(torch.__file__).resolve().parent / "lib"
    return str(torch.__version__), int(bool(abi)), library_dir


def library_path(torch, source=SOURCE, environ=None):
    """Where the allocator built for this torch is (or goes) in the cache."""
    version, abi, library_dir = torch_facts(torch)
    python = "%d.%d" % sys.version_info[:2]
    key = cache_key(Path(source).read_text(), version, abi, library_dir, python)
    return cache_dir(environ) / ("torch_allocator-%s.so" % key)


# ---- the compiler command ------------------------------------------------------

def compiler(environ=None):
    """The C++ compiler's command words: $CXX, else c++, else g++."""
    environ = os.environ if environ is None else environ
    if environ.get("CXX"):
        return shlex.split(environ["CXX"])
    for name in ("c++", "g++"):
        if shutil.which(name):
            return [name]
    raise BuildError("memlake: no C++ compiler found (set CXX, or install c++ or g++)")


def torch_include_dirs(cpp_extension, torch_dir):
    """torch's header folders: torch.utils.cpp_extension.include_paths for
    CUDA (include_paths(device_type="cuda") in newer versions,
    include_paths(cuda=True) in older), its CPU folders where the CUDA call
    fails (it raises without a CUDA toolkit), or torch/include and its C++
    API folder where cpp_extension cannot be imported."""
    if cpp_extension is not None:
        for kwargs in ({"device_type": "cuda"}, {"cuda": True}, {}):
            try:
                return [str(p) for p in cpp_extension.include_paths(**kwargs)]
            except TypeError:
                continue  # the other version's keyword
            except (OSError, RuntimeError):
                continue  # no CUDA toolkit where it looks: the CPU folders
    include = Path(torch_dir) / "include"
    return [str(include), str(include / "torch" / "csrc" / "api" / "include")]


def cuda_include_candidates(environ=None, site_dirs=None):
    """The folders that may hold cuda_runtime_api.h, in the order tried: the
    toolkit $CUDA_HOME or $CUDA_PATH names, the CUDA wheels torch was
    installed with (under the folders of sys.path), /usr/local/cuda."""
    environ = os.environ if environ is None else environ
    out = []
    for variable in ("CUDA_HOME", "CUDA_PATH"):
        if environ.get(variable):
            out.append(Path(environ[variable]) / "include")
    if site_dirs is None:
        site_dirs = [Path(p) for p in sys.path if p and Path(p).is_dir()]
    for site in site_dirs:
        out += [Path(site) / sub for sub in WHEEL_CUDA_INCLUDES]
        out += sorted(Path(site).glob("nvidia/*/include"))
    out.append(Path("/usr/local/cuda/include"))
    return out


def cuda_include_dir(include_dirs, environ=None, site_dirs=None):
    """A folder with cuda_runtime_api.h that include_dirs lacks (None when one
    of them has it); BuildError naming the places looked at when none has."""
    if any((Path(d) / "cuda_runtime_api.h").is_file() for d in include_dirs):
        return None
    candidates = cuda_include_candidates(environ, site_dirs)
    for d in candidates:
        if (d / "cuda_runtime_api.h").is_file():
            return str(d)
    raise BuildError("memlake: CUDA's cuda_runtime_api.h is not in %s (set CUDA_HOME to the "
                     "CUDA toolkit)" % ", ".join(str(d) for d in list(include_dirs) + candidates))


def compile_command(cxx, source, output, include_dirs, library_dir, abi, defines=()):
    library_dir = str(library_dir)
    return (list(cxx) + ["-O2", "-shared", "-fPIC", "-std=c++17",
                         "-D_GLIBCXX_USE_CXX11_ABI=%d" % int(abi)]
            + ["-D" + d for d in defines]
            + [w for d in include_dirs for w in ("-isystem", str(d))]
            + [str(source), "-o", str(output), "-L" + library_dir, "-Wl,-rpath," + library_dir]
            + ["-l" + name for name in LIBRARIES])


# ---- building and installing -------------------------------------------------

def _cpp_extension(torch):
    """torch.utils.cpp_extension, or None where it does not import (it needs
    setuptools)."""
    found = getattr(getattr(torch, "utils", None), "cpp_extension", None)
    if found is None and torch is sys.modules.get("torch"):
        try:
            found = importlib.import_module("torch.utils.cpp_extension")
        except Exception:
            found = None
    return found


def _run_compiler(command, environ=None):
    try:
        r = subprocess.run(command, capture_output=True, text=True, env=environ)
    except OSError as e:
        raise BuildError("memlake: cannot run the compiler (%s): %s"
                         % (e, " ".join(shlex.quote(c) for c in command))) from None
    if r.returncode != 0:
        raise BuildError("memlake: compiling the graph-tree allocator failed (exit status %d): "
                         "%s\n%s" % (r.returncode, " ".join(shlex.quote(c) for c in command),
                                     (r.stderr or r.stdout)[-_STDERR_TAIL:]))


def build(torch, source=SOURCE, environ=None, site_dirs=None):
    """The path of the allocator compiled for `torch`, built now if the cache
    does not hold it yet."""
    target = library_path(torch, source, environ)
    if target.is_file():
        return target
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        lock = open(str(target) + ".lock", "w")
    except OSError as e:
        raise BuildError("memlake: cannot write to the cache folder %s (%s; MEMLAKE_CACHE_DIR "
                         "names another)" % (target.parent, e)) from None
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one build; the others wait for it
        if target.is_file():
            return target
        _, abi, library_dir = torch_facts(torch)
        includes = torch_include_dirs(_cpp_extension(torch),
                                      Path(torch.__file__).resolve().parent)
        cuda = cuda_include_dir(includes, environ, site_dirs)
        if cuda is not None:
            includes.append(cuda)
        partial = Path("%s.%d.partial" % (target, os.getpid()))
        cxx = compiler(environ)
        command = compile_command(cxx, source, partial, includes, library_dir, abi)
        sys.stderr.write("memlake: compiling the graph-tree allocator for torch %s into %s "
                         "(once for this torch)\n" % (torch.__version__, target))
        sys.stderr.flush()
        try:
            try:
                _run_compiler(command, environ)
            except BuildError as full:
                command = compile_command(cxx, source, partial, includes, library_dir, abi,
                                          defines=[NO_HISTORY])
                try:
                    _run_compiler(command, environ)
                except BuildError:
                    raise full from None
                sys.stderr.write(
                    "memlake: built without PyTorch's memory history (torch.cuda.memory."
                    "_record_memory_history and _snapshot stay refused): this torch's "
                    "recordHistory or snapshot interface is not the one memlake's allocator "
                    "is written for. The compiler said:\n%s\n" % str(full)[-_STDERR_TAIL:])
                sys.stderr.flush()
            os.replace(partial, target)
        finally:
            if partial.exists():
                partial.unlink()
    return target


def install(path, address_of):
    """Loads the compiled allocator at `path` and makes it PyTorch's CUDA
    allocator; address_of(name) gives libmemlake.so's function addresses.
    RuntimeError with PyTorch's message if PyTorch refuses the switch."""
    try:
        lib = ctypes.CDLL(str(path))
        entry = getattr(lib, ENTRY_POINT)
    except (OSError, AttributeError) as e:
        raise BuildError("memlake: cannot load %s: %s" % (path, e)) from None
    entry.restype = ctypes.c_int
    entry.argtypes = [ctypes.POINTER(Functions), ctypes.c_char_p, ctypes.c_size_t]
    try:
        functions = Functions(*[address_of("memlake_" + name) for name in FUNCTIONS])
    except AttributeError as e:
        raise BuildError("memlake: the loaded libmemlake.so lacks a function the graph-tree "
                         "allocator calls (%s): a build older than this package" % e) from None
    error = ctypes.create_string_buffer(4096)
    if entry(ctypes.byref(functions), error, len(error)) != 0:
        raise RuntimeError(error.value.decode(errors="replace"))
    _loaded.append(lib)  # the allocator's code stays mapped for the process
    return lib


_loaded = []
