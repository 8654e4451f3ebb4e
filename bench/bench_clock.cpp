// What one read of the clock that times each allocate and deallocate costs
// (common/tick_clock.hpp: the time-stamp counter where the kernel keeps time
// by it), against a read of steady_clock, which it replaces. Real time per
// read, in ns; `tsc` says which clock now_ticks reads.
#include <chrono>

#include "common.hpp"
#include "common/tick_clock.hpp"

namespace memlake::bench {
namespace {

void clock_steady(benchmark::State& state) {
  for (auto _ : state) {
    auto t = std::chrono::steady_clock::now();
    benchmark::DoNotOptimize(t);
  }
}

void clock_ticks(benchmark::State& state) {
  for (auto _ : state) {
    std::int64_t t = now_ticks();
    benchmark::DoNotOptimize(t);
  }
  state.counters["tsc"] = tick_clock_detail::uses_tsc ? 1 : 0;
}

BENCHMARK(clock_steady)->Name("clock/steady_clock");
BENCHMARK(clock_ticks)->Name("clock/tick_clock");

}  // namespace
}  // namespace memlake::bench
