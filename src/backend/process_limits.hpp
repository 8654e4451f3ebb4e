// What the operating system lets the process's backends hold, and the
// process-wide ledgers the HostBackends draw from. The kernel counts a
// process's memory mappings against vm.max_map_count and its descriptors
// against RLIMIT_NOFILE; when either runs out, every mmap or open in the
// process fails, malloc's included. So the backends of a process together
// stay below the limit by a headroom left to the rest of the process (its
// heap, thread stacks, libraries), and a call that would cross that budget is
// refused before the kernel is asked.
//
// The budgets are read once per process, when the first backend asks: the
// kernel's limit minus what the process held then minus the headroom (an
// eighth of the limit, at least 1,024 mappings or 64 descriptors).
#pragma once

#include <atomic>
#include <cstddef>

namespace memlake {

struct ProcessLimits {
  std::size_t max_map_count = 0;       // /proc/sys/vm/max_map_count
  std::size_t maps_in_use = 0;         // the process's mappings when read
  std::size_t mapping_budget = 0;      // what HostBackends may hold together
  std::size_t nofile_limit = 0;        // RLIMIT_NOFILE (soft)
  std::size_t descriptors_in_use = 0;  // open descriptors when read
  std::size_t descriptor_budget = 0;
  std::size_t address_space = 0;  // RLIMIT_AS (soft), or the user address space
  std::size_t va_budget = 0;      // unbounded (~0) without RLIMIT_AS
};

// Read once per process; never throws (an unreadable value falls back to
// the kernel's default: 65,530 mappings, 1,024 descriptors).
const ProcessLimits& process_limits();

// The process's mappings right now (lines of /proc/self/maps), read without
// the heap; 0 when it cannot be read. For failure messages.
std::size_t process_maps_in_use();

// A process-wide count of one resource that every HostBackend shares (the
// CUDA driver keeps its own).
class ProcessLedger {
 public:
  // Adds `n` if the total stays within `budget`; false (and nothing added)
  // otherwise.
  bool claim(std::size_t n, std::size_t budget);
  void give_back(std::size_t n) { used_.fetch_sub(n, std::memory_order_relaxed); }
  std::size_t used() const { return used_.load(std::memory_order_relaxed); }

 private:
  std::atomic<std::size_t> used_{0};
};

ProcessLedger& host_mapping_ledger();
ProcessLedger& host_descriptor_ledger();
ProcessLedger& host_va_ledger();

}  // namespace memlake
