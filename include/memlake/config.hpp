// Allocator configuration. Every field has one row in the option table
// (src/allocator/options.cpp), which also parses MEMLAKE_CONF="key:value,..." and the
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

// What a user sets. The first group says what memlake may use and how it
// behaves; the tuning group changes how it places blocks and how much it
// keeps mapped (docs/configuration.md explains when to touch them).
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

  // Physical bytes memlake may hold. 0: the backend's default (host: 80 GiB;
  // cuda: free device memory at start). capacity_fraction, when > 0, takes
  // that share of the device's total memory instead; giving both is an
  // error. A capacity below one chunk (the backend's granularity) is too.
  std::size_t capacity = 0;
  double capacity_fraction = 0.0;

  // The mapping worker stitches free chunks into one range after a request
  // had to stitch, and unmaps over the budget, off the allocating thread.
  // inline_jobs runs the same jobs at the same points on the allocating
  // thread (deterministic, for tests and replay).
  WorkerMode worker = WorkerMode::thread;
  // Free chunks the worker keeps created and mapped ahead of demand, so a
  // request that needs new memory maps nothing. They count as reserved
  // memory (they raise the peak by up to this much), hence off by default.
  // Needs the worker.
  std::size_t reserve = 0;

  // Chunks are created exportable, so Allocator::share() can hand a block to
  // another process as file descriptors (include/memlake/sharing.hpp). On
  // CUDA they are created with CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR.
  bool shareable = false;

  // Records every allocation and free as a memlake-trace (docs/replay.md)
  // for memlake-replay: ".gz" compresses; "{device}" and "{pid}" in the path
  // become the device and process id. Empty: off.
  std::string record;

  // Profiling (docs/profiling.md). nvtx: NVTX ranges and markers in the
  // domain "memlake" for Nsight Systems, and the NVTX memory API (mapped
  // ranges as heaps, live blocks as regions) for compute-sanitizer.
  // timeline: keep the last timeline_events events in memory and write them
  // as Chrome Trace Event JSON (Perfetto, chrome://tracing) to this path at
  // exit ("{device}" and "{pid}" replaced as for record); also what
  // Allocator::dump_timeline() and the memory snapshots read. Empty: off.
  bool nvtx = false;
  std::string timeline;
  std::size_t timeline_events = std::size_t{1} << 20;

  // What happens on a bad free / unknown pointer: return an error (the C API
  // sets memlake_last_error, C++ throws memlake::misuse) or abort with a
  // report.
  MisuseAction on_misuse = MisuseAction::error;

  // HostBackend only: chunk granularity, and simulated VMM latencies (the
  // costs measured on an H200), so that times on the CPU resemble the GPU's.
  std::size_t host_granularity = std::size_t{2} << 20;
  bool host_simulate_latency = false;
  // HostBackend only: limits lower than the machine's (0: the machine's), so
  // that a run meets them as on a smaller machine: mapping units
  // (vm.max_map_count counts them), descriptors, reserved address space.
  std::size_t host_max_mappings = 0;
  std::size_t host_max_fds = 0;
  std::size_t host_max_va = 0;

  // ---- tuning ----
  // Requests up to this size are packed into free space of chunks already in
  // use before any chunk is taken for them.
  std::size_t small_max = std::size_t{1} << 20;
  // Largest chunk created at once; larger requests get several chunks. Small
  // chunks combine freely when stitched (the handle is the unit), large ones
  // cost fewer handles per mapping.
  std::size_t max_chunk = std::size_t{2} << 20;
  // The body of a request of at least large_chunk_from bytes is created in
  // chunks of large_chunk instead (0: max_chunk for all): large blocks cost
  // fewer handles to map, stitch and unmap, while small and medium ones keep
  // combining freely.
  std::size_t large_chunk = std::size_t{4} << 20;
  std::size_t large_chunk_from = std::size_t{64} << 20;
  // A cached range may be this much larger than the request (as a fraction
  // of the request) and still count as a fit.
  double fit_slack = 0.125;
  // Idle mapped ranges are kept while all mapped virtual bytes stay below
  // (1 + stitch_cache_ratio) * reserved bytes; beyond that the least
  // recently used idle ones are unmapped. Mappings cost no physical memory.
  double stitch_cache_ratio = 4.0;
  // Most chunks combined into one stitched range (a stitch costs ~25 us per
  // chunk on an H200). A low bound makes the lake create memory while free
  // chunks exist.
  std::size_t max_stitch_chunks = 4096;

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
  // Throws config_error naming both keys of a combination that cannot work
  // (capacity with capacity_fraction, reserve without the worker). The
  // Allocator checks this when it is made.
  void validate() const;
};

}  // namespace memlake
