// memlake under PyTorch, on the host: allocate + free pairs through the C
// API's memlake_torch_malloc / memlake_torch_free (PyTorch's plain
// CUDAPluggableAllocator calls those), and through memlake's PyTorch
// allocator (python/memlake/_torch_allocator.cpp, built here against the
// stand-in torch of tests/torch_stand_in) by raw_alloc_with_stream and
// raw_delete, the calls a tensor's allocation and deleter make: the
// difference is what that layer adds to each pair. Pairs back to back of
// eight sizes from 4 KiB to 16 MiB in turn, or in a window of many live
// blocks (in_window); on the HostBackend (device 0 of the C API,
// MEMLAKE_CONF's options). A fixed number of pairs per run, so callgrind's
// totals divide by it.
#include "python/memlake/_torch_allocator.cpp"

#include <cstdlib>
#include <string>
#include <vector>

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
      void* p = a->raw_alloc_with_stream(kSizes[i % 8], nullptr);
      benchmark::DoNotOptimize(p);
      a->raw_delete(p);
    }
  }
  state.SetItemsProcessed(state.iterations() * kPairs);
}

// As a training step holds its tensors: a window of kLive live blocks, one
// freed (in an order that jumps about the window) before each new one, so
// the records of every layer are many and spread, as between a step's
// calls. Sizes of 4 KiB to 256 KiB (the window then holds about 87 MiB);
// the fill and the drain run in each iteration as well.
constexpr int kLive = 1024;
constexpr int kWindowSizes = 4;

template <class Alloc, class Free>
void in_window(benchmark::State& state, Alloc alloc, Free free) {
  std::vector<void*> live(kLive);
  std::vector<std::size_t> sizes(kLive);
  for (auto _ : state) {
    for (int i = 0; i < kLive; ++i) live[i] = alloc(sizes[i] = kSizes[i % kWindowSizes]);
    for (int i = 0; i < kPairs; ++i) {
      const int slot = (i * 389) % kLive;
      free(live[slot], sizes[slot]);
      // No DoNotOptimize(live[slot]): the frees read every pointer, and GCC
      // 12 may drop stores to an lvalue DoNotOptimize was given.
      live[slot] = alloc(sizes[slot] = kSizes[(i * 3 + 1) % kWindowSizes]);
    }
    for (int i = 0; i < kLive; ++i) free(live[i], sizes[i]);
  }
  state.SetItemsProcessed(state.iterations() * kPairs);
}

void torch_layer_capi_window(benchmark::State& state) {
  if (installed(state) == nullptr) return;
  in_window(
      state, [](std::size_t bytes) { return memlake_torch_malloc(bytes, 0, nullptr); },
      [](void* p, std::size_t bytes) { memlake_torch_free(p, bytes, 0, nullptr); });
}

void torch_layer_pluggable_window(benchmark::State& state) {
  MemlakeAllocator* a = installed(state);
  if (a == nullptr) return;
  in_window(
      state, [a](std::size_t bytes) { return a->raw_alloc_with_stream(bytes, nullptr); },
      [a](void* p, std::size_t) { a->raw_delete(p); });
}

BENCHMARK(torch_layer_capi)->Name("torch_layer/capi_host")->Iterations(5);
BENCHMARK(torch_layer_pluggable)->Name("torch_layer/pluggable_host")->Iterations(5);
BENCHMARK(torch_layer_capi_window)->Name("torch_layer/capi_window_host")->Iterations(5);
BENCHMARK(torch_layer_pluggable_window)->Name("torch_layer/pluggable_window_host")->Iterations(5);

}  // namespace
}  // namespace memlake::bench
