#!/usr/bin/env bash
# gpu_table.sh: the training table of the GPU validation, from one run.
# samples/pytorch_training/train.py under PyTorch's caching allocator
# (native), its expandable segments, its cudaMallocAsync backend and memlake:
#   gpt2-dynamic, llama-dynamic  GPT-2 with recomputation and Llama-LoRA, a new
#                                sequence length every step, --rounds R
#                                interleaved rounds (peak reserved, median step
#                                time and its spread, losses);
#   decode                       GPT-2 greedy decoding, K/V cache and token
#                                buffer grown by torch.cat every token;
#   batch-search                 the largest GPT-2 batch that trains under a
#                                memory cap (set_per_process_memory_fraction),
#                                per allocator (tries in parallel on one GPU);
#   gpt2-fixed, llama-fixed      the two models at a fixed sequence length.
# In that order of importance, each under a time limit and the whole under
# MEMLAKE_RUN_BUDGET (default 525 s). With 2 or more GPUs the workloads run
# side by side, each on its own GPU (every allocator of a workload on the same
# one): 2 GPUs, lanes [gpt2-dynamic decode gpt2-fixed] and [llama-dynamic
# batch-search llama-fixed]; 4 or more, [gpt2-dynamic gpt2-fixed]
# [llama-dynamic llama-fixed] [decode] [batch-search]. On one GPU they run
# one after another with fewer decode tokens and one fixed-shape round, and
# the last ones may not fit in the budget.
# Builds libmemlake.so (Release, Hopper) unless MEMLAKE_LIBRARY names one.
# Settings: MEMLAKE_TABLE_STEPS (20), MEMLAKE_TABLE_ROUNDS (3),
# MEMLAKE_TABLE_CAP_GIB (8), MEMLAKE_TABLE_BATCH_SEQ (512),
# MEMLAKE_TABLE_BATCH_RANGE (1:64), MEMLAKE_TABLE_JOBS (8 tries at a time),
# MEMLAKE_TABLE_LANES (the GPU count, at most 4), MEMLAKE_TABLE_ONLY (a list
# of workloads to run), MEMLAKE_TABLE_WORKLOAD_SECONDS (each workload's
# longest time, instead of the layout's), MEMLAKE_TABLE_INIT (cuda: weights created on the GPU),
# MEMLAKE_TABLE_ALLOCATORS (train.py --allocators; memlake variants as
# memlake/KEY:VALUE, e.g. native,expandable,async,memlake,memlake/worker:off).
# Everything goes to $OUT (default ./out): WORKLOAD.log (each run's JSON on a
# line starting "JSON "), table.jsonl (all of them), table-build.log and
# table-summary.txt (the tables).
set -u -o pipefail

cd "$(dirname "$0")/../.." || exit 1
BUILD=${MEMLAKE_BUILD_DIR:-build-table}
SUMMARY_NAME=table-summary.txt
BUDGET=${MEMLAKE_RUN_BUDGET:-525}
# shellcheck source=tools/device/lib.sh
. tools/device/lib.sh
TRAIN=samples/pytorch_training/train.py

note "== machine"
machine
python3 -c "import torch, transformers, peft; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'transformers', transformers.__version__, 'peft', peft.__version__)" 2>&1 | tee -a "$SUMMARY"

if [[ -n ${MEMLAKE_LIBRARY:-} && -f ${MEMLAKE_LIBRARY:-} ]]; then
  note "== libmemlake.so: $MEMLAKE_LIBRARY (MEMLAKE_LIBRARY, not built)"
else
  note "== build"
  build "$BUILD" "$OUT/table-build.log" memlake_shared
  export MEMLAKE_LIBRARY=$PWD/$BUILD/libmemlake.so
fi

# The GPUs, as CUDA numbers them (PCI order, as nvidia-smi does).
export CUDA_DEVICE_ORDER=PCI_BUS_ID
if [[ -n ${CUDA_VISIBLE_DEVICES:-} ]]; then
  IFS=, read -r -a GPUS <<<"$CUDA_VISIBLE_DEVICES"
else
  mapfile -t GPUS < <(nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null)
fi
((${#GPUS[@]} > 0)) || GPUS=(0)
LANES=${MEMLAKE_TABLE_LANES:-${#GPUS[@]}}
((LANES > ${#GPUS[@]})) && LANES=${#GPUS[@]}
if ((LANES >= 4)); then
  LANES=4
elif ((LANES >= 2)); then
  LANES=2
else
  LANES=1
fi

STEPS=${MEMLAKE_TABLE_STEPS:-20}
ROUNDS=${MEMLAKE_TABLE_ROUNDS:-3}
CAP=${MEMLAKE_TABLE_CAP_GIB:-8}
BATCH_SEQ=${MEMLAKE_TABLE_BATCH_SEQ:-512}
BATCH_RANGE=${MEMLAKE_TABLE_BATCH_RANGE:-1:64}
JOBS=${MEMLAKE_TABLE_JOBS:-8}
INIT=${MEMLAKE_TABLE_INIT:-cuda}
ALLOCATORS=${MEMLAKE_TABLE_ALLOCATORS:-native,expandable,async,memlake}
FIXED_SEQ=512
# Per lane layout: decode's size, the fixed shapes' rounds, and each
# workload's longest time (the budget cuts shorter).
declare -A MAX
case $LANES in
  1)
    DECODE_STEPS=6 DECODE_NEW=32:128 FIXED_ROUNDS=1
    MAX=([gpt2-dynamic]=130 [llama-dynamic]=150 [decode]=110 [batch-search]=90
      [gpt2-fixed]=60 [llama-fixed]=60)
    LAYOUT=("gpt2-dynamic llama-dynamic decode batch-search gpt2-fixed llama-fixed")
    ;;
  2)
    DECODE_STEPS=8 DECODE_NEW=64:256 FIXED_ROUNDS=$ROUNDS
    MAX=([gpt2-dynamic]=180 [llama-dynamic]=210 [decode]=200 [batch-search]=120
      [gpt2-fixed]=150 [llama-fixed]=150)
    LAYOUT=("gpt2-dynamic decode gpt2-fixed" "llama-dynamic batch-search llama-fixed")
    ;;
  *)
    DECODE_STEPS=8 DECODE_NEW=128:512 FIXED_ROUNDS=$ROUNDS
    MAX=([gpt2-dynamic]=220 [llama-dynamic]=250 [decode]=470 [batch-search]=300
      [gpt2-fixed]=220 [llama-fixed]=220)
    LAYOUT=("gpt2-dynamic gpt2-fixed" "llama-dynamic llama-fixed" "decode" "batch-search")
    ;;
esac
DECODE_STEPS=${MEMLAKE_TABLE_DECODE_STEPS:-$DECODE_STEPS}
DECODE_NEW=${MEMLAKE_TABLE_DECODE_NEW:-$DECODE_NEW}
ALL="gpt2-dynamic llama-dynamic decode batch-search gpt2-fixed llama-fixed"
ONLY=${MEMLAKE_TABLE_ONLY:-$ALL}

# Seconds a workload of at most MAX seconds has, less a margin so that its
# parent process ends (and prints its table) before step() kills it.
time_for() {
  local left=$((START + BUDGET - $(date +%s)))
  local t=$(($1 < left ? $1 : left))
  echo $((t > 25 ? t - 15 : 10))
}

workload() {
  local name=$1 max=${MEMLAKE_TABLE_WORKLOAD_SECONDS:-${MAX[$1]}}
  [[ " $ONLY " == *" $name "* ]] || return 0
  local log=$OUT/$name.log common=(--init-device "$INIT" --time-budget "$(time_for "$max")"
    --allocators "$ALLOCATORS")
  case $name in
    gpt2-dynamic | llama-dynamic | gpt2-fixed | llama-fixed)
      local model=gpt2-recompute seq=0 rounds=$ROUNDS
      [[ $name == llama-* ]] && model=llama-lora
      [[ $name == *-fixed ]] && seq=$FIXED_SEQ rounds=$FIXED_ROUNDS
      step "$name" "$max" "$log" python3 "$TRAIN" --compare --model "$model" --steps "$STEPS" \
        --seq-len "$seq" --rounds "$rounds" "${common[@]}"
      ;;
    decode)
      step "$name" "$max" "$log" python3 "$TRAIN" --compare --model decode \
        --steps "$DECODE_STEPS" --new-tokens "$DECODE_NEW" --rounds "$ROUNDS" "${common[@]}"
      ;;
    batch-search)
      step "$name" "$max" "$log" python3 "$TRAIN" --find-batch --model gpt2-recompute \
        --memory-cap-gib "$CAP" --seq-len "$BATCH_SEQ" --steps 6 --batch-range "$BATCH_RANGE" \
        --jobs "$JOBS" "${common[@]}"
      ;;
  esac
}

# lane GPU WORKLOAD...: the workloads one after another on that GPU.
lane() {
  local gpu=$1 w
  shift
  export CUDA_VISIBLE_DEVICES=$gpu
  for w in "$@"; do workload "$w"; done
}

note "== workloads: $LANES lane(s), budget ${BUDGET}s, $((START + BUDGET - $(date +%s)))s left"
i=0
for workloads in "${LAYOUT[@]}"; do
  note "  GPU ${GPUS[$i]}: $workloads"
  # shellcheck disable=SC2086 # the list splits into workloads
  (lane "${GPUS[$i]}" $workloads) &
  i=$((i + 1))
done
wait

note "== tables"
for w in $ALL; do
  [[ -s $OUT/$w.log ]] || continue
  note ""
  timeout 60 python3 "$TRAIN" --summarize "$OUT/$w.log" 2>&1 | tee -a "$SUMMARY"
  # Failures, the time budget, and the exceptions children died of, counted.
  grep -hE "FAILED|time budget|TIMED OUT|^[A-Za-z_.]*(Error|Exception)\b" "$OUT/$w.log" |
    grep -v '^JSON' | sort | uniq -c | sort -rn | head -n 8 | tee -a "$SUMMARY"
done
grep -h '^JSON ' "$OUT"/*.log 2>/dev/null | cut -c6- >"$OUT/table.jsonl"
note "== done in $(($(date +%s) - START))s"
