// StatsDelta: what the allocator calls since it was made changed in the
// stats, field by field.
//
//   StatsDelta d(*alloc);
//   void* p = alloc->allocate(8 << 20);
//   EXPECT_EQ(d(&Stats::rung_stitch), 1) << d.changed();
#pragma once

#include <cstdint>
#include <string>

#include "memlake/allocator.hpp"
#include "memlake/stats.hpp"

namespace memlake::test {

class StatsDelta {
 public:
  explicit StatsDelta(const Allocator& a) : a_(&a), before_(a.stats()) {}

  // How much `field`'s current value moved.
  std::int64_t operator()(StatValue Stats::*field) const {
    return (a_->stats().*field).current - (before_.*field).current;
  }
  // Counts from now on.
  void restart() { before_ = a_->stats(); }
  // "allocs +1, rung_stitch +1, ...": every field that moved, for messages.
  std::string changed() const {
    const Stats now = a_->stats();
    std::string out;
#define MEMLAKE_DELTA_TEXT(name, kind, help)                                    \
  if (const std::int64_t d = now.name.current - before_.name.current; d != 0) { \
    out += out.empty() ? "" : ", ";                                             \
    out += #name;                                                               \
    out += d > 0 ? " +" : " ";                                                  \
    out += std::to_string(d);                                                   \
  }
    MEMLAKE_STAT_FIELDS(MEMLAKE_DELTA_TEXT)
#undef MEMLAKE_DELTA_TEXT
    return out.empty() ? "nothing changed" : out;
  }

 private:
  const Allocator* a_;
  Stats before_;
};

}  // namespace memlake::test
