#!/usr/bin/env bash
# gpu_replay.sh: the bundled traces and the pipeline sample on the GPU, each
# beside cudaMallocAsync in the same run. Builds memlake-replay and
# pipeline_parallel (Release, ninja), then:
#   - memlake-replay --backend cuda --allocator cudaMallocAsync over the
#     traces, with the worker inline (reproducible, the host replay's
#     decisions) and on its thread (the latency a training run sees);
#   - pipeline_parallel --backend cuda at scales 1, 4 and 16.
# Traces come from $MEMLAKE_TRACES (default traces/).
# Logs and JSON go to $OUT (default ./out): replay-summary.txt, replay.log,
# replay-inline.json, replay-thread.json, pipeline.log.
set -u -o pipefail

cd "$(dirname "$0")/../.." || exit 1
BUILD=${MEMLAKE_BUILD_DIR:-build-replay}
SUMMARY_NAME=replay-summary.txt
# shellcheck source=tools/device/lib.sh
. tools/device/lib.sh

TRACES=${MEMLAKE_TRACES:-traces}

note "== machine"
machine

note "== build"
GENERATOR=()
command -v ninja >/dev/null && GENERATOR=(-G Ninja)
step configure 120 "$OUT/build-replay.log" cmake -S . -B "$BUILD" "${GENERATOR[@]}" \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 &&
  step build 300 "$OUT/build-replay.log" cmake --build "$BUILD" -j "$(nproc)" \
    --target memlake-replay pipeline_parallel || {
  tail -n 30 "$OUT/build-replay.log" | tee -a "$SUMMARY"
  exit 1
}

note "== memlake-replay on the GPU, beside cudaMallocAsync"
for mode in inline thread; do
  MEMLAKE_WORKER=$mode step "replay-$mode" 200 "$OUT/replay.log" \
    "$BUILD/tools/memlake-replay" --backend cuda --allocator cudaMallocAsync --json \
    --no-progress "$TRACES"/*.csv.gz
  grep '^{' "$OUT/replay.log" | tail -n "$(ls "$TRACES"/*.csv.gz | wc -l)" >"$OUT/replay-$mode.json"
done
python3 tools/device/replay_lines.py "$OUT"/replay-inline.json "$OUT"/replay-thread.json | tee -a "$SUMMARY"

note "== pipeline_parallel on the GPU"
for scale in 1 4 16; do
  step "pipeline-scale-$scale" 100 "$OUT/pipeline.log" "$BUILD/samples/pipeline_parallel" \
    --backend cuda --scale "$scale"
done
grep -E "^pipeline_parallel|peak|utilization|host waits|mismatches|cudaMallocAsync|reserved high|pool reserved" \
  "$OUT/pipeline.log" | tee -a "$SUMMARY"
note "== done in $(($(date +%s) - START))s"
