"""The memlake Python package without PyTorch or a GPU: library discovery,
configuration checks, and stats of the C API's allocators over the host
backend (MEMLAKE_CONF=backend:host, set by the test before anything loads)."""

import ctypes
import os
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ["MEMLAKE_CONF"] = "backend:host,capacity:256M"

import memlake  # noqa: E402
from memlake import _native  # noqa: E402

MiB = 1 << 20


class Package(unittest.TestCase):
    def test_library_is_found(self):
        path = memlake.library_path()
        self.assertTrue(path.endswith("libmemlake.so"), path)
        self.assertTrue(Path(path).is_file())

    def test_a_missing_library_is_a_clear_error(self):
        saved = _native._lib, _native._path
        _native._lib = None
        try:
            with self.assertRaises(FileNotFoundError) as e:
                _native.load("/nonexistent/libmemlake.so")
            self.assertIn("/nonexistent/libmemlake.so", str(e.exception))
            self.assertIn("MEMLAKE_LIBRARY", str(e.exception))
        finally:
            _native._lib, _native._path = saved

    def test_check_config_names_the_bad_key(self):
        memlake.check_config("backend:host,capacity:1G")
        with self.assertRaises(ValueError) as e:
            memlake.check_config("backend:host,capacty:1G")
        self.assertIn("capacty", str(e.exception))
        with self.assertRaises(ValueError) as e:
            memlake.check_config("capacity:-3")
        self.assertIn("capacity", str(e.exception))
        memlake.check_config()  # the environment set above

    def test_stats_follow_allocations(self):
        lib = _native.load()
        device = 5
        self.assertEqual(memlake.stats(device)["reserved_bytes"]["current"], 0)
        p = lib.memlake_malloc(3 * MiB, device, None)
        self.assertIsNotNone(p, _native.last_error())
        ctypes.memset(p, 0x5A, 3 * MiB)  # host backend memory is the process's own
        self.assertEqual(ctypes.string_at(p + 3 * MiB - 4, 4), b"\x5a" * 4)
        s = memlake.stats(device)
        self.assertEqual(s["requested_bytes"]["current"], 3 * MiB)
        self.assertGreaterEqual(s["reserved_bytes"]["current"], 3 * MiB)
        self.assertEqual(s["allocs"], 1)
        lib.memlake_free(p, 3 * MiB, device, None)
        self.assertEqual(_native.last_error(), "")
        memlake.empty_cache(device)
        s = memlake.stats(device)
        self.assertEqual(s["reserved_bytes"]["current"], 0)
        memlake.reset_peak_stats(device)
        self.assertEqual(memlake.stats(device)["reserved_bytes"]["peak"], 0)

    def test_out_of_memory_returns_null_with_the_report(self):
        lib = _native.load()
        p = lib.memlake_malloc(1 << 30, 6, None)  # capacity is 256 MiB
        self.assertIsNone(p)
        self.assertIn("out of memory", _native.last_error())
        q = lib.memlake_malloc(MiB, 6, None)
        self.assertIsNotNone(q, _native.last_error())
        lib.memlake_free(q, MiB, 6, None)

    def test_bad_device_is_a_value_error(self):
        with self.assertRaises(ValueError) as e:
            memlake.stats(64)
        self.assertIn("bad device 64", str(e.exception))


if __name__ == "__main__":
    unittest.main()
