#!/usr/bin/env bash
# gpu_sanitize.sh: compute-sanitizer's four tools over the CUDA suite, and
# the driver contention that the mapping worker's VMM calls cause on the
# training thread, from the binaries in $MEMLAKE_PREBUILT (see
# gpu_validate.sh; built here when absent). Each under a time limit and the
# whole under MEMLAKE_RUN_BUDGET (default 540 s):
#   memlake_vmm_contention: the training thread's kernel launches, event
#     records and async copies, quiet and beside a thread making VMM calls;
#   memcheck over memlake_cuda_tests (API errors not reported: some tests
#     provoke them on purpose), the test at the device's memory limit on its
#     own (memcheck keeps device memory of its own);
#   racecheck, synccheck and initcheck over the kernel and graph tests.
# Logs go to $OUT (default ./out); sanitize-summary.txt collects them.
set -u -o pipefail

cd "$(dirname "$0")/../.." || exit 1
SUMMARY_NAME=sanitize-summary.txt
BUDGET=${MEMLAKE_RUN_BUDGET:-540}
# shellcheck source=tools/device/lib.sh
. tools/device/lib.sh

machine
BIN=${MEMLAKE_PREBUILT:-}
if [[ -z $BIN || ! -x $BIN/memlake_cuda_tests ]] || ! "$BIN/memlake_cuda_tests" --gtest_list_tests >/dev/null 2>&1; then
  build build-sanitize "$OUT/build.log" memlake_cuda_tests memlake_vmm_contention
  BIN=$PWD/build-sanitize/bin
  mkdir -p "$BIN"
  cp build-sanitize/tests/memlake_cuda_tests build-sanitize/bench/memlake_vmm_contention "$BIN/"
fi
case $BIN in /*) ;; *) BIN=$PWD/$BIN ;; esac
TESTS=$BIN/memlake_cuda_tests

note "== the training thread's CUDA calls beside VMM calls (host ns)"
step contention 90 "$OUT/contention.log" "$BIN/memlake_vmm_contention" --rounds 3 --calls 20000
step contention-paced 60 "$OUT/contention.log" "$BIN/memlake_vmm_contention" --rounds 2 \
  --calls 20000 --vmm-per-ms 5
grep -vE "^\+" "$OUT/contention.log" | tee -a "$SUMMARY"

note "== compute-sanitizer"
OOM='GpuKernels.OutOfMemory*'
GPU_WORK='GpuKernels.*:*Graph*:*Capture*'
step memcheck 200 "$OUT/memcheck.log" compute-sanitizer --tool memcheck --report-api-errors no \
  --error-exitcode 99 "$TESTS" --gtest_color=no "--gtest_filter=-$OOM"
step memcheck-oom 60 "$OUT/memcheck.log" compute-sanitizer --tool memcheck --report-api-errors no \
  --error-exitcode 99 "$TESTS" --gtest_color=no "--gtest_filter=$OOM"
for tool in racecheck synccheck initcheck; do
  step "$tool" 70 "$OUT/$tool.log" compute-sanitizer --tool "$tool" --error-exitcode 99 \
    "$TESTS" --gtest_color=no "--gtest_filter=$GPU_WORK-$OOM"
done
for f in memcheck racecheck synccheck initcheck; do
  [[ -f $OUT/$f.log ]] || continue
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|^\[  (PASSED|FAILED) |^\[==========\]" "$OUT/$f.log" |
    sed "s/^/$f: /" | tee -a "$SUMMARY"
done
note "== done in $(($(date +%s) - START))s"
