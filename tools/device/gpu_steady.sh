#!/usr/bin/env bash
# gpu_steady.sh: the steady state of repeated training steps on the GPU, and
# the checks that go with it, from one Release build:
#   memlake_cuda_tests (optionally under compute-sanitizer memcheck,
#     MEMLAKE_MEMCHECK=1);
#   memlake-replay --backend cuda --allocator cudaMallocAsync (worker thread)
#     over repeated-step traces made here by tools/synth_trace.py --repeat
#     and over the traces in $MEMLAKE_TRACES (default
#     traces/): critical-path VMM calls and allocate p99 after
#     warm-up, beside cudaMallocAsync's;
#   samples/pytorch_training/train.py with a fixed sequence length
#     (MEMLAKE_SEQ_LEN, default 512; MEMLAKE_DYNAMIC=1 adds a run with a new
#     length every step) under expandable segments and memlake, per model in
#     MEMLAKE_TORCH_MODELS: per-step times and VMM calls (train_steps.py);
#   pipeline_parallel --backend cuda at scale 1 over seeds MEMLAKE_SEEDS
#     (default 1..5) and at scale 16.
# Everything goes to $OUT (default ./out); steady-summary.txt collects it.
set -u -o pipefail

cd "$(dirname "$0")/../.." || exit 1
BUILD=${MEMLAKE_BUILD_DIR:-build-steady}
SUMMARY_NAME=steady-summary.txt
BUDGET=${MEMLAKE_RUN_BUDGET:-560}
# shellcheck source=tools/device/lib.sh
. tools/device/lib.sh
TRACES=${MEMLAKE_TRACES:-traces}

machine
build "$BUILD" "$OUT/steady-build.log" memlake_cuda_tests memlake-replay pipeline_parallel memlake_shared

step cuda-tests 150 "$OUT/cuda-tests.log" "$BUILD/tests/memlake_cuda_tests"
grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED  \]" "$OUT/cuda-tests.log" | tee -a "$SUMMARY"
if [[ ${MEMLAKE_MEMCHECK:-0} == 1 ]]; then
  step memcheck 120 "$OUT/memcheck.log" compute-sanitizer --tool memcheck --report-api-errors no \
    "$BUILD/tests/memlake_cuda_tests"
  grep -E "ERROR SUMMARY|^\[  (PASSED|FAILED) " "$OUT/memcheck.log" | tee -a "$SUMMARY"
fi

REPEATED=$OUT/repeated
mkdir -p "$REPEATED"
for kind in dynamic moe offload pipeline moe_large; do
  python3 tools/synth_trace.py --kind "$kind" --repeat --steps 20 -o "$REPEATED/$kind.csv.gz"
done
step replay 200 "$OUT/replay.log" "$BUILD/tools/memlake-replay" --backend cuda \
  --allocator cudaMallocAsync --json --no-progress "$REPEATED"/*.csv.gz "$TRACES"/*.csv.gz
rm -rf "$REPEATED"
python3 tools/device/replay_lines.py "$OUT/replay.log" | tee -a "$SUMMARY"

export MEMLAKE_LIBRARY=$PWD/$BUILD/libmemlake.so
# Fixed shapes (every step MEMLAKE_SEQ_LEN tokens), and with MEMLAKE_DYNAMIC=1
# also train.py's default of a new length every step.
SHAPES=("${MEMLAKE_SEQ_LEN:-512}")
[[ ${MEMLAKE_DYNAMIC:-0} == 1 ]] && SHAPES+=(0)
for model in ${MEMLAKE_TORCH_MODELS:-gpt2-recompute}; do
  for seq in "${SHAPES[@]}"; do
    runs=()
    name=$model-$([[ $seq == 0 ]] && echo dynamic || echo "fixed$seq")
    for allocator in expandable memlake; do
      json=$OUT/$name-$allocator.json
      step "$name-$allocator" 120 "$json" python3 samples/pytorch_training/train.py \
        --allocator "$allocator" --model "$model" --steps "${MEMLAKE_TORCH_STEPS:-20}" \
        --seq-len "$seq" && runs+=("$json")
    done
    note "[$name]"
    python3 tools/device/train_steps.py "${runs[@]}" | tee -a "$SUMMARY"
  done
done

for seed in ${MEMLAKE_SEEDS:-1 2 3 4 5}; do
  step "pipeline-1-$seed" 60 "$OUT/pipeline.log" "$BUILD/samples/pipeline_parallel" --backend cuda \
    --scale 1 --seed "$seed"
done
step "pipeline-16" 60 "$OUT/pipeline.log" "$BUILD/samples/pipeline_parallel" --backend cuda \
  --scale 16
grep -E "^pipeline_parallel|peak reserved|utilization|host waits|mismatches|pool reserved|schedule" \
  "$OUT/pipeline.log" | tee -a "$SUMMARY"
note "== done in $(($(date +%s) - START))s"
