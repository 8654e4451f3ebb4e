#!/usr/bin/env bash
# gpu_ab.sh: memlake under two option sets, A and B, on the same fixed-shape
# training runs and pipeline sample, alternating, so that a change's effect
# on the GPU is seen beside run-to-run noise. MEMLAKE_AB_A and MEMLAKE_AB_B
# hold the options (memlake.torch.enable / MEMLAKE_CONF syntax; empty: the
# defaults); MEMLAKE_TORCH_MODELS the models, MEMLAKE_AB_REPEAT the rounds.
# Two builds instead: MEMLAKE_AB_LIBRARY_A and MEMLAKE_AB_LIBRARY_B name a
# libmemlake.so each (built elsewhere, e.g. before and after a change) for
# the training runs; the pipeline sample then runs this tree's build.
set -u -o pipefail

cd "$(dirname "$0")/../.." || exit 1
BUILD=${MEMLAKE_BUILD_DIR:-build-steady}
SUMMARY_NAME=ab-summary.txt
# shellcheck source=tools/device/lib.sh
. tools/device/lib.sh

machine
build "$BUILD" "$OUT/ab-build.log" pipeline_parallel memlake_shared
export MEMLAKE_LIBRARY=$PWD/$BUILD/libmemlake.so
A=${MEMLAKE_AB_A:-}
B=${MEMLAKE_AB_B:-}
note "A: '${A}' ${MEMLAKE_AB_LIBRARY_A:-}  B: '${B}' ${MEMLAKE_AB_LIBRARY_B:-}"
conf_of() { if [[ $1 == A ]]; then echo "$A"; else echo "$B"; fi; }
library_of() {
  local named
  if [[ $1 == A ]]; then named=${MEMLAKE_AB_LIBRARY_A:-}; else named=${MEMLAKE_AB_LIBRARY_B:-}; fi
  echo "${named:-$MEMLAKE_LIBRARY}"
}
for round in $(seq 1 "${MEMLAKE_AB_REPEAT:-2}"); do
  for model in ${MEMLAKE_TORCH_MODELS:-llama-lora}; do
    for side in A B; do
      conf=$(conf_of "$side")
      json=$OUT/$model-$side-$round.json
      library=$(library_of "$side")
      MEMLAKE_LIBRARY=$library step "$model-$side-$round" 120 "$json" \
        python3 samples/pytorch_training/train.py \
        --allocator memlake --model "$model" --steps "${MEMLAKE_TORCH_STEPS:-20}" \
        --seq-len "${MEMLAKE_SEQ_LEN:-512}" --memlake-conf "$conf" &&
        python3 tools/device/train_steps.py "$json" | tee -a "$SUMMARY"
    done
  done
  for side in A B; do
    conf=$(conf_of "$side")
    for scale in 1 16; do
      MEMLAKE_CONF=$conf step "pipeline-$scale-$side-$round" 60 "$OUT/pipeline-$side.log" \
        "$BUILD/samples/pipeline_parallel" --backend cuda --scale "$scale" --seed "$round"
    done
    note "pipeline $side:"
    grep -E "utilization|schedule time" "$OUT/pipeline-$side.log" | tail -6 | tee -a "$SUMMARY"
  done
done
note "== done in $(($(date +%s) - START))s"
