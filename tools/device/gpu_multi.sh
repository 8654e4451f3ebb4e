#!/usr/bin/env bash
# gpu_multi.sh: the multi-GPU checks, for a machine with two GPUs or more:
#   memlake_cuda_tests, all of them, GpuPeer.* among them (a kernel on GPU 1
#     reads and writes memlake blocks of GPU 0, one of them stitched; two
#     devices' allocators apart);
#   python/tests/test_torch_nccl.py (NCCL all-reduce, send/recv and
#     all-gather on memlake tensors, one of them stitched, two ranks);
#   samples/distributed/train_distributed.py --compare under torchrun with
#     MEMLAKE_NPROC ranks for DDP (default 2) and 2 for the two-stage
#     pipeline with send/recv, both over NCCL; losses and peak reserved per rank against
#     PyTorch's caching allocator.
# Everything goes to $OUT (default ./out); multi-summary.txt collects it.
set -u -o pipefail

cd "$(dirname "$0")/../.." || exit 1
BUILD=${MEMLAKE_BUILD_DIR:-build-multi}
SUMMARY_NAME=multi-summary.txt
# shellcheck source=tools/device/lib.sh
. tools/device/lib.sh

machine
nvidia-smi topo -m 2>&1 | tee -a "$SUMMARY"
build "$BUILD" "$OUT/multi-build.log" memlake_cuda_tests memlake_shared

step cuda-tests 200 "$OUT/cuda-tests.log" "$BUILD/tests/memlake_cuda_tests"
grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED  \]|^\[       OK \] GpuPeer" "$OUT/cuda-tests.log" | tee -a "$SUMMARY"

export MEMLAKE_LIBRARY=$PWD/$BUILD/libmemlake.so
step nccl-test 150 "$OUT/nccl-test.log" python3 python/tests/test_torch_nccl.py -v
grep -E "^Ran|^OK|FAILED|rank [01] ok|Error" "$OUT/nccl-test.log" | tail -n 12 | tee -a "$SUMMARY"
NPROC=${MEMLAKE_NPROC:-2}
for mode in ddp pipeline; do
  ranks=$NPROC
  [[ $mode == pipeline ]] && ranks=2  # two stages
  step "$mode-$ranks" 240 "$OUT/$mode.log" python3 samples/distributed/train_distributed.py \
    --compare --nproc "$ranks" --mode "$mode" --steps "${MEMLAKE_STEPS:-12}"
  grep -v "^JSON" "$OUT/$mode.log" | tail -n 8 | tee -a "$SUMMARY"
done
note "== done in $(($(date +%s) - START))s"
