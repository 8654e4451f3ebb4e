// Allocator configuration. Every field has one row in the option table
// (src/options.cpp), which also parses MEMLAKE_CONF="key:value,..." and the
// MEMLAKE_<KEY> environment variables. Sizes accept K/M/G/T suffixes
// (binary: 2M == 2097152).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace memlake {

enum class BackendKind { automatic, host, cuda };
enum class MisuseAction { error, abort };
enum class WorkerMode { off, inline_jobs, thread };

// A set of devices 0..63 (a bit each); all() is every device there is.
struct DeviceSet {
  static constexpr std::uint64_t kAll = ~std::uint64_t{0};
  std::uint64_t bits = 0;
  bool all() const { return bits == kAll; }
  bool has(int device) const { return device >= 0 && device < 64 && ((bits >> device) & 1) != 0; }
  bool operator==(const DeviceSet&) const = default;
};

struct Config {
  BackendKind backend = BackendKind::automatic;  // auto: cuda if a GPU is present, else host
  int device = 0;
  // Devices whose kernels may read and write this allocator's memory: every
  // mapping grants them access in the same SetAccess call (NCCL's P2P
  // transports need it). "all" (every device that can reach this one peer to
  // peer), "none", or device numbers joined by '+' ("1+3"; the allocator's
  // own device is skipped). The HostBackend's memory is host memory, open to
  // every "device" already.
  DeviceSet peer_access;

  // Physical capacity. 0 means the backend's default (host: 80 GiB;
  // cuda: free device memory at start). capacity_fraction, when > 0, takes
  // that share of the device's total memory instead.
  std::size_t capacity = 0;
  double capacity_fraction = 0.0;

  // HostBackend only: chunk granularity and simulated VMM latencies (the
  // H200 costs measured in DESIGN.md), so costs on the CPU resemble the GPU's.
  std::size_t host_granularity = std::size_t{2} << 20;
  bool host_simulate_latency = false;

  // Requests up to this size are packed into free space of chunks already in
  // use before any chunk is taken for them.
  std::size_t small_max = std::size_t{1} << 20;
  // Largest chunk created at once; larger requests get several chunks. Small
  // chunks combine freely when stitched (the handle is the unit), large ones
  // cost fewer handles per mapping. Measured with memlake-replay on the
  // bundled traces: 2 MiB gives 0.994/0.996/0.996 utilization, 8 MiB
  // 0.979/0.991/0.996, 32 MiB loses up to 4% more.
  std::size_t max_chunk = std::size_t{2} << 20;
  // The body of a request of at least large_chunk_from bytes is created in
  // chunks of large_chunk instead (0: max_chunk for all). Large blocks then
  // cost half the handles to map, stitch and unmap, on the caller's thread
  // and the worker's, while small and medium ones keep combining freely.
  // Measured with memlake-replay: VMM calls on the allocating thread after
  // warm-up -40..-50% on the bundled and recorded training traces, peak
  // reserved within 0.15% of 2 MiB chunks everywhere (4M for all requests
  // costs 3% on a MoE-like trace).
  std::size_t large_chunk = std::size_t{4} << 20;
  std::size_t large_chunk_from = std::size_t{64} << 20;
  // The same a tier up: a request of at least huge_chunk_from bytes gets its
  // body in huge_chunk chunks (0, the default: large_chunk for it too), so
  // that a block of hundreds of MiB is dozens of handles, not hundreds, to
  // map and to claim chunk by chunk. Off by default: on the H200 (16M from
  // 512M against off) critical-path VMM calls after warm-up on the bundled
  // gpt2_recompute / llama_lora_ckpt replays fell 23% / 45% at the same
  // peaks, but gpt2_recompute's VMM time on the allocating thread rose
  // (448-468 against 356-376 ms: fewer, slower calls), and fixed-shape GPT-2
  // training reserved 4.09 GiB instead of 4.05 (its 785 MiB logits).
  std::size_t huge_chunk = 0;
  std::size_t huge_chunk_from = std::size_t{512} << 20;
  // A cached block may be this much larger than the request (as a fraction
  // of the request) and still count as a fit.
  double fit_slack = 0.125;
  // Idle mapped segments are kept while all mapped virtual bytes stay below
  // (1 + stitch_cache_ratio) * reserved bytes; beyond that the least recently
  // used idle ones are unmapped.
  // Mappings cost no physical memory; on gpt2_recompute 1.0 evicts 100
  // ranges that are mapped again later (52,571 VMM calls), 4.0 none (35,432).
  double stitch_cache_ratio = 4.0;
  // Upper bound on chunks combined into one stitched range (a stitch costs
  // ~25 us per chunk on an H200). A low bound makes the lake create memory
  // while free chunks exist: 64 costs up to 25% utilization on the traces.
  std::size_t max_stitch_chunks = 4096;

  // Stream order: let a stream take another stream's pending free block by
  // a GPU-side wait on its event instead of asking for new memory.
  bool cross_stream_wait = true;
  // With cross_stream_wait: where no single pending block holds a request
  // but all of them could, every stream waits (GPU-side) on every stream
  // with pending frees, which then serve any stream, before new memory is
  // made. It orders the streams at that point (a GPU-side barrier); off
  // keeps them independent at the cost of memory. Pipeline sample on host
  // streams, scale 1: utilization 0.766 off, 0.964-0.971 on.
  bool fence = true;
  // Frees recorded on one stream share one event per batch.
  std::size_t free_batch = 32;
  // While one stream is all the allocator has seen, a block freed on it
  // (and used on no other) goes to the lake at once: stream order makes it
  // safe to reuse there, and a stream seen later first waits (GPU-side) on
  // everything queued so far. No batch to retire later, no event per
  // batch: an event every free_batch frees only tells when the memory could
  // be unmapped. Decisions then no longer depend on the GPU's timing.
  bool direct_free = true;
  // Direct frees with several streams too: a block freed on stream S goes to
  // the lake at once under S's open fence; a request of another stream given
  // any of its memory first waits (GPU-side) on that fence, recorded then if
  // it is still open. The allocation that follows a step's frees then finds
  // them in the lake instead of retiring them all. false: with several
  // streams, frees wait in batches on their stream (reusable there at once).
  bool direct_free_streams = true;
  // Each free hands at most this many completed frees of its stream's oldest
  // batches to the lake (one event query at most), spreading the retiring
  // over the frees instead of leaving it to the next allocation: a step's
  // frees complete together, and then one allocation in a hundred retires
  // dozens of blocks (tens of microseconds). With free_batch 4 and 2 here,
  // allocate p99 after warm-up on the H200 replays fell from 8.5-44 us to
  // 3.7-10 us (free p99 0.3 -> 3-10 us), but on fixed-shape GPT-2 and
  // Llama-LoRA training the layout no longer settled: which frees had
  // reached the lake when a request came now followed the GPU's timing, and
  // steps kept stitching (170-300 VMM calls every other step, slow path
  // 1.6x). Off by default: steady training first.
  std::size_t retire_per_free = 0;
  // A batch of frees stays open (no event recorded) until a request finds
  // nothing mapped and free without it: its blocks are first taken back by
  // same-size requests on their stream, and the slow path records no event.
  // Measured: allocate median on the H200 replays 3.9-9.2 us -> 0.47-1.0 us
  // (cudaMallocAsync: 1.05-1.2 us), but GPT-2 training on the GPU reserved
  // 7.13 GiB instead of 6.51 (frees reach the lake later while the GPU still
  // runs), and a synthetic MoE trace packs worse (0.972 -> 0.938). Off by
  // default: memory first.
  bool lazy_batches = false;
  // ...or once the batch holds this many bytes (0: count only). A large
  // block then waits only for the work before its own free, not for the work
  // queued until the batch closes, and comes back sooner on other streams;
  // each such free records an event (~0.35 us on an H200).
  std::size_t free_batch_bytes = 0;

  // The mapping worker stitches free chunks into one range after a request
  // had to stitch, and unmaps over the budget, off the allocating thread.
  // inline_jobs runs the same jobs at the same points on the allocating
  // thread (deterministic, for tests and replay).
  WorkerMode worker = WorkerMode::thread;
  // Free chunks the worker keeps created and mapped ahead of demand, so a
  // request that needs new memory maps nothing. They count as reserved
  // memory (they raise the peak by up to this much), hence off by default.
  std::size_t reserve = 0;

  // Chunks are created exportable, so Allocator::share() can hand a block to
  // another process as file descriptors (include/memlake/sharing.hpp). On
  // CUDA they are created with CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR.
  bool shareable = false;

  // Records every allocation and free as a memlake-trace (traces/FORMAT.md)
  // for memlake-replay: ".gz" compresses; "{device}" and "{pid}" in the path
  // become the device and process id. Empty: off. Costs a few hundred
  // nanoseconds per call while on.
  std::string record;

  // What happens on a bad free / unknown pointer: return an error (the C API
  // sets memlake_last_error, C++ throws memlake::misuse) or abort with a
  // report.
  MisuseAction on_misuse = MisuseAction::error;

  // Parses "key:value,key:value" on top of this config. Throws config_error
  // naming the key or value at fault.
  void apply(std::string_view conf);
  // Defaults, then MEMLAKE_<KEY> variables, then MEMLAKE_CONF.
  static Config from_env();
  static Config parse(std::string_view conf) {
    Config c;
    c.apply(conf);
    return c;
  }
  // "key:value" lines of every option, with help text.
  std::string describe() const;
};

}  // namespace memlake
