#!/usr/bin/env bash
# gpu_train_variants.sh: one model, PyTorch's expandable segments beside
# memlake under several option sets, to see what a step costs and why.
# Builds libmemlake.so (Release), runs samples/pytorch_training/train.py
# once per variant, and prints per-step milliseconds, VMM calls, slow-path
# and lock-wait milliseconds (tools/device/train_steps.py).
#   MEMLAKE_TORCH_MODELS   models (default gpt2-recompute)
#   MEMLAKE_TORCH_STEPS    steps (default 20)
#   MEMLAKE_VARIANTS       memlake option sets separated by ';' ("" = defaults)
# JSON per run and variants-summary.txt go to $OUT.
set -u -o pipefail

cd "$(dirname "$0")/../.." || exit 1
BUILD=${MEMLAKE_BUILD_DIR:-build-torch}
SUMMARY_NAME=variants-summary.txt
# shellcheck source=tools/device/lib.sh
. tools/device/lib.sh

machine
GENERATOR=()
command -v ninja >/dev/null && GENERATOR=(-G Ninja)
step configure 120 "$OUT/variants-build.log" cmake -S . -B "$BUILD" "${GENERATOR[@]}" \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DMEMLAKE_BUILD_TESTS=OFF \
  -DMEMLAKE_BUILD_TOOLS=OFF -DMEMLAKE_BUILD_BENCH=OFF &&
  step build 240 "$OUT/variants-build.log" cmake --build "$BUILD" -j "$(nproc)" --target memlake_shared || {
  tail -n 30 "$OUT/variants-build.log" | tee -a "$SUMMARY"
  exit 1
}
export MEMLAKE_LIBRARY=$PWD/$BUILD/libmemlake.so
STEPS=${MEMLAKE_TORCH_STEPS:-20}
IFS=';' read -r -a VARIANTS <<<"${MEMLAKE_VARIANTS-}"
((${#VARIANTS[@]})) || VARIANTS=("")
for model in ${MEMLAKE_TORCH_MODELS:-gpt2-recompute}; do
  runs=()
  step "$model-expandable" 120 "$OUT/$model-expandable.json" python3 samples/pytorch_training/train.py \
    --allocator expandable --model "$model" --steps "$STEPS" && runs+=("$OUT/$model-expandable.json")
  i=0
  for conf in "${VARIANTS[@]}"; do
    json=$OUT/$model-memlake-$i.json
    note "[$model memlake $i] options: '${conf}'"
    step "$model-memlake-$i" 120 "$json" python3 samples/pytorch_training/train.py \
      --allocator memlake --model "$model" --steps "$STEPS" --memlake-conf "$conf" && runs+=("$json")
    i=$((i + 1))
  done
  python3 tools/device/train_steps.py "${runs[@]}" | tee -a "$SUMMARY"
done
note "== done in $(($(date +%s) - START))s"
