#!/usr/bin/env bash
# gpu_steps_ab.sh: training steps under PyTorch's caching allocator (native),
# its expandable segments and two builds of memlake, interleaved round by
# round, so that a change is seen beside the stock allocators and beside the
# rounds' own spread on a shared GPU. Uses prebuilt libraries only (nothing
# is built here, so the whole budget goes to the runs):
#   MEMLAKE_STEPS_LIBRARY_NEW   libmemlake.so of the change
#   MEMLAKE_STEPS_LIBRARY_BASE  libmemlake.so to compare it with (optional;
#                               default: the new one, when a base conf is set)
#   MEMLAKE_STEPS_CONF_NEW, MEMLAKE_STEPS_CONF_BASE
#                               memlake options for each side
#                               (memlake.torch.enable syntax, e.g. worker:off)
#   MEMLAKE_STEPS_CASES         "model:seq_len ..." (seq_len 0: a new length
#                               every step; default "gpt2-recompute:0")
#   MEMLAKE_STEPS_ROUNDS        interleaved rounds (default 2)
#   MEMLAKE_STEPS_STEPS         steps per run (default 10)
# Each run's JSON line goes to $OUT/steps_ab.jsonl; the summary (median
# step per allocator and case, each round, peak reserved, memlake's time
# inside allocate and critical-path VMM calls per step) to
# $OUT/steps-ab-summary.txt.
set -u -o pipefail

cd "$(dirname "$0")/../.." || exit 1
SUMMARY_NAME=steps-ab-summary.txt
# shellcheck source=tools/device/lib.sh
. tools/device/lib.sh

NEW=${MEMLAKE_STEPS_LIBRARY_NEW:?MEMLAKE_STEPS_LIBRARY_NEW names the libmemlake.so to test}
CONF_NEW=${MEMLAKE_STEPS_CONF_NEW:-}
CONF_BASE=${MEMLAKE_STEPS_CONF_BASE:-}
BASE=${MEMLAKE_STEPS_LIBRARY_BASE:-}
[[ -z $BASE && -n $CONF_BASE ]] && BASE=$NEW
export PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}
JSONL=$OUT/steps_ab.jsonl
machine
note "new: $NEW '$CONF_NEW'  base: ${BASE:-none} '$CONF_BASE'"
sides=(native expandable memlake_new)
[[ -n $BASE ]] && sides+=(memlake_base)
for round in $(seq 1 "${MEMLAKE_STEPS_ROUNDS:-2}"); do
  for workload in ${MEMLAKE_STEPS_CASES:-gpt2-recompute:0}; do
    model=${workload%%:*}
    seq_len=${workload##*:}
    for side in "${sides[@]}"; do
      allocator=$side
      library=$NEW
      conf=
      case $side in
        memlake_new) allocator=memlake conf=$CONF_NEW ;;
        memlake_base) allocator=memlake library=$BASE conf=$CONF_BASE ;;
      esac
      log=$OUT/steps-$model-$seq_len-$side-$round.log
      MEMLAKE_LIBRARY=$library step "$model:$seq_len $side $round" 120 "$log" \
        python3 samples/pytorch_training/train.py --allocator "$allocator" --label "$side" \
        --model "$model" --seq-len "$seq_len" --steps "${MEMLAKE_STEPS_STEPS:-10}" \
        --memlake-conf "$conf"
      grep '^{' "$log" | tail -n 1 |
        sed "s/^{/{\"round\": $round, \"case\": \"$workload\", /" >>"$JSONL"
    done
  done
done
python3 - "$JSONL" <<'PY' | tee -a "$SUMMARY"
import json, statistics as st, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
for case in sorted({r["case"] for r in rows}):
    print("==", case)
    for side in ("native", "expandable", "memlake_base", "memlake_new"):
        rs = [r for r in rows if r["case"] == case and r["allocator"] == side]
        if not rs:
            continue
        ms = [r["median_step_seconds"] * 1e3 for r in rs]
        line = "%-13s median step %.1f ms (%s), peak %.2f GiB" % (
            side, st.median(ms), " ".join("%.1f" % x for x in ms),
            max(r["peak_reserved_bytes"] for r in rs) / 2**30)
        if side.startswith("memlake") and "allocate_ms_by_step" in rs[0]:
            line += "; inside allocate %.1f ms, critical-path VMM calls %.0f per step" % (
                st.median(st.median(r["allocate_ms_by_step"][3:]) for r in rs),
                st.median(st.median(r["critical_vmm_by_step"][3:]) for r in rs))
        print(line)
PY
note "== done in $(($(date +%s) - START))s"
