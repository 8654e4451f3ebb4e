#!/usr/bin/env bash
# gpu_validate.sh: the GPU validation of everything but the training table
# (gpu_table.sh) and the sanitizers' long runs (gpu_sanitize.sh), in one
# command. Uses the binaries in $MEMLAKE_PREBUILT (a folder holding
# memlake_cuda_tests, memlake_nvtx_sanitizer_check, memlake-replay,
# graph_step, cuda_mr_thrust, pipeline_parallel and libmemlake.so, built for
# sm_90 elsewhere) when they start here; otherwise builds them (Release,
# Hopper). Then, each under a time limit and the whole under
# MEMLAKE_RUN_BUDGET (default 560 s):
#   memlake_cuda_tests (the shared suites on the CudaBackend, graph pools and
#     capture included, and the GPU-only tests);
#   compute-sanitizer memcheck with memlake's NVTX heaps and regions: valid
#     accesses, a read of a freed block and a read past a block's end, each
#     with nvtx:true and with nvtx:false (tests/nvtx/sanitizer_check.cu);
#   samples/graph_step on the GPU (1,000 replays checked, separate pools,
#     shared chunks and cudaMallocAsync graph memory nodes) and
#     samples/cuda_mr_thrust (thrust and CUB through memlake::cuda_resource);
#   the Python package's tests under PyTorch: test_torch_gpu.py,
#     test_torch_graphs.py, test_profiling.py, test_package.py, and
#     samples/pytorch_graphs/graphed_train.py --compare (captured training
#     steps under PyTorch's allocator and memlake, each pool setup, and
#     under torch.compile(mode="reduce-overhead"));
#   memlake-replay --backend cuda --allocator cudaMallocAsync over traces/.
# Logs go to $OUT (default ./out); validate-summary.txt collects the results.
set -u -o pipefail

cd "$(dirname "$0")/../.." || exit 1
SUMMARY_NAME=validate-summary.txt
BUDGET=${MEMLAKE_RUN_BUDGET:-560}
# shellcheck source=tools/device/lib.sh
. tools/device/lib.sh

note "== machine"
machine
python3 -c "import torch; print('torch', torch.__version__, 'GPUs', torch.cuda.device_count())" 2>&1 |
  tee -a "$SUMMARY"
compute-sanitizer --version 2>&1 | tail -n 1 | tee -a "$SUMMARY"

BIN=${MEMLAKE_PREBUILT:-}
if [[ -n $BIN && -x $BIN/memlake_cuda_tests ]] && "$BIN/memlake_cuda_tests" --gtest_list_tests >/dev/null 2>&1; then
  note "== prebuilt binaries from $BIN"
else
  note "== build (prebuilt binaries absent or not runnable here)"
  build build-validate "$OUT/build.log" memlake_cuda_tests memlake_nvtx_sanitizer_check \
    memlake-replay graph_step cuda_mr_thrust pipeline_parallel memlake_shared
  BIN=$PWD/build-validate/bin
  mkdir -p "$BIN"
  for f in tests/memlake_cuda_tests tests/memlake_nvtx_sanitizer_check tools/memlake-replay \
    samples/graph_step samples/cuda_mr_thrust samples/pipeline_parallel libmemlake.so; do
    cp "build-validate/$f" "$BIN/"
  done
fi
case $BIN in /*) ;; *) BIN=$PWD/$BIN ;; esac

note "== memlake_cuda_tests"
step cuda-tests 150 "$OUT/cuda-tests.log" "$BIN/memlake_cuda_tests" --gtest_color=no
grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[==========\]" "$OUT/cuda-tests.log" | tee -a "$SUMMARY"

note "== compute-sanitizer memcheck over memlake's NVTX heaps and regions"
# Expected: valid reports nothing; freed and past-end are reported with NVTX
# and not without it.
for mode in valid freed past-end; do
  for flag in "" --no-nvtx; do
    name=nvtx-$mode${flag:+-off}
    step "$name" 60 "$OUT/nvtx-sanitizer.log" compute-sanitizer --tool memcheck --error-exitcode 99 \
      "$BIN/memlake_nvtx_sanitizer_check" "$mode" $flag
  done
done
grep -E "^\+|ERROR SUMMARY|Invalid|stitched block|reading" "$OUT/nvtx-sanitizer.log" | tee -a "$SUMMARY"

note "== samples on the GPU"
step graph-step 120 "$OUT/samples.log" "$BIN/graph_step" --backend cuda --buckets 4 --tokens 512 \
  --hidden 1024 --replays 1000
step thrust 60 "$OUT/samples.log" "$BIN/cuda_mr_thrust" --log2-elements 24 --steps 8
grep -vE "^\+" "$OUT/samples.log" | tail -n 40 | tee -a "$SUMMARY"

note "== Python package under PyTorch"
export MEMLAKE_LIBRARY=$BIN/libmemlake.so PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}
# The graph tests compile with Inductor in four setups: from a cold cache
# they took more than 150 s on an H200.
for t in torch_gpu torch_graphs profiling package; do
  limit=150
  [[ $t == torch_graphs ]] && limit=300
  step "python-$t" "$limit" "$OUT/python.log" python3 "python/tests/test_$t.py" -v
done
grep -E "^(test_|Ran|OK|FAILED)|Error:|refused|worked|skipped" "$OUT/python.log" | head -n 80 |
  tee -a "$SUMMARY"
# Captured training steps per bucket: what each allocator and pool setup
# reserves, and whether the losses agree; then the same steps under
# torch.compile(mode="reduce-overhead"), smaller (compilation takes most of
# their time).
step graphed-train 150 "$OUT/graphed.log" python3 samples/pytorch_graphs/graphed_train.py --compare \
  --only separate,shared,exclusive
grep -vE "^(JSON|\+)" "$OUT/graphed.log" | tail -n 8 | tee -a "$SUMMARY"
step compiled-train 240 "$OUT/compiled.log" python3 samples/pytorch_graphs/graphed_train.py --compare \
  --only compiled,compiled_plain,compiled_exclusive --layers 2 --replays 100
grep -vE "^(JSON|\+)" "$OUT/compiled.log" | tail -n 6 | tee -a "$SUMMARY"

note "== memlake-replay on the GPU beside cudaMallocAsync"
step replay 120 "$OUT/replay.log" "$BIN/memlake-replay" --backend cuda --allocator cudaMallocAsync \
  --json --no-progress traces/*.csv.gz
python3 tools/device/replay_lines.py "$OUT/replay.log" | tee -a "$SUMMARY"
note "== done in $(($(date +%s) - START))s"
