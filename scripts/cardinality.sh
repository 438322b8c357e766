#!/usr/bin/env bash
# Series per GPU file and per job for each cardinality mode (docs/scale.md): runs the simulator's
# job (default 4 nodes x 4 GPUs, the demo's) through the real plugin for --duration simulated
# seconds per mode and counts the sample lines of the .prom files it leaves.
#   scripts/cardinality.sh [--sim BIN --plugin SO] [--nodes 4 --gpus 4] [--duration 30]
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
SIM=$REPO/build/bin/ncclinsp-sim PLUGIN=$REPO/build/lib/libnccl-profiler-ncclinsp.so NODES=4 GPUS=4 DURATION=30
while [[ $# -gt 0 ]]; do
  case $1 in
    --sim) SIM=$2; shift 2 ;; --plugin) PLUGIN=$2; shift 2 ;; --nodes) NODES=$2; shift 2 ;;
    --gpus) GPUS=$2; shift 2 ;; --duration) DURATION=$2; shift 2 ;; *) echo "usage: see $0" >&2; exit 2 ;;
  esac
done
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
modes=(
  "default|"
  "no compat gauges|NCCLINSP_COMPAT_GAUGES=0"
  "histogram coarse|NCCLINSP_HISTOGRAM=coarse"
  "histogram off|NCCLINSP_HISTOGRAM=off"
  "size buckets x4 (SIZE_BUCKET_BITS=2)|NCCLINSP_SIZE_BUCKET_BITS=2"
  "drop rank,comm_hash,uuid,algo_proto|NCCLINSP_DROP_LABELS=rank,comm_hash,uuid,algo_proto"
  "lean: compat off + histogram off + drop algo_proto|NCCLINSP_COMPAT_GAUGES=0 NCCLINSP_HISTOGRAM=off NCCLINSP_DROP_LABELS=algo_proto"
  "cap 100 lines per file|NCCLINSP_MAX_SERIES=100"
)
printf '| mode | env | series per GPU file (min-max) | series per job (%dx%d) | bytes per file (max) |\n|---|---|---|---|---|\n' "$NODES" "$GPUS"
for m in "${modes[@]}"; do
  name=${m%%|*} env=${m#*|}
  out=$TMP/run
  rm -rf "$out"
  mkdir -p "$out"
  # shellcheck disable=SC2086
  env SLURM_JOB_ID=card NCCL_INSPECTOR_ENABLE=1 NCCL_INSPECTOR_PROM_DUMP=1 \
    NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS=1000000 $env \
    "$SIM" --plugin "$PLUGIN" --nodes "$NODES" --gpus "$GPUS" --duration "$DURATION" --speed 1 \
    --out "$out" --prom >"$TMP/sim.log" 2>&1 || { tail "$TMP/sim.log" >&2; exit 1; }
  python3 - "$out" "$name" "${env:--}" <<'PY'
import glob, os, sys
out, name, env = sys.argv[1:]
counts, sizes = [], []
for f in glob.glob(os.path.join(out, "*", "nccl_inspector_metrics_*.prom")):
    lines = [l for l in open(f) if l.strip() and not l.startswith("#")]
    counts.append(len(lines)); sizes.append(os.path.getsize(f))
print(f"| {name} | `{env}` | {min(counts)}-{max(counts)} | {sum(counts)} | {max(sizes)} |")
PY
done
