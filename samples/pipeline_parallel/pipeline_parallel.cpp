// pipeline_parallel: a 1F1B pipeline schedule through memlake. Four stages run
// on four streams of one allocator; each micro-batch's activation is produced
// on stage k's stream and consumed, then freed, on stage k+1's stream
// (record_stream first, PyTorch style), and its gradient travels back the
// same way. Weights and gradients live per stage; sequence lengths vary per
// micro-batch, so every size is irregular. The "kernels" write a tag into
// each buffer they produce and check the tags of what they consume, in stream
// order: on the HostBackend they are host jobs (launch_host_func), on CUDA
// cudaMemsetAsync writes and cudaMemcpyAsync copies samples back for a check.
// A block handed out again before its last reader ran shows up as a mismatch;
// the sample counts them and exits non-zero if there is any.
//
//   pipeline_parallel --backend host --steps 4 --microbatches 8 --scale 1
//
// On CUDA the same schedule also runs through cudaMallocAsync/cudaFreeAsync
// on a pool that keeps everything (release threshold UINT64_MAX), and its
// reserved high watermark is printed beside memlake's peak reserved.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "backend/backend.hpp"
#include "memlake/allocator.hpp"

#if MEMLAKE_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace {

constexpr int kStages = 4;

struct Options {
  std::string backend = "host";
  int steps = 4;
  int microbatches = 8;
  double scale = 1.0;
  std::uint64_t seed = 1;
  bool corrupt = false;  // change one byte behind the schedule's back (tests the checks)
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "pipeline_parallel: %s\n"
               "usage: pipeline_parallel [--backend host|cuda] [--steps N] [--microbatches M]\n"
               "                         [--scale X] [--seed S] [--corrupt]\n",
               why);
  std::exit(2);
}

Options parse_args(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) usage(("missing value for " + std::string(a)).c_str());
      return argv[++i];
    };
    if (a == "--backend") {
      o.backend = value();
      if (o.backend != "host" && o.backend != "cuda") usage("--backend is host or cuda");
    } else if (a == "--steps") {
      o.steps = std::atoi(value());
    } else if (a == "--microbatches") {
      o.microbatches = std::atoi(value());
    } else if (a == "--scale") {
      o.scale = std::atof(value());
    } else if (a == "--seed") {
      o.seed = std::strtoull(value(), nullptr, 10);
    } else if (a == "--corrupt") {
      o.corrupt = true;
    } else if (a == "--help" || a == "-h") {
      usage("help");
    } else {
      usage(("unknown argument " + std::string(a)).c_str());
    }
  }
  if (o.steps < 1 || o.microbatches < 1 || !(o.scale > 0))
    usage("bad --steps, --microbatches or --scale");
  return o;
}

// Wall time of `f` (the schedule, up to its final synchronize).
template <class F>
double timed_ms(F&& f) {
  const auto start = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

std::uint64_t mix(std::uint64_t x) {
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  x *= 0x94D049BB133111EBull;
  return x ^ (x >> 32);
}

// ---- where the kernels run ---------------------------------------------------

using memlake::Stream;

// Writes and checks tags in buffers, in the order of each stream, and orders
// one stream after another.
class Device {
 public:
  virtual ~Device() = default;
  virtual void fill(void* p, std::size_t n, std::uint64_t tag, Stream s) = 0;
  virtual void check(const void* p, std::size_t n, std::uint64_t tag, Stream s) = 0;
  // Later work on `consumer` runs after the work queued on `producer` so far.
  virtual void order_after(Stream consumer, Stream producer) = 0;
  virtual void synchronize(const std::vector<Stream>& streams) = 0;
  // Changes one byte of a buffer at once, outside stream order.
  virtual void corrupt(void* p) = 0;
  std::uint64_t mismatches() const { return mismatches_.load(); }
  std::uint64_t checks() const { return checks_.load(); }

 protected:
  std::atomic<std::uint64_t> mismatches_{0};
  std::atomic<std::uint64_t> checks_{0};
};

// Host jobs on the HostBackend's streams. A job touches the first 64 bytes of
// every 4 KiB page and the last 64 bytes of the buffer: every page (and so
// every chunk of a stitched block) is looked at, at a fraction of the cost.
class HostDevice final : public Device {
 public:
  explicit HostDevice(memlake::Backend& backend) : backend_(backend) {}
  ~HostDevice() override {
    for (memlake::EventHandle e : events_) backend_.event_destroy(e);
  }

  void fill(void* p, std::size_t n, std::uint64_t tag, Stream s) override {
    launch(s, new Job{this, static_cast<unsigned char*>(p), n, tag, true});
  }
  void check(const void* p, std::size_t n, std::uint64_t tag, Stream s) override {
    launch(s, new Job{this, static_cast<unsigned char*>(const_cast<void*>(p)), n, tag, false});
  }
  void order_after(Stream consumer, Stream producer) override {
    memlake::EventHandle e = nullptr;
    if (backend_.event_create(&e) != memlake::Status::ok ||
        backend_.event_record(e, producer) != memlake::Status::ok ||
        backend_.stream_wait_event(consumer, e) != memlake::Status::ok)
      fatal("event");
    events_.push_back(e);
  }
  void synchronize(const std::vector<Stream>& streams) override {
    for (Stream s : streams)
      if (backend_.stream_synchronize(s) != memlake::Status::ok) fatal("stream_synchronize");
    for (memlake::EventHandle e : events_) backend_.event_destroy(e);
    events_.clear();
  }
  void corrupt(void* p) override { *static_cast<unsigned char*>(p) ^= 0x5A; }

 private:
  struct Job {
    HostDevice* device;
    unsigned char* p;
    std::size_t n;
    std::uint64_t tag;
    bool write;
    static void run(void* self) {
      std::unique_ptr<Job> j(static_cast<Job*>(self));
      bool ok = true;
      auto visit = [&](std::size_t at) {
        const std::size_t end = std::min(j->n, at + 64);
        for (std::size_t i = at; i < end; ++i) {
          const auto v = static_cast<unsigned char>(mix(j->tag + i));
          if (j->write)
            j->p[i] = v;
          else
            ok &= j->p[i] == v;
        }
      };
      for (std::size_t at = 0; at < j->n; at += 4096) visit(at);
      if (j->n > 64) visit(j->n - 64);
      if (!j->write) {
        j->device->checks_.fetch_add(1, std::memory_order_relaxed);
        if (!ok) j->device->mismatches_.fetch_add(1, std::memory_order_relaxed);
      }
    }
  };

  void launch(Stream s, Job* j) {
    if (backend_.launch_host_func(s, &Job::run, j) != memlake::Status::ok) {
      delete j;
      fatal("launch_host_func");
    }
  }
  [[noreturn]] void fatal(const char* what) {
    std::fprintf(stderr, "pipeline_parallel: %s failed: %s\n", what, backend_.last_error().c_str());
    std::exit(1);
  }

  memlake::Backend& backend_;
  std::vector<memlake::EventHandle> events_;
};

#if MEMLAKE_HAVE_CUDA
void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "pipeline_parallel: %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

// cudaMemsetAsync writes a tag byte over the whole buffer; a check copies
// its head, middle and tail (4 KiB each) into pinned memory and compares
// them in a host function queued behind the copies.
class CudaDevice final : public Device {
 public:
  ~CudaDevice() override {
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
    for (Slot* s : slots_) {
      cudaFreeHost(s->bytes);
      delete s;
    }
  }
  void fill(void* p, std::size_t n, std::uint64_t tag, Stream s) override {
    cuda_check(cudaMemsetAsync(p, byte_of(tag), n, to_stream(s)), "cudaMemsetAsync");
  }
  void check(const void* p, std::size_t n, std::uint64_t tag, Stream s) override {
    Slot* slot = next_slot();
    slot->expect = static_cast<unsigned char>(byte_of(tag));
    slot->length = 0;
    const std::size_t w = std::min<std::size_t>(kWindow, n);
    const std::size_t starts[3] = {0, n / 2 - std::min(n / 2, w / 2), n - w};
    for (std::size_t at : starts) {
      cuda_check(cudaMemcpyAsync(slot->bytes + slot->length, static_cast<const char*>(p) + at, w,
                                 cudaMemcpyDeviceToHost, to_stream(s)),
                 "cudaMemcpyAsync");
      slot->length += w;
    }
    cuda_check(cudaLaunchHostFunc(to_stream(s), &CudaDevice::compare, slot), "cudaLaunchHostFunc");
  }
  void order_after(Stream consumer, Stream producer) override {
    cudaEvent_t e = nullptr;
    cuda_check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
    cuda_check(cudaEventRecord(e, to_stream(producer)), "cudaEventRecord");
    cuda_check(cudaStreamWaitEvent(to_stream(consumer), e, 0), "cudaStreamWaitEvent");
    events_.push_back(e);
  }
  void synchronize(const std::vector<Stream>& streams) override {
    for (Stream s : streams)
      cuda_check(cudaStreamSynchronize(to_stream(s)), "cudaStreamSynchronize");
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
    events_.clear();
    used_ = 0;
  }
  void corrupt(void* p) override { cuda_check(cudaMemset(p, 0, 1), "cudaMemset"); }

 private:
  static constexpr std::size_t kWindow = 4096;
  struct Slot {
    CudaDevice* device;
    unsigned char* bytes;
    std::size_t length;
    unsigned char expect;
  };
  static int byte_of(std::uint64_t tag) { return static_cast<int>(mix(tag) % 255 + 1); }
  static cudaStream_t to_stream(Stream s) { return static_cast<cudaStream_t>(s); }
  static void CUDART_CB compare(void* user) {
    auto* slot = static_cast<Slot*>(user);
    bool ok = true;
    for (std::size_t i = 0; i < slot->length; ++i) ok &= slot->bytes[i] == slot->expect;
    slot->device->checks_.fetch_add(1, std::memory_order_relaxed);
    if (!ok) slot->device->mismatches_.fetch_add(1, std::memory_order_relaxed);
  }
  // Slots are reused after each synchronize().
  Slot* next_slot() {
    if (used_ == slots_.size()) {
      auto* s = new Slot{this, nullptr, 0, 0};
      cuda_check(cudaMallocHost(reinterpret_cast<void**>(&s->bytes), 3 * kWindow),
                 "cudaMallocHost");
      slots_.push_back(s);
    }
    return slots_[used_++];
  }

  std::vector<cudaEvent_t> events_;
  std::vector<Slot*> slots_;
  std::size_t used_ = 0;
};
#endif

// ---- where the memory comes from ---------------------------------------------

class Memory {
 public:
  virtual ~Memory() = default;
  virtual void* allocate(std::size_t n, Stream s) = 0;
  virtual void deallocate(void* p, std::size_t n, Stream s) = 0;
  // `p` (allocated elsewhere) is used on `s` from now on.
  virtual void record_stream(void* p, Stream s) = 0;
};

class MemlakeMemory final : public Memory {
 public:
  explicit MemlakeMemory(memlake::Allocator& a) : alloc_(a) {}
  void* allocate(std::size_t n, Stream s) override { return alloc_.allocate(n, s); }
  void deallocate(void* p, std::size_t n, Stream s) override { alloc_.deallocate(p, n, s); }
  void record_stream(void* p, Stream s) override { alloc_.record_stream(p, s); }

 private:
  memlake::Allocator& alloc_;
};

#if MEMLAKE_HAVE_CUDA
// cudaMallocAsync on a pool that never gives memory back.
class PoolMemory final : public Memory {
 public:
  explicit PoolMemory(int device) {
    cudaMemPoolProps props{};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = device;
    cuda_check(cudaMemPoolCreate(&pool_, &props), "cudaMemPoolCreate");
    std::uint64_t threshold = UINT64_MAX;
    cuda_check(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &threshold),
               "cudaMemPoolSetAttribute");
  }
  ~PoolMemory() override { cudaMemPoolDestroy(pool_); }
  void* allocate(std::size_t n, Stream s) override {
    void* p = nullptr;
    cuda_check(cudaMallocFromPoolAsync(&p, n, pool_, static_cast<cudaStream_t>(s)),
               "cudaMallocFromPoolAsync");
    return p;
  }
  void deallocate(void* p, std::size_t, Stream s) override {
    cuda_check(cudaFreeAsync(p, static_cast<cudaStream_t>(s)), "cudaFreeAsync");
  }
  // Stream order covers it: the consumer waited for the producer's work.
  void record_stream(void*, Stream) override {}
  std::uint64_t attribute(cudaMemPoolAttr a) const {
    std::uint64_t v = 0;
    cuda_check(cudaMemPoolGetAttribute(pool_, a, &v), "cudaMemPoolGetAttribute");
    return v;
  }

 private:
  cudaMemPool_t pool_ = nullptr;
};
#endif

// ---- the schedule ------------------------------------------------------------

struct Buffer {
  void* p = nullptr;
  std::size_t n = 0;
  std::uint64_t tag = 0;
};

enum class Kind : int { weight = 1, grad, act, grad_in, stash, workspace };

std::uint64_t tag_of(Kind kind, int step, int stage, int mb, int version = 0) {
  return mix((static_cast<std::uint64_t>(kind) << 56) ^ (static_cast<std::uint64_t>(step) << 40) ^
             (static_cast<std::uint64_t>(stage) << 32) ^ (static_cast<std::uint64_t>(mb) << 8) ^
             static_cast<std::uint64_t>(version));
}

// One op of a stage's 1F1B list: forward or backward of a micro-batch.
struct Op {
  bool forward;
  int mb;
};

// Stage k: (stages - k - 1) warm-up forwards, then one forward and one
// backward alternately, then the remaining backwards.
std::vector<Op> one_f_one_b(int stage, int microbatches) {
  std::vector<Op> ops;
  const int warmup = std::min(kStages - stage - 1, microbatches);
  int f = 0, b = 0;
  for (; f < warmup; ++f) ops.push_back({true, f});
  while (f < microbatches) {
    ops.push_back({true, f++});
    ops.push_back({false, b++});
  }
  while (b < microbatches) ops.push_back({false, b++});
  return ops;
}

class Pipeline {
 public:
  Pipeline(const Options& o, Memory& mem, Device& dev, std::vector<Stream> streams)
      : o_(o), mem_(mem), dev_(dev), streams_(std::move(streams)) {}

  void run() {
    for (int k = 0; k < kStages; ++k) {
      const std::size_t n = bytes((24 + 4 * k) << 20) + 4096 * static_cast<std::size_t>(k);
      weights_[k] = alloc(n, k, tag_of(Kind::weight, 0, k, 0));
    }
    for (int step = 0; step < o_.steps; ++step) {
      run_step(step);
      if (o_.corrupt && step == 0) dev_.corrupt(weights_[kStages - 1].p);
    }
    dev_.synchronize(streams_);
    for (int k = 0; k < kStages; ++k) {
      dev_.check(weights_[k].p, weights_[k].n, weights_[k].tag, streams_[k]);
      release(weights_[k], k);
    }
    dev_.synchronize(streams_);
  }

 private:
  std::size_t bytes(double base) const {
    return static_cast<std::size_t>(base * o_.scale) / 512 * 512 + 512 + 8 * 13;
  }

  Buffer alloc(std::size_t n, int stage, std::uint64_t tag) {
    Buffer b{mem_.allocate(n, streams_[stage]), n, tag};
    dev_.fill(b.p, b.n, b.tag, streams_[stage]);
    return b;
  }
  void release(Buffer& b, int stage) {
    mem_.deallocate(b.p, b.n, streams_[stage]);
    b = Buffer{};
  }
  // Stage `to` starts using a buffer that stage `from` produced.
  void hand_over(Buffer& b, int from, int to) {
    dev_.order_after(streams_[to], streams_[from]);
    mem_.record_stream(b.p, streams_[to]);
    dev_.check(b.p, b.n, b.tag, streams_[to]);
  }

  void run_step(int step) {
    const int m_count = o_.microbatches;
    std::mt19937_64 rng(o_.seed * 1000003 + static_cast<std::uint64_t>(step));
    seq_.assign(static_cast<std::size_t>(m_count), 0);
    for (int& s : seq_) s = 64 + static_cast<int>(rng() % 449);  // 64..512 tokens
    for (auto* v : {&act_, &grad_in_, &stash_})
      for (auto& row : *v) row.assign(static_cast<std::size_t>(m_count), Buffer{});
    for (int k = 0; k < kStages; ++k) {
      grads_[k] = alloc(weights_[k].n, k, tag_of(Kind::grad, step, k, 0));
      grad_version_[k] = 0;
    }
    std::vector<Op> ops[kStages];
    std::size_t next[kStages] = {};
    for (int k = 0; k < kStages; ++k) ops[k] = one_f_one_b(k, m_count);
    std::vector<bool> forward_done[kStages], backward_done[kStages];
    for (int k = 0; k < kStages; ++k) {
      forward_done[k].assign(static_cast<std::size_t>(m_count), false);
      backward_done[k].assign(static_cast<std::size_t>(m_count), false);
    }
    // Issue ops round-robin over the stages, each when what it consumes has
    // been issued: the host runs ahead of the streams, as a training loop does.
    for (bool progress = true; progress;) {
      progress = false;
      for (int k = 0; k < kStages; ++k) {
        if (next[k] == ops[k].size()) continue;
        const Op op = ops[k][next[k]];
        const auto m = static_cast<std::size_t>(op.mb);
        const bool ready = op.forward ? (k == 0 || forward_done[k - 1][m])
                                      : (k == kStages - 1 || backward_done[k + 1][m]);
        if (!ready) continue;
        if (op.forward) {
          forward(step, k, op.mb);
          forward_done[k][m] = true;
        } else {
          backward(step, k, op.mb);
          backward_done[k][m] = true;
        }
        ++next[k];
        progress = true;
      }
    }
    for (int k = 0; k < kStages; ++k) {
      if (next[k] != ops[k].size()) {
        std::fprintf(stderr, "pipeline_parallel: schedule stalled at stage %d\n", k);
        std::exit(1);
      }
    }
    // Optimizer: read the gradients, update the weights, drop the gradients.
    for (int k = 0; k < kStages; ++k) {
      Stream s = streams_[k];
      dev_.check(grads_[k].p, grads_[k].n, grads_[k].tag, s);
      dev_.check(weights_[k].p, weights_[k].n, weights_[k].tag, s);
      weights_[k].tag = tag_of(Kind::weight, step + 1, k, 0);
      dev_.fill(weights_[k].p, weights_[k].n, weights_[k].tag, s);
      release(grads_[k], k);
    }
    dev_.synchronize(streams_);
  }

  std::size_t act_bytes(int stage, int mb) const {
    return bytes(seq_[static_cast<std::size_t>(mb)] * 4096.0) +
           512 * static_cast<std::size_t>(stage);
  }

  void forward(int step, int k, int mb) {
    const auto m = static_cast<std::size_t>(mb);
    Stream s = streams_[k];
    if (k > 0) hand_over(act_[k - 1][m], k - 1, k);  // the input, kept for backward
    dev_.check(weights_[k].p, weights_[k].n, weights_[k].tag, s);
    // Saved tensors for backward, and a short-lived workspace.
    stash_[k][m] = alloc(act_bytes(k, mb) * (3 + k % 2) / 2, k, tag_of(Kind::stash, step, k, mb));
    Buffer ws = alloc(bytes(seq_[m] * 3072.0) + 777, k, tag_of(Kind::workspace, step, k, mb));
    dev_.check(ws.p, ws.n, ws.tag, s);
    release(ws, k);
    if (k < kStages - 1) act_[k][m] = alloc(act_bytes(k, mb), k, tag_of(Kind::act, step, k, mb));
  }

  void backward(int step, int k, int mb) {
    const auto m = static_cast<std::size_t>(mb);
    Stream s = streams_[k];
    if (k < kStages - 1) {
      Buffer& g = grad_in_[k + 1][m];
      hand_over(g, k + 1, k);
      release(g, k);  // freed on the consumer's stream
    }
    dev_.check(stash_[k][m].p, stash_[k][m].n, stash_[k][m].tag, s);
    release(stash_[k][m], k);
    // Accumulate into the stage's gradient.
    dev_.check(grads_[k].p, grads_[k].n, grads_[k].tag, s);
    grads_[k].tag = tag_of(Kind::grad, step, k, mb, ++grad_version_[k]);
    dev_.fill(grads_[k].p, grads_[k].n, grads_[k].tag, s);
    if (k > 0) {
      Buffer& input = act_[k - 1][m];
      grad_in_[k][m] = alloc(input.n, k, tag_of(Kind::grad_in, step, k, mb));
      dev_.check(input.p, input.n, input.tag, s);
      release(input, k);  // allocated on stage k-1's stream, freed on this one
    }
  }

  const Options& o_;
  Memory& mem_;
  Device& dev_;
  std::vector<Stream> streams_;
  std::vector<int> seq_;
  Buffer weights_[kStages], grads_[kStages];
  int grad_version_[kStages] = {};
  std::vector<Buffer> act_[kStages], grad_in_[kStages], stash_[kStages];
};

double mib(std::int64_t b) {
  return static_cast<double>(b) / (1 << 20);
}

int run(const Options& o) {
  memlake::Config config = memlake::Config::from_env();
  config.backend = o.backend == "cuda" ? memlake::BackendKind::cuda : memlake::BackendKind::host;
#if !MEMLAKE_HAVE_CUDA
  if (o.backend == "cuda") {
    std::fprintf(stderr, "pipeline_parallel: this build has no CUDA backend\n");
    return 2;
  }
#endif
  std::int64_t memlake_peak_reserved = 0;
  double memlake_ms = 0;
  int failures = 0;
  {
    memlake::Allocator alloc(config);
    std::vector<Stream> streams;
    for (int k = 0; k < kStages; ++k) streams.push_back(alloc.create_stream());
    std::unique_ptr<Device> dev;
#if MEMLAKE_HAVE_CUDA
    if (o.backend == "cuda") dev = std::make_unique<CudaDevice>();
#endif
    if (!dev) dev = std::make_unique<HostDevice>(alloc.backend());
    MemlakeMemory mem(alloc);
    memlake_ms = timed_ms([&] { Pipeline(o, mem, *dev, streams).run(); });
    alloc.process_pending_frees();
    const memlake::Stats s = alloc.stats();
    const std::string inv = alloc.check_invariants();
    memlake_peak_reserved = s.reserved_bytes.peak;
    std::printf("pipeline_parallel: %s backend, %d stages, %d steps, %d micro-batches, scale %g\n",
                alloc.backend_name(), kStages, o.steps, o.microbatches, o.scale);
    std::string rungs;
#define MEMLAKE_RUNG_TEXT(name, help)                             \
  if (s.rung_##name.current != 0)                                 \
    rungs += std::string(rungs.empty() ? "" : ", ") + #name " " + \
             std::to_string(static_cast<long long>(s.rung_##name.current));
    MEMLAKE_RUNGS(MEMLAKE_RUNG_TEXT)
#undef MEMLAKE_RUNG_TEXT
    std::printf("  allocations          %lld (%s)\n", static_cast<long long>(s.allocs.current),
                rungs.c_str());
    // Live as the schedule asked for it (a block handed out a little larger
    // than asked would otherwise count as used).
    std::printf("  peak live            %.1f MiB (requested bytes)\n", mib(s.requested_bytes.peak));
    std::printf("  peak reserved        %.1f MiB\n", mib(s.reserved_bytes.peak));
    std::printf("  utilization          %.3f\n",
                s.reserved_bytes.peak > 0 ? static_cast<double>(s.requested_bytes.peak) /
                                                static_cast<double>(s.reserved_bytes.peak)
                                          : 0.0);
    std::printf("  host waits           %lld\n", static_cast<long long>(s.host_waits.current));
    std::printf("  cross-stream waits   %lld\n",
                static_cast<long long>(s.cross_stream_waits.current));
    std::printf("  schedule time        %.1f ms\n", memlake_ms);
    std::printf("  VMM calls            %lld (%lld on the allocating thread)\n",
                static_cast<long long>(s.vmm_calls.current),
                static_cast<long long>(s.critical_path_vmm_calls.current));
    std::printf("  checks               %llu, mismatches %llu\n",
                static_cast<unsigned long long>(dev->checks()),
                static_cast<unsigned long long>(dev->mismatches()));
    if (dev->mismatches() != 0) {
      std::fprintf(stderr, "pipeline_parallel: %llu buffers did not hold what was written\n",
                   static_cast<unsigned long long>(dev->mismatches()));
      ++failures;
    }
    if (dev->checks() == 0) {
      std::fprintf(stderr, "pipeline_parallel: nothing was checked\n");
      ++failures;
    }
    if (s.live_bytes.current != 0 || s.allocs.current != s.frees.current) {
      std::fprintf(stderr, "pipeline_parallel: %lld bytes still live at the end\n",
                   static_cast<long long>(s.live_bytes.current));
      ++failures;
    }
    if (!inv.empty()) {
      std::fprintf(stderr, "pipeline_parallel: invariant broken: %s\n", inv.c_str());
      ++failures;
    }
    dev.reset();
    for (Stream st : streams) alloc.destroy_stream(st);
  }
#if MEMLAKE_HAVE_CUDA
  if (o.backend == "cuda") {
    std::vector<Stream> streams;
    for (int k = 0; k < kStages; ++k) {
      cudaStream_t st = nullptr;
      cuda_check(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), "cudaStreamCreate");
      streams.push_back(st);
    }
    int device = 0;
    cuda_check(cudaGetDevice(&device), "cudaGetDevice");
    std::uint64_t reserved_high = 0, used_high = 0;
    std::uint64_t mismatches = 0;
    double pool_ms = 0;
    {
      PoolMemory pool(device);
      CudaDevice dev;
      pool_ms = timed_ms([&] { Pipeline(o, pool, dev, streams).run(); });
      reserved_high = pool.attribute(cudaMemPoolAttrReservedMemHigh);
      used_high = pool.attribute(cudaMemPoolAttrUsedMemHigh);
      mismatches = dev.mismatches();
    }
    for (Stream st : streams) cudaStreamDestroy(static_cast<cudaStream_t>(st));
    std::printf("cudaMallocAsync pool (release threshold max), same schedule:\n");
    std::printf("  reserved high        %.1f MiB\n", mib(static_cast<std::int64_t>(reserved_high)));
    std::printf("  used high            %.1f MiB\n", mib(static_cast<std::int64_t>(used_high)));
    std::printf("  mismatches           %llu\n", static_cast<unsigned long long>(mismatches));
    std::printf("  schedule time        %.1f ms (memlake / pool = %.3f)\n", pool_ms,
                pool_ms > 0 ? memlake_ms / pool_ms : 0.0);
    if (reserved_high > 0)
      std::printf("  memlake peak reserved / pool reserved high = %.3f\n",
                  static_cast<double>(memlake_peak_reserved) / static_cast<double>(reserved_high));
    if (mismatches != 0) ++failures;
  }
#else
  (void)memlake_peak_reserved;
#endif
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse_args(argc, argv);
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pipeline_parallel: %s\n", e.what());
    return 1;
  }
}
