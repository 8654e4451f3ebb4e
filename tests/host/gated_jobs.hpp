// Host-stream jobs that hold a block busy until a gate opens, and a check
// that work queued on another stream ran after them: the stream-order tests
// prove with the bytes that a block was not handed over too early.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstring>

#include "memlake/allocator.hpp"

namespace memlake {

// A job that waits for a gate, then writes `tag` over the block.
struct GatedWrite {
  std::atomic<bool> open{false};
  std::atomic<bool> done{false};
  void* block = nullptr;
  std::size_t size = 0;
  unsigned char tag = 0;
  static void run(void* self) {
    auto* g = static_cast<GatedWrite*>(self);
    while (!g->open.load()) {
    }
    std::memset(g->block, g->tag, g->size);
    g->done = true;
  }
};

// Queues `job` on `s`: once its gate opens it writes `tag` over the `n`
// bytes at `p`. False if the job could not be queued.
inline bool start_gated_write(Allocator& a, GatedWrite& job, void* p, std::size_t n,
                              unsigned char tag, Stream s) {
  job.block = p;
  job.size = n;
  job.tag = tag;
  return a.backend().launch_host_func(s, &GatedWrite::run, &job) == Status::ok;
}

// A job that checks the block still holds `expect` everywhere, then writes
// `tag`.
struct CheckThenWrite {
  void* block = nullptr;
  std::size_t size = 0;
  unsigned char expect = 0, tag = 0;
  std::atomic<bool> saw_expected{false};
  static void run(void* self) {
    auto* c = static_cast<CheckThenWrite*>(self);
    const auto* b = static_cast<const unsigned char*>(c->block);
    bool ok = true;
    for (std::size_t i = 0; i < c->size; ++i) ok &= b[i] == c->expect;
    c->saw_expected = ok;
    std::memset(c->block, c->tag, c->size);
  }
};

// Queues on `s` a check that `n` bytes at `q` hold the gated job's tag, then
// a write of `tag`; opens the gate and drains `s`. True if the check saw the
// job's bytes: `s` ran after the job.
inline bool ran_after_gate(Allocator& a, GatedWrite& gate, void* q, std::size_t n, Stream s,
                           unsigned char tag) {
  CheckThenWrite check;
  check.block = q;
  check.size = n;
  check.expect = gate.tag;
  check.tag = tag;
  if (a.backend().launch_host_func(s, &CheckThenWrite::run, &check) != Status::ok) return false;
  gate.open = true;
  a.backend().stream_synchronize(s);
  return check.saw_expected.load();
}

}  // namespace memlake
