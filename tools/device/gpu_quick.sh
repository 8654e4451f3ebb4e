#!/usr/bin/env bash
# gpu_quick.sh: the essential GPU checks from one Release build, for a
# session with little device time (the other gpu_*.sh scripts each build
# their own tree). In order, each under a time limit and the whole under
# MEMLAKE_RUN_BUDGET (default 560 s):
#   memlake_cuda_tests, then under compute-sanitizer memcheck;
#   memlake-replay --backend cuda --allocator cudaMallocAsync (worker thread)
#     over the traces in $MEMLAKE_TRACES (default traces/);
#   python/tests/test_torch_gpu.py;
#   samples/pytorch_training/train.py: expandable segments and memlake per
#     model (MEMLAKE_TORCH_MODELS), plus memlake with MEMLAKE_VARIANTS
#     (option sets separated by ';') on the first model; per-step times,
#     VMM calls and host time in the allocator (tools/device/train_steps.py);
#   pipeline_parallel --backend cuda at scales 1 and 16.
# Everything goes to $OUT (default ./out); quick-summary.txt collects it.
set -u -o pipefail

cd "$(dirname "$0")/../.." || exit 1
BUILD=${MEMLAKE_BUILD_DIR:-build-quick}
SUMMARY_NAME=quick-summary.txt
BUDGET=${MEMLAKE_RUN_BUDGET:-560}
# shellcheck source=tools/device/lib.sh
. tools/device/lib.sh
TRACES=${MEMLAKE_TRACES:-traces}

machine
build "$BUILD" "$OUT/quick-build.log" memlake_cuda_tests memlake-replay pipeline_parallel memlake_shared

step cuda-tests 120 "$OUT/cuda-tests.log" "$BUILD/tests/memlake_cuda_tests"
grep -E "^\[  (PASSED|FAILED|SKIPPED) " "$OUT/cuda-tests.log" | tee -a "$SUMMARY"
step memcheck 90 "$OUT/memcheck.log" compute-sanitizer --tool memcheck --report-api-errors no \
  "$BUILD/tests/memlake_cuda_tests"
grep -E "ERROR SUMMARY|^\[  (PASSED|FAILED) " "$OUT/memcheck.log" | tee -a "$SUMMARY"

step replay 120 "$OUT/replay.log" "$BUILD/tools/memlake-replay" --backend cuda \
  --allocator cudaMallocAsync --json --no-progress "$TRACES"/*.csv.gz
python3 tools/device/replay_lines.py "$OUT/replay.log" | tee -a "$SUMMARY"

export MEMLAKE_LIBRARY=$PWD/$BUILD/libmemlake.so
step torch-tests 100 "$OUT/torch-tests.log" python3 python/tests/test_torch_gpu.py -v
grep -E "^(Ran|OK|FAILED)" "$OUT/torch-tests.log" | tee -a "$SUMMARY"

STEPS=${MEMLAKE_TORCH_STEPS:-20}
IFS=';' read -r -a VARIANTS <<<"${MEMLAKE_VARIANTS-}"
first=1
for model in ${MEMLAKE_TORCH_MODELS:-gpt2-recompute llama-lora}; do
  runs=()
  for allocator in expandable memlake; do
    json=$OUT/$model-$allocator.json
    step "$model-$allocator" 100 "$json" python3 samples/pytorch_training/train.py \
      --allocator "$allocator" --model "$model" --steps "$STEPS" && runs+=("$json")
  done
  if ((first)); then
    i=0
    for conf in "${VARIANTS[@]}"; do
      json=$OUT/$model-memlake-$i.json
      note "[$model memlake-$i] options '$conf'"
      step "$model-memlake-$i" 100 "$json" python3 samples/pytorch_training/train.py \
        --allocator memlake --model "$model" --steps "$STEPS" --memlake-conf "$conf" && runs+=("$json")
      i=$((i + 1))
    done
  fi
  first=0
  python3 tools/device/train_steps.py "${runs[@]}" | tee -a "$SUMMARY"
done

for scale in 1 16; do
  step "pipeline-$scale" 60 "$OUT/pipeline.log" "$BUILD/samples/pipeline_parallel" --backend cuda \
    --scale "$scale"
done
grep -E "^pipeline_parallel|peak reserved|utilization|host waits|mismatches|pool reserved" \
  "$OUT/pipeline.log" | tee -a "$SUMMARY"
note "== done in $(($(date +%s) - START))s"
