// memlake::cuda_resource: a memlake::Allocator as a CCCL memory resource
// (cuda::mr), header-only. It satisfies
//   cuda::mr::resource_with<cuda_resource, cuda::mr::device_accessible>
// and the stream-ordered concept under both generations of CCCL names:
//   CCCL >= 3.1, RMM 26: allocate(stream, bytes, align) / deallocate(stream, p, bytes, align)
//                        and allocate_sync / deallocate_sync;
//   CCCL 3.0 (CUDA 13.0): allocate(bytes, align) / deallocate(p, bytes, align)
//                        and allocate_async / deallocate_async(..., stream).
//
//   memlake::Allocator lake(memlake::Config::parse("backend:cuda"));
//   memlake::cuda_resource mr(lake);
//   void* p = mr.allocate(cuda::stream_ref{stream}, 1 << 20);
//   mr.deallocate(cuda::stream_ref{stream}, p, 1 << 20);
//
// It is a value: copies refer to the same Allocator and compare equal, so it
// goes into cuda::mr::resource_ref and any_resource (where CCCL has it) and
// serves as an upstream. The Allocator must outlive every copy.
//
// Stream order is memlake's: a block is usable on the stream it was
// allocated on at once, and a block freed on a stream is reused on other
// streams only after that stream's work up to the free (or behind a
// GPU-side wait). Blocks start on 512-byte boundaries; a larger alignment is
// refused with memlake::misuse. deallocate is noexcept, as CCCL requires: a
// bad free is reported on stderr and counted in misuse_errors, and nothing
// changes.
#pragma once

// CCCL 3.0 declares cuda::mr only with this defined.
#ifndef LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE
#define LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE
#endif

#include <cuda_runtime_api.h>
#include <cuda/memory_resource>
#include <cuda/stream_ref>

#include <cstddef>
#include <cstdio>
#include <exception>
#include <string>

#include "memlake/allocator.hpp"
#include "memlake/errors.hpp"

namespace memlake {

class cuda_resource {
 public:
  // Every block memlake hands out starts at a multiple of this.
  static constexpr std::size_t alignment = 512;

  explicit cuda_resource(Allocator& allocator) noexcept : allocator_(&allocator) {}

  // ---- stream-ordered -------------------------------------------------------

  // Usable on `stream` at once; throws memlake::out_of_memory (with memlake's
  // report) when the request cannot be served.
  void* allocate(cuda::stream_ref stream, std::size_t bytes, std::size_t align = alignment) {
    check_alignment(align);
    return allocator_->allocate(bytes, stream.get());
  }

  // Work queued on `stream` before this call may still use the block.
  void deallocate(cuda::stream_ref stream, void* ptr, std::size_t bytes,
                  std::size_t align = alignment) noexcept {
    (void)align;
    release(ptr, bytes, stream.get());
  }

  // ---- synchronous ----------------------------------------------------------

  // Usable on every stream and device-wide when this returns: the block is
  // allocated in the order of the device's default stream (which also waits,
  // GPU-side, for any stream the block comes from), then that stream is
  // synchronized.
  void* allocate_sync(std::size_t bytes, std::size_t align = alignment) {
    check_alignment(align);
    void* ptr = allocator_->allocate(bytes, nullptr);
    const cudaError_t e = synchronize_default_stream();
    if (e != cudaSuccess) {
      release(ptr, bytes, nullptr);
      throw error(std::string("memlake::cuda_resource::allocate_sync: synchronizing the default "
                              "stream failed: ") +
                  cudaGetErrorString(e));
    }
    return ptr;
  }

  // No work may use the block any more (CCCL's rule for synchronous frees);
  // it is free for every stream at once.
  void deallocate_sync(void* ptr, std::size_t bytes, std::size_t align = alignment) noexcept {
    (void)align;
    release(ptr, bytes, nullptr);
  }

  // ---- the CCCL 3.0 names ---------------------------------------------------

  void* allocate(std::size_t bytes, std::size_t align) { return allocate_sync(bytes, align); }
  void deallocate(void* ptr, std::size_t bytes, std::size_t align) noexcept {
    deallocate_sync(ptr, bytes, align);
  }
  void* allocate_async(std::size_t bytes, std::size_t align, cuda::stream_ref stream) {
    return allocate(stream, bytes, align);
  }
  void deallocate_async(void* ptr, std::size_t bytes, std::size_t align,
                        cuda::stream_ref stream) noexcept {
    deallocate(stream, ptr, bytes, align);
  }

  // ---- value semantics ------------------------------------------------------

  bool operator==(const cuda_resource& other) const noexcept {
    return allocator_ == other.allocator_;
  }
  bool operator!=(const cuda_resource& other) const noexcept { return !(*this == other); }

  Allocator& allocator() const noexcept { return *allocator_; }

  friend void get_property(const cuda_resource&, cuda::mr::device_accessible) noexcept {}

 private:
  static void check_alignment(std::size_t align) {
    if (align == 0 || (align & (align - 1)) != 0 || align > alignment) {
      throw misuse("memlake::cuda_resource: alignment " + std::to_string(align) +
                   " is not supported (a power of two up to " + std::to_string(alignment) +
                   " bytes, the alignment of every memlake block)");
    }
  }

  void release(void* ptr, std::size_t bytes, Stream stream) noexcept {
    try {
      allocator_->deallocate(ptr, bytes, stream);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "memlake::cuda_resource: deallocate: %s\n", e.what());
    }
  }

  // The legacy default stream of the allocator's device: the stream memlake
  // orders a nullptr stream on, whatever default-stream mode this file is
  // compiled with.
  cudaError_t synchronize_default_stream() const noexcept {
    int current = 0;
    cudaError_t e = cudaGetDevice(&current);
    if (e != cudaSuccess) return e;
    const int device = allocator_->device();
    if (device != current && (e = cudaSetDevice(device)) != cudaSuccess) return e;
    e = cudaStreamSynchronize(cudaStreamLegacy);
    if (device != current) {
      const cudaError_t restored = cudaSetDevice(current);
      if (e == cudaSuccess) e = restored;
    }
    return e;
  }

  Allocator* allocator_;
};

}  // namespace memlake
