"""A stand-in for PyTorch with only the calls memlake.torch makes, for tests
on machines without torch: it records what memlake asks of it (which
library and functions it plugs in, and when). test_torch_gpu.py checks the
same paths against the real PyTorch on a GPU."""

from . import cuda  # noqa: F401

__version__ = "0.0+fake"

OutOfMemoryError = cuda.OutOfMemoryError


class device:
    def __init__(self, spec):
        kind, _, index = str(spec).partition(":")
        self.type = kind
        self.index = int(index) if index else None
