#!/usr/bin/env bash
# gpu_ab.sh: training steps under PyTorch's caching allocator (native), its
# expandable segments and memlake under two sides, A and B, interleaved round
# by round (native, expandable, A, B, native, ...), so that a change is seen
# beside the stock allocators and beside the rounds' own spread on a shared
# GPU. Each side has its own options and may have its own build:
#   MEMLAKE_AB_A, MEMLAKE_AB_B   memlake options (memlake.torch.enable /
#                                MEMLAKE_CONF syntax, e.g. worker:off;
#                                empty: the defaults)
#   MEMLAKE_AB_LIBRARY_A, MEMLAKE_AB_LIBRARY_B
#                                a prebuilt libmemlake.so per side (e.g.
#                                before and after a change); a side without
#                                one uses MEMLAKE_LIBRARY, and only when
#                                neither names one is this tree built
#   MEMLAKE_AB_CASES             "model:seq_len ..." (seq_len 0: a new length
#                                every step; default "llama-lora:512")
#   MEMLAKE_AB_ROUNDS            interleaved rounds (default 2)
#   MEMLAKE_AB_STEPS             steps per run (default 10)
#   MEMLAKE_AB_STOCK=0           leaves out native and expandable
#   MEMLAKE_AB_PIPELINE=1        also runs samples/pipeline_parallel on the
#                                CUDA backend, A and B, each round (builds it)
#   MEMLAKE_AB_CPUS              a CPU list for taskset -c (e.g. 4-7): every
#                                run on the same cores, for a host speed
#                                that moves less from run to run (training
#                                steps here are bound by the host)
# Each run's JSON line goes to $OUT/ab.jsonl; the summary (median step per
# side and case, each round, peak reserved; for memlake, medians per step
# from the 4th of the time inside allocate and what it waited for (the
# driver, the lock, events) and inside deallocate; each memlake side's ratio
# to the faster stock allocator of each round, and their median; each
# memlake side's fastest run against the faster stock allocator's fastest)
# to $OUT/ab-summary.txt.
set -u -o pipefail

cd "$(dirname "$0")/../.." || exit 1
BUILD=${MEMLAKE_BUILD_DIR:-build-steady}
SUMMARY_NAME=ab-summary.txt
# shellcheck source=tools/device/lib.sh
. tools/device/lib.sh

machine
targets=()
[[ -z ${MEMLAKE_LIBRARY:-} && (-z ${MEMLAKE_AB_LIBRARY_A:-} || -z ${MEMLAKE_AB_LIBRARY_B:-}) ]] &&
  targets+=(memlake_shared)
[[ ${MEMLAKE_AB_PIPELINE:-0} == 1 ]] && targets+=(pipeline_parallel)
if ((${#targets[@]})); then
  build "$BUILD" "$OUT/ab-build.log" "${targets[@]}"
  export MEMLAKE_LIBRARY=${MEMLAKE_LIBRARY:-$PWD/$BUILD/libmemlake.so}
fi
export PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}
A=${MEMLAKE_AB_A:-}
B=${MEMLAKE_AB_B:-}
LIBRARY_A=${MEMLAKE_AB_LIBRARY_A:-${MEMLAKE_LIBRARY:-}}
LIBRARY_B=${MEMLAKE_AB_LIBRARY_B:-${MEMLAKE_LIBRARY:-}}
note "A: '$A' $LIBRARY_A  B: '$B' $LIBRARY_B"
JSONL=$OUT/ab.jsonl
pin=()
[[ -n ${MEMLAKE_AB_CPUS:-} ]] && pin=(taskset -c "$MEMLAKE_AB_CPUS") && note "runs on CPUs $MEMLAKE_AB_CPUS"
sides=(memlake_A memlake_B)
[[ ${MEMLAKE_AB_STOCK:-1} == 1 ]] && sides=(native expandable "${sides[@]}")

for round in $(seq 1 "${MEMLAKE_AB_ROUNDS:-2}"); do
  for workload in ${MEMLAKE_AB_CASES:-llama-lora:512}; do
    model=${workload%%:*}
    seq_len=${workload##*:}
    for side in "${sides[@]}"; do
      allocator=$side library=$LIBRARY_A conf=
      case $side in
        memlake_A) allocator=memlake conf=$A ;;
        memlake_B) allocator=memlake library=$LIBRARY_B conf=$B ;;
      esac
      log=$OUT/steps-$model-$seq_len-$side-$round.log
      MEMLAKE_LIBRARY=$library step "$workload $side $round" 120 "$log" \
        "${pin[@]}" python3 samples/pytorch_training/train.py --allocator "$allocator" --label "$side" \
        --model "$model" --seq-len "$seq_len" --steps "${MEMLAKE_AB_STEPS:-10}" \
        --memlake-conf "$conf"
      grep '^{' "$log" | tail -n 1 |
        sed "s/^{/{\"round\": $round, \"case\": \"$workload\", /" >>"$JSONL"
    done
  done
  [[ ${MEMLAKE_AB_PIPELINE:-0} == 1 ]] || continue
  for side in A B; do
    conf=$A
    [[ $side == B ]] && conf=$B
    for scale in 1 16; do
      MEMLAKE_CONF=$conf step "pipeline-$scale-$side-$round" 60 "$OUT/pipeline-$side.log" \
        "$BUILD/samples/pipeline_parallel" --backend cuda --scale "$scale" --seed "$round"
    done
    note "pipeline $side:"
    grep -E "utilization|schedule time" "$OUT/pipeline-$side.log" | tail -6 | tee -a "$SUMMARY"
  done
done

[[ -s $JSONL ]] && python3 - "$JSONL" <<'PY' | tee -a "$SUMMARY"
import json, statistics as st, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
for case in sorted({r["case"] for r in rows}):
    print("==", case)
    fastest = {}  # each side's fastest run (ms)
    for side in ("native", "expandable", "memlake_A", "memlake_B"):
        rs = [r for r in rows if r["case"] == case and r["allocator"] == side]
        if not rs:
            continue
        ms = [r["median_step_seconds"] * 1e3 for r in rs]
        fastest[side] = min(ms)
        line = "%-11s median step %.1f ms (%s), peak %.2f GiB" % (
            side, st.median(ms), " ".join("%.1f" % x for x in ms),
            max(r["peak_reserved_bytes"] for r in rs) / 2**30)
        if side.startswith("memlake") and "allocate_ms_by_step" in rs[0]:
            per_step = lambda key: st.median(st.median(r[key][3:]) for r in rs)
            line += ("; per step: inside allocate %.1f ms (critical-path VMM %.1f ms in %.0f"
                     " calls, lock waits %.1f ms, events %.1f ms), worker VMM %.1f ms") % (
                per_step("allocate_ms_by_step"), per_step("critical_path_vmm_ms_by_step"),
                per_step("critical_vmm_by_step"), per_step("lock_wait_ms_by_step"),
                per_step("critical_path_event_ms_by_step"), per_step("worker_vmm_ms_by_step"))
            if "deallocate_ms_by_step" in rs[0]:
                line += ", inside deallocate %.1f ms" % per_step("deallocate_ms_by_step")
        print(line)
    # Each memlake side against the faster stock allocator of the same
    # round: a ratio per round, then their median.
    for side in ("memlake_A", "memlake_B"):
        ratios = []
        for rnd in sorted({r["round"] for r in rows if r["case"] == case}):
            of = {r["allocator"]: r["median_step_seconds"] for r in rows
                  if r["case"] == case and r["round"] == rnd}
            stock = [of[k] for k in ("native", "expandable") if k in of]
            if side in of and stock:
                ratios.append(of[side] / min(stock))
        if ratios:
            print("%-11s / the faster stock allocator of its round: median %.3f (%s)"
                  % (side, st.median(ratios), " ".join("%.3f" % x for x in ratios)))
    # A process draws a fast or a slow host and keeps it for the run, so the
    # fastest run of each allocator is the steadier figure over many rounds.
    stock = [fastest[k] for k in ("native", "expandable") if k in fastest]
    for side in ("memlake_A", "memlake_B"):
        if side in fastest and stock:
            print("%-11s fastest run %.1f ms, / the faster stock allocator's fastest %.1f ms: %.3f"
                  % (side, fastest[side], min(stock), fastest[side] / min(stock)))
PY
note "== done in $(($(date +%s) - START))s"
