// The "kernels" of graph_step, enqueued on a stream (so a capture records
// them): on the HostBackend host functions, on CUDA kernels
// (cuda_work.cu). Their arithmetic is 32-bit integer, so the host computes
// the expected results bit for bit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "memlake/allocator.hpp"

#if defined(__CUDACC__)
#define GRAPH_STEP_HD __host__ __device__
#else
#define GRAPH_STEP_HD
#endif

namespace graph_step {

GRAPH_STEP_HD inline std::uint32_t word(std::uint32_t x, std::uint32_t i) {
  x = x * 0x9E3779B9u + i;
  x ^= x >> 16;
  x *= 0x85EBCA6Bu;
  x ^= x >> 13;
  x *= 0xC2B2AE35u;
  x ^= x >> 16;
  return x;
}

class Work {
 public:
  virtual ~Work() = default;
  // A layer: dst[i] = word(src[i % src_words] ^ key, i) for i < dst_words.
  virtual void layer(memlake::Stream s, const std::uint32_t* src, std::size_t src_words,
                     std::uint32_t* dst, std::size_t dst_words, std::uint32_t key) = 0;
  // A gradient: acc[j] += src[i] for every i with i % acc_words == j.
  virtual void accumulate(memlake::Stream s, const std::uint32_t* src, std::size_t words,
                          std::uint32_t* acc, std::size_t acc_words) = 0;
  // Copies device memory to the host (after the stream is synchronized).
  virtual void read(const void* p, void* out, std::size_t bytes) = 0;
};

std::unique_ptr<Work> host_work(memlake::Backend& backend);
#if defined(MEMLAKE_SAMPLE_KERNELS)
std::unique_ptr<Work> cuda_work();
// The same steps, captured with cudaMallocAsync/cudaFreeAsync for their
// temporaries (graph memory nodes), one graph per bucket, each launched
// once: the device's graph memory reserved afterwards, in bytes.
std::size_t graph_memory_nodes_reserved(const std::vector<std::size_t>& tokens, std::size_t hidden);
#endif

}  // namespace graph_step
