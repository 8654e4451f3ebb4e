// Allocation that needs new memory: before each timed allocation the
// allocator holds nothing cached (memlake: empty_cache; cudaMallocAsync: the
// pool trimmed to 0; cudaMalloc never caches), so the call creates and maps
// physical memory. Only the allocating call is timed (manual time, in us);
// the free and the emptying run outside the measurement. memlake runs with
// its default 2 MiB chunks (one handle per 2 MiB: per-handle driver costs),
// memlake_1g_chunks with max_chunk 1 GiB (one handle per request here).
#include <exception>

#include "common.hpp"

namespace memlake::bench {
namespace {

#if MEMLAKE_HAVE_CUDA
void new_memlake(benchmark::State& state, std::size_t max_chunk) {
  if (!need_gpu(state)) return;
  const auto bytes = static_cast<std::size_t>(state.range(0));
  try {
    Allocator a(memlake_config(BackendKind::cuda, max_chunk));
    Stream s = a.create_stream();
    const auto cs = static_cast<cudaStream_t>(s);
    a.deallocate(a.allocate(bytes, s), bytes, s);  // warm-up of the driver paths
    const Stats s0 = a.stats();
    for (auto _ : state) {
      if (!cuda_ok(state, cudaStreamSynchronize(cs), "cudaStreamSynchronize")) break;
      a.empty_cache();
      const auto t0 = Clock::now();
      void* p = a.allocate(bytes, s);
      state.SetIterationTime(seconds_since(t0));
      a.deallocate(p, bytes, s);
    }
    const Stats s1 = a.stats();
    state.counters["new"] = per_iteration(s1.rung_new_memory.current - s0.rung_new_memory.current);
    state.counters["vmm_calls"] =
        per_iteration(s1.critical_path_vmm_calls.current - s0.critical_path_vmm_calls.current);
    a.destroy_stream(s);
  } catch (const std::exception& e) {
    fail(state, e.what());
  }
}

void new_cuda_async(benchmark::State& state) {
  if (!need_gpu(state)) return;
  const auto bytes = static_cast<std::size_t>(state.range(0));
  cudaMemPool_t pool = nullptr;
  if (!cuda_ok(state, caching_pool(&pool), "caching pool")) return;
  CudaStream stream;
  if (!cuda_ok(state, stream.error(), "cudaStreamCreate")) return;
  const cudaStream_t s = stream.get();
  for (auto _ : state) {
    if (!cuda_ok(state, cudaStreamSynchronize(s), "cudaStreamSynchronize")) break;
    if (!cuda_ok(state, cudaMemPoolTrimTo(pool, 0), "cudaMemPoolTrimTo")) break;
    void* p = nullptr;
    const auto t0 = Clock::now();
    const cudaError_t e = cudaMallocAsync(&p, bytes, s);
    state.SetIterationTime(seconds_since(t0));
    if (!cuda_ok(state, e, "cudaMallocAsync")) break;
    if (!cuda_ok(state, cudaFreeAsync(p, s), "cudaFreeAsync")) break;
  }
  cudaStreamSynchronize(s);
  cudaMemPoolTrimTo(pool, 0);
}

void new_cuda_malloc(benchmark::State& state) {
  if (!need_gpu(state)) return;
  const auto bytes = static_cast<std::size_t>(state.range(0));
  for (auto _ : state) {
    void* p = nullptr;
    const auto t0 = Clock::now();
    const cudaError_t e = cudaMalloc(&p, bytes);
    state.SetIterationTime(seconds_since(t0));
    if (!cuda_ok(state, e, "cudaMalloc")) break;
    if (!cuda_ok(state, cudaFree(p), "cudaFree")) break;
  }
}
#else
void new_memlake(benchmark::State& state, std::size_t) {
  need_gpu(state);
}
void new_cuda_async(benchmark::State& state) {
  need_gpu(state);
}
void new_cuda_malloc(benchmark::State& state) {
  need_gpu(state);
}
#endif

void sizes(benchmark::internal::Benchmark* b) {
  for (std::size_t s : {2 * MiB, 64 * MiB, 1 * GiB}) b->Arg(static_cast<std::int64_t>(s));
  b->UseManualTime()->Unit(benchmark::kMicrosecond)->Iterations(30);
}

[[maybe_unused]] const bool registered = [] {
  sizes(benchmark::RegisterBenchmark("new/memlake", new_memlake, 2 * MiB));
  sizes(benchmark::RegisterBenchmark("new/memlake_1g_chunks", new_memlake, 1 * GiB));
  sizes(benchmark::RegisterBenchmark("new/cuda_async", new_cuda_async));
  sizes(benchmark::RegisterBenchmark("new/cuda_malloc", new_cuda_malloc));
  return true;
}();

}  // namespace
}  // namespace memlake::bench
