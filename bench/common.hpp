// Shared pieces of memlake's microbenchmarks (Google Benchmark). Every
// benchmark is named "<operation>/<allocator>/<argument>", where allocator is
// memlake (CudaBackend), memlake_host (HostBackend), cuda_async
// (cudaMallocAsync on a pool that keeps all freed memory) or cuda_malloc
// (cudaMalloc/cudaFree); tools/device/bench_ratios.py reads that shape from
// the JSON output. GPU benchmarks skip with "no GPU" where none is present,
// so the binary runs everywhere.
#pragma once

#include <cstdlib>
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>

#include "backend/backend.hpp"
#include "memlake/allocator.hpp"
#include "memlake/config.hpp"
#include "memlake/stats.hpp"

#if MEMLAKE_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "backend/cuda/cuda_backend.hpp"
#endif

namespace memlake::bench {

inline constexpr std::size_t KiB = std::size_t{1} << 10;
inline constexpr std::size_t MiB = std::size_t{1} << 20;
inline constexpr std::size_t GiB = std::size_t{1} << 30;

inline bool have_gpu() {
#if MEMLAKE_HAVE_CUDA
  static const bool yes = CudaBackend::device_count() > 0;
  return yes;
#else
  return false;
#endif
}

// True when the benchmark may run; else it is marked skipped ("no GPU").
inline bool need_gpu(benchmark::State& state) {
  if (have_gpu()) return true;
  state.SkipWithError("no GPU");
  return false;
}

inline void fail(benchmark::State& state, const std::string& why) {
  state.SkipWithError(why.c_str());
}

using Clock = std::chrono::steady_clock;
inline double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// A config of memlake over the given backend with the defaults otherwise.
// The defaults, with MEMLAKE_BENCH_CONF ("key:value,...") on top, so a run
// can compare settings.
inline Config memlake_config(BackendKind backend, std::size_t max_chunk = 2 * MiB) {
  Config c;
  if (const char* conf = std::getenv("MEMLAKE_BENCH_CONF")) c.apply(conf);
  c.backend = backend;
  c.max_chunk = max_chunk;
  return c;
}

// Waits for the work queued on one of the allocator's streams (outside the
// timed part of a benchmark); false, with the benchmark failed, on error.
inline bool synchronize(benchmark::State& state, Allocator& a, Stream s) {
  if (a.backend().stream_synchronize(s) == Status::ok) return true;
  fail(state, "stream_synchronize: " + a.backend().last_error());
  return false;
}

// Per-iteration average of a stats counter's growth.
inline benchmark::Counter per_iteration(std::int64_t delta) {
  return benchmark::Counter(static_cast<double>(delta), benchmark::Counter::kAvgIterations);
}

#if MEMLAKE_HAVE_CUDA
// False (and the benchmark marked failed) when `e` is an error.
inline bool cuda_ok(benchmark::State& state, cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  fail(state, std::string(what) + ": " + cudaGetErrorString(e));
  return false;
}

// The device's default pool, set to keep every freed byte cached
// (cudaMemPoolAttrReleaseThreshold = UINT64_MAX): cudaMallocAsync at its best.
inline cudaError_t caching_pool(cudaMemPool_t* pool) {
  cudaError_t e = cudaDeviceGetDefaultMemPool(pool, 0);
  if (e != cudaSuccess) return e;
  std::uint64_t threshold = UINT64_MAX;
  return cudaMemPoolSetAttribute(*pool, cudaMemPoolAttrReleaseThreshold, &threshold);
}

// A non-blocking stream for the CUDA baselines.
class CudaStream {
 public:
  CudaStream() { error_ = cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking); }
  ~CudaStream() {
    if (error_ == cudaSuccess) {
      cudaStreamSynchronize(stream_);
      cudaStreamDestroy(stream_);
    }
  }
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;
  cudaError_t error() const { return error_; }
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
  cudaError_t error_ = cudaSuccess;
};
#endif

}  // namespace memlake::bench
