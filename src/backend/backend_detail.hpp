// Helpers shared by the backends and their adaptors, private to src/backend/:
// the per-thread error slot behind every last_error(), message formatting and
// the busy wait used to simulate driver latency.
//
// All backends write to one slot per thread, as errno does: whichever layer
// of an adaptor stack failed last, last_error() on any layer reports it. The
// slot is a fixed buffer (messages past 1 KiB are cut), so reporting a
// failure never needs the heap.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <new>
#include <string>

#include "backend/backend.hpp"

namespace memlake::detail {

// Stores a message in the calling thread's error slot.
void set_last_error(const char* message);
// Formats with printf rules and stores the result; returns `status` so a
// failure path reads `return fail(Status::invalid_argument, "...", ...)`.
// Never allocates, never throws.
[[gnu::format(printf, 2, 3)]] Status fail(Status status, const char* format, ...);
// The calling thread's message; valid until its next failure.
const char* thread_last_error();
// The same as a string: what every last_error() returns (empty when the
// heap cannot hold it).
std::string thread_last_error_copy() noexcept;

// printf into a new string (may throw std::bad_alloc: not for failure paths
// inside Backend methods).
[[gnu::format(printf, 1, 2)]] std::string format(const char* format, ...);

// Burns CPU for `d` (a driver call occupies its thread; sleeping would let
// the OS hide the cost). Long waits sleep for most of the time.
void spin_for(std::chrono::nanoseconds d);

// Runs the body of a Backend method and turns anything it throws into a
// status, so that no Backend method throws: out_of_host_memory for
// std::bad_alloc (the heap could not hold the backend's tables), error for
// anything else. The body must keep its tables consistent wherever it may
// throw (grow a table before the system call it records, not after).
template <typename Body>
Status no_throw(const char* who, const char* call, Body&& body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return fail(Status::out_of_host_memory,
                "%s: %s: out of host memory: the heap cannot hold the backend's tables", who, call);
  } catch (const std::exception& e) {
    return fail(Status::error, "%s: %s: %s", who, call, e.what());
  } catch (...) {
    return fail(Status::error, "%s: %s: unexpected exception", who, call);
  }
}

inline bool is_aligned(std::size_t value, std::size_t alignment) {
  return alignment != 0 && value % alignment == 0;
}

}  // namespace memlake::detail
