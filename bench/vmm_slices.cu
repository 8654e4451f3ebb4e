// memlake_vmm_slices: whether one physical handle can be mapped in slices
// (cuMemMap with a nonzero offset, or a size below the handle's), and what
// growing memory costs in each unit, measured on this driver:
//
//   probe   a 64 MiB handle mapped whole and written; then 2 MiB slices of it
//           mapped elsewhere at offsets 0, 2 MiB and 62 MiB, each read back
//           through the slice (every word checked against what the whole
//           mapping wrote). Prints each cuMemMap's result.
//   grow    host time to make --mib of new, accessible memory: cudaMalloc;
//           2 MiB handles each created, mapped and granted access one by one;
//           2 MiB handles granted access in one call over the range; one
//           handle of the whole size; one handle mapped as 2 MiB slices in
//           shuffled order (how a stitched range would map it) with one
//           access call. Each way's data is written and checked.
//   unmap   host time to unmap the range of 2 MiB handles in one call and
//           chunk by chunk.
//
// Exits 77 without a GPU. One line per measurement, rounds interleaved.
//   memlake_vmm_slices [--rounds 3] [--mib 1024]
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>
#include <vector>

namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;
constexpr std::size_t kSlice = 2 * kMiB;

struct Driver {
  PFN_cuMemCreate_v10020 create = nullptr;
  PFN_cuMemRelease_v10020 release = nullptr;
  PFN_cuMemAddressReserve_v10020 reserve = nullptr;
  PFN_cuMemAddressFree_v10020 address_free = nullptr;
  PFN_cuMemMap_v10020 map = nullptr;
  PFN_cuMemUnmap_v10020 unmap = nullptr;
  PFN_cuMemSetAccess_v10020 set_access = nullptr;
};

template <class F>
bool load(const char* symbol, F* fn) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  if (cudaGetDriverEntryPointByVersion(symbol, &p, 12000, cudaEnableDefault, &found) !=
          cudaSuccess ||
      found != cudaDriverEntryPointSuccess || p == nullptr) {
    std::fprintf(stderr, "no driver entry point %s\n", symbol);
    return false;
  }
  *fn = reinterpret_cast<F>(p);
  return true;
}

bool load_driver(Driver& d) {
  return load("cuMemCreate", &d.create) && load("cuMemRelease", &d.release) &&
         load("cuMemAddressReserve", &d.reserve) && load("cuMemAddressFree", &d.address_free) &&
         load("cuMemMap", &d.map) && load("cuMemUnmap", &d.unmap) &&
         load("cuMemSetAccess", &d.set_access);
}

Driver g;
int g_device = 0;

CUmemAllocationProp prop() {
  CUmemAllocationProp p{};
  p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  p.location.id = g_device;
  return p;
}

CUmemAccessDesc access() {
  CUmemAccessDesc a{};
  a.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  a.location.id = g_device;
  a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  return a;
}

bool ok(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return true;
  std::fprintf(stderr, "%s failed: %d\n", what, static_cast<int>(r));
  return false;
}

CUmemGenericAllocationHandle create(std::size_t bytes) {
  CUmemGenericAllocationHandle h = 0;
  const CUmemAllocationProp p = prop();
  return ok(g.create(&h, bytes, &p, 0), "cuMemCreate") ? h : 0;
}

CUdeviceptr reserve(std::size_t bytes) {
  CUdeviceptr va = 0;
  return ok(g.reserve(&va, bytes, kSlice, 0, 0), "cuMemAddressReserve") ? va : 0;
}

bool grant(CUdeviceptr va, std::size_t bytes) {
  const CUmemAccessDesc a = access();
  return ok(g.set_access(va, bytes, &a, 1), "cuMemSetAccess");
}

__global__ void fill_kernel(std::uint32_t* a, std::size_t n, std::uint32_t first) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x)
    a[i] = first + static_cast<std::uint32_t>(i);
}

__global__ void check_kernel(const std::uint32_t* a, std::size_t n, std::uint32_t first,
                             unsigned long long* wrong) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x)
    if (a[i] != first + static_cast<std::uint32_t>(i)) atomicAdd(wrong, 1ull);
}

unsigned long long* g_wrong = nullptr;

// Words of [va, va + bytes) that do not hold first, first + 1, ...
unsigned long long wrong_words(CUdeviceptr va, std::size_t bytes, std::uint32_t first) {
  cudaMemset(g_wrong, 0, sizeof(*g_wrong));
  check_kernel<<<1024, 256>>>(reinterpret_cast<const std::uint32_t*>(va), bytes / 4, first,
                              g_wrong);
  unsigned long long host = ~0ull;
  if (cudaMemcpy(&host, g_wrong, sizeof host, cudaMemcpyDeviceToHost) != cudaSuccess) return ~0ull;
  return host;
}

void fill(CUdeviceptr va, std::size_t bytes, std::uint32_t first) {
  fill_kernel<<<1024, 256>>>(reinterpret_cast<std::uint32_t*>(va), bytes / 4, first);
  cudaDeviceSynchronize();
}

using Clock = std::chrono::steady_clock;
double us_since(Clock::time_point t) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t).count();
}

// Maps 2 MiB of `h` at `offset` into a new reservation, with `size` given to
// cuMemMap; reads it back against what the whole mapping wrote there.
void probe_slice(CUmemGenericAllocationHandle h, std::size_t offset, const char* name) {
  const CUdeviceptr va = reserve(kSlice);
  const CUresult r = g.map(va, kSlice, offset, h, 0);
  if (r != CUDA_SUCCESS) {
    std::printf("probe %-34s cuMemMap result %d: refused\n", name, static_cast<int>(r));
    g.address_free(va, kSlice);
    return;
  }
  const bool granted = grant(va, kSlice);
  const unsigned long long wrong =
      granted ? wrong_words(va, kSlice, static_cast<std::uint32_t>(offset / 4)) : ~0ull;
  std::printf("probe %-34s cuMemMap result 0, access %s, wrong words %llu of %zu\n", name,
              granted ? "granted" : "refused", wrong, kSlice / 4);
  g.unmap(va, kSlice);
  g.address_free(va, kSlice);
}

bool probe() {
  constexpr std::size_t kHandle = 64 * kMiB;
  const CUmemGenericAllocationHandle h = create(kHandle);
  const CUdeviceptr whole = reserve(kHandle);
  if (h == 0 || whole == 0 || !ok(g.map(whole, kHandle, 0, h, 0), "cuMemMap whole") ||
      !grant(whole, kHandle))
    return false;
  fill(whole, kHandle, 0);
  probe_slice(h, 0, "offset 0, 2 MiB of a 64 MiB handle");
  probe_slice(h, kSlice, "offset 2 MiB, 2 MiB of 64 MiB");
  probe_slice(h, kHandle - kSlice, "offset 62 MiB, 2 MiB of 64 MiB");
  g.unmap(whole, kHandle);
  g.address_free(whole, kHandle);
  g.release(h);
  return true;
}

struct Grown {
  CUdeviceptr va = 0;
  std::vector<CUmemGenericAllocationHandle> handles;
  void* malloced = nullptr;
};

// Makes `bytes` of new accessible memory one way; returns the host time.
double grow(const std::string& way, std::size_t bytes, Grown& out, std::mt19937& rng) {
  const std::size_t n = bytes / kSlice;
  const auto t = Clock::now();
  if (way == "cudaMalloc") {
    if (cudaMalloc(&out.malloced, bytes) != cudaSuccess) return -1;
    out.va = reinterpret_cast<CUdeviceptr>(out.malloced);
    return us_since(t);
  }
  out.va = reserve(bytes);
  if (way == "2MiB handles, access each") {
    for (std::size_t i = 0; i < n; ++i) {
      out.handles.push_back(create(kSlice));
      if (!ok(g.map(out.va + i * kSlice, kSlice, 0, out.handles.back(), 0), "map") ||
          !grant(out.va + i * kSlice, kSlice))
        return -1;
    }
  } else if (way == "2MiB handles, one access call") {
    for (std::size_t i = 0; i < n; ++i) {
      out.handles.push_back(create(kSlice));
      if (!ok(g.map(out.va + i * kSlice, kSlice, 0, out.handles.back(), 0), "map")) return -1;
    }
    if (!grant(out.va, bytes)) return -1;
  } else if (way == "one handle") {
    out.handles.push_back(create(bytes));
    if (!ok(g.map(out.va, bytes, 0, out.handles.back(), 0), "map") || !grant(out.va, bytes))
      return -1;
  } else if (way == "one handle in shuffled slices") {
    out.handles.push_back(create(bytes));
    std::vector<std::size_t> order(n);
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::shuffle(order.begin(), order.end(), rng);
    for (std::size_t i = 0; i < n; ++i)
      if (!ok(g.map(out.va + i * kSlice, kSlice, order[i] * kSlice, out.handles.back(), 0),
              "map slice"))
        return -1;
    if (!grant(out.va, bytes)) return -1;
  }
  return us_since(t);
}

double drop(const std::string& way, std::size_t bytes, Grown& g_out, bool chunk_by_chunk) {
  const auto t = Clock::now();
  if (way == "cudaMalloc") {
    cudaFree(g_out.malloced);
    return us_since(t);
  }
  if (chunk_by_chunk) {
    for (std::size_t off = 0; off < bytes; off += kSlice) g.unmap(g_out.va + off, kSlice);
  } else {
    g.unmap(g_out.va, bytes);
  }
  const double unmap_us = us_since(t);
  for (auto h : g_out.handles) g.release(h);
  g.address_free(g_out.va, bytes);
  return unmap_us;
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 3;
  std::size_t bytes = 1024 * kMiB;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--rounds")
      rounds = std::atoi(argv[i + 1]);
    else if (a == "--mib")
      bytes = static_cast<std::size_t>(std::atol(argv[i + 1])) * kMiB;
  }
  if (rounds < 1 || bytes < 64 * kMiB || bytes % kSlice != 0) {
    std::fprintf(stderr, "usage: memlake_vmm_slices [--rounds N] [--mib M (even, >= 64)]\n");
    return 2;
  }
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("no GPU: skipped\n");
    return 77;
  }
  cudaSetDevice(g_device);
  cudaFree(nullptr);
  if (!load_driver(g) || cudaMalloc(&g_wrong, sizeof(*g_wrong)) != cudaSuccess) return 1;
  if (!probe()) return 1;

  const std::vector<std::string> ways = {"cudaMalloc", "2MiB handles, access each",
                                         "2MiB handles, one access call", "one handle",
                                         "one handle in shuffled slices"};
  std::mt19937 rng(7);
  bool all_ok = true;
  for (int r = 0; r < rounds; ++r) {
    for (const std::string& way : ways) {
      Grown grown;
      const double us = grow(way, bytes, grown, rng);
      if (us < 0) {
        std::printf("grow %-32s %zu MiB: failed\n", way.c_str(), bytes / kMiB);
        all_ok = false;
        continue;
      }
      fill(grown.va, bytes, 17);
      const unsigned long long wrong = wrong_words(grown.va, bytes, 17);
      all_ok = all_ok && wrong == 0;
      const bool by_chunk = way == "2MiB handles, access each";
      const double unmap_us = drop(way, bytes, grown, by_chunk);
      std::printf(
          "round %d grow %-32s %zu MiB: %10.1f us, wrong words %llu; %s %10.1f us\n", r + 1,
          way.c_str(), bytes / kMiB, us, wrong,
          way == "cudaMalloc" ? "cudaFree" : (by_chunk ? "unmap by chunk" : "unmap at once"),
          unmap_us);
    }
  }
  return all_ok ? 0 : 1;
}
