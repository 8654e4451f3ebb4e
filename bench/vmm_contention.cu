// memlake_vmm_contention: how much a thread making VMM calls (what memlake's
// mapping worker does: create a chunk, reserve, map, set access, unmap,
// release) slows the training thread's own CUDA calls. The training thread
// times, per call, kernel launches, event records and small async copies
// while phases alternate: quiet (no other thread), and with a VMM thread
// mapping and unmapping `--chunk-mib` chunks as fast as it can (or at
// `--vmm-per-ms` calls per millisecond). Each phase runs `--calls` of each
// kind; phases alternate `--rounds` times so drift shows beside the effect.
// Prints per phase the median, p99 and p99.9 host nanoseconds of each call,
// and the VMM thread's calls per second. Exits 77 without a GPU.
//
//   memlake_vmm_contention [--rounds 3] [--calls 20000] [--chunk-mib 2] [--vmm-per-ms 0]
#include <cuda_runtime.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "backend/cuda/cuda_backend.hpp"
#include "host_timing.hpp"

namespace {

using memlake::bench::Clock;
using memlake::bench::ns_since;
using memlake::bench::quantile;
constexpr std::size_t kMiB = std::size_t{1} << 20;

__global__ void empty_kernel(int* p) {
  if (p != nullptr && threadIdx.x == 1024) *p = 0;  // never true: keeps the argument live
}

struct Options {
  int rounds = 3;
  int calls = 20000;
  std::size_t chunk = 2 * kMiB;
  double vmm_per_ms = 0;  // 0: as fast as the driver allows
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    const double v = std::strtod(argv[i + 1], nullptr);
    if (a == "--rounds")
      o.rounds = static_cast<int>(v);
    else if (a == "--calls")
      o.calls = static_cast<int>(v);
    else if (a == "--chunk-mib")
      o.chunk = static_cast<std::size_t>(v) * kMiB;
    else if (a == "--vmm-per-ms")
      o.vmm_per_ms = v;
    else {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      std::exit(2);
    }
  }
  if (argc % 2 == 0 || o.rounds < 1 || o.calls < 100 || o.chunk == 0) {
    std::fprintf(stderr,
                 "usage: memlake_vmm_contention [--rounds N] [--calls N] [--chunk-mib M] "
                 "[--vmm-per-ms R]\n");
    std::exit(2);
  }
  return o;
}

// The mapping worker's calls, in a loop until told to stop: six VMM calls per
// cycle. Counts cycles; stops at the first failure and reports it.
class VmmThread {
 public:
  VmmThread(memlake::CudaBackend& backend, const Options& o) : backend_(backend), options_(o) {}

  void start() {
    stop_ = false;
    calls_ = 0;
    thread_ = std::thread([this] { loop(); });
  }
  long stop() {
    stop_ = true;
    thread_.join();
    return calls_;
  }
  bool failed() const { return failed_; }

 private:
  void loop() {
    using memlake::Status;
    const auto t0 = Clock::now();
    while (!stop_) {
      memlake::ChunkHandle chunk{};
      memlake::DevicePtr va = 0;
      const std::size_t n = options_.chunk;
      if (backend_.create_chunk(n, &chunk) != Status::ok ||
          backend_.reserve(n, &va) != Status::ok || backend_.map(va, n, chunk) != Status::ok ||
          backend_.set_access(va, n) != Status::ok || backend_.unmap(va, n) != Status::ok ||
          backend_.release_chunk(chunk) != Status::ok || backend_.unreserve(va, n) != Status::ok) {
        std::fprintf(stderr, "VMM call failed: %s\n", backend_.last_error().c_str());
        failed_ = true;
        return;
      }
      calls_ += 7;
      if (options_.vmm_per_ms > 0) {
        const double due_ms = static_cast<double>(calls_) / options_.vmm_per_ms;
        std::this_thread::sleep_until(t0 +
                                      std::chrono::microseconds(static_cast<long>(due_ms * 1e3)));
      }
    }
  }

  memlake::CudaBackend& backend_;
  Options options_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<long> calls_{0};
  std::atomic<bool> failed_{false};
};

struct Percentiles {
  double median, p99, p999;
};

Percentiles percentiles(const std::vector<double>& v) {
  return {quantile(v, 0.5), quantile(v, 0.99), quantile(v, 0.999)};
}

// Times `calls` of each CUDA call kind on `stream`; synchronizes every 512
// launches (untimed) so the launch queue never fills.
bool time_calls(int calls, cudaStream_t stream, const char* phase) {
  std::vector<double> launch, record, copy;
  launch.reserve(calls);
  record.reserve(calls);
  copy.reserve(calls);
  cudaEvent_t event;
  int* device_word = nullptr;
  int host_word = 0;
  if (cudaEventCreateWithFlags(&event, cudaEventDisableTiming) != cudaSuccess ||
      cudaMalloc(&device_word, sizeof(int)) != cudaSuccess)
    return false;
  for (int i = 0; i < calls; ++i) {
    auto t = Clock::now();
    empty_kernel<<<1, 32, 0, stream>>>(device_word);
    launch.push_back(ns_since(t));
    t = Clock::now();
    cudaEventRecord(event, stream);
    record.push_back(ns_since(t));
    t = Clock::now();
    cudaMemcpyAsync(device_word, &host_word, sizeof(int), cudaMemcpyHostToDevice, stream);
    copy.push_back(ns_since(t));
    if (i % 512 == 511) cudaStreamSynchronize(stream);
  }
  const bool ok = cudaStreamSynchronize(stream) == cudaSuccess;
  cudaFree(device_word);
  cudaEventDestroy(event);
  const Percentiles l = percentiles(launch), r = percentiles(record), c = percentiles(copy);
  std::printf(
      "%-10s launch %7.0f %8.0f %9.0f | event record %7.0f %8.0f %9.0f | memcpy async %7.0f %8.0f "
      "%9.0f\n",
      phase, l.median, l.p99, l.p999, r.median, r.p99, r.p999, c.median, c.p99, c.p999);
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  if (memlake::CudaBackend::device_count() == 0) {
    std::fprintf(stderr, "no GPU\n");
    return 77;
  }
  memlake::CudaBackend backend;
  cudaStream_t stream;
  if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) return 1;
  VmmThread vmm(backend, o);
  std::printf(
      "host ns per call (median, p99, p99.9); chunk %zu MiB, VMM pace %s\n", o.chunk / kMiB,
      o.vmm_per_ms > 0 ? (std::to_string(o.vmm_per_ms) + " calls/ms").c_str() : "unbounded");
  time_calls(1000, stream, "warm-up");
  for (int round = 0; round < o.rounds; ++round) {
    if (!time_calls(o.calls, stream, "quiet")) return 1;
    vmm.start();
    const auto t0 = Clock::now();
    const bool ok = time_calls(o.calls, stream, "with-VMM");
    const double seconds = ns_since(t0) / 1e9;
    const long calls = vmm.stop();
    std::printf("%-10s (the VMM thread made %ld calls in %.2f s: %.0f per second)\n", "", calls,
                seconds, static_cast<double>(calls) / seconds);
    if (!ok || vmm.failed()) return 1;
  }
  cudaStreamDestroy(stream);
  return 0;
}
