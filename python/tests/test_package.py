"""The memlake Python package without PyTorch or a GPU: where the library
comes from, configuration checks, and memlake.allocate/free and the stats of
the C API's allocators over the host backend (MEMLAKE_CONF=backend:host, set
before anything loads). With MEMLAKE_TEST_INSTALLED=1 it also checks that
the package under test is an installed one that carries its library."""

import ctypes
import os
import subprocess
import sys
import textwrap
import unittest
from pathlib import Path

os.environ["MEMLAKE_CONF"] = "backend:host,capacity:256M"

import support  # noqa: E402
import memlake  # noqa: E402
from memlake import _native  # noqa: E402

MiB = 1 << 20
INSTALLED = os.environ.get("MEMLAKE_TEST_INSTALLED") == "1"


def run_python(code, **variables):
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, env=support.child_env(**variables), timeout=120)


class Library(unittest.TestCase):
    def test_library_is_found(self):
        path = memlake.library_path()
        self.assertTrue(path.endswith("libmemlake.so"), path)
        self.assertTrue(Path(path).is_file())

    @unittest.skipUnless(INSTALLED, "checks an installed package (MEMLAKE_TEST_INSTALLED=1)")
    def test_installed_package_carries_its_library(self):
        package_dir = Path(memlake.__file__).resolve().parent
        self.assertNotIn("MEMLAKE_LIBRARY", os.environ)
        self.assertEqual(Path(memlake.library_path()).parent, package_dir)
        self.assertEqual(package_dir.parent.name, "site-packages")
        script = Path(sys.executable).parent / "memlake-run"
        self.assertTrue(script.is_file(), script)
        hook = package_dir.parent / "memlake.pth"
        self.assertTrue(hook.is_file(), hook)

    def test_a_missing_library_argument_is_a_clear_error(self):
        saved = _native._lib, _native._path
        _native._lib = None
        try:
            with self.assertRaises(FileNotFoundError) as e:
                _native.load("/nonexistent/libmemlake.so")
            self.assertIn("/nonexistent/libmemlake.so", str(e.exception))
        finally:
            _native._lib, _native._path = saved

    def test_a_wrong_memlake_library_is_an_error_naming_it(self):
        # No other place is tried, although the package's library exists.
        r = run_python("""
            import memlake
            memlake.stats(0)
        """, MEMLAKE_LIBRARY="/nonexistent/dir/libmemlake.so")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("FileNotFoundError", r.stderr)
        self.assertIn("MEMLAKE_LIBRARY names /nonexistent/dir/libmemlake.so", r.stderr)

    def test_a_memlake_library_that_is_not_a_library_is_an_error_naming_it(self):
        r = run_python("""
            import memlake
            memlake.stats(0)
        """, MEMLAKE_LIBRARY=__file__)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("OSError: memlake: cannot load %s (MEMLAKE_LIBRARY)" % __file__, r.stderr)


class Config(unittest.TestCase):
    def test_check_config_names_the_bad_key(self):
        memlake.check_config("backend:host,capacity:1G")
        with self.assertRaises(ValueError) as e:
            memlake.check_config("backend:host,capacty:1G")
        self.assertIn("capacty", str(e.exception))
        with self.assertRaises(ValueError) as e:
            memlake.check_config("capacity:-3")
        self.assertIn("capacity", str(e.exception))
        memlake.check_config()  # the environment set above

    def test_check_config_of_a_non_string_is_a_type_error(self):
        for bad in (42, b"capacity:1G", ["capacity:1G"]):
            with self.assertRaises(TypeError) as e:
                memlake.check_config(bad)
            self.assertIn("conf must be a str", str(e.exception))
            self.assertIn(type(bad).__name__, str(e.exception))


class AllocateAndFree(unittest.TestCase):
    def test_blocks_read_back_and_stats_follow(self):
        device = 5
        self.assertEqual(memlake.stats(device)["reserved_bytes"]["current"], 0)
        sizes = [3 * MiB, 1000, 17 * MiB + 5]
        blocks = [memlake.allocate(n, device=device) for n in sizes]
        for i, (p, n) in enumerate(zip(blocks, sizes)):
            ctypes.memset(p, 0x40 + i, n)  # host backend memory is the process's own
        for i, (p, n) in enumerate(zip(blocks, sizes)):
            self.assertEqual(ctypes.string_at(p, n), bytes([0x40 + i]) * n, i)
        s = memlake.stats(device)
        self.assertEqual(s["requested_bytes"]["current"], sum(sizes))
        self.assertGreaterEqual(s["reserved_bytes"]["current"], sum(sizes))
        self.assertEqual(s["allocs"], 3)
        for p, n in zip(blocks, sizes):
            memlake.free(p, n, device=device)
        s = memlake.stats(device)
        self.assertEqual(s["requested_bytes"]["current"], 0)
        self.assertEqual(s["requested_bytes"]["peak"], sum(sizes))
        self.assertEqual(s["frees"], 3)
        memlake.empty_cache(device)
        self.assertEqual(memlake.stats(device)["reserved_bytes"]["current"], 0)
        memlake.reset_peak_stats(device)
        self.assertEqual(memlake.stats(device)["reserved_bytes"]["peak"], 0)

    def test_out_of_memory_is_a_memory_error_with_the_report(self):
        with self.assertRaises(MemoryError) as e:
            memlake.allocate(1 << 30, device=6)  # capacity is 256 MiB
        self.assertIn("out of memory", str(e.exception))
        self.assertIn("capacity", str(e.exception))
        p = memlake.allocate(MiB, device=6)
        memlake.free(p, MiB, device=6)

    def test_a_bad_free_is_a_value_error_and_changes_nothing(self):
        p = memlake.allocate(MiB, device=7)
        before = memlake.stats(7)
        with self.assertRaises(ValueError) as e:
            memlake.free(p + 512, MiB, device=7)
        self.assertIn("interior pointer", str(e.exception))
        with self.assertRaises(ValueError) as e:
            memlake.free(p, 2 * MiB, device=7)  # wrong size
        after = memlake.stats(7)
        self.assertEqual(after["frees"], before["frees"])
        self.assertEqual(after["misuse_errors"], before["misuse_errors"] + 2)
        memlake.free(p, MiB, device=7)
        with self.assertRaises(ValueError):
            memlake.free(p, MiB, device=7)  # twice

    def test_record_stream_of_an_unknown_pointer_is_a_value_error(self):
        with self.assertRaises(ValueError):
            memlake.record_stream(0x1000, 0, device=7)

    def test_bad_arguments_are_type_and_value_errors(self):
        with self.assertRaises(ValueError) as e:
            memlake.allocate(MiB, device=64)
        self.assertIn("device 64 is out of range (0 to 63)", str(e.exception))
        with self.assertRaises(ValueError):
            memlake.allocate(-1)
        with self.assertRaises(TypeError):
            memlake.allocate(1.5)
        with self.assertRaises(TypeError):
            memlake.allocate(MiB, device="cuda:0")
        with self.assertRaises(TypeError):
            memlake.free(None, MiB)
        with self.assertRaises(ValueError) as e:
            memlake.stats(64)
        self.assertIn("device 64", str(e.exception))


class GraphPools(unittest.TestCase):
    """Pools through the C API; the captures themselves are the C++ suites'
    (a pool here routes allocations the way torch.cuda.MemPool does)."""

    def test_a_pool_takes_what_its_streams_allocate_and_is_released(self):
        device = 8
        pool = memlake.graph_pool_handle(device)
        asked = []
        memlake.begin_allocate_to_pool(pool, device,
                                       streams=lambda stream: asked.append(stream) or True)
        p = memlake.allocate(3 * MiB, device=device)
        ctypes.memset(p, 0x5A, 3 * MiB)
        self.assertEqual(asked, [0])
        s = memlake.pool_stats(pool, device)
        self.assertEqual(s["live_blocks"], 1)
        self.assertTrue(s["allocating"])
        self.assertGreaterEqual(s["reserved_bytes"], 3 * MiB)
        self.assertEqual(memlake.stats(device)["graph_allocs"], 1)
        self.assertEqual(ctypes.string_at(p, 3 * MiB), b"\x5a" * (3 * MiB))
        memlake.free(p, 3 * MiB, device=device)
        memlake.end_allocate_to_pool(pool, device)
        q = memlake.allocate(MiB, device=device)  # no route open: the lake's
        self.assertEqual(memlake.pool_stats(pool, device)["live_blocks"], 0)
        memlake.free(q, MiB, device=device)
        memlake.release_pool(pool, device)
        self.assertEqual(memlake.stats(device)["graph_pools"]["current"], 0)
        with self.assertRaises(ValueError) as e:
            memlake.release_pool(pool, device)
        self.assertIn("released already", str(e.exception))

    def test_pools_of_an_exclusive_group_share_their_memory(self):
        device = 9
        group = memlake.exclusive_group(device)
        pools = [memlake.exclusive_pool_handle(group, device) for _ in range(3)]
        for i, pool in enumerate(pools):
            memlake.begin_allocate_to_pool(pool, device)
            p = memlake.allocate((4 + 2 * i) * MiB, device=device)
            memlake.free(p, device=device)
            memlake.end_allocate_to_pool(pool, device)
        largest = max(memlake.pool_stats(pool, device)["reserved_bytes"] for pool in pools)
        self.assertEqual(memlake.exclusive_group_bytes(group, device), largest)
        for pool in pools:
            memlake.release_pool(pool, device)
        self.assertEqual(memlake.exclusive_group_bytes(group, device), 0)

    def test_what_an_exclusive_capture_keeps_is_its_pool_alone(self):
        device = 11
        group = memlake.exclusive_group(device)
        first, second = (memlake.exclusive_pool_handle(group, device) for _ in range(2))
        memlake.begin_allocate_to_pool(first, device)
        kept = memlake.allocate(MiB, device=device)
        memlake.end_allocate_to_pool(first, device)
        self.assertGreaterEqual(memlake.pool_stats(first, device)["kept_bytes"], MiB)
        ctypes.memset(kept, 0x11, MiB)
        memlake.begin_allocate_to_pool(second, device)
        temp = memlake.allocate(4 * MiB, device=device)  # the group's shared chunks
        ctypes.memset(temp, 0x22, 4 * MiB)
        memlake.free(temp, device=device)
        memlake.end_allocate_to_pool(second, device)
        self.assertEqual(memlake.pool_stats(second, device)["kept_bytes"], 0)
        self.assertEqual(ctypes.string_at(kept, MiB), b"\x11" * MiB)
        self.assertGreaterEqual(memlake.stats(device)["graph_kept_chunks"], 1)
        memlake.free(kept, device=device)
        for pool in (first, second):
            memlake.release_pool(pool, device)
        self.assertEqual(memlake.exclusive_group_bytes(group, device), 0)

    def test_misuse_is_a_value_error_naming_it(self):
        pool = memlake.graph_pool_handle(10)
        with self.assertRaises(ValueError) as e:
            memlake.end_allocate_to_pool(pool, 10)
        self.assertIn("end without begin", str(e.exception))
        with self.assertRaises(TypeError):
            memlake.begin_allocate_to_pool("pool", 10)


class StatFields(unittest.TestCase):
    def test_fields_come_from_the_library_and_match_the_stats(self):
        fields = memlake.stat_fields()
        names = [name for name, _, _ in fields]
        self.assertIn("requested_bytes", names)
        self.assertEqual(len(names), len(set(names)))
        s = memlake.stats(0)
        self.assertEqual([k for k in s if k != "version"], names)
        for name, kind, help_text in fields:
            self.assertIn(kind, ("gauge", "counter"))
            self.assertEqual(isinstance(s[name], dict), kind == "gauge", name)
            self.assertTrue(help_text, name)


if __name__ == "__main__":
    support.main()
