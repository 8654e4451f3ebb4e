// cudaMallocAsync replay (see async_replay.hpp). Built only with the CUDA
// toolkit; elsewhere it says why it did not run.
#include "replay/async_replay.hpp"

#include "replay/format.hpp"

#include <algorithm>
#include <chrono>
#include <unordered_map>
#include <vector>

#if MEMLAKE_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace memlake {

#if MEMLAKE_HAVE_CUDA
namespace {
std::string cuda_failure(const char* what, cudaError_t e) {
  return std::string(what) + " failed: " + cudaGetErrorName(e);
}
}  // namespace

AsyncResult replay_cuda_async(const ReplaySetup& setup, int device) {
  AsyncResult r;
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count <= device) {
    r.why_not = "no GPU";
    return r;
  }
  int previous = 0;
  cudaGetDevice(&previous);
  cudaSetDevice(device);
  cudaMemPool_t pool = nullptr;
  if (cudaError_t e = cudaDeviceGetDefaultMemPool(&pool, device); e != cudaSuccess) {
    r.why_not = cuda_failure("cudaDeviceGetDefaultMemPool", e);
    cudaSetDevice(previous);
    return r;
  }
  std::uint64_t value = UINT64_MAX;
  cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &value);
  cudaMemPoolTrimTo(pool, 0);
  value = 0;
  cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &value);
  cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &value);

  const Trace& t = *setup.trace;
  std::unordered_map<std::uint64_t, cudaStream_t> streams;
  std::vector<void*> ptrs(t.events.size(), nullptr);
  std::vector<std::uint32_t> alloc_ns, free_ns, alloc_ns_after_warmup;
  const auto warm = static_cast<std::size_t>(static_cast<double>(t.events.size()) *
                                             std::clamp(setup.warmup_fraction, 0.0, 1.0));
  alloc_ns.reserve(t.events.size() / 2 + 1);
  free_ns.reserve(t.events.size() / 2 + 1);
  for (std::size_t i = 0; i < t.events.size() && r.why_not.empty(); ++i) {
    const Event& e = t.events[i];
    auto it = streams.find(e.stream);
    if (it == streams.end()) {
      cudaStream_t s = nullptr;
      if (cudaError_t err = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
          err != cudaSuccess) {
        r.why_not = cuda_failure("cudaStreamCreate", err);
        break;
      }
      it = streams.emplace(e.stream, s).first;
    }
    const auto t0 = std::chrono::steady_clock::now();
    cudaError_t err;
    if (e.op == TraceOp::alloc) {
      err = cudaMallocAsync(&ptrs[i], e.bytes, it->second);
    } else {
      const std::uint32_t a = (*setup.alloc_of)[i];
      err = cudaFreeAsync(ptrs[a], it->second);
      ptrs[a] = nullptr;
    }
    const auto ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0);
    (e.op == TraceOp::alloc ? alloc_ns : free_ns).push_back(static_cast<std::uint32_t>(ns.count()));
    if (e.op == TraceOp::alloc && i >= warm)
      alloc_ns_after_warmup.push_back(static_cast<std::uint32_t>(ns.count()));
    if (err != cudaSuccess)
      r.why_not = cuda_failure(e.op == TraceOp::alloc ? "cudaMallocAsync" : "cudaFreeAsync", err);
  }
  for (std::size_t i = 0; i < ptrs.size(); ++i) {
    if (ptrs[i]) cudaFreeAsync(ptrs[i], streams[t.events[i].stream]);
  }
  cudaDeviceSynchronize();
  cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &r.reserved_high);
  cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &r.used_high);
  for (auto& [id, s] : streams) cudaStreamDestroy(s);
  cudaMemPoolTrimTo(pool, 0);
  cudaSetDevice(previous);
  r.alloc_ns = percentiles(std::move(alloc_ns));
  r.free_ns = percentiles(std::move(free_ns));
  r.alloc_ns_after_warmup = percentiles(std::move(alloc_ns_after_warmup));
  r.ran = r.why_not.empty();
  return r;
}
#else
AsyncResult replay_cuda_async(const ReplaySetup&, int) {
  AsyncResult r;
  r.why_not = "built without the CUDA toolkit";
  return r;
}
#endif

namespace {

double memlake_ratio(const AsyncResult& a, std::uint64_t memlake_peak) {
  return a.ran && a.reserved_high && memlake_peak ? ratio(memlake_peak, a.reserved_high) : 0;
}

}  // namespace

void print_cuda_async(std::FILE* out, const AsyncResult& a, std::uint64_t memlake_peak) {
  if (!a.ran) {
    std::fprintf(out, "  cudaMallocAsync  not run: %s\n\n", a.why_not.c_str());
    return;
  }
  std::fprintf(out,
               "  cudaMallocAsync  measured here: peak reserved %s, used high %s; memlake / it "
               "%.3f; ns per alloc median/p99 %llu/%llu (after warm-up %llu/%llu), free "
               "%llu/%llu\n\n",
               gib(a.reserved_high).c_str(), gib(a.used_high).c_str(),
               memlake_ratio(a, memlake_peak), static_cast<unsigned long long>(a.alloc_ns.median),
               static_cast<unsigned long long>(a.alloc_ns.p99),
               static_cast<unsigned long long>(a.alloc_ns_after_warmup.median),
               static_cast<unsigned long long>(a.alloc_ns_after_warmup.p99),
               static_cast<unsigned long long>(a.free_ns.median),
               static_cast<unsigned long long>(a.free_ns.p99));
}

std::string cuda_async_json_member(const AsyncResult& a, std::uint64_t memlake_peak) {
  if (!a.ran) return ",\"cuda_async_measured\":null";
  Json j;
  j.key("peak_reserved_bytes").u(a.reserved_high).key("used_high_bytes").u(a.used_high);
  j.key("memlake_ratio").d(memlake_ratio(a, memlake_peak));
  j.key("alloc_ns_median").u(a.alloc_ns.median).key("free_ns_median").u(a.free_ns.median);
  j.key("alloc_ns_p99").u(a.alloc_ns.p99).key("free_ns_p99").u(a.free_ns.p99);
  j.key("alloc_ns_after_warmup_median").u(a.alloc_ns_after_warmup.median);
  j.key("alloc_ns_after_warmup_p99").u(a.alloc_ns_after_warmup.p99);
  return ",\"cuda_async_measured\":" + j.done();
}

}  // namespace memlake
