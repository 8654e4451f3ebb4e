// memlake_nvtx_sanitizer_check MODE [--no-nvtx]: a program to run under
// compute-sanitizer memcheck, which learns from memlake's NVTX heaps and
// regions (nvtx:true) which bytes of a mapped range are live blocks.
//   valid     kernels write and read back a primary block and a stitched
//             block (four chunks mapped into one range): memcheck must
//             report nothing;
//   freed     a kernel reads a block after it was freed into memlake's cache,
//             where its range stays mapped: memcheck must report the read;
//   past-end  a kernel reads the word after a 3 MiB block, inside the same
//             mapped 4 MiB range: memcheck must report the read;
//   heap-probe  registers NVTX heaps the way memlake does and the minimal
//             way, over cudaMalloc memory and over a VMM-mapped range, and
//             prints which ones the tool accepted, to tell which parameter
//             a tool refuses.
// --no-nvtx runs the same with nvtx:false: the planted reads then touch
// mapped memory that no tool can tell from a live block, so memcheck reports
// nothing, which shows that the NVTX calls are what it reports from.
// Exits 0 when every word read back as written, 1 on a mismatch or a CUDA or
// memlake error, 2 on bad usage. tools/device/gpu_validate.sh runs it.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.hpp"
#include "memlake/allocator.hpp"
#include "memlake/config.hpp"
#include "nvtx3/nvToolsExtMem.h"

namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

__global__ void fill_words(std::uint32_t* p, std::size_t n, std::uint32_t seed) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride)
    p[i] = seed ^ static_cast<std::uint32_t>(i * 2654435761u);
}

__global__ void count_mismatches(const std::uint32_t* p, std::size_t n, std::uint32_t seed,
                                 unsigned long long* bad) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  unsigned long long mine = 0;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride)
    mine += p[i] != (seed ^ static_cast<std::uint32_t>(i * 2654435761u)) ? 1 : 0;
  if (mine) atomicAdd(bad, mine);
}

// One thread reads one word: the planted access.
__global__ void read_word(const std::uint32_t* p, std::uint32_t* out) {
  *out = *p;
}

bool cuda_ok(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
  return false;
}

// Writes then checks every word of [p, p + bytes) with kernels; true when
// all read back as written.
bool write_and_check(void* p, std::size_t bytes, std::uint32_t seed,
                     unsigned long long* bad_counter) {
  const std::size_t n = bytes / 4;
  auto* words = static_cast<std::uint32_t*>(p);
  if (!cuda_ok(cudaMemset(bad_counter, 0, sizeof(*bad_counter)), "cudaMemset")) return false;
  fill_words<<<132, 256>>>(words, n, seed);
  count_mismatches<<<132, 256>>>(words, n, seed, bad_counter);
  unsigned long long bad = 0;
  if (!cuda_ok(cudaMemcpy(&bad, bad_counter, sizeof(bad), cudaMemcpyDeviceToHost), "check"))
    return false;
  if (bad != 0) std::fprintf(stderr, "%llu of %zu words read back wrong\n", bad, n);
  return bad == 0;
}

bool planted_read(const void* p, std::uint32_t* sink) {
  read_word<<<1, 1>>>(static_cast<const std::uint32_t*>(p), sink);
  return cuda_ok(cudaDeviceSynchronize(), "planted read");
}

// nvtxMemHeapRegister over [p, p + bytes): with memlake's category and
// registered message (full) or with only what the API requires.
bool heap_accepted(nvtxDomainHandle_t domain, void* p, std::size_t bytes, bool full) {
  nvtxMemVirtualRangeDesc_t range{};
  range.size = bytes;
  range.ptr = p;
  nvtxMemHeapDesc_t desc{};
  desc.extCompatID = NVTX_EXT_COMPATID_MEM;
  desc.structSize = sizeof desc;
  desc.usage = NVTX_MEM_HEAP_USAGE_TYPE_SUB_ALLOCATOR;
  desc.type = NVTX_MEM_TYPE_VIRTUAL_ADDRESS;
  desc.typeSpecificDescSize = sizeof range;
  desc.typeSpecificDesc = &range;
  if (full) {
    desc.category = 1;
    desc.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
    desc.message.registered = nvtxDomainRegisterStringA(domain, "probe heap");
  }
  nvtxMemHeapHandle_t heap = nvtxMemHeapRegister(domain, &desc);
  if (heap != nullptr) nvtxMemHeapUnregister(domain, heap);
  return heap != nullptr;
}

int heap_probe() {
  nvtxDomainHandle_t domain = nvtxDomainCreateA("memlake-probe");
  void* runtime = nullptr;
  if (!cuda_ok(cudaMalloc(&runtime, 4 * kMiB), "cudaMalloc")) return 1;
  memlake::CudaBackend backend;
  const std::size_t g = backend.granularity();
  memlake::ChunkHandle chunk{};
  memlake::DevicePtr va = 0;
  if (backend.create_chunk(g, &chunk) != memlake::Status::ok ||
      backend.reserve(g, &va) != memlake::Status::ok ||
      backend.map(va, g, chunk) != memlake::Status::ok ||
      backend.set_access(va, g) != memlake::Status::ok) {
    std::fprintf(stderr, "VMM: %s\n", backend.last_error().c_str());
    return 1;
  }
  void* mapped = reinterpret_cast<void*>(va);
  std::printf("heap over cudaMalloc memory, minimal: %s\n",
              heap_accepted(domain, runtime, 4 * kMiB, false) ? "accepted" : "refused");
  std::printf("heap over cudaMalloc memory, as memlake: %s\n",
              heap_accepted(domain, runtime, 4 * kMiB, true) ? "accepted" : "refused");
  std::printf("heap over a VMM-mapped range, minimal: %s\n",
              heap_accepted(domain, mapped, g, false) ? "accepted" : "refused");
  std::printf("heap over a VMM-mapped range, as memlake: %s\n",
              heap_accepted(domain, mapped, g, true) ? "accepted" : "refused");
  backend.unmap(va, g);
  backend.release_chunk(chunk);
  backend.unreserve(va, g);
  cudaFree(runtime);
  return 0;
}

int run(const std::string& mode, bool nvtx) {
  if (mode == "heap-probe") return heap_probe();
  memlake::Config c;
  c.backend = memlake::BackendKind::cuda;
  c.nvtx = nvtx;
  c.max_chunk =
      2 * kMiB;  // chunks of one granule, so that 8 MiB from four freed chunks is a stitch
  c.capacity = 256 * kMiB;
  memlake::Allocator a(c);
  unsigned long long* bad_counter = nullptr;
  std::uint32_t* sink = nullptr;
  if (!cuda_ok(cudaMalloc(&bad_counter, sizeof(*bad_counter)), "cudaMalloc") ||
      !cuda_ok(cudaMalloc(&sink, sizeof(*sink)), "cudaMalloc"))
    return 1;

  if (mode == "valid") {
    void* primary = a.allocate(4 * kMiB);
    if (!write_and_check(primary, 4 * kMiB, 1, bad_counter)) return 1;
    std::vector<void*> chunks;
    for (int i = 0; i < 4; ++i) chunks.push_back(a.allocate(2 * kMiB));
    for (void* p : chunks) a.deallocate(p, 2 * kMiB);
    if (!cuda_ok(cudaDeviceSynchronize(), "sync")) return 1;
    a.process_pending_frees();
    const auto stitches_before = a.stats().rung_stitch.current;
    void* stitched = a.allocate(8 * kMiB);
    const bool was_stitched = a.stats().rung_stitch.current > stitches_before;
    std::printf("stitched block: %s\n", was_stitched ? "yes" : "no (served another way)");
    if (!write_and_check(stitched, 8 * kMiB, 2, bad_counter)) return 1;
    a.deallocate(stitched, 8 * kMiB);
    a.deallocate(primary, 4 * kMiB);
  } else if (mode == "freed") {
    void* p = a.allocate(4 * kMiB);
    if (!write_and_check(p, 4 * kMiB, 3, bad_counter)) return 1;
    a.deallocate(p, 4 * kMiB);
    if (!cuda_ok(cudaDeviceSynchronize(), "sync")) return 1;
    std::printf("reading a word of a freed block at %p\n", p);
    if (!planted_read(static_cast<char*>(p) + kMiB, sink)) return 1;
  } else if (mode == "past-end") {
    void* p = a.allocate(3 * kMiB);
    if (!write_and_check(p, 3 * kMiB, 4, bad_counter)) return 1;
    std::printf("reading the word after a 3 MiB block at %p\n", p);
    if (!planted_read(static_cast<char*>(p) + 3 * kMiB, sink)) return 1;
    a.deallocate(p, 3 * kMiB);
  } else {
    std::fprintf(stderr, "unknown mode '%s' (valid, freed, past-end, heap-probe)\n", mode.c_str());
    return 2;
  }
  cudaFree(sink);
  cudaFree(bad_counter);
  return cuda_ok(cudaDeviceSynchronize(), "final sync") ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3 || (argc == 3 && std::strcmp(argv[2], "--no-nvtx") != 0)) {
    std::fprintf(stderr, "usage: %s valid|freed|past-end|heap-probe [--no-nvtx]\n", argv[0]);
    return 2;
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "no GPU\n");
    return 77;
  }
  try {
    return run(argv[1], argc == 2);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "memlake: %s\n", e.what());
    return 1;
  }
}
