// FenceId: names a point in the stream-ordered past. A block freed on a
// stream goes to the lake at once, under the id of a fence its stream will
// record after the work queued so far; memory freed under fence F may still
// be read or written by that work until F completes. Ids only grow, so the
// lake keeps, per chunk and per range, the newest id it was freed under and
// compares it with the newest id known complete: it never looks inside one.
#pragma once

#include <compare>
#include <cstdint>

namespace memlake {

struct FenceId {
  std::uint64_t value = 0;  // 0: no fence (nothing to wait for)
  auto operator<=>(const FenceId&) const = default;
  explicit operator bool() const { return value != 0; }
};

}  // namespace memlake
