// Cached allocation: one allocate + deallocate pair of the same size on one
// stream, after a warm-up, so every allocator serves it from memory it holds
// already (cudaMalloc/cudaFree cache nothing and show the cost of the
// driver). Real time per pair, in ns. memlake_host runs memlake over the
// HostBackend and needs no GPU.
#include <exception>

#include "common.hpp"

namespace memlake::bench {
namespace {

void cached_memlake(benchmark::State& state, BackendKind backend) {
  if (backend == BackendKind::cuda && !need_gpu(state)) return;
  const auto bytes = static_cast<std::size_t>(state.range(0));
  try {
    Allocator a(memlake_config(backend));
    Stream s = a.create_stream();
    a.deallocate(a.allocate(bytes, s), bytes, s);  // warm-up: the block exists now
    const Stats s0 = a.stats();
    for (auto _ : state) {
      void* p = a.allocate(bytes, s);
      benchmark::DoNotOptimize(p);
      a.deallocate(p, bytes, s);
    }
    const Stats s1 = a.stats();
    state.counters["remembered"] =
        per_iteration(s1.rung_remembered.current - s0.rung_remembered.current);
    state.counters["vmm_calls"] =
        per_iteration(s1.critical_path_vmm_calls.current - s0.critical_path_vmm_calls.current);
    a.destroy_stream(s);
  } catch (const std::exception& e) {
    fail(state, e.what());
  }
}

#if MEMLAKE_HAVE_CUDA
void cached_cuda_async(benchmark::State& state) {
  if (!need_gpu(state)) return;
  const auto bytes = static_cast<std::size_t>(state.range(0));
  cudaMemPool_t pool = nullptr;
  if (!cuda_ok(state, caching_pool(&pool), "caching pool")) return;
  CudaStream stream;
  if (!cuda_ok(state, stream.error(), "cudaStreamCreate")) return;
  const cudaStream_t s = stream.get();
  void* p = nullptr;
  if (!cuda_ok(state, cudaMallocAsync(&p, bytes, s), "cudaMallocAsync")) return;
  if (!cuda_ok(state, cudaFreeAsync(p, s), "cudaFreeAsync")) return;
  if (!cuda_ok(state, cudaStreamSynchronize(s), "cudaStreamSynchronize")) return;
  for (auto _ : state) {
    const cudaError_t e1 = cudaMallocAsync(&p, bytes, s);
    benchmark::DoNotOptimize(p);
    const cudaError_t e2 = cudaFreeAsync(p, s);
    if (e1 != cudaSuccess || e2 != cudaSuccess) {
      cuda_ok(state, e1 != cudaSuccess ? e1 : e2, "cudaMallocAsync/cudaFreeAsync");
      break;
    }
  }
  cuda_ok(state, cudaStreamSynchronize(s), "cudaStreamSynchronize");
  cudaMemPoolTrimTo(pool, 0);
}

void cached_cuda_malloc(benchmark::State& state) {
  if (!need_gpu(state)) return;
  const auto bytes = static_cast<std::size_t>(state.range(0));
  void* p = nullptr;
  if (!cuda_ok(state, cudaMalloc(&p, bytes), "cudaMalloc")) return;
  if (!cuda_ok(state, cudaFree(p), "cudaFree")) return;
  for (auto _ : state) {
    const cudaError_t e1 = cudaMalloc(&p, bytes);
    benchmark::DoNotOptimize(p);
    const cudaError_t e2 = cudaFree(p);
    if (e1 != cudaSuccess || e2 != cudaSuccess) {
      cuda_ok(state, e1 != cudaSuccess ? e1 : e2, "cudaMalloc/cudaFree");
      break;
    }
  }
}
#else
void cached_cuda_async(benchmark::State& state) {
  need_gpu(state);
}
void cached_cuda_malloc(benchmark::State& state) {
  need_gpu(state);
}
#endif

void sizes(benchmark::internal::Benchmark* b) {
  for (std::size_t s : {4 * KiB, 1 * MiB, 64 * MiB, 1 * GiB}) b->Arg(static_cast<std::int64_t>(s));
  b->UseRealTime()->Unit(benchmark::kNanosecond)->MinTime(0.2);
}

[[maybe_unused]] const bool registered = [] {
  sizes(benchmark::RegisterBenchmark("cached/memlake", cached_memlake, BackendKind::cuda));
  sizes(benchmark::RegisterBenchmark("cached/cuda_async", cached_cuda_async));
  sizes(benchmark::RegisterBenchmark("cached/cuda_malloc", cached_cuda_malloc));
  sizes(benchmark::RegisterBenchmark("cached/memlake_host", cached_memlake, BackendKind::host));
  // A fixed number of pairs, for callgrind: the instructions of a run of
  // 101 pairs less those of a run of 1 are those of 100 pairs (the warm-up,
  // which makes the block's memory, counts in both).
  for (const int pairs : {1, 101}) {
    benchmark::RegisterBenchmark("cached_count/memlake_host", cached_memlake, BackendKind::host)
        ->Arg(static_cast<std::int64_t>(4 * KiB))
        ->Arg(static_cast<std::int64_t>(1 * GiB))
        ->Iterations(pairs);
  }
  return true;
}();

}  // namespace
}  // namespace memlake::bench
