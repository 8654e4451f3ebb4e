// The soak run: several threads, each with a stream of its own, allocate
// and free blocks of mixed sizes (512 B to 1 GiB, mostly small) through one
// memlake::Allocator with the mapping worker on, near its capacity, over a
// HostBackend with emulated limits and a FaultBackend that refuses VMM calls
// at random with every refusal kind. Every live block carries a pattern
// that is checked before its free; the allocator's invariants are checked
// as it runs. At the end everything is freed and the cache emptied, and the
// report says what was lost.
//
// Only the public API drives it (memlake::Allocator over a Backend stack),
// so it holds whatever the allocator's insides become.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace memlake::test {

struct SoakOptions {
  std::uint64_t operations = 40'000;            // allocations and frees, all threads together
  double seconds = 0;                           // > 0: stop after this long too
  int streams = 4;                              // one thread each
  std::size_t capacity = std::size_t{3} << 29;  // 1.5 GiB
  double fault_probability = 0.01;              // per VMM call
  std::size_t max_mappings = 4096;              // HostBackend's emulated limit (0: the machine's)
  std::uint64_t seed = 1;
  bool worker_thread = true;  // worker:thread, else worker:inline
  std::size_t reserve = 0;    // the worker's reserve (Config::reserve): its jobs create and map
  // Reads MEMLAKE_SOAK_OPS, MEMLAKE_SOAK_SECONDS, MEMLAKE_SOAK_CAPACITY,
  // MEMLAKE_SOAK_FAULTS, MEMLAKE_SOAK_MAX_MAPPINGS, MEMLAKE_SOAK_SEED over
  // these defaults.
  SoakOptions with_env() const;
};

struct SoakReport {
  std::uint64_t operations = 0;
  std::uint64_t allocations = 0;
  std::uint64_t frees = 0;
  std::uint64_t bytes_allocated = 0;
  std::uint64_t out_of_memory = 0;
  // backend_error from allocate or deallocate, by the status it names, and
  // the first message of each.
  std::map<std::string, std::uint64_t> errors;
  std::map<std::string, std::string> first_error;
  // Anything else thrown out of the allocator (never allowed), with the
  // first few messages.
  std::uint64_t other_exceptions = 0;
  std::uint64_t failed_frees = 0;                 // deallocate threw: the block may be lost
  std::uint64_t corrupted_blocks = 0;             // a pattern changed while the block was live
  std::uint64_t invariant_failures = 0;           // check_invariants() said something
  std::map<std::string, std::uint64_t> injected;  // by status
  std::map<std::string, std::uint64_t> refused;   // what the HostBackend refused itself
  std::uint64_t chunks_left = 0;  // after everything was freed and the cache emptied
  std::uint64_t bytes_left = 0;
  std::uint64_t mappings_left = 0;
  std::uint64_t reservations_left = 0;
  std::uint64_t peak_mapping_units = 0;
  double seconds = 0;
  std::vector<std::string> first_failures;

  // backend_errors naming an exhaustion status (out_of_memory, out_of_va,
  // out_of_mappings, out_of_descriptors, out_of_host_memory): refusals the
  // allocator should have routed around or reported as out of memory.
  std::uint64_t exhaustion_errors() const;
  std::string summary() const;
};

SoakReport run_soak(const SoakOptions& options);

}  // namespace memlake::test
