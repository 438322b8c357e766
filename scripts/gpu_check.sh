#!/usr/bin/env bash
# The GPU check (README "The two commands"): the plugin inside real NCCL on this machine's GPUs.
# It builds the profiler plugin, a do-nothing profiler plugin (scripts/gpu_check/noop_profiler.c),
# examples/nccl_wrappers and, when the tree has it, ncclinsp-replay, against this machine's CUDA
# and NCCL, then runs:
#  1. sweep: AllReduce / AllGather / ReduceScatter from GPU_CHECK_MIN_BYTES to GPU_CHECK_MAX_BYTES
#     on every local GPU (one process) as an interleaved A/B/C: no plugin, the do-nothing plugin,
#     ncclinsp. A warm-up round is discarded, then GPU_CHECK_ROUNDS rounds run the three in
#     rotating order. Per size: the median on/off and noop/off time ratios with their min..max;
#     overhead is flagged where the median on/off exceeds 1 + GPU_CHECK_OVERHEAD_PCT/100 and the
#     largest noop/off (the noise between two arms that should be equal). With several GPUs, the
#     .prom bus bandwidth against the example's CUDA-event bus bandwidth.
#  2. cases: eager, grouped, CUDA-graph and mixed Send/Recv and AllReduce (examples/nccl_wrappers/
#     cases.hpp) with ncclinsp recording every callback (NCCLINSP_CAPTURE, all v5 event types).
#     Every op NCCL announced (a Coll or P2p start in the trace) is GPU-timed
#     (ncclinsp_ops_total) or counted under a filter reason (ncclinsp_filtered_ops_total); none is
#     left in flight or abandoned, no event is dropped.
#  3. multi-rank: the cases with two ranks on GPU 0 over the socket transport (NCCL_P2P_DISABLE=1,
#     NCCL_SHM_DISABLE=1: ProxyOp/ProxyStep events), where NCCL allows two ranks on one GPU (2.30+,
#     NCCL_MULTI_RANK_GPU_ENABLE=1); otherwise it says why it is skipped.
#  4. traces: each case's trace is copied to $OUT/traces-to-commit/nccl-<version>-<gpu>-<case>.trace
#     and replayed through the plugin on the CPU (ncclinsp-replay), whose .prom files must pass the
#     same check.
# One GPU means one-rank communicators. There NCCL (2.27 .. 2.31) runs a collective as a copy
# before any profiler call (no event at all: the collectives are not expected in the counts), and a
# Send/Recv to the rank itself sends GroupApi, P2pApi, KernelLaunch, Group and P2p events but no
# KernelCh and no ProxyOp (tests/traces/nccl-2.28.9-h200-onerank-cases.trace): no GPU time can
# come, the plugin counts the op under filter reason no_kernel_events. A captured self Send/Recv
# announces itself once, at capture; its replays send nothing.
# Exit: 0 pass, 1 a check failed, 77 skipped (nvidia-smi finds no GPU; nothing is built). Every
# step has a timeout; about 4 minutes on one H200 (bound: 6).
#   bash scripts/gpu_check.sh [build-dir]           (default build-gpu-check; results in <build-dir>/gpu-check)
# Environment: CUDAToolkit_ROOT / NCCL_HOME (the toolkit and NCCL to build against);
# GPU_CHECK_NCCL_LIB=/path/libnccl.so.2 (the NCCL to run with: its directory goes first on
# LD_LIBRARY_PATH); GPU_CHECK_MIN_BYTES, GPU_CHECK_MAX_BYTES (8, 1073741824); GPU_CHECK_TARGET_MS
# (time per sweep point, 20); GPU_CHECK_ROUNDS (5; fewer once GPU_CHECK_SWEEP_BUDGET_S, 150, is
# spent); GPU_CHECK_OVERHEAD_PCT (1);
# GPU_CHECK_STRICT_OVERHEAD=1 (flagged overhead fails the check); GPU_CHECK_ALLOW_NCCL_DESYNC=1
# (report, not fail, the mixed case's foreign KernelCh timestamps on NCCL < 2.31.2, where NCCL
# itself pairs them wrongly).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  echo "SKIP: nvidia-smi finds no GPU"
  exit 77
fi
nvidia-smi -L
NGPU=$(nvidia-smi -L | grep -c '^GPU ')
GPU_MODEL=$(nvidia-smi --query-gpu=name --format=csv,noheader -i 0 | tr '[:upper:]' '[:lower:]' | sed -e 's/^nvidia //' -e 's/[^a-z0-9]\+/-/g' -e 's/-$//')

BUILD=$(realpath -m "${1:-build-gpu-check}")
OUT=$BUILD/gpu-check
MIN=${GPU_CHECK_MIN_BYTES:-8}
MAX=${GPU_CHECK_MAX_BYTES:-1073741824}
TARGET_MS=${GPU_CHECK_TARGET_MS:-20}
ROUNDS=${GPU_CHECK_ROUNDS:-5}
TABLE=$ROOT/scripts/gpu_check/table.py
command -v python3 >/dev/null || { echo "FAIL: python3 is needed for the tables"; exit 1; }
if [ -n "${GPU_CHECK_NCCL_LIB:-}" ]; then
  [ -f "$GPU_CHECK_NCCL_LIB" ] || { echo "FAIL: GPU_CHECK_NCCL_LIB=$GPU_CHECK_NCCL_LIB is not a file"; exit 1; }
  nccl_dir=$(dirname "$(realpath "$GPU_CHECK_NCCL_LIB")")
  export LD_LIBRARY_PATH=$nccl_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
# Nothing of the caller's plugin setup reaches a run: each run sets what it needs.
unset NCCL_PROFILER_PLUGIN NCCLINSP_ENABLE NCCLINSP_CAPTURE NCCLINSP_CAPTURE_MASK NCCLINSP_PROM_KEEP_FILES
for v in $(compgen -e | grep '^NCCL_INSPECTOR_' || true); do unset "$v"; done

start=$SECONDS
step() { echo "== $* (+$((SECONDS - start)) s)"; }
rc=0

step "build (plugin, do-nothing plugin, nccl_wrappers_example, ncclinsp-replay if present; Release)"
mkdir -p "$BUILD"
timeout 120 cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DNCCLINSP_BUILD_TESTS=OFF -DNCCLINSP_BUILD_SIM=OFF \
  -DNCCLINSP_BUILD_BENCH=OFF -DNCCLINSP_BUILD_TOOLS=ON -DNCCLINSP_BUILD_EXAMPLES=ON >"$BUILD/configure.log" 2>&1 ||
  { cat "$BUILD/configure.log"; echo "FAIL: cmake configure"; exit 1; }
grep -E "examples: " "$BUILD/configure.log" || true
PLUGIN=$BUILD/lib/libnccl-profiler-ncclinsp.so
NOOP=$BUILD/lib/libnccl-profiler-noop.so
EXAMPLE=$BUILD/examples/nccl_wrappers_example
REPLAY=
targets=(nccl-profiler-ncclinsp nccl_wrappers_example)
if cmake --build "$BUILD" --target help 2>/dev/null | grep -q '^ncclinsp-replay:'; then
  targets+=(ncclinsp-replay)
  REPLAY=$BUILD/bin/ncclinsp-replay
fi
if ! timeout 300 cmake --build "$BUILD" -j "$(nproc)" --target "${targets[@]}" >"$BUILD/build.log" 2>&1; then
  tail -30 "$BUILD/build.log"
  [ -f "$EXAMPLE" ] || echo "examples/nccl_wrappers: CUDA Toolkit and NCCL found? (CUDAToolkit_ROOT / NCCL_HOME)"
  echo "FAIL: the build (${targets[*]}; exit 124: past 300 s)"
  exit 1
fi
${CC:-cc} -shared -fPIC -O2 -o "$NOOP" scripts/gpu_check/noop_profiler.c || { echo "FAIL: the do-nothing plugin did not build"; exit 1; }

rm -rf "$OUT" && mkdir -p "$OUT"
timeout 60 "$EXAMPLE" --version >"$OUT/version.tsv" 2>&1 || { cat "$OUT/version.tsv"; echo "FAIL: nccl_wrappers_example --version"; exit 1; }
NCCL_CODE=$(awk '$1 == "runtime_nccl" {print $2}' "$OUT/version.tsv")
NCCL_HDR=$(awk '$1 == "nccl" {print $2}' "$OUT/version.tsv")
version_of() { echo "$(($1 / 10000)).$(($1 % 10000 / 100)).$(($1 % 100))"; }
NCCL_VERSION=$(version_of "$NCCL_CODE")
echo "NCCL $NCCL_VERSION loaded (headers $(version_of "$NCCL_HDR"))${GPU_CHECK_NCCL_LIB:+ from $GPU_CHECK_NCCL_LIB}; $NGPU GPU(s), $GPU_MODEL"

# The plugin's settings for every ncclinsp run whose files are read: its .prom files stay after exit.
plugin_env() {  # plugin_env DUMP_DIR: sets PENV, NAME=VALUE words for env
  PENV=("NCCL_PROFILER_PLUGIN=$PLUGIN" NCCL_INSPECTOR_ENABLE=1 NCCL_INSPECTOR_PROM_DUMP=1 "NCCL_INSPECTOR_DUMP_DIR=$1"
    NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS=1000000 NCCL_INSPECTOR_DUMP_MIN_SIZE_BYTES=0
    NCCLINSP_PROM_KEEP_FILES=1 NCCLINSP_NODE_NAME=gpu-check)
}

# ---- 1. sweep: no plugin / do-nothing plugin / ncclinsp, interleaved ----------------------------
step "sweep $MIN..$MAX B: warm-up round, then $ROUNDS rounds of off / noop / on in rotating order"
SWEEP=$OUT/sweep
mkdir -p "$SWEEP"
arms=(off noop on)
sweep_run() {  # sweep_run ROUND ARM
  local k=$1 arm=$2
  PENV=()
  case $arm in
    noop) PENV=("NCCL_PROFILER_PLUGIN=$NOOP") ;;
    on) mkdir -p "$SWEEP/prom-r$k" && plugin_env "$SWEEP/prom-r$k" ;;
  esac
  env "${PENV[@]}" timeout 120 "$EXAMPLE" --sweep "$MIN" "$MAX" "$TARGET_MS" \
    >"$SWEEP/r$k-$arm.tsv" 2>"$SWEEP/r$k-$arm.err"
}
sweep_ok=1
sweep_end=$((SECONDS + ${GPU_CHECK_SWEEP_BUDGET_S:-150}))
for k in $(seq 0 "$ROUNDS"); do
  if [ "$k" -ge 2 ] && [ "$SECONDS" -ge "$sweep_end" ]; then
    echo "  sweep budget (GPU_CHECK_SWEEP_BUDGET_S=${GPU_CHECK_SWEEP_BUDGET_S:-150}) spent: $((k - 1)) measured round(s)"
    break
  fi
  order=()
  for i in 0 1 2; do order+=("${arms[$(((k + i) % 3))]}"); done
  for arm in "${order[@]}"; do
    src=0
    sweep_run "$k" "$arm" || src=$?
    if [ "$src" != 0 ]; then
      tail -20 "$SWEEP/r$k-$arm.err"
      echo "FAIL: sweep round $k, arm $arm exited with $src (124: past 120 s)"
      sweep_ok=0 rc=1
      break 2
    fi
  done
  echo "  round $k (${order[*]}) done (+$((SECONDS - start)) s)"
done
if [ "$sweep_ok" = 1 ]; then
  step "sweep table"
  strict=()
  [ "${GPU_CHECK_STRICT_OVERHEAD:-0}" = 1 ] && strict=(--strict-overhead)
  python3 "$TABLE" sweep "$SWEEP" --threshold-pct "${GPU_CHECK_OVERHEAD_PCT:-1}" "${strict[@]}" || rc=1
fi

# ---- 2, 3. cases, recorded -----------------------------------------------------------------------
TRACES=()  # case name = its directory
cases_run() {  # cases_run NAME [--multi-rank N] [VAR=VALUE...]: runs the cases into $OUT/NAME and checks them
  local name=$1 dir=$OUT/$1 args=() crc=0
  shift
  if [ "${1:-}" = --multi-rank ]; then args=(--multi-rank "$2"); shift 2; fi
  mkdir -p "$dir/prom" "$dir/traces"
  plugin_env "$dir/prom"
  env "${PENV[@]}" NCCLINSP_CAPTURE="$dir/traces" NCCLINSP_CAPTURE_MASK=4095 \
    NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,PROFILE "$@" \
    timeout 150 "$EXAMPLE" --cases "${args[@]}" >"$dir/cases.tsv" 2>"$dir/cases.err" || crc=$?
  grep -hoE "ncclinsp [^ ]+ loaded through profiler ABI v[0-9]+" "$dir/cases.err" | head -1 | sed 's/^/profiler: /' || true
  grep -hiE "NCCL version|PROFILER/Plugin" "$dir/cases.err" | head -3 || true
  if [ "$crc" != 0 ]; then
    tail -30 "$dir/cases.err"
    echo "FAIL: the cases program ($name) exited with $crc (124: past 150 s)"
    return 1
  fi
  local desync=()
  [ "${GPU_CHECK_ALLOW_NCCL_DESYNC:-0}" = 1 ] && desync=(--allow-desync)
  TRACES+=("$name")
  python3 "$TABLE" cases "$dir" "${desync[@]}"
}
if [ "$NGPU" -le 1 ]; then CASE=onerank-cases; else CASE=${NGPU}gpu-cases; fi
step "cases ($CASE): eager, grouped, CUDA-graph replays, replays mixed with eager launches; callbacks recorded"
cases_run "$CASE" || rc=1

MULTI=tworank-onegpu-socket-cases
if [ "$NCCL_CODE" -lt 23000 ]; then
  step "multi-rank: skipped: NCCL $NCCL_VERSION < 2.30: two ranks per GPU need NCCL_MULTI_RANK_GPU_ENABLE (2.30+); GPU_CHECK_NCCL_LIB picks another NCCL"
  MULTI=
else
  step "multi-rank ($MULTI): two ranks on GPU 0, socket transport (ProxyOp/ProxyStep)"
  cases_run "$MULTI" --multi-rank 2 NCCL_MULTI_RANK_GPU_ENABLE=1 NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 \
    NCCL_SOCKET_IFNAME=lo || rc=1
  f=$(find "$OUT/$MULTI/traces" -name '*.trace' -print -quit)
  if [ -n "$f" ]; then
    nproxy=$(awk '$1 == "S" && ($6 == 8 || $6 == 16) {n++} END {print n + 0}' "$f")
    echo "proxy events in the trace: $nproxy ProxyOp/ProxyStep starts"
    [ "$nproxy" -gt 0 ] || echo "note: no ProxyOp/ProxyStep: the ranks did not connect over NET/Socket (see $OUT/$MULTI/cases.err)"
  fi
fi

# ---- 4. traces: to commit, and replayed on the CPU ------------------------------------------------
step "traces"
mkdir -p "$OUT/traces-to-commit"
for name in "${TRACES[@]}"; do
  n=0
  for f in "$OUT/$name"/traces/*.trace*; do  # one per process; a second one gets a .N suffix
    [ -f "$f" ] || continue
    sfx=
    [ "$n" -gt 0 ] && sfx=.$n
    dest=$OUT/traces-to-commit/nccl-$NCCL_VERSION-$GPU_MODEL-$name$sfx.trace
    cp "$f" "$dest"
    echo "$dest: $(grep -c '^[ISERF] ' "$dest") callbacks ($(head -1 "$dest" | grep '^#' || echo 'no header'))"
    if [ -n "$REPLAY" ]; then
      echo "-- replayed through the plugin on the CPU"
      bash scripts/gpu_check/replay_cases.sh "$REPLAY" "$PLUGIN" "$dest" "$OUT/$name/cases.tsv" "$OUT/replay-$name$sfx" || rc=1
    fi
    n=$((n + 1))
  done
  [ "$n" -gt 0 ] || { echo "FAIL: no trace recorded for $name (NCCLINSP_CAPTURE=$OUT/$name/traces)"; rc=1; }
done
[ -n "$REPLAY" ] || echo "replay skipped: this tree has no ncclinsp-replay target"
echo "traces to commit (tests/traces/): $OUT/traces-to-commit/"

echo "== what this machine does not check"
if [ "$NGPU" -le 1 ]; then
  cat <<'EOF'
One GPU: every communicator has one rank. Not checked here (simulator and conformance tests only):
 - collectives' events and bus bandwidth (one-rank collectives send no event at all), unless the
   multi-rank case ran; Broadcast counter drift (2.29+), batch-shared timestamps of grouped collectives
 - a straggler or a hung peer: arrival skew, transitive hangs, the hang alerts
 - the network beyond one host's sockets: NetPlugin events, PXN, NIC and fabric degradation
 - CollNet (SHARP), NVLS, symmetric kernels and KernelPhase (2.31.2), copy-engine collectives
 - communicators sharing a proxy or a profiler thread (ncclCommSplit with shareResources), abort
   with work in flight, non-blocking communicators (async group thread)
EOF
else
  cat <<EOF
$NGPU GPUs on one node: multi-rank collectives over NVLink/PCIe are checked. Not checked here: the
network (NetPlugin, PXN, NIC and fabric faults), CollNet (SHARP), multi-node stragglers, hangs and
clock offsets (simulator and conformance tests only).
EOF
fi
echo "== done in $((SECONDS - start)) s (files in $OUT): $([ "$rc" = 0 ] && echo PASS || echo FAIL)"
exit $rc
