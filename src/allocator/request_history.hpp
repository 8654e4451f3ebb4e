// The sizes of the caller's last requests, as one hash: where a request
// stands in the sequence a training step repeats. Two requests of the same
// size in different places of a step (the first and the second use of a
// logits buffer, a layer's temporaries) have different histories, so each
// finds the place it had itself last step (lake/remembered.cpp), while the
// step's requests repeat in the same order.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace memlake {

class RequestHistory {
 public:
  // Long enough that a position in a step is told apart from the same
  // position one layer later (a layer makes a few dozen requests); short
  // enough that the first steps' differences are soon out of it
  // (docs/benchmarks.md has the windows measured).
  static constexpr std::size_t kWindow = 64;

  // The hash of the requests before this one; then this one joins them.
  std::uint64_t push(std::size_t bytes) {
    const std::uint64_t before = hash_;
    std::uint64_t& slot = sizes_[next_++ % kWindow];
    hash_ = hash_ * kBase + bytes - slot * kBasePowWindow;
    slot = bytes;
    return before;
  }

 private:
  static constexpr std::uint64_t kBase = 0x100000001B3ull;
  // kBase to the kWindow: the weight of the size leaving the window.
  static constexpr std::uint64_t kBasePowWindow = [] {
    std::uint64_t x = 1;
    for (std::size_t i = 0; i < kWindow; ++i) x *= kBase;
    return x;
  }();

  std::array<std::uint64_t, kWindow> sizes_{};
  std::size_t next_ = 0;
  std::uint64_t hash_ = 0;
};

}  // namespace memlake
