#!/usr/bin/env bash
# gpu_step_gap.sh: where a training step with shapes new every step loses
# time under memlake, against PyTorch's allocators, in one command:
#   bench/memlake_vmm_gpu_effects: kernel speed over memory mapped from
#     handles of each size (against cudaMalloc), VMM calls beside running
#     kernels (does a call wait for the GPU?), kernels beside VMM calls;
#   samples/pytorch_training/train.py --trace for each allocator of
#     MEMLAKE_GAP_ALLOCATORS (default: native expandable memlake
#     memlake/worker:inline; memlake variants as in train.py --allocators),
#     model MEMLAKE_GAP_MODEL (gpt2-recompute), sequence length
#     MEMLAKE_GAP_SEQ_LEN (default 0: a new length every step), in
#     MEMLAKE_GAP_ROUNDS interleaved rounds (default 1), three steps after
#     the warm-up recorded by torch.profiler, and tools/device/step_trace.py
#     over each trace: host time, GPU busy and idle, launches, synchronizing
#     calls, allocation ops per step, beside memlake's own counters per
#     step; then, per round, the host's self time by op name side by side
#     for the allocators (step_trace.py --ops), the ops that differ most
#     first;
#   MEMLAKE_GAP_TRAIN_ONLY=1 leaves out the rest;
#   then, with what the budget leaves, python/tests/test_torch_graphs.py and
#     memlake_cuda_tests.
# Uses the binaries in $MEMLAKE_PREBUILT when they start here, otherwise
# builds them. Everything goes to $OUT (default ./out); gap-summary.txt
# collects the results.
set -u -o pipefail

cd "$(dirname "$0")/../.." || exit 1
SUMMARY_NAME=gap-summary.txt
BUDGET=${MEMLAKE_RUN_BUDGET:-560}
# shellcheck source=tools/device/lib.sh
. tools/device/lib.sh

note "== machine"
machine
BIN=${MEMLAKE_PREBUILT:-}
# A binary that starts here answers bad arguments with its usage (status 2).
if [[ -n $BIN && -x $BIN/memlake_vmm_gpu_effects ]] &&
  [[ $("$BIN/memlake_vmm_gpu_effects" --rounds 0 2>&1) == *usage* ]]; then
  note "== prebuilt binaries from $BIN"
else
  note "== build"
  build build-gap "$OUT/gap-build.log" memlake_vmm_gpu_effects memlake_cuda_tests memlake_shared
  BIN=$PWD/build-gap/bin
  mkdir -p "$BIN"
  cp build-gap/bench/memlake_vmm_gpu_effects build-gap/tests/memlake_cuda_tests \
    build-gap/libmemlake.so "$BIN/"
fi
case $BIN in /*) ;; *) BIN=$PWD/$BIN ;; esac

TRAIN_ONLY=${MEMLAKE_GAP_TRAIN_ONLY:-0}
if [[ $TRAIN_ONLY != 1 ]]; then
  note "== what mappings cost the GPU"
  step vmm-gpu-effects 120 "$OUT/vmm-gpu-effects.log" "$BIN/memlake_vmm_gpu_effects" --rounds 3
  grep -vE "^\+" "$OUT/vmm-gpu-effects.log" | tee -a "$SUMMARY"
fi

note "== traced training steps"
export MEMLAKE_LIBRARY=$BIN/libmemlake.so PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}
MODEL=${MEMLAKE_GAP_MODEL:-gpt2-recompute}
for round in $(seq 1 "${MEMLAKE_GAP_ROUNDS:-1}"); do
  traces=()
  for allocator in ${MEMLAKE_GAP_ALLOCATORS:-native expandable memlake memlake/worker:inline}; do
    base=${allocator%%/*} conf=
    [[ $allocator == */* ]] && conf=${allocator#*/} && conf=${conf//\//,}
    label=$(echo "$allocator" | tr '/:' '-_')-$round
    step "train-$label" 150 "$OUT/train-$label.log" python3 samples/pytorch_training/train.py \
      --allocator "$base" --memlake-conf "$conf" --label "$allocator" --model "$MODEL" --steps 8 \
      --seq-len "${MEMLAKE_GAP_SEQ_LEN:-0}" --warmup 4 --init-device cuda \
      --trace "$OUT/trace-$label.json.gz"
    python3 tools/device/train_steps.py "$OUT/train-$label.log" | tee -a "$SUMMARY"
    [[ -f $OUT/trace-$label.json.gz ]] || continue
    python3 tools/device/step_trace.py "$OUT/trace-$label.json.gz" | tee -a "$SUMMARY"
    traces+=("$OUT/trace-$label.json.gz")
  done
  ((${#traces[@]} > 1)) && python3 tools/device/step_trace.py --ops 30 "${traces[@]}" | tee -a "$SUMMARY"
done
[[ $TRAIN_ONLY == 1 ]] && { note "== done in $(($(date +%s) - START))s"; exit 0; }

note "== graphs under PyTorch, then the CUDA suite"
step python-torch-graphs 120 "$OUT/python.log" python3 python/tests/test_torch_graphs.py -v
grep -E "^(test_|Ran|OK|FAILED)|Error:|refused|skipped" "$OUT/python.log" | head -n 40 |
  tee -a "$SUMMARY"
step cuda-tests 200 "$OUT/cuda-tests.log" "$BIN/memlake_cuda_tests" --gtest_color=no
grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[==========\]" "$OUT/cuda-tests.log" | tee -a "$SUMMARY"
note "== done in $(($(date +%s) - START))s"
