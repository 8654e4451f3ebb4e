// Helpers shared by the backends and their adaptors, private to src/backend/:
// the per-thread error slot behind every last_error(), message formatting and
// the busy wait used to simulate driver latency.
//
// All backends write to one slot per thread, as errno does: whichever layer
// of an adaptor stack failed last, last_error() on any layer reports it.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

#include "backend/backend.hpp"

namespace memlake::detail {

// Stores a message in the calling thread's error slot.
void set_last_error(std::string message);
// Formats with printf rules and stores the result; returns `status` so a
// failure path reads `return fail(Status::invalid_argument, "...", ...)`.
[[gnu::format(printf, 2, 3)]] Status fail(Status status, const char* format, ...);
const std::string& thread_last_error();

[[gnu::format(printf, 1, 2)]] std::string format(const char* format, ...);

// Burns CPU for `d` (a driver call occupies its thread; sleeping would let
// the OS hide the cost). Long waits sleep for most of the time.
void spin_for(std::chrono::nanoseconds d);

inline bool is_aligned(std::size_t value, std::size_t alignment) {
  return alignment != 0 && value % alignment == 0;
}

}  // namespace memlake::detail
