"""The build of memlake's allocator for CUDA graph trees
(memlake/_torch_build.py), without torch, a GPU or a C++ compiler: the
cache key and folder, the include folders taken from a stand-in
torch.utils.cpp_extension of either API, the search for CUDA's runtime
headers, the compiler command, one build for concurrent callers and none
once cached (a stand-in compiler that writes its output), a failing
compiler's error, the build without the memory history where only that
part fails, and that the C++ file ships with the package and declares
the functions Python hands it in the order Python fills them.
test_torch_graphs.py builds and runs it against the real PyTorch on a GPU."""

import contextlib
import ctypes
import io
import os
import re
import sys
import tempfile
import textwrap
import threading
import types
import unittest
from pathlib import Path

import support  # noqa: F401  (puts memlake on the path)
import memlake  # noqa: E402
from memlake import _torch_build as tb

# A compiler that writes the file named after -o and logs its arguments, one
# line a run, to the file named by FAKE_CXX_LOG; with FAKE_CXX_FAIL set it
# prints an error and fails instead, with FAKE_CXX_FAIL_HISTORY only where
# the memory history is compiled in.
FAKE_CXX = textwrap.dedent("""
    import os, sys, time
    args = sys.argv[1:]
    if os.environ.get("FAKE_CXX_FAIL"):
        sys.stderr.write("fatal error: torch/csrc/cuda/CUDAPluggableAllocator.h: boom\\n")
        sys.exit(1)
    if os.environ.get("FAKE_CXX_FAIL_HISTORY") and "-DMEMLAKE_TORCH_NO_HISTORY" not in args:
        sys.stderr.write("error: no member named 'recordHistory' to override\\n")
        sys.exit(1)
    time.sleep(float(os.environ.get("FAKE_CXX_SLEEP", "0")))
    with open(os.environ["FAKE_CXX_LOG"], "a") as log:
        log.write(" ".join(args) + "\\n")
    with open(args[args.index("-o") + 1], "w") as out:
        out.write("compiled")
""")


class OldCppExtension:
    """include_paths(cuda=False) of PyTorch before device_type."""

    def __init__(self, root):
        self.root = root

    def include_paths(self, cuda=False):
        return [str(self.root / "include")] + ([str(self.root / "cuda" / "include")] if cuda else [])


class NewCppExtension(OldCppExtension):
    """include_paths(device_type="cpu"), raising where CUDA_HOME is not found."""

    def __init__(self, root, cuda_home=True):
        super().__init__(root)
        self.cuda_home = cuda_home

    def include_paths(self, device_type="cpu"):
        if device_type == "cuda" and not self.cuda_home:
            raise OSError("CUDA_HOME environment variable is not set")
        return super().include_paths(cuda=device_type == "cuda")


def fake_torch(root, version="2.11.0", abi=True, cpp_extension=None):
    (root / "torch").mkdir(parents=True, exist_ok=True)
    return types.SimpleNamespace(
        __version__=version, __file__=str(root / "torch" / "__init__.py"),
        _C=types.SimpleNamespace(_GLIBCXX_USE_CXX11_ABI=abi),
        utils=types.SimpleNamespace(cpp_extension=cpp_extension))


class CacheKey(unittest.TestCase):
    def test_the_key_changes_with_each_thing_the_build_depends_on(self):
        base = ("source", "2.11.0", 1, "/t/lib", "3.12")
        key = tb.cache_key(*base)
        self.assertEqual(key, tb.cache_key(*base))
        for i, other in enumerate(("source 2", "2.12.0", 0, "/u/lib", "3.13")):
            changed = list(base)
            changed[i] = other
            self.assertNotEqual(key, tb.cache_key(*changed), other)

    def test_the_cache_folder(self):
        self.assertEqual(tb.cache_dir({"MEMLAKE_CACHE_DIR": "/a", "XDG_CACHE_HOME": "/b"}),
                         Path("/a"))
        self.assertEqual(tb.cache_dir({"XDG_CACHE_HOME": "/b"}), Path("/b/memlake"))
        self.assertEqual(tb.cache_dir({}), Path.home() / ".cache" / "memlake")

    def test_the_path_follows_the_source_and_torch(self):
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            source = root / "a.cpp"
            source.write_text("int x;")
            env = {"MEMLAKE_CACHE_DIR": str(root / "cache")}
            first = tb.library_path(fake_torch(root), source, env)
            self.assertEqual(first.parent, root / "cache")
            self.assertRegex(first.name, r"^torch_allocator-[0-9a-f]{16}\.so$")
            self.assertNotEqual(first, tb.library_path(fake_torch(root, "2.12.0"), source, env))
            self.assertNotEqual(first, tb.library_path(fake_torch(root, abi=False), source, env))
            source.write_text("int y;")
            self.assertNotEqual(first, tb.library_path(fake_torch(root), source, env))

    def test_a_torch_without_its_cxx_library_is_refused(self):
        torch = types.SimpleNamespace(__version__="0.0+fake", __file__="/x/torch/__init__.py")
        with self.assertRaisesRegex(tb.BuildError, "_GLIBCXX_USE_CXX11_ABI"):
            tb.torch_facts(torch)


class Includes(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.root = Path(self.tmp.name)

    def test_both_apis_of_include_paths(self):
        cuda = str(self.root / "cuda" / "include")
        self.assertIn(cuda, tb.torch_include_dirs(NewCppExtension(self.root), "/t"))
        self.assertIn(cuda, tb.torch_include_dirs(OldCppExtension(self.root), "/t"))
        # Without a CUDA toolkit where torch looks: its CPU folders.
        self.assertEqual(tb.torch_include_dirs(NewCppExtension(self.root, cuda_home=False), "/t"),
                         [str(self.root / "include")])
        self.assertEqual(tb.torch_include_dirs(None, "/t"),
                         ["/t/include", "/t/include/torch/csrc/api/include"])

    def header_in(self, folder):
        folder.mkdir(parents=True)
        (folder / "cuda_runtime_api.h").write_text("")
        return str(folder)

    def test_cuda_headers_from_a_wheel_under_site_packages(self):
        site = self.root / "site-packages"
        found = self.header_in(site / "nvidia" / "cu13" / "include")
        self.assertEqual(tb.cuda_include_dir(["/t/include"], {}, [site]), found)
        self.assertIsNone(tb.cuda_include_dir([found], {}, [site]))  # torch's list has it

    def test_cuda_home_comes_first(self):
        home = self.header_in(self.root / "cuda" / "include")
        site = self.root / "site-packages"
        self.header_in(site / "nvidia" / "cuda_runtime" / "include")
        self.assertEqual(tb.cuda_include_dir([], {"CUDA_HOME": str(self.root / "cuda")}, [site]),
                         home)

    def test_no_cuda_headers_names_where_it_looked(self):
        if Path("/usr/local/cuda/include/cuda_runtime_api.h").is_file():
            self.skipTest("this machine has CUDA's headers in /usr/local/cuda")
        with self.assertRaisesRegex(tb.BuildError, "cuda_runtime_api.h") as caught:
            tb.cuda_include_dir(["/t/include"], {"CUDA_HOME": "/opt/nocuda"}, [self.root])
        self.assertIn("/opt/nocuda/include", str(caught.exception))
        self.assertIn("CUDA_HOME", str(caught.exception))


class Command(unittest.TestCase):
    def test_the_compiler_command(self):
        for abi in (0, 1):
            cmd = tb.compile_command(["g++"], "a.cpp", "a.so", ["/t/include", "/cuda/include"],
                                     "/t/lib", abi)
            self.assertEqual(cmd[0], "g++")
            self.assertIn("-D_GLIBCXX_USE_CXX11_ABI=%d" % abi, cmd)
            for flag in ("-O2", "-shared", "-fPIC", "-std=c++17", "-L/t/lib",
                         "-Wl,-rpath,/t/lib", "-lc10", "-lc10_cuda", "-ltorch_cpu",
                         "-ltorch_cuda", "-ltorch"):
                self.assertIn(flag, cmd)
            text = " ".join(cmd)
            self.assertIn("-isystem /t/include -isystem /cuda/include", text)
            self.assertIn("a.cpp -o a.so", text)

    def test_cxx_picks_the_compiler(self):
        self.assertEqual(tb.compiler({"CXX": "ccache g++-12"}), ["ccache", "g++-12"])


class Build(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        root = Path(self.tmp.name)
        (root / "cxx.py").write_text(FAKE_CXX)
        self.log = root / "cxx.log"
        self.source = root / "alloc.cpp"
        self.source.write_text("// the allocator")
        cuda = root / "cuda" / "include"
        cuda.mkdir(parents=True)
        (cuda / "cuda_runtime_api.h").write_text("")
        self.torch = fake_torch(root, cpp_extension=NewCppExtension(root))
        self.env = {"CXX": "%s %s" % (sys.executable, root / "cxx.py"),
                    "MEMLAKE_CACHE_DIR": str(root / "cache"), "FAKE_CXX_LOG": str(self.log)}
        self.cache = root / "cache"

    def build(self, **more):
        env = dict(os.environ, **self.env)
        env.update(more)
        return tb.build(self.torch, self.source, env, site_dirs=[])

    def test_built_once_then_found_in_the_cache(self):
        path = self.build()
        self.assertEqual(path.read_text(), "compiled")
        self.assertEqual(path, self.build())
        runs = self.log.read_text().splitlines()
        self.assertEqual(len(runs), 1)
        self.assertIn("-D_GLIBCXX_USE_CXX11_ABI=1", runs[0])
        self.assertIn(str(self.source), runs[0])
        self.assertEqual(sorted(p.name for p in self.cache.iterdir()),
                         [path.name, path.name + ".lock"])  # nothing half-written left

    def test_concurrent_builds_compile_once(self):
        paths = []
        threads = [threading.Thread(target=lambda: paths.append(self.build(FAKE_CXX_SLEEP="0.5")))
                   for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(len(set(paths)), 1)
        self.assertEqual(len(paths), 3)
        self.assertEqual(len(self.log.read_text().splitlines()), 1)

    def test_a_failing_compiler_names_its_command_and_output(self):
        with self.assertRaises(tb.BuildError) as caught:
            self.build(FAKE_CXX_FAIL="1")
        text = str(caught.exception)
        self.assertIn("exit status 1", text)
        self.assertIn("cxx.py", text)                      # the command
        self.assertIn("-D_GLIBCXX_USE_CXX11_ABI=1", text)
        self.assertIn("CUDAPluggableAllocator.h: boom", text)  # its output
        self.assertEqual([p.name for p in self.cache.iterdir() if not p.name.endswith(".lock")],
                         [])

    def test_a_torch_whose_history_interface_differs_gets_the_rest(self):
        stderr = io.StringIO()
        with contextlib.redirect_stderr(stderr):
            path = self.build(FAKE_CXX_FAIL_HISTORY="1")
        self.assertEqual(path.read_text(), "compiled")
        runs = self.log.read_text().splitlines()
        self.assertEqual(len(runs), 1)  # the run that failed wrote no line
        self.assertIn("-DMEMLAKE_TORCH_NO_HISTORY", runs[0])
        self.assertIn("built without PyTorch's memory history", stderr.getvalue())
        self.assertIn("no member named 'recordHistory'", stderr.getvalue())
        self.assertEqual(path, self.build())  # the cache holds it: no third run
        self.assertEqual(len(self.log.read_text().splitlines()), 1)

    def test_a_full_build_passes_no_define(self):
        self.build()
        self.assertNotIn("MEMLAKE_TORCH_NO_HISTORY", self.log.read_text())

    def test_a_missing_compiler_is_named(self):
        with self.assertRaisesRegex(tb.BuildError, "cannot run the compiler.*no-such-cxx"):
            self.build(CXX="/nonexistent/no-such-cxx")

    def test_a_library_that_does_not_load_is_a_build_error(self):
        with self.assertRaisesRegex(tb.BuildError, "cannot load"):
            tb.install(Path(self.tmp.name) / "missing.so", lambda name: 0)


class Source(unittest.TestCase):
    def test_the_cpp_file_ships_beside_the_module(self):
        self.assertTrue(tb.SOURCE.is_file(), tb.SOURCE)
        self.assertIn(tb.ENTRY_POINT, tb.SOURCE.read_text())

    def test_python_fills_the_functions_in_the_order_cpp_declares_them(self):
        text = tb.SOURCE.read_text()
        body = text[text.index("struct MemlakeFunctions {"):]
        body = body[:body.index("};")]
        declared = re.findall(r"\(\*(\w+)\)", body)
        self.assertEqual(tuple(declared), tb.FUNCTIONS)
        self.assertEqual([name for name, _ in tb.Functions._fields_], list(tb.FUNCTIONS))

    def test_the_library_exports_every_function_the_allocator_calls(self):
        lib = ctypes.CDLL(str(memlake.library_path()))
        missing = [name for name in tb.FUNCTIONS if not hasattr(lib, "memlake_" + name)]
        self.assertEqual(missing, [], "not in %s" % memlake.library_path())


if __name__ == "__main__":
    support.main()
