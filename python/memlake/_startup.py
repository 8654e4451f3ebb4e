"""Switches PyTorch to memlake at interpreter start-up when MEMLAKE_ENABLE
is set, so a program runs on memlake without being edited:

    MEMLAKE_ENABLE=1 MEMLAKE_CONF=capacity_fraction:0.9 python train.py
    MEMLAKE_ENABLE=1 torchrun --nproc-per-node 8 train.py

pip installs memlake.pth beside the package; Python runs its one line at
every start-up. That line only reads MEMLAKE_ENABLE: unset or "0", nothing
else happens (nothing is imported). Otherwise it imports this module, which
puts a one-shot hook on the import of torch: right after torch has loaded,
memlake.torch.enable() runs, before the program's next line can create a
CUDA tensor or call torch.cuda.set_device(). A process that never imports
torch is left alone. Under torchrun every worker inherits the variable and
enables memlake for its own device.
"""

import importlib.abc
import importlib.util
import os
import sys

_ON = {"1", "true", "yes", "on"}
_OFF = {"", "0", "false", "no", "off"}


def requested(environ=None):
    """Whether MEMLAKE_ENABLE asks for memlake; ValueError for a value that is
    neither on nor off."""
    environ = os.environ if environ is None else environ
    value = environ.get("MEMLAKE_ENABLE", "").strip().lower()
    if value in _ON:
        return True
    if value in _OFF:
        return False
    raise ValueError("memlake: MEMLAKE_ENABLE=%r is not understood: 1 enables memlake for "
                     "PyTorch, 0 or unset leaves it off" % environ["MEMLAKE_ENABLE"])


def enable_now():
    """memlake.torch.enable() with the options of MEMLAKE_CONF; its failure is
    an error that says where the request came from."""
    try:
        import memlake.torch
        memlake.torch.enable()
    except Exception as e:
        raise RuntimeError("memlake: MEMLAKE_ENABLE is set, but memlake cannot be enabled: %s"
                           % e) from e


class _EnableAfterTorch(importlib.abc.MetaPathFinder):
    """Finds torch the usual way and makes its loader call enable_now() once
    torch's module has run."""

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        run_module = spec.loader.exec_module

        def exec_module(module):
            run_module(module)
            enable_now()

        spec.loader.exec_module = exec_module
        return spec


def install():
    """Enables memlake now if torch is loaded, else as soon as it is."""
    if "torch" in sys.modules:
        enable_now()
    elif not any(isinstance(f, _EnableAfterTorch) for f in sys.meta_path):
        sys.meta_path.insert(0, _EnableAfterTorch())


def install_from_env():
    """What memlake.pth runs: install() if MEMLAKE_ENABLE asks for it. A value
    that is neither on nor off ends the process (exit status 2) with a message
    rather than running the program without memlake; an exception here would
    make site.py print a traceback and go on."""
    try:
        if requested():
            install()
    except ValueError as e:
        sys.stderr.write("%s\n" % e)
        sys.stderr.flush()
        os._exit(2)
