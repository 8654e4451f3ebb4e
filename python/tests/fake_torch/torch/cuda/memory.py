"""torch.cuda.memory of the stand-in: CUDAPluggableAllocator resolves the
functions it is given in the library, as PyTorch does, and
change_current_allocator refuses once the allocator has started."""

import ctypes

current_allocator = None
started = False


def _address(lib, name):
    return ctypes.cast(getattr(lib, name), ctypes.c_void_p).value


class _Hooks:
    def __init__(self):
        self.record_stream_fn = None
        self.reset_fn = None
        self.memory_fraction_fn = None
        self.begin_allocate_to_pool_fn = None
        self.end_allocate_to_pool_fn = None
        self.release_pool_fn = None

    def set_begin_allocate_to_pool(self, address):
        self.begin_allocate_to_pool_fn = address

    def set_end_allocate_to_pool_fn(self, address):
        self.end_allocate_to_pool_fn = address

    def set_release_pool(self, address):
        self.release_pool_fn = address

    def set_record_stream_fn(self, address):
        self.record_stream_fn = address

    def set_reset_fn(self, address):
        self.reset_fn = address

    def set_memory_fraction_fn(self, address):
        self.memory_fraction_fn = address


class CUDAPluggableAllocator:
    def __init__(self, path_to_so_file, alloc_fn_name, free_fn_name):
        lib = ctypes.CDLL(path_to_so_file)
        self.path = path_to_so_file
        self.alloc_fn_name = alloc_fn_name
        self.free_fn_name = free_fn_name
        self.alloc_fn = _address(lib, alloc_fn_name)
        self.free_fn = _address(lib, free_fn_name)
        self._hooks = _Hooks()

    def allocator(self):
        return self._hooks


def change_current_allocator(allocator):
    global current_allocator
    if started:
        raise RuntimeError("Can't swap an already initialized allocator")
    current_allocator = allocator
