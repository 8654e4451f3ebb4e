#!/usr/bin/env bash
# gpu_torch.sh: memlake under PyTorch on the GPU. Builds libmemlake.so
# (Release, ninja), runs python/tests/test_torch_gpu.py (memlake.torch.enable()
# in child processes: data, OOM, record_stream, empty_cache, memory fraction,
# errors) and python/tests/test_torch_graphs.py (CUDA graphs), then
# samples/pytorch_training/train.py --compare for each model: the same
# training under PyTorch's caching allocator, its expandable segments and
# memlake, losses and peak reserved side by side.
# Logs go to $OUT (default ./out): torch-summary.txt, torch-build.log,
# torch-tests.log, training.log.
set -u -o pipefail

cd "$(dirname "$0")/../.." || exit 1
BUILD=${MEMLAKE_BUILD_DIR:-build-torch}
SUMMARY_NAME=torch-summary.txt
# shellcheck source=tools/device/lib.sh
. tools/device/lib.sh

note "== machine"
machine
python3 -c "import torch, transformers, peft; print('torch', torch.__version__, 'transformers', transformers.__version__, 'peft', peft.__version__)" 2>&1 | tee -a "$SUMMARY"

note "== build"
GENERATOR=()
command -v ninja >/dev/null && GENERATOR=(-G Ninja)
step configure 120 "$OUT/torch-build.log" cmake -S . -B "$BUILD" "${GENERATOR[@]}" \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DMEMLAKE_BUILD_TESTS=OFF \
  -DMEMLAKE_BUILD_TOOLS=OFF -DMEMLAKE_BUILD_BENCH=OFF &&
  step build 240 "$OUT/torch-build.log" cmake --build "$BUILD" -j "$(nproc)" --target memlake_shared || {
  tail -n 30 "$OUT/torch-build.log" | tee -a "$SUMMARY"
  exit 1
}
export MEMLAKE_LIBRARY=$PWD/$BUILD/libmemlake.so

note "== memlake.torch tests"
step torch-tests 240 "$OUT/torch-tests.log" python3 python/tests/test_torch_gpu.py -v
grep -E "^(test_|Ran|OK|FAILED)|Error|assert" "$OUT/torch-tests.log" | head -n 40 | tee -a "$SUMMARY"

note "== CUDA graphs under PyTorch"
step torch-graphs 300 "$OUT/torch-graphs.log" python3 python/tests/test_torch_graphs.py -v
grep -E "^(test_|Ran|OK|FAILED)|Error|assert|refused|shared" "$OUT/torch-graphs.log" | head -n 40 | tee -a "$SUMMARY"

note "== training beside PyTorch's allocators"
for model in ${MEMLAKE_TORCH_MODELS:-gpt2-recompute llama-lora}; do
  step "train-$model" 240 "$OUT/training.log" python3 samples/pytorch_training/train.py \
    --compare --model "$model" --steps "${MEMLAKE_TORCH_STEPS:-30}"
done
grep -vE "^JSON|^\+" "$OUT/training.log" | tee -a "$SUMMARY"
note "== done in $(($(date +%s) - START))s"
