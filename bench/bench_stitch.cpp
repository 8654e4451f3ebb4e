// Assembling one large block from scattered free memory. Each iteration
// allocates 2N+1 blocks of 2 MiB, frees the N odd ones (so the free memory
// lies in N separate 2 MiB pieces between live blocks) and times one
// allocation of N x 2 MiB: memlake stitches the N free chunks into a new
// range; cudaMallocAsync's pool and cudaMalloc do what they do with the same
// request. Manual time of that allocation alone, in us; the set-up and the
// frees after it are outside the measurement. Variants of memlake:
//   memlake              the default config (mapping worker thread on);
//   memlake_noworker     worker off: the request stitches on its own thread.
// stitch_cached repeats a stitch whose range memlake keeps mapped (the same
// layout again, as in the next training step): an exact fit, no driver call.
// stitch_host runs the two variants over the HostBackend (no GPU needed).
#include <exception>
#include <vector>

#include "common.hpp"

namespace memlake::bench {
namespace {

constexpr std::size_t kPiece = 2 * MiB;

// memlake with the given mapping worker mode (thread: the default; off: the
// request stitches on the allocating thread, nothing runs beside it).
void stitch_memlake(benchmark::State& state, BackendKind backend, WorkerMode worker) {
  if (backend == BackendKind::cuda && !need_gpu(state)) return;
  const auto n = static_cast<std::size_t>(state.range(0));
  try {
    Config c = memlake_config(backend, kPiece);
    c.worker = worker;
    Allocator a(c);
    Stream s = a.create_stream();
    std::int64_t stitches = 0, vmm = 0, new_bytes = 0;
    std::vector<void*> blocks(2 * n + 1);
    for (auto _ : state) {
      for (auto& p : blocks) p = a.allocate(kPiece, s);
      for (std::size_t i = 1; i < blocks.size(); i += 2) a.deallocate(blocks[i], kPiece, s);
      if (!synchronize(state, a, s)) break;
      a.process_pending_frees();
      const Stats s0 = a.stats();
      const auto t0 = Clock::now();
      void* big = a.allocate(n * kPiece, s);
      state.SetIterationTime(seconds_since(t0));
      const Stats s1 = a.stats();
      stitches += s1.rung_stitch.current - s0.rung_stitch.current;
      vmm += s1.critical_path_vmm_calls.current - s0.critical_path_vmm_calls.current;
      new_bytes += s1.reserved_bytes.current - s0.reserved_bytes.current;
      a.deallocate(big, n * kPiece, s);
      for (std::size_t i = 0; i < blocks.size(); i += 2) a.deallocate(blocks[i], kPiece, s);
      if (!synchronize(state, a, s)) break;
      a.empty_cache();  // the next iteration starts from nothing mapped
    }
    state.counters["stitch"] = per_iteration(stitches);
    state.counters["vmm_calls"] = per_iteration(vmm);
    state.counters["new_MiB"] = per_iteration(new_bytes / static_cast<std::int64_t>(MiB));
    a.destroy_stream(s);
  } catch (const std::exception& e) {
    fail(state, e.what());
  }
}

#if MEMLAKE_HAVE_CUDA
void stitch_cached_memlake(benchmark::State& state) {
  if (!need_gpu(state)) return;
  const auto n = static_cast<std::size_t>(state.range(0));
  try {
    Allocator a(memlake_config(BackendKind::cuda, kPiece));
    Stream s = a.create_stream();
    const auto cs = static_cast<cudaStream_t>(s);
    std::vector<void*> blocks(2 * n + 1);
    for (auto& p : blocks) p = a.allocate(kPiece, s);
    for (std::size_t i = 1; i < blocks.size(); i += 2) a.deallocate(blocks[i], kPiece, s);
    if (!cuda_ok(state, cudaStreamSynchronize(cs), "cudaStreamSynchronize")) return;
    a.process_pending_frees();
    a.deallocate(a.allocate(n * kPiece, s), n * kPiece, s);  // the stitch, kept mapped
    const Stats s0 = a.stats();
    for (auto _ : state) {
      // The freed block goes back to the lake (not the stream's own cache).
      if (!cuda_ok(state, cudaStreamSynchronize(cs), "cudaStreamSynchronize")) break;
      a.process_pending_frees();
      const auto t0 = Clock::now();
      void* big = a.allocate(n * kPiece, s);
      state.SetIterationTime(seconds_since(t0));
      a.deallocate(big, n * kPiece, s);
    }
    const Stats s1 = a.stats();
    state.counters["idle_segment"] =
        per_iteration(s1.rung_idle_segment.current - s0.rung_idle_segment.current);
    state.counters["vmm_calls"] =
        per_iteration(s1.critical_path_vmm_calls.current - s0.critical_path_vmm_calls.current);
    for (std::size_t i = 0; i < blocks.size(); i += 2) a.deallocate(blocks[i], kPiece, s);
    a.destroy_stream(s);
  } catch (const std::exception& e) {
    fail(state, e.what());
  }
}

void stitch_cuda_async(benchmark::State& state) {
  if (!need_gpu(state)) return;
  const auto n = static_cast<std::size_t>(state.range(0));
  cudaMemPool_t pool = nullptr;
  if (!cuda_ok(state, caching_pool(&pool), "caching pool")) return;
  CudaStream stream;
  if (!cuda_ok(state, stream.error(), "cudaStreamCreate")) return;
  const cudaStream_t s = stream.get();
  std::vector<void*> blocks(2 * n + 1);
  for (auto _ : state) {
    bool ok = true;
    for (auto& p : blocks)
      ok = ok && cuda_ok(state, cudaMallocAsync(&p, kPiece, s), "cudaMallocAsync");
    if (!ok) break;
    for (std::size_t i = 1; i < blocks.size(); i += 2) cudaFreeAsync(blocks[i], s);
    if (!cuda_ok(state, cudaStreamSynchronize(s), "cudaStreamSynchronize")) break;
    void* big = nullptr;
    const auto t0 = Clock::now();
    const cudaError_t e = cudaMallocAsync(&big, n * kPiece, s);
    state.SetIterationTime(seconds_since(t0));
    if (!cuda_ok(state, e, "cudaMallocAsync")) break;
    cudaFreeAsync(big, s);
    for (std::size_t i = 0; i < blocks.size(); i += 2) cudaFreeAsync(blocks[i], s);
    if (!cuda_ok(state, cudaStreamSynchronize(s), "cudaStreamSynchronize")) break;
    if (!cuda_ok(state, cudaMemPoolTrimTo(pool, 0), "cudaMemPoolTrimTo")) break;
  }
}

void stitch_cuda_malloc(benchmark::State& state) {
  if (!need_gpu(state)) return;
  const auto n = static_cast<std::size_t>(state.range(0));
  std::vector<void*> blocks(2 * n + 1);
  for (auto _ : state) {
    bool ok = true;
    for (auto& p : blocks) ok = ok && cuda_ok(state, cudaMalloc(&p, kPiece), "cudaMalloc");
    if (!ok) break;
    for (std::size_t i = 1; i < blocks.size(); i += 2) cudaFree(blocks[i]);
    void* big = nullptr;
    const auto t0 = Clock::now();
    const cudaError_t e = cudaMalloc(&big, n * kPiece);
    state.SetIterationTime(seconds_since(t0));
    if (!cuda_ok(state, e, "cudaMalloc")) break;
    cudaFree(big);
    for (std::size_t i = 0; i < blocks.size(); i += 2) cudaFree(blocks[i]);
  }
}
#else
void stitch_cached_memlake(benchmark::State& state) {
  need_gpu(state);
}
void stitch_cuda_async(benchmark::State& state) {
  need_gpu(state);
}
void stitch_cuda_malloc(benchmark::State& state) {
  need_gpu(state);
}
#endif

void chunk_counts(benchmark::internal::Benchmark* b) {
  for (int n : {8, 64, 512}) b->Arg(n);
  b->UseManualTime()->Unit(benchmark::kMicrosecond)->Iterations(15);
}

[[maybe_unused]] const bool registered = [] {
  chunk_counts(benchmark::RegisterBenchmark("stitch/memlake", stitch_memlake, BackendKind::cuda,
                                            WorkerMode::thread));
  chunk_counts(benchmark::RegisterBenchmark("stitch/memlake_noworker", stitch_memlake,
                                            BackendKind::cuda, WorkerMode::off));
  chunk_counts(benchmark::RegisterBenchmark("stitch/cuda_async", stitch_cuda_async));
  chunk_counts(benchmark::RegisterBenchmark("stitch/cuda_malloc", stitch_cuda_malloc));
  chunk_counts(benchmark::RegisterBenchmark("stitch_cached/memlake", stitch_cached_memlake));
  chunk_counts(benchmark::RegisterBenchmark("stitch_host/memlake", stitch_memlake,
                                            BackendKind::host, WorkerMode::thread));
  chunk_counts(benchmark::RegisterBenchmark("stitch_host/memlake_noworker", stitch_memlake,
                                            BackendKind::host, WorkerMode::off));
  return true;
}();

}  // namespace
}  // namespace memlake::bench
