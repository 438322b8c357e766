#!/usr/bin/env bash
# ncclinsp demo: a simulated multi-node training job, instrumented by the ncclinsp NCCL profiler
# plugin, scraped by real node_exporter + Prometheus on loopback, through two
# scenarios (network degradation; one slow host) and a compute straggler, with a summary read back
# from Prometheus: who the alerts name and how long after each onset they fired.
#
#   scripts/demo.sh [--quick] [--keep] [--nodes N] [--gpus G] [--backend B] [--root DIR] [--no-install]
#
#   --quick       ~6.5 min job instead of ~10 min
#   --keep        leave the stack running at the end (prints the URLs and the command that stops it)
#   --nodes/--gpus  job shape (default 4 x 4; at least 2 nodes)
#   --backend B   prometheus (default) or victoriametrics (vmagent + victoria-metrics + vmalert)
#   --root DIR    work dir (default /tmp/ncclinsp-demo): node dirs, Prometheus TSDB, logs
#   --no-install  do not apt-get anything; fail if something is missing
#
# Fresh Debian 12, as root: installs what is missing (cmake ninja-build g++ prometheus
# prometheus-node-exporter prometheus-alertmanager [victoria-metrics] libcli11-dev python3), builds
# only the plugin and the simulator into build-demo/, starts the stack (scripts/stack.sh, with
# Alertmanager using prometheus/alertmanager.example.yml and a webhook receiver in demo.py that
# prints every notification), runs the job (scripts/demo.py), prints the summary, and stops
# everything it started, also on Ctrl-C or error, unless --keep.
# Note: Debian's prometheus / prometheus-node-exporter packages also start their system services
# (:9090, :9100) when first installed; the demo does not use them (its own run on free ports).
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$SCRIPT_DIR/.." && pwd)
BUILD=$REPO/build-demo
ROOT=/tmp/ncclinsp-demo
QUICK=0 KEEP=0 INSTALL=1 NODES=4 GPUS=4 BACKEND=prometheus

usage() { sed -n '7,15p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while [[ $# -gt 0 ]]; do
  case $1 in
    --quick) QUICK=1; shift ;;
    --keep) KEEP=1; shift ;;
    --nodes) NODES=$2; shift 2 ;;
    --gpus) GPUS=$2; shift 2 ;;
    --root) ROOT=$2; shift 2 ;;
    --backend) BACKEND=$2; shift 2 ;;
    --no-install) INSTALL=0; shift ;;
    -h | --help) usage ;;
    *) echo "demo.sh: unknown argument $1" >&2; usage ;;
  esac
done
[[ $NODES =~ ^[0-9]+$ && $NODES -ge 2 ]] || { echo "demo.sh: --nodes must be >= 2" >&2; exit 2; }
[[ $GPUS =~ ^[0-9]+$ && $GPUS -ge 1 ]] || { echo "demo.sh: --gpus must be >= 1" >&2; exit 2; }
[[ $BACKEND == prometheus || $BACKEND == victoriametrics ]] || { echo "demo.sh: --backend prometheus|victoriametrics" >&2; exit 2; }

T_START=$SECONDS
step() { printf '[demo %s] == %s\n' "$(date +%H:%M:%S)" "$*"; }
info() { printf '[demo %s] %s\n' "$(date +%H:%M:%S)" "$*"; }
die() { printf 'demo.sh: %s\n' "$*" >&2; exit 1; }

# ---- cleanup: whatever we started goes away again (unless --keep after a successful run) ----
STACK_STARTED=0 OK=0
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [[ -f $ROOT/sim.pid ]]; then
    local pid
    pid=$(cat "$ROOT/sim.pid" 2>/dev/null || true)
    if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then
      # demo.py starts the simulator in its own process group (pgid = its pid), which also
      # holds the simulator's per-node processes: one signal to that group stops the job.
      info "stopping the simulator (process group $pid)"
      kill -KILL -- "-$pid" 2>/dev/null || true
    fi
    rm -f "$ROOT/sim.pid"
  fi
  if ((STACK_STARTED)); then
    if ((KEEP && OK)); then
      echo
      info "stack left running (--keep):"
      info "  query API:      $(cat "$ROOT/query_url")   (try: ALERTS, ncclinsp_job_fabric:bus_bandwidth_gbs:rate1m)"
      info "  Alertmanager:   $(cat "$ROOT"/am_url_* | head -n 1)   (notifications went to the demo's webhook, now gone)"
      info "  Grafana:        import grafana/ncclinsp.json with a Prometheus data source at the query URL"
      info "  stop it with:   $REPO/scripts/stack.sh stop --root $ROOT"
    else
      info "stopping the stack ($BACKEND, Alertmanager, node_exporters)"
      "$REPO/scripts/stack.sh" stop --root "$ROOT" || true
    fi
  fi
  if ((rc != 0)); then
    info "demo failed (exit $rc); logs under $ROOT/logs"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'echo; info "interrupted"; exit 130' INT TERM

# ---- 1. dependencies --------------------------------------------------------------------------
step "checking dependencies"
missing=()
command -v cmake >/dev/null || missing+=(cmake)
command -v ninja >/dev/null || missing+=(ninja-build)
command -v g++ >/dev/null || missing+=(g++)
command -v python3 >/dev/null || missing+=(python3)
[[ -x /usr/bin/prometheus ]] || missing+=(prometheus)
[[ -x /usr/bin/prometheus-node-exporter ]] || missing+=(prometheus-node-exporter)
[[ -x /usr/bin/prometheus-alertmanager ]] || missing+=(prometheus-alertmanager)
[[ $BACKEND != victoriametrics || -x /usr/bin/vmalert ]] || missing+=(victoria-metrics)
[[ -f /usr/include/CLI/CLI.hpp ]] || missing+=(libcli11-dev)
[[ -f /usr/include/fmt/core.h ]] || missing+=(libfmt-dev)  # the library logs through {fmt}
if ((${#missing[@]})); then
  ((INSTALL)) || die "missing: ${missing[*]} (and --no-install given)"
  [[ $(id -u) -eq 0 ]] || die "missing: ${missing[*]}; run as root or: sudo apt-get install -y ${missing[*]}"
  step "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update
  apt-get install -y --no-install-recommends "${missing[@]}"
else
  info "all present (cmake, ninja, g++, python3, prometheus, prometheus-node-exporter, prometheus-alertmanager, CLI11)"
fi

# ---- 2. build the plugin and the simulator only -------------------------------------------------
step "building the plugin and the simulator in $BUILD"
mkdir -p "$BUILD"
cmake -S "$REPO" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DNCCLINSP_BUILD_TESTS=OFF -DNCCLINSP_BUILD_BENCH=OFF -DNCCLINSP_BUILD_EXAMPLES=OFF \
  -DNCCLINSP_BUILD_TOOLS=OFF >"$BUILD/demo-configure.log" 2>&1 ||
  { tail -n 30 "$BUILD/demo-configure.log" >&2; die "cmake configure failed (full log: $BUILD/demo-configure.log)"; }
cmake --build "$BUILD" --target nccl-profiler-ncclinsp ncclinsp-sim ncclinsp-simcuda
PLUGIN=$BUILD/lib/libnccl-profiler-ncclinsp.so
SIM=$BUILD/bin/ncclinsp-sim
[[ -f $PLUGIN && -x $SIM ]] || die "build did not produce $PLUGIN and $SIM"

# ---- 3. stack --------------------------------------------------------------------------------
step "starting $BACKEND + Alertmanager + $NODES node_exporters (1 s scrape) under $ROOT"
mkdir -p "$ROOT"
ROOT=$(cd "$ROOT" && pwd)
if [[ -d $ROOT/pids ]]; then
  info "a previous demo stack under $ROOT: stopping it"
  "$REPO/scripts/stack.sh" stop --root "$ROOT" || true
fi
# Fresh job directories and TSDB (only what this script creates under ROOT).
rm -rf "$ROOT"/node[0-9]* "$ROOT/prometheus-data" "$ROOT/vm-data" "$ROOT/vmagent-data" "$ROOT"/alertmanager-*-data \
  "$ROOT/summary.json" "$ROOT/sim.pid"
nodes=$(seq -s, -f 'node%g' 0 $((NODES - 1)))
STACK_STARTED=1
HOOK_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
URL=$("$REPO/scripts/stack.sh" start --nodes "$nodes" --root "$ROOT" --scrape 1s --backend "$BACKEND" \
  --webhook "http://127.0.0.1:$HOOK_PORT" | tail -n 1)
info "$BACKEND at $URL (rules: prometheus/rules/ncclinsp.rules.yml), Alertmanager at $(cat "$ROOT"/am_url_*)"

# ---- 4. job + summary ----------------------------------------------------------------------------
step "running the simulated job"
args=(--prom "$URL" --root "$ROOT" --sim "$SIM" --plugin "$PLUGIN" --nodes "$NODES" --gpus "$GPUS"
      --webhook-port "$HOOK_PORT")
((QUICK)) && args+=(--quick)
python3 "$REPO/scripts/demo.py" "${args[@]}"
OK=1
info "demo finished in $((SECONDS - T_START)) s"
