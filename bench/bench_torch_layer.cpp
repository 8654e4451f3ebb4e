// memlake under PyTorch, on the host: one allocate + free pair through the
// C API's memlake_torch_malloc / memlake_torch_free, which PyTorch's
// pluggable allocator calls, and through memlake's PyTorch allocator
// (python/memlake/_torch_allocator.cpp, built here against the stand-in torch
// of tests/torch_stand_in, whose CUDAPluggableAllocator keeps its own map
// of live blocks as PyTorch's does): the difference is what the pluggable
// layer adds to each pair. Eight sizes from 4 KiB to 16 MiB in turn, on the
// HostBackend (device 0 of the C API, MEMLAKE_CONF's options). A fixed
// number of pairs per run, so callgrind's totals divide by it.
#include "python/memlake/_torch_allocator.cpp"

#include <cstdlib>
#include <string>

#include "common.hpp"
#include "memlake_functions.hpp"

namespace memlake::bench {
namespace {

constexpr int kPairs = 20000;
constexpr std::size_t kSizes[] = {4 * KiB, 16 * KiB, 64 * KiB, 256 * KiB,
                                  1 * MiB, 4 * MiB,  8 * MiB,  16 * MiB};

// memlake installed as PyTorch's allocator, once for the process; every
// benchmark that finds it missing fails with the installation's error.
MemlakeAllocator* installed(benchmark::State& state) {
  static std::string error;
  static MemlakeAllocator* allocator = []() -> MemlakeAllocator* {
    setenv("MEMLAKE_CONF", "backend:host,capacity:1G,worker:off", /*overwrite=*/0);
    const MemlakeFunctions f = memlake_functions();
    char why[256] = "";
    if (memlake_torch_install_graph_tree_allocator(&f, why, sizeof why) != 0) {
      error = why;
      return nullptr;
    }
    return dynamic_cast<MemlakeAllocator*>(
        torch::cuda::CUDAPluggableAllocator::getCurrentAllocator().get());
  }();
  if (allocator == nullptr) fail(state, error);
  return allocator;
}

void torch_layer_capi(benchmark::State& state) {
  if (installed(state) == nullptr) return;
  for (auto _ : state) {
    for (int i = 0; i < kPairs; ++i) {
      const std::size_t bytes = kSizes[i % 8];
      void* p = memlake_torch_malloc(bytes, 0, nullptr);
      benchmark::DoNotOptimize(p);
      memlake_torch_free(p, bytes, 0, nullptr);
    }
  }
  state.SetItemsProcessed(state.iterations() * kPairs);
}

void torch_layer_pluggable(benchmark::State& state) {
  MemlakeAllocator* a = installed(state);
  if (a == nullptr) return;
  for (auto _ : state) {
    for (int i = 0; i < kPairs; ++i) {
      void* p = a->malloc(kSizes[i % 8], 0, nullptr);
      benchmark::DoNotOptimize(p);
      a->raw_delete(p);
    }
  }
  state.SetItemsProcessed(state.iterations() * kPairs);
}

BENCHMARK(torch_layer_capi)->Name("torch_layer/capi_host")->Iterations(5);
BENCHMARK(torch_layer_pluggable)->Name("torch_layer/pluggable_host")->Iterations(5);

}  // namespace
}  // namespace memlake::bench
