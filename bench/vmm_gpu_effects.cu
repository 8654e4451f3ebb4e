// memlake_vmm_gpu_effects: what VMM mappings cost the GPU and the training
// thread beyond the host time of each call, measured in isolation:
//
//   kernels    the speed of a streaming kernel and of a random gather over
//              1 GiB (--mib) backed five ways: cudaMalloc; one VMM handle;
//              16 MiB handles; 2 MiB handles in order; 2 MiB handles mapped
//              in shuffled order (a stitched range). Rounds interleave the
//              backings. Every element is checked after the streaming passes.
//   busy       the host time of each VMM call (create, reserve, map, set
//              access, unmap, release, free address) with the GPU idle and
//              while a streaming kernel of a few milliseconds runs on another
//              stream; a call that returns only after that kernel ended waited
//              for the GPU, and is counted.
//   stall      the streaming kernel's own duration alone and while another
//              thread maps and unmaps 2 MiB chunks: what mapping costs the
//              kernels already running.
//
// Exits 77 without a GPU. Prints one line per measurement.
//   memlake_vmm_gpu_effects [--rounds 3] [--mib 1024] [--cycles 200]
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "backend/cuda/cuda_backend.hpp"
#include "host_timing.hpp"

namespace {

using memlake::Status;
using memlake::bench::Clock;
using memlake::bench::ns_since;
using memlake::bench::quantile;
constexpr std::size_t kMiB = std::size_t{1} << 20;

struct Options {
  int rounds = 3;
  std::size_t bytes = 1024 * kMiB;
  int cycles = 200;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    const long v = std::strtol(argv[i + 1], nullptr, 10);
    if (a == "--rounds")
      o.rounds = static_cast<int>(v);
    else if (a == "--mib")
      o.bytes = static_cast<std::size_t>(v) * kMiB;
    else if (a == "--cycles")
      o.cycles = static_cast<int>(v);
    else {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      std::exit(2);
    }
  }
  if (argc % 2 == 0 || o.rounds < 1 || o.cycles < 10 || o.bytes < 64 * kMiB ||
      o.bytes % (16 * kMiB) != 0) {
    std::fprintf(stderr,
                 "usage: memlake_vmm_gpu_effects [--rounds N] [--mib M (a multiple of 16, "
                 ">= 64)] [--cycles N]\n");
    std::exit(2);
  }
  return o;
}

__global__ void fill_kernel(float* a, std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x)
    a[i] = static_cast<float>(i % 1024);
}

__global__ void stream_kernel(float* a, std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x)
    a[i] = a[i] + 1.0f;
}

// Random 4-byte reads over the whole buffer: what a page walk costs shows here
// first.
__global__ void gather_kernel(const float* a, std::size_t n, std::size_t reads, float* sink) {
  float acc = 0;
  for (std::size_t j = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; j < reads;
       j += std::size_t{gridDim.x} * blockDim.x) {
    std::uint64_t h = j * 0x9E3779B97F4A7C15ull;
    h ^= h >> 29;
    acc += a[h % n];
  }
  if (acc == -1.0f) *sink = acc;  // keeps the reads
}

__global__ void check_kernel(const float* a, std::size_t n, float added,
                             unsigned long long* wrong) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x)
    if (a[i] != static_cast<float>(i % 1024) + added) atomicAdd(wrong, 1ull);
}

constexpr int kBlocks = 132 * 8;
constexpr int kThreads = 256;

// A device buffer backed by cudaMalloc or by VMM handles of one size, mapped
// in order or shuffled.
class Backing {
 public:
  Backing(memlake::CudaBackend& backend, std::string name, std::size_t bytes, std::size_t handle,
          bool shuffled)
      : backend_(backend), name_(std::move(name)), bytes_(bytes) {
    if (handle == 0) {
      void* p = nullptr;
      ok_ = cudaMalloc(&p, bytes) == cudaSuccess;
      base_ = reinterpret_cast<memlake::DevicePtr>(p);
      return;
    }
    handle_ = handle;
    ok_ = backend.reserve(bytes, &base_) == Status::ok;
    std::vector<std::size_t> order(bytes / handle);
    std::iota(order.begin(), order.end(), std::size_t{0});
    if (shuffled) std::shuffle(order.begin(), order.end(), std::mt19937(7));
    chunks_.resize(order.size());
    for (auto& c : chunks_) ok_ = ok_ && backend.create_chunk(handle, &c) == Status::ok;
    for (std::size_t i = 0; ok_ && i < order.size(); ++i)
      ok_ = backend.map(base_ + order[i] * handle, handle, chunks_[i]) == Status::ok;
    ok_ = ok_ && backend.set_access(base_, bytes) == Status::ok;
    if (!ok_) std::fprintf(stderr, "%s: %s\n", name_.c_str(), backend.last_error().c_str());
  }
  ~Backing() {
    if (handle_ == 0) {
      cudaFree(data());
      return;
    }
    backend_.unmap(base_, bytes_);
    for (auto c : chunks_) backend_.release_chunk(c);
    backend_.unreserve(base_, bytes_);
  }
  Backing(const Backing&) = delete;
  Backing& operator=(const Backing&) = delete;

  bool ok() const { return ok_; }
  const std::string& name() const { return name_; }
  float* data() const { return reinterpret_cast<float*>(base_); }
  std::size_t floats() const { return bytes_ / sizeof(float); }

 private:
  memlake::CudaBackend& backend_;
  std::string name_;
  std::size_t bytes_;
  std::size_t handle_ = 0;
  memlake::DevicePtr base_ = 0;
  std::vector<memlake::ChunkHandle> chunks_;
  bool ok_ = false;
};

float elapsed_ms(cudaEvent_t a, cudaEvent_t b) {
  float ms = 0;
  cudaEventElapsedTime(&ms, a, b);
  return ms;
}

// Streams `passes` times over the buffer, then gathers; checks every element.
bool time_kernels(const Backing& b, int passes, float* sink, unsigned long long* wrong,
                  double* stream_gbs, double* gather_ms) {
  cudaEvent_t e0, e1, e2;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  cudaEventCreate(&e2);
  fill_kernel<<<kBlocks, kThreads>>>(b.data(), b.floats());
  cudaEventRecord(e0);
  for (int p = 0; p < passes; ++p) stream_kernel<<<kBlocks, kThreads>>>(b.data(), b.floats());
  cudaEventRecord(e1);
  gather_kernel<<<kBlocks, kThreads>>>(b.data(), b.floats(), std::size_t{1} << 26, sink);
  cudaEventRecord(e2);
  cudaMemset(wrong, 0, sizeof(*wrong));
  check_kernel<<<kBlocks, kThreads>>>(b.data(), b.floats(), static_cast<float>(passes), wrong);
  unsigned long long host_wrong = 1;
  const bool ok =
      cudaMemcpy(&host_wrong, wrong, sizeof(host_wrong), cudaMemcpyDeviceToHost) == cudaSuccess &&
      host_wrong == 0;
  const double ms = elapsed_ms(e0, e1);
  *stream_gbs = 2.0 * static_cast<double>(b.floats() * sizeof(float)) * passes / (ms * 1e6);
  *gather_ms = elapsed_ms(e1, e2);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaEventDestroy(e2);
  if (!ok)
    std::fprintf(stderr, "%s: %llu elements wrong after streaming\n", b.name().c_str(), host_wrong);
  return ok;
}

bool kernels(memlake::CudaBackend& backend, const Options& o) {
  float* sink = nullptr;
  unsigned long long* wrong = nullptr;
  if (cudaMalloc(&sink, sizeof(float)) != cudaSuccess ||
      cudaMalloc(&wrong, sizeof(*wrong)) != cudaSuccess)
    return false;
  struct Kind {
    const char* name;
    std::size_t handle;
    bool shuffled;
  };
  const Kind kinds[] = {{"cudaMalloc", 0, false},
                        {"vmm-one-handle", o.bytes, false},
                        {"vmm-16MiB-handles", 16 * kMiB, false},
                        {"vmm-2MiB-handles", 2 * kMiB, false},
                        {"vmm-2MiB-shuffled", 2 * kMiB, true}};
  bool ok = true;
  for (int round = 0; round < o.rounds; ++round) {
    for (const Kind& k : kinds) {
      Backing b(backend, k.name, o.bytes, k.handle, k.shuffled);
      double gbs = 0, gather = 0;
      if (!b.ok() || !time_kernels(b, 10, sink, wrong, &gbs, &gather)) {
        ok = false;
        continue;
      }
      std::printf("kernels round %d %-18s stream %7.1f GB/s  gather(64M reads) %7.3f ms\n", round,
                  k.name, gbs, gather);
    }
  }
  cudaFree(sink);
  cudaFree(wrong);
  return ok;
}

// One mapping's life, as the lake lives it: create, reserve, map, set access,
// unmap, release, free the address range. Times each call; flags a call that
// returned only after `busy` (an event after the running kernel) completed.
struct CycleTimes {
  std::vector<double> ns[7];
  int waited[7] = {};
};
const char* const kCallNames[7] = {"create", "reserve", "map",         "set_access",
                                   "unmap",  "release", "free_address"};

bool cycle(memlake::CudaBackend& backend, cudaEvent_t busy, CycleTimes* t) {
  memlake::ChunkHandle chunk{};
  memlake::DevicePtr va = 0;
  const std::size_t n = 2 * kMiB;
  auto timed = [&](int k, auto&& call) {
    const bool running_before = busy != nullptr && cudaEventQuery(busy) == cudaErrorNotReady;
    const auto t0 = Clock::now();
    const bool ok = call() == Status::ok;
    t->ns[k].push_back(ns_since(t0));
    if (running_before && cudaEventQuery(busy) == cudaSuccess) ++t->waited[k];
    return ok;
  };
  return timed(0, [&] { return backend.create_chunk(n, &chunk); }) &&
         timed(1, [&] { return backend.reserve(n, &va); }) &&
         timed(2, [&] { return backend.map(va, n, chunk); }) &&
         timed(3, [&] { return backend.set_access(va, n); }) &&
         timed(4, [&] { return backend.unmap(va, n); }) &&
         timed(5, [&] { return backend.release_chunk(chunk); }) &&
         timed(6, [&] { return backend.unreserve(va, n); });
}

bool busy(memlake::CudaBackend& backend, const Options& o) {
  Backing work(backend, "busy-buffer", 256 * kMiB, 0, false);
  cudaStream_t stream;
  cudaEvent_t done;
  if (!work.ok() || cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess ||
      cudaEventCreateWithFlags(&done, cudaEventDisableTiming) != cudaSuccess)
    return false;
  for (int round = 0; round < o.rounds; ++round) {
    CycleTimes idle, loaded;
    for (int i = 0; i < o.cycles; ++i)
      if (!cycle(backend, nullptr, &idle)) return false;
    for (int i = 0; i < o.cycles; ++i) {
      // About 2 ms of streaming per cycle, so the cycle's calls run beside it.
      for (int p = 0; p < 8; ++p)
        stream_kernel<<<kBlocks, kThreads, 0, stream>>>(work.data(), work.floats());
      cudaEventRecord(done, stream);
      if (!cycle(backend, done, &loaded)) return false;
      cudaStreamSynchronize(stream);
    }
    for (int k = 0; k < 7; ++k)
      std::printf(
          "busy round %d %-13s idle median %7.1f us p99 %8.1f | GPU busy median %7.1f us p99 "
          "%8.1f, returned after the kernels ended: %d of %d\n",
          round, kCallNames[k], quantile(idle.ns[k], 0.5) / 1e3, quantile(idle.ns[k], 0.99) / 1e3,
          quantile(loaded.ns[k], 0.5) / 1e3, quantile(loaded.ns[k], 0.99) / 1e3, loaded.waited[k],
          o.cycles);
  }
  cudaEventDestroy(done);
  cudaStreamDestroy(stream);
  return true;
}

bool stall(memlake::CudaBackend& backend, const Options& o) {
  Backing work(backend, "stall-buffer", 512 * kMiB, 0, false);
  cudaEvent_t e0, e1;
  if (!work.ok() || cudaEventCreate(&e0) != cudaSuccess || cudaEventCreate(&e1) != cudaSuccess)
    return false;
  auto time_passes = [&] {
    std::vector<double> ms;
    for (int i = 0; i < 40; ++i) {
      cudaEventRecord(e0);
      stream_kernel<<<kBlocks, kThreads>>>(work.data(), work.floats());
      cudaEventRecord(e1);
      cudaEventSynchronize(e1);
      ms.push_back(elapsed_ms(e0, e1));
    }
    return ms;
  };
  for (int round = 0; round < o.rounds; ++round) {
    const auto quiet = time_passes();
    std::atomic<bool> stop{false};
    std::atomic<long> calls{0};
    std::atomic<bool> failed{false};
    std::thread mapper([&] {
      CycleTimes t;
      while (!stop) {
        if (!cycle(backend, nullptr, &t)) {
          failed = true;
          return;
        }
        calls += 7;
      }
    });
    const auto t0 = Clock::now();
    const auto mapped = time_passes();
    const double seconds = ns_since(t0) / 1e9;
    stop = true;
    mapper.join();
    if (failed) return false;
    std::printf(
        "stall round %d streaming pass (512 MiB) quiet median %.3f ms max %.3f | beside %.0f VMM "
        "calls/s median %.3f ms max %.3f\n",
        round, quantile(quiet, 0.5), quantile(quiet, 1.0), static_cast<double>(calls) / seconds,
        quantile(mapped, 0.5), quantile(mapped, 1.0));
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  if (memlake::CudaBackend::device_count() == 0) {
    std::fprintf(stderr, "no GPU\n");
    return 77;
  }
  memlake::CudaBackend backend;
  const bool ok = kernels(backend, o) && busy(backend, o) && stall(backend, o);
  if (!ok)
    std::fprintf(stderr, "failed: %s / %s\n", backend.last_error().c_str(),
                 cudaGetErrorString(cudaGetLastError()));
  return ok ? 0 : 1;
}
