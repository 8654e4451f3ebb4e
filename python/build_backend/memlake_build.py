"""The PEP 517 build backend of pyproject.toml: `pip install .` builds
libmemlake.so with CMake and packs a wheel holding

    memlake/*.py             the package (python/memlake/)
    memlake/*.cpp            sources the package compiles on first use
                             (_torch_allocator.cpp, against the installed torch)
    memlake/libmemlake.so    the library, found by memlake._native
    memlake.pth              the MEMLAKE_ENABLE start-up hook (python/memlake.pth)
    memlake-<v>.dist-info/   metadata, the memlake-run script, RECORD

It is plain Python with nothing to download, so pip installs the package on
a machine without network access. The version is the one of
CMakeLists.txt's project(). Settings (`pip install . -C key=value`, or the
environment):

    build-dir   MEMLAKE_BUILD_DIR    CMake build folder to use and keep
                                     (default: a temporary one)
    cmake-args  MEMLAKE_CMAKE_ARGS   more CMake arguments, e.g.
                                     "-DMEMLAKE_CUDA=OFF"
"""

import base64
import hashlib
import io
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "python" / "memlake"
STARTUP_HOOK = ROOT / "python" / "memlake.pth"


# ---- metadata -----------------------------------------------------------------

def _version():
    text = (ROOT / "CMakeLists.txt").read_text()
    m = re.search(r"project\(\s*memlake\s+VERSION\s+([0-9][0-9.]*)", text)
    if m is None:
        raise RuntimeError("memlake: no project(memlake VERSION ...) in CMakeLists.txt")
    return m.group(1)


def _read_toml(path):
    try:
        import tomllib
    except ImportError:
        try:
            import tomli as tomllib
        except ImportError:
            return _read_simple_toml(path.read_text())
    with open(path, "rb") as f:
        return tomllib.load(f)


def _read_simple_toml(text):
    """The subset pyproject.toml uses (tables, strings, lists of strings on
    one line), for Python versions without tomllib."""
    data, table = {}, {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            table = data
            for key in line.strip("[]").split("."):
                table = table.setdefault(key, {})
            continue
        key, value = (x.strip() for x in line.split("=", 1))
        key = key.strip('"')
        if value.startswith("["):
            table[key] = re.findall(r'"([^"]*)"', value)
        else:
            table[key] = value.strip('"')
    return data


def _project():
    return _read_toml(ROOT / "pyproject.toml")["project"]


def _metadata_text():
    project = _project()
    lines = [
        "Metadata-Version: 2.1",
        "Name: %s" % project["name"],
        "Version: %s" % _version(),
        "Summary: %s" % project.get("description", ""),
    ]
    if "requires-python" in project:
        lines.append("Requires-Python: %s" % project["requires-python"])
    for extra, requirements in sorted(project.get("optional-dependencies", {}).items()):
        lines.append("Provides-Extra: %s" % extra)
        for r in requirements:
            lines.append('Requires-Dist: %s ; extra == "%s"' % (r, extra))
    readme = project.get("readme")
    body = ""
    if readme:
        lines.append("Description-Content-Type: text/markdown")
        body = "\n" + (ROOT / readme).read_text()
    return "\n".join(lines) + "\n" + body


def _entry_points_text():
    scripts = _project().get("scripts", {})
    if not scripts:
        return None
    return "[console_scripts]\n" + "".join("%s = %s\n" % kv for kv in sorted(scripts.items()))


def _dist_info_name():
    return "memlake-%s.dist-info" % _version()


def _wheel_tag():
    platform = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    return "py3-none-%s" % platform


def _dist_info_files():
    files = {
        "METADATA": _metadata_text().encode(),
        "WHEEL": ("Wheel-Version: 1.0\nGenerator: memlake_build\nRoot-Is-Purelib: false\n"
                  "Tag: %s\n" % _wheel_tag()).encode(),
        "top_level.txt": b"memlake\n",
    }
    entry_points = _entry_points_text()
    if entry_points:
        files["entry_points.txt"] = entry_points.encode()
    return files


# ---- the library --------------------------------------------------------------

def _setting(config_settings, key, variable):
    value = (config_settings or {}).get(key)
    if isinstance(value, list):
        value = " ".join(value)
    return value or os.environ.get(variable, "")


def _run(command):
    print("memlake_build: " + " ".join(shlex.quote(str(c)) for c in command), file=sys.stderr)
    try:
        subprocess.run([str(c) for c in command], check=True, stdout=sys.stderr)
    except FileNotFoundError:
        raise RuntimeError("memlake: building the package needs %s (CMake >= 3.25 and a C++20 "
                           "compiler; see README.md)" % command[0]) from None
    except subprocess.CalledProcessError as e:
        raise RuntimeError("memlake: %s failed with exit status %d (its output is above)"
                           % (" ".join(str(c) for c in command[:2]), e.returncode)) from None


def _build_library(config_settings):
    """Builds libmemlake.so (and nothing else) and returns its path."""
    build_dir = _setting(config_settings, "build-dir", "MEMLAKE_BUILD_DIR")
    build_dir = Path(build_dir).resolve() if build_dir else Path(tempfile.mkdtemp(
        prefix="memlake-build-"))
    configure = ["cmake", "-S", ROOT, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release",
                 "-DMEMLAKE_BUILD_TESTS=OFF", "-DMEMLAKE_BUILD_TOOLS=OFF",
                 "-DMEMLAKE_BUILD_BENCH=OFF"]
    if not (build_dir / "CMakeCache.txt").exists() and shutil.which("ninja"):
        configure += ["-G", "Ninja"]
    configure += shlex.split(_setting(config_settings, "cmake-args", "MEMLAKE_CMAKE_ARGS"))
    _run(configure)
    jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 1)
    _run(["cmake", "--build", build_dir, "--target", "memlake_shared", "-j", jobs])
    library = build_dir / "libmemlake.so"
    if not library.is_file():
        raise RuntimeError("memlake: the build left no %s" % library)
    return library


# ---- wheel --------------------------------------------------------------------

def _record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d" % (name, digest, len(data))


def _write_wheel(path, contents, executable):
    """contents: {archive name: bytes}; RECORD is added last."""
    dist_info = _dist_info_name()
    record = [_record_line(name, data) for name, data in contents.items()]
    record.append("%s/RECORD,," % dist_info)
    contents = dict(contents)
    contents["%s/RECORD" % dist_info] = ("\n".join(record) + "\n").encode()
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as wheel:
        for name, data in contents.items():
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = (0o755 if name in executable else 0o644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            wheel.writestr(info, data)


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    library = _build_library(config_settings)
    contents = {}
    for source in sorted(list(PACKAGE.glob("*.py")) + list(PACKAGE.glob("*.cpp"))):
        contents["memlake/%s" % source.name] = source.read_bytes()
    contents["memlake/libmemlake.so"] = library.read_bytes()
    contents["memlake.pth"] = STARTUP_HOOK.read_bytes()
    for name, data in _dist_info_files().items():
        contents["%s/%s" % (_dist_info_name(), name)] = data
    wheel_name = "memlake-%s-%s.whl" % (_version(), _wheel_tag())
    _write_wheel(Path(wheel_directory) / wheel_name, contents, {"memlake/libmemlake.so"})
    return wheel_name


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    target = Path(metadata_directory) / _dist_info_name()
    target.mkdir(parents=True, exist_ok=True)
    for name, data in _dist_info_files().items():
        (target / name).write_bytes(data)
    return target.name


def get_requires_for_build_wheel(config_settings=None):
    return []


# ---- sdist --------------------------------------------------------------------

def _source_files():
    """The files of the source tree: git's list in a checkout, else every file
    outside build folders."""
    if (ROOT / ".git").exists() and shutil.which("git"):
        listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z"], check=True,
                                capture_output=True).stdout.decode().split("\0")
        return sorted(f for f in listed if f and (ROOT / f).is_file())
    out = []
    for path in sorted(ROOT.rglob("*")):
        rel = path.relative_to(ROOT)
        if path.is_file() and not any(p.startswith(("build", ".git", "__pycache__"))
                                      for p in rel.parts):
            out.append(str(rel))
    return out


def build_sdist(sdist_directory, config_settings=None):
    base = "memlake-%s" % _version()
    name = base + ".tar.gz"
    with tarfile.open(Path(sdist_directory) / name, "w:gz", format=tarfile.PAX_FORMAT) as sdist:
        for rel in _source_files():
            sdist.add(ROOT / rel, arcname="%s/%s" % (base, rel), recursive=False)
        info = tarfile.TarInfo("%s/PKG-INFO" % base)
        data = _metadata_text().encode()
        info.size = len(data)
        info.mode = 0o644
        sdist.addfile(info, io.BytesIO(data))
    return name


def get_requires_for_build_sdist(config_settings=None):
    return []
