// The clock of the allocator's own call timings (allocate_ns,
// deallocate_ns): on x86-64 where the kernel keeps time by the processor's
// time-stamp counter (then it runs at one constant rate on every core), the
// counter itself, read in one instruction that touches no memory; elsewhere
// steady_clock's nanoseconds. A call is timed twice on every allocate and
// free, so the cheaper read matters there; ticks become nanoseconds only
// when the stats are read.
#pragma once

#include <chrono>
#include <cstdint>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace memlake {

// steady_clock's nanoseconds: the clock of everything but the call timings.
inline std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

namespace tick_clock_detail {
// Whether ticks are the time-stamp counter's, decided once at load.
extern const bool uses_tsc;
}  // namespace tick_clock_detail

inline std::int64_t now_ticks() {
#if defined(__x86_64__)
  if (__builtin_expect(tick_clock_detail::uses_tsc, 1)) return static_cast<std::int64_t>(__rdtsc());
#endif
  return now_ns();
}

// Nanoseconds of `ticks` (a difference of now_ticks values). The first call
// with the time-stamp counter in use fixes its rate against steady_clock
// over at least 2 ms since load, waiting out what is left of them.
std::int64_t ticks_to_ns(std::int64_t ticks);

}  // namespace memlake
