// memlake_bench: the allocator microbenchmarks of this folder, one binary.
// Run it with --benchmark_format=json (or --benchmark_out=FILE
// --benchmark_out_format=json) and read the ratios with
// tools/device/bench_ratios.py. docs/benchmarks.md has the measured table.
#include <benchmark/benchmark.h>

BENCHMARK_MAIN();
