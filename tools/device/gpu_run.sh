#!/usr/bin/env bash
# gpu_run.sh: the GPU machine's whole check of memlake in one command, run
# from anywhere inside the repository. It configures and builds with ninja
# (warnings are errors; if that build fails it says so and builds again with
# warnings allowed, so the later steps still run), runs memlake_cuda_tests,
# memlake_bench with JSON output and the ratios against cudaMallocAsync and
# cudaMalloc, then compute-sanitizer memcheck over memlake_cuda_tests (API
# errors not reported: some tests provoke them on purpose) and racecheck and
# synccheck over the GPU kernel tests. Every step has a time limit and the
# whole run stays under MEMLAKE_RUN_BUDGET seconds (default 520). Logs go to
# $OUT (default ./out): summary.txt, build.log, tests.log, bench.log,
# bench.json, memcheck.log, racecheck.log, synccheck.log.
set -u -o pipefail

cd "$(dirname "$0")/../.." || exit 1
BUILD=${MEMLAKE_BUILD_DIR:-build-device}
# shellcheck source=tools/device/lib.sh
. tools/device/lib.sh

note "== machine"
machine
compute-sanitizer --version 2>&1 | tail -n 1 | tee -a "$SUMMARY"

note "== build"
CONFIGURE=(-G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CUDA_ARCHITECTURES=90
  -DCMAKE_CUDA_FLAGS=-lineinfo -DMEMLAKE_BUILD_TOOLS=OFF)
TESTS="" BENCH="" STRICT=1
if step configure 120 "$OUT/build.log" cmake -S . -B "$BUILD" "${CONFIGURE[@]}"; then
  step build-tests 240 "$OUT/build.log" cmake --build "$BUILD" --target memlake_cuda_tests &&
    TESTS=$BUILD/tests/memlake_cuda_tests
  step build-bench 120 "$OUT/build.log" cmake --build "$BUILD" --target memlake_bench &&
    BENCH=$BUILD/bench/memlake_bench
fi
if [[ -z $TESTS || -z $BENCH ]]; then
  # A newer compiler may warn where the one the code was written with did
  # not: build what failed again with warnings allowed, and say so.
  STRICT=0
  note "a build with warnings as errors failed (first diagnostics below); building it again with warnings allowed"
  grep -m 20 -E "error|warning" "$OUT/build.log" | tee -a "$SUMMARY"
  case $BUILD in
    /*) RELAXED=$BUILD-relaxed ;;
    *) RELAXED=$PWD/$BUILD-relaxed ;;
  esac
  mkdir -p "$RELAXED"
  printf '#!/bin/sh\nexec "$@" -Wno-error\n' >"$RELAXED/cxx"
  printf '#!/bin/sh\nexec "$@" -Xcompiler=-Wno-error\n' >"$RELAXED/cuda"
  chmod +x "$RELAXED/cxx" "$RELAXED/cuda"
  if step configure-relaxed 120 "$OUT/build.log" cmake -S . -B "$RELAXED/build" "${CONFIGURE[@]}" \
    -DCMAKE_CXX_COMPILER_LAUNCHER="$RELAXED/cxx" -DCMAKE_CUDA_COMPILER_LAUNCHER="$RELAXED/cuda"; then
    [[ -n $TESTS ]] ||
      { step build-tests-relaxed 240 "$OUT/build.log" cmake --build "$RELAXED/build" \
        --target memlake_cuda_tests && TESTS=$RELAXED/build/tests/memlake_cuda_tests; }
    [[ -n $BENCH ]] ||
      { step build-bench-relaxed 120 "$OUT/build.log" cmake --build "$RELAXED/build" \
        --target memlake_bench && BENCH=$RELAXED/build/bench/memlake_bench; }
  fi
fi
if [[ -z $TESTS ]]; then
  note "memlake_cuda_tests did not build; last lines of build.log:"
  tail -n 40 "$OUT/build.log" | tee -a "$SUMMARY"
  exit 1
fi
KERNEL_TESTS='GpuKernels.*-GpuKernels.OutOfMemory*'

note "== memlake_cuda_tests"
step tests 150 "$OUT/tests.log" "$TESTS" --gtest_color=no
grep -E "^\[  (PASSED|FAILED) |^\[  SKIPPED \] [0-9]|^\[==========\]|GiB allocated before" \
  "$OUT/tests.log" | tee -a "$SUMMARY"

note "== memlake_bench"
if [[ -n $BENCH ]]; then
  step bench 200 "$OUT/bench.log" "$BENCH" --benchmark_out="$OUT/bench.json" \
    --benchmark_out_format=json --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
  if [[ -s $OUT/bench.json ]]; then
    python3 tools/device/bench_ratios.py "$OUT/bench.json" 2>&1 | tee -a "$OUT/bench.log" "$SUMMARY"
  fi
else
  note "memlake_bench was not built (Google Benchmark not found?)"
fi

note "== compute-sanitizer"
if command -v compute-sanitizer >/dev/null; then
  # The test at the device's memory limit runs on its own: memcheck keeps
  # device memory of its own, which that test takes to the last byte.
  step memcheck 150 "$OUT/memcheck.log" compute-sanitizer --tool memcheck --report-api-errors no \
    --error-exitcode 99 "$TESTS" --gtest_color=no '--gtest_filter=-GpuKernels.OutOfMemory*'
  step memcheck-oom 90 "$OUT/memcheck.log" compute-sanitizer --tool memcheck --report-api-errors no \
    --error-exitcode 99 "$TESTS" --gtest_color=no '--gtest_filter=GpuKernels.OutOfMemory*'
  step racecheck 60 "$OUT/racecheck.log" compute-sanitizer --tool racecheck --error-exitcode 99 \
    "$TESTS" --gtest_color=no "--gtest_filter=$KERNEL_TESTS"
  step synccheck 60 "$OUT/synccheck.log" compute-sanitizer --tool synccheck --error-exitcode 99 \
    "$TESTS" --gtest_color=no "--gtest_filter=$KERNEL_TESTS"
  for f in memcheck racecheck synccheck; do
    [[ -f $OUT/$f.log ]] || continue
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|^\[  (PASSED|FAILED) |^\[==========\]" "$OUT/$f.log" |
      sed "s/^/$f: /" | tee -a "$SUMMARY"
  done
else
  note "compute-sanitizer not found"
fi

note "== done in $(($(date +%s) - START))s (build: $( ((STRICT)) && echo 'warnings as errors' || echo 'warnings allowed for what failed'))"
