"""The HTML report in headless Chromium (Debian's chromium package; .ci/run
installs it): memlake-replay --html on a bundled trace and memlake-report on
the replay's --timeline file each make a page that

- loads with no console message and no script error (the page also counts
  its own errors into #report-status, which --dump-dom shows),
- draws: #report-status says so, with the four legend items and the number
  of allocations the timeline holds,
- looks drawn in a screenshot (--screenshot, decoded here with zlib): the
  plot area is not blank and shows the live and reserved lines' colours, and
  the legend shows their swatches.

A page whose data is broken must be seen as failed, so these checks can
fail. Without chromium every case is skipped (exit 77, which ctest reports
as skipped), unless MEMLAKE_REQUIRE_CHROMIUM=1 (.ci/run's stage) makes that
a failure.

usage: test_html_report.py --replay MEMLAKE_REPLAY --report MEMLAKE_REPORT --trace TRACE
"""

import argparse
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest
import zlib
from pathlib import Path

EXIT_ALL_SKIPPED = 77
WINDOW = (1200, 900)
LIVE = (0x1f, 0x77, 0xb4)
RESERVED = (0x2c, 0xa0, 0x2c)

ARGS = None


def chromium():
    for name in (os.environ.get("MEMLAKE_CHROMIUM"), "chromium", "chromium-browser"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def run_chromium(page, *extra):
    profile = tempfile.mkdtemp(prefix="memlake-chromium-")
    try:
        args = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                "--no-first-run", "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--user-data-dir=" + profile, "--hide-scrollbars",
                "--force-device-scale-factor=1", "--window-size=%d,%d" % WINDOW,
                "--virtual-time-budget=20000", "--enable-logging=stderr", "--v=0", *extra,
                Path(page).resolve().as_uri()]
        return subprocess.run(args, capture_output=True, text=True, timeout=300)
    finally:
        shutil.rmtree(profile, ignore_errors=True)


def page_status(page):
    """The attributes of #report-status after the page ran, and the console lines."""
    r = run_chromium(page, "--dump-dom")
    if r.returncode != 0:
        raise AssertionError("chromium failed: " + r.stderr[-2000:])
    m = re.search(r'<div id="report-status"([^>]*)>', r.stdout)
    if not m:
        raise AssertionError("no #report-status in the page")
    attrs = dict(re.findall(r'data-([a-z-]+)="([^"]*)"', m.group(1)))
    errors = re.search(r'<div id="report-errors">(.*?)</div>', r.stdout, re.S)
    console = [l for l in r.stderr.splitlines() if "CONSOLE" in l]
    return attrs, errors.group(1) if errors else "", console


def read_png(path):
    """(width, height, rows of RGB tuples) of an 8-bit RGB or RGBA PNG."""
    data = Path(path).read_bytes()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise AssertionError("not a PNG")
    pos, idat, width = 8, b"", None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            width, height, depth, color = struct.unpack(">IIBB", body[:10])
            if depth != 8 or color not in (2, 6) or body[12] != 0:
                raise AssertionError("PNG: only 8-bit RGB(A), not interlaced")
            channels = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += body
    raw = zlib.decompress(idat)
    stride = width * channels
    rows, prev = [], bytearray(stride)
    for y in range(height):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        if f == 1:
            for i in range(channels, stride):
                line[i] = (line[i] + line[i - channels]) & 0xFF
        elif f == 2:
            line = bytearray((a + b) & 0xFF for a, b in zip(line, prev))
        elif f == 3:
            for i in range(stride):
                left = line[i - channels] if i >= channels else 0
                line[i] = (line[i] + ((left + prev[i]) >> 1)) & 0xFF
        elif f == 4:
            for i in range(stride):
                a = line[i - channels] if i >= channels else 0
                b = prev[i]
                c = prev[i - channels] if i >= channels else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        elif f != 0:
            raise AssertionError("PNG: bad filter %d" % f)
        rows.append(line)
        prev = line
    return width, height, channels, rows


def pixels(png, rect):
    width, height, channels, rows = png
    x0, y0, w, h = rect
    for y in range(max(y0, 0), min(y0 + h, height)):
        row = rows[y]
        for x in range(max(x0, 0), min(x0 + w, width)):
            i = x * channels
            yield row[i], row[i + 1], row[i + 2]


def near(p, color, tolerance=40):
    return sum(abs(a - b) for a, b in zip(p, color)) <= tolerance


class Report(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if chromium() is None:
            if os.environ.get("MEMLAKE_REQUIRE_CHROMIUM") == "1":
                raise AssertionError("chromium is not installed and MEMLAKE_REQUIRE_CHROMIUM=1")
            raise unittest.SkipTest("chromium is not installed (apt-get install chromium)")
        cls.tmp = Path(tempfile.mkdtemp(prefix="memlake-report-"))
        cls.replay_html = cls.tmp / "replay.html"
        cls.timeline = cls.tmp / "timeline.json"
        r = subprocess.run([ARGS.replay, ARGS.trace, "--html", str(cls.replay_html), "--timeline",
                            str(cls.timeline), "--no-progress"], capture_output=True, text=True,
                           timeout=600)
        if r.returncode != 0:
            raise AssertionError("memlake-replay failed: " + r.stderr)
        cls.report_html = cls.tmp / "report.html"
        r = subprocess.run([ARGS.report, str(cls.timeline), "-o", str(cls.report_html)],
                           capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            raise AssertionError("memlake-report failed: " + r.stderr)
        events = json.loads(cls.timeline.read_text())["traceEvents"]
        cls.allocations = sum(1 for e in events if e["ph"] == "X" and e.get("cat") == "alloc")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def check_page(self, page):
        attrs, errors, console = page_status(page)
        self.assertEqual(console, [], "console messages")
        self.assertEqual(errors.strip(), "")
        self.assertEqual(attrs.get("errors"), "0")
        self.assertEqual(attrs.get("state"), "drawn")
        self.assertEqual(attrs.get("legend-items"), "4")
        self.assertEqual(int(attrs.get("allocations", "-1")), self.allocations)
        self.assertGreater(int(attrs.get("points", "0")), 100)
        plot = [int(v) for v in attrs["plot"].split(",")]
        legend = [int(v) for v in attrs["legend"].split(",")]
        self.assertGreater(plot[2], 300)
        self.assertGreater(plot[3], 200)
        self.assertLess(plot[1] + plot[3], WINDOW[1], "the plot is in the screenshot")

        shot = self.tmp / (Path(page).stem + ".png")
        r = run_chromium(page, "--screenshot=" + str(shot))
        self.assertEqual(r.returncode, 0, r.stderr[-2000:])
        png = read_png(shot)
        self.assertEqual(png[:2], WINDOW)
        inner = [plot[0] + 2, plot[1] + 2, plot[2] - 4, plot[3] - 4]
        px = list(pixels(png, inner))
        drawn = sum(1 for p in px if p != (255, 255, 255))
        self.assertGreater(drawn / len(px), 0.02, "the plot area is blank")
        self.assertGreater(len(set(px)), 10, "the plot area has almost no colours")
        self.assertGreater(sum(1 for p in px if near(p, LIVE)), 50, "no live line")
        self.assertGreater(sum(1 for p in px if near(p, RESERVED)), 50, "no reserved line")
        swatches = list(pixels(png, legend))
        self.assertGreater(sum(1 for p in swatches if near(p, LIVE, 10)), 20, "no live swatch")
        self.assertGreater(sum(1 for p in swatches if near(p, RESERVED, 10)), 20,
                           "no reserved swatch")

    def test_replay_html(self):
        self.check_page(self.replay_html)

    def test_report_from_the_timeline_file(self):
        self.check_page(self.report_html)

    def test_a_broken_page_is_seen_as_failed(self):
        bad = self.tmp / "bad.json"
        bad.write_text('{"traceEvents": {"not": "a list"}}')
        page = self.tmp / "bad.html"
        r = subprocess.run([ARGS.report, str(bad), "-o", str(page)], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        attrs, errors, console = page_status(page)
        self.assertEqual(attrs.get("state"), "failed")
        self.assertEqual(attrs.get("errors"), "1")
        self.assertIn("no traceEvents", errors)


def main():
    global ARGS
    parser = argparse.ArgumentParser()
    parser.add_argument("--replay", required=True)
    parser.add_argument("--report", required=True)
    parser.add_argument("--trace", required=True)
    ARGS, rest = parser.parse_known_args()
    program = unittest.main(argv=[sys.argv[0]] + rest, exit=False)
    result = program.result
    if not result.wasSuccessful():
        sys.exit(1)
    if result.testsRun > 0 and len(result.skipped) == result.testsRun:
        sys.exit(EXIT_ALL_SKIPPED)
    if result.testsRun == 0 and chromium() is None:
        sys.exit(EXIT_ALL_SKIPPED)


if __name__ == "__main__":
    main()
