"""What the package's tests share: which memlake they test, the environment
their child processes get, and an exit status that tells ctest when every
case was skipped.

The memlake tested is the one `import memlake` finds (an installed package,
or python/ through PYTHONPATH as ctest sets it); without either, the source
tree's python/ next to these tests.
"""

import os
import sys
import unittest
from pathlib import Path

TESTS_DIR = Path(__file__).resolve().parent
SOURCE_PYTHON_DIR = TESTS_DIR.parent
FAKE_TORCH_DIR = TESTS_DIR / "fake_torch"
NO_TORCH_DIR = TESTS_DIR / "no_torch"

# ctest's SKIP_RETURN_CODE for these scripts (the automake convention).
EXIT_ALL_SKIPPED = 77

try:
    import memlake  # noqa: F401
except ImportError:
    sys.path.insert(0, str(SOURCE_PYTHON_DIR))
    import memlake  # noqa: F401

PACKAGE_PARENT = Path(memlake.__file__).resolve().parent.parent
# memlake.pth: the one pip installed beside the package, else the source's.
HOOK_FILE = PACKAGE_PARENT / "memlake.pth"
if not HOOK_FILE.is_file():
    HOOK_FILE = SOURCE_PYTHON_DIR / "memlake.pth"


def child_env(extra_paths=(), **variables):
    """The environment of a child Python process that imports the same
    memlake as this one, with `extra_paths` first on its path."""
    env = dict(os.environ)
    paths = [str(p) for p in extra_paths] + [str(PACKAGE_PARENT)]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    for key, value in variables.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def main():
    """unittest.main(), exiting with EXIT_ALL_SKIPPED when every case that ran
    was skipped, so that ctest reports the script as skipped, not passed."""
    program = unittest.main(exit=False)
    result = program.result
    if not result.wasSuccessful():
        sys.exit(1)
    if result.testsRun > 0 and len(result.skipped) == result.testsRun:
        sys.exit(EXIT_ALL_SKIPPED)
    sys.exit(0)
