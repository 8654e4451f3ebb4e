// thrust and CUB on memlake through memlake::cuda_resource (cuda_mr.hpp):
// the buffers come from the resource in stream order, and thrust's and CUB's
// temporary storage too. Each step sorts a shuffled sequence with thrust,
// sorts it again with CUB's radix sort and sums it with CUB's reduction,
// and checks both on the host. Exits 77 without a GPU.
//
//   cuda_mr_thrust [--log2-elements K] [--steps S]   (2^K elements; 24, 8)
#include <cuda_runtime.h>
#include <thrust/execution_policy.h>
#include <thrust/functional.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>
#include <thrust/sort.h>
#include <thrust/transform.h>
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_reduce.cuh>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <vector>

#include "memlake/allocator.hpp"
#include "memlake/config.hpp"
#include "memlake/cuda_mr.hpp"

namespace {

constexpr int kNoGpu = 77;

#define CHECK_CUDA(expr)                                                 \
  do {                                                                   \
    const cudaError_t err_ = (expr);                                     \
    if (err_ != cudaSuccess) {                                           \
      std::fprintf(stderr, "%s: %s\n", #expr, cudaGetErrorString(err_)); \
      std::exit(1);                                                      \
    }                                                                    \
  } while (0)

// thrust's temporary storage from the resource, ordered on one stream.
struct TempAllocator {
  using value_type = char;
  memlake::cuda_resource mr;
  cuda::stream_ref stream;

  char* allocate(std::ptrdiff_t n) {
    return static_cast<char*>(mr.allocate(stream, static_cast<std::size_t>(n)));
  }
  void deallocate(char* p, std::size_t n) { mr.deallocate(stream, p, n); }
};

// A permutation of 0..n-1: i -> (i * a + b) mod n with a odd and n a power of two.
struct Shuffle {
  std::uint32_t mask, a, b;
  __host__ __device__ std::uint32_t operator()(std::uint32_t i) const { return (i * a + b) & mask; }
};

std::size_t arg(int argc, char** argv, const char* name, std::size_t fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return std::strtoull(argv[i + 1], nullptr, 10);
  return fallback;
}

// Widens keys for the sum, so that it does not overflow.
struct Widen {
  __host__ __device__ unsigned long long operator()(std::uint32_t x) const { return x; }
};

// Whether host[i] == i for every i; reports the first element that is not.
int check_identity(const char* what, const std::vector<std::uint32_t>& host) {
  for (std::size_t i = 0; i < host.size(); ++i) {
    if (host[i] != i) {
      std::fprintf(stderr, "%s: element %zu is %u\n", what, i, host[i]);
      return 1;
    }
  }
  return 0;
}

// One step: a shuffled 0..n-1 radix-sorted by CUB into `sorted` and summed
// by CUB, and sorted in place by thrust; returns the number of failed checks.
int step(memlake::cuda_resource& mr, cudaStream_t stream, std::uint32_t log2n, std::uint32_t seed) {
  const cuda::stream_ref s{stream};
  const std::size_t n = std::size_t{1} << log2n;
  const std::size_t bytes = n * sizeof(std::uint32_t);
  auto* keys = static_cast<std::uint32_t*>(mr.allocate(s, bytes));
  auto* sorted = static_cast<std::uint32_t*>(mr.allocate(s, bytes));
  auto* sum = static_cast<unsigned long long*>(mr.allocate(s, sizeof(unsigned long long)));
  TempAllocator temp{mr, s};
  const auto policy = thrust::cuda::par_nosync(temp).on(stream);
  thrust::transform(policy, thrust::counting_iterator<std::uint32_t>(0),
                    thrust::counting_iterator<std::uint32_t>(static_cast<std::uint32_t>(n)), keys,
                    Shuffle{static_cast<std::uint32_t>(n - 1), 2 * seed + 1, seed * 7919});

  std::size_t sort_bytes = 0, sum_bytes = 0;
  CHECK_CUDA(cub::DeviceRadixSort::SortKeys(nullptr, sort_bytes, keys, sorted, n, 0, 32, stream));
  void* sort_temp = mr.allocate(s, sort_bytes);
  CHECK_CUDA(cub::DeviceRadixSort::SortKeys(sort_temp, sort_bytes, keys, sorted, n, 0, 32, stream));
  mr.deallocate(s, sort_temp, sort_bytes);
  const auto wide = thrust::make_transform_iterator(sorted, Widen{});
  CHECK_CUDA(cub::DeviceReduce::Sum(nullptr, sum_bytes, wide, sum, n, stream));
  void* sum_temp = mr.allocate(s, sum_bytes);
  CHECK_CUDA(cub::DeviceReduce::Sum(sum_temp, sum_bytes, wide, sum, n, stream));
  mr.deallocate(s, sum_temp, sum_bytes);

  thrust::sort(policy, keys, keys + n);

  std::vector<std::uint32_t> by_cub(n), by_thrust(n);
  unsigned long long host_sum = 0;
  CHECK_CUDA(cudaMemcpyAsync(by_cub.data(), sorted, bytes, cudaMemcpyDeviceToHost, stream));
  CHECK_CUDA(cudaMemcpyAsync(by_thrust.data(), keys, bytes, cudaMemcpyDeviceToHost, stream));
  CHECK_CUDA(cudaMemcpyAsync(&host_sum, sum, sizeof host_sum, cudaMemcpyDeviceToHost, stream));
  CHECK_CUDA(cudaStreamSynchronize(stream));
  int failures =
      check_identity("CUB radix sort", by_cub) + check_identity("thrust sort", by_thrust);
  const unsigned long long want = static_cast<unsigned long long>(n) * (n - 1) / 2;
  if (host_sum != want) {
    std::fprintf(stderr, "CUB sum: %llu, not %llu\n", host_sum, want);
    ++failures;
  }
  mr.deallocate(s, sum, sizeof(unsigned long long));
  mr.deallocate(s, sorted, bytes);
  mr.deallocate(s, keys, bytes);
  return failures;
}

}  // namespace

int main(int argc, char** argv) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("cuda_mr_thrust: no GPU, nothing run\n");
    return kNoGpu;
  }
  const auto log2n = static_cast<std::uint32_t>(arg(argc, argv, "--log2-elements", 24));
  const std::size_t steps = arg(argc, argv, "--steps", 8);
  try {
    memlake::Allocator alloc(memlake::Config::parse("backend:cuda"));
    memlake::cuda_resource mr(alloc);
    cudaStream_t stream = nullptr;
    CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    int failures = 0;
    std::int64_t vmm_after_first = 0;
    for (std::size_t i = 0; i < steps; ++i) {
      failures += step(mr, stream, log2n, static_cast<std::uint32_t>(i + 1));
      if (i == 0) vmm_after_first = alloc.stats().critical_path_vmm_calls.current;
    }
    CHECK_CUDA(cudaStreamSynchronize(stream));
    CHECK_CUDA(cudaStreamDestroy(stream));
    const memlake::Stats st = alloc.stats();
    std::printf(
        "cuda_mr_thrust: %zu steps of 2^%u elements, %d failed checks; memlake: %lld "
        "allocations, peak reserved %lld bytes, critical-path VMM calls %lld after the "
        "first step, host waits %lld\n",
        steps, log2n, failures, static_cast<long long>(st.allocs.current),
        static_cast<long long>(st.reserved_bytes.peak),
        static_cast<long long>(st.critical_path_vmm_calls.current - vmm_after_first),
        static_cast<long long>(st.host_waits.current));
    return failures == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cuda_mr_thrust: %s\n", e.what());
    return 1;
  }
}
