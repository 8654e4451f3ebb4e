/* The functions python/memlake/torch.py gives PyTorch's CUDAPluggableAllocator
 * (the allocator functions, and its record_stream, empty_cache and memory
 * fraction hooks). They behave like memlake.h's functions, except that
 * errors are C++ exceptions (memlake::error, a std::runtime_error): PyTorch
 * calls them from C++ and turns an exception into a Python RuntimeError
 * carrying memlake's message, where a NULL pointer would crash later.
 * memlake_torch_free never throws (PyTorch frees from destructors): it
 * reports an error on stderr. Not for C callers. */
#ifndef MEMLAKE_TORCH_HOOKS_H_
#define MEMLAKE_TORCH_HOOKS_H_

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

void* memlake_torch_malloc(size_t size, int device, void* stream);
void memlake_torch_free(void* ptr, size_t size, int device, void* stream);
/* The device is the one whose allocator holds ptr. */
void memlake_torch_record_stream(void* ptr, void* stream);
/* Every device's allocator. */
void memlake_torch_empty_cache(void);
/* torch.cuda.set_per_process_memory_fraction: before the device's first
 * allocation only. */
void memlake_torch_set_memory_fraction(double fraction, int device);

#ifdef __cplusplus
}
#endif

#endif /* MEMLAKE_TORCH_HOOKS_H_ */
