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
