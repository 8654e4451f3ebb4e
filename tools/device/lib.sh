# Shared by the device scripts: $OUT, $SUMMARY, the time budget, and step().
# Sourced after `cd` to the repository root; BUDGET and SUMMARY_NAME may be
# set before.
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
export PATH=/usr/local/cuda/bin:$PATH
BUDGET=${MEMLAKE_RUN_BUDGET:-${BUDGET:-520}}
START=$(date +%s)
SUMMARY=$OUT/${SUMMARY_NAME:-summary.txt}
: >"$SUMMARY"

note() { echo "$*" | tee -a "$SUMMARY"; }

# step NAME MAX_SECONDS LOG CMD...: runs CMD with output appended to LOG, for
# at most MAX_SECONDS and never past the budget; notes its status and time.
step() {
  local name=$1 max=$2 log=$3
  shift 3
  local left=$((START + BUDGET - $(date +%s)))
  local limit=$((max < left ? max : left))
  if ((limit < 10)); then
    note "[$name] not run: the time budget is spent"
    return 124
  fi
  local t0 rc
  t0=$(date +%s)
  echo "+ $*" >>"$log"
  timeout --kill-after=10 "$limit" "$@" >>"$log" 2>&1
  rc=$?
  local secs=$(($(date +%s) - t0))
  if ((rc == 124 || rc == 137)); then
    note "[$name] TIMED OUT after ${secs}s (limit ${limit}s), rc=$rc"
  else
    note "[$name] rc=$rc in ${secs}s"
  fi
  return $rc
}

machine() {
  {
    nvidia-smi --query-gpu=name,driver_version,memory.total,memory.free --format=csv,noheader 2>&1
    nvcc --version 2>&1 | tail -n 2
    cmake --version | head -n 1
    "${CXX:-c++}" --version | head -n 1
    echo "git: $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $(git status --short 2>/dev/null | wc -l) changed files"
    # memlake times its calls by the TSC only where this says tsc.
    echo "clock source: $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource 2>/dev/null || echo '?')"
  } | tee -a "$SUMMARY"
}

# build BUILD LOG TARGET...: configures (Release, Hopper, ninja when there is
# one) and builds the targets; on failure prints the log's end and exits.
build() {
  local dir=$1 log=$2
  shift 2
  local generator=()
  command -v ninja >/dev/null && generator=(-G Ninja)
  step configure 120 "$log" cmake -S . -B "$dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CUDA_ARCHITECTURES=90 &&
    step build 240 "$log" cmake --build "$dir" -j "$(nproc)" --target "$@" || {
    tail -n 30 "$log" | tee -a "$SUMMARY"
    exit 1
  }
}
