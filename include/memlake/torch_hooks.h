/* The functions python/memlake/torch.py gives PyTorch's CUDAPluggableAllocator
 * (the allocator functions, and its record_stream, empty_cache, memory
 * fraction and CUDA graph pool hooks). They behave like memlake.h's functions, except that
 * errors are C++ exceptions (memlake::error, a std::runtime_error): PyTorch
 * calls them from C++ and turns an exception into a Python RuntimeError
 * carrying memlake's message, where a NULL pointer would crash later.
 * memlake_torch_free and memlake_torch_free_block never throw (PyTorch
 * frees from destructors): they report an error on stderr. Not for C callers. */
#ifndef MEMLAKE_TORCH_HOOKS_H_
#define MEMLAKE_TORCH_HOOKS_H_

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

void* memlake_torch_malloc(size_t size, int device, void* stream);
void memlake_torch_free(void* ptr, size_t size, int device, void* stream);
/* PyTorch's deleter, which has the pointer alone: frees the live block at
 * ptr, of whichever device holds it, on the stream it was allocated on.
 * Never throws: it reports an error on stderr. */
void memlake_torch_free_block(void* ptr);
/* The device is the one whose allocator holds ptr. */
void memlake_torch_record_stream(void* ptr, void* stream);
/* Every device's allocator. */
void memlake_torch_empty_cache(void);
/* torch.cuda.set_per_process_memory_fraction: before the device's first
 * allocation only. */
void memlake_torch_set_memory_fraction(double fraction, int device);

#ifdef __cplusplus
}

#include <functional>
#include <utility>

struct CUstream_st; /* cudaStream_t is CUstream_st* */

/* PyTorch's graph-pool hooks (CUDAPluggableAllocator's
 * set_begin_allocate_to_pool, set_end_allocate_to_pool_fn and
 * set_release_pool) with the exact parameter types PyTorch calls them with:
 * c10::cuda::MempoolId_t is std::pair<unsigned long long, unsigned long
 * long>, the filter a std::function of cudaStream_t. C linkage, so that
 * ctypes finds them by name. release never throws (PyTorch releases from
 * destructors): it reports an error on stderr. */
extern "C" {
void memlake_torch_begin_allocate_to_pool(int device,
                                          std::pair<unsigned long long, unsigned long long> pool,
                                          std::function<bool(CUstream_st*)> filter);
void memlake_torch_end_allocate_to_pool(int device,
                                        std::pair<unsigned long long, unsigned long long> pool);
void memlake_torch_release_pool(int device, std::pair<unsigned long long, unsigned long long> pool);
}
#endif

#endif /* MEMLAKE_TORCH_HOOKS_H_ */
