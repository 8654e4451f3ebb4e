"""torch.cuda of the stand-in: one device, index 0."""

from . import memory  # noqa: F401

_current = 0


class OutOfMemoryError(RuntimeError):
    """What PyTorch's CUDA allocator raises when it runs out of memory."""


def current_device():
    return _current


def set_device(index):
    global _current
    memory.started = True  # starts PyTorch's allocator, as the real one does
    _current = index


class graph:
    """torch.cuda.graph's arguments, kept: the stand-in captures nothing."""

    def __init__(self, cuda_graph, pool=None, stream=None, capture_error_mode="global"):
        self.cuda_graph = cuda_graph
        self.pool = pool
        self.capture_stream = stream
