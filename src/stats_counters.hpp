// StatCounters: the live, lock-free form of memlake::Stats, generated from
// MEMLAKE_STAT_FIELDS. Every field is a relaxed atomic: the counters order
// nothing, they only count, so an update is one uncontended atomic add (plus
// a compare-exchange when a gauge reaches a new peak). snapshot() copies them
// into a Stats; fields read at slightly different moments may disagree by
// the operations that ran in between.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "memlake/stats.hpp"

namespace memlake {

// The kinds of MEMLAKE_STAT_FIELDS as types, so that X-macro expansions can
// pick an overload or a specialization by kind: stat_kind::gauge{}.
namespace stat_kind {
struct gauge {};
struct counter {};
}  // namespace stat_kind

template <class Kind>
class StatCell;

// A value that goes up and down, with the highest value it has reached.
template <>
class StatCell<stat_kind::gauge> {
 public:
  void add(std::int64_t n) noexcept {
    raise_peak(current_.fetch_add(n, std::memory_order_relaxed) + n);
  }
  void sub(std::int64_t n) noexcept { current_.fetch_sub(n, std::memory_order_relaxed); }
  void set(std::int64_t v) noexcept {
    current_.store(v, std::memory_order_relaxed);
    raise_peak(v);
  }
  std::int64_t current() const noexcept { return current_.load(std::memory_order_relaxed); }
  std::int64_t peak() const noexcept { return peak_.load(std::memory_order_relaxed); }
  void reset_peak() noexcept { peak_.store(current(), std::memory_order_relaxed); }
  // An add racing with reset_peak() can leave peak below current for a
  // moment; a snapshot never shows that.
  StatValue load() const noexcept {
    const std::int64_t c = current();
    return {c, std::max(c, peak())};
  }

 private:
  void raise_peak(std::int64_t v) noexcept {
    std::int64_t p = peak_.load(std::memory_order_relaxed);
    while (v > p && !peak_.compare_exchange_weak(p, v, std::memory_order_relaxed)) {
    }
  }

  std::atomic<std::int64_t> current_{0};
  std::atomic<std::int64_t> peak_{0};
};

// A count that only grows. Its snapshot has peak == current.
template <>
class StatCell<stat_kind::counter> {
 public:
  void add(std::int64_t n = 1) noexcept { value_.fetch_add(n, std::memory_order_relaxed); }
  void set(std::int64_t v) noexcept { value_.store(v, std::memory_order_relaxed); }
  std::int64_t current() const noexcept { return value_.load(std::memory_order_relaxed); }
  void reset_peak() noexcept {}
  StatValue load() const noexcept {
    const std::int64_t v = current();
    return {v, v};
  }

 private:
  std::atomic<std::int64_t> value_{0};
};

// One cell per MEMLAKE_STAT_FIELDS entry, named like the Stats member:
// counters.live_bytes.add(n), counters.allocs.add().
struct StatCounters {
#define MEMLAKE_STAT_CELL(name, kind, help) StatCell<stat_kind::kind> name;
  MEMLAKE_STAT_FIELDS(MEMLAKE_STAT_CELL)
#undef MEMLAKE_STAT_CELL

  Stats snapshot() const noexcept {
    Stats s;
#define MEMLAKE_STAT_LOAD(name, kind, help) s.name = name.load();
    MEMLAKE_STAT_FIELDS(MEMLAKE_STAT_LOAD)
#undef MEMLAKE_STAT_LOAD
    return s;
  }

  // Gauges: peak = current. Counters are unchanged.
  void reset_peaks() noexcept {
#define MEMLAKE_STAT_RESET(name, kind, help) name.reset_peak();
    MEMLAKE_STAT_FIELDS(MEMLAKE_STAT_RESET)
#undef MEMLAKE_STAT_RESET
  }
};

}  // namespace memlake
