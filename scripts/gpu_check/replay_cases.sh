#!/usr/bin/env bash
# Replays a recorded trace of the cases through the plugin on the CPU (ncclinsp-replay) and checks
# the replay's final .prom files as the GPU run's (table.py cases): every op NCCL announced in the
# trace is GPU-timed or filtered under a reason, none in flight or abandoned, nothing dropped.
#   replay_cases.sh REPLAY PLUGIN TRACE CASES_TSV WORKDIR [table.py cases options]
# Exit: table.py's (0 pass, 1 a check failed, 2 bad input), or the replay tool's when it fails.
set -euo pipefail
[ $# -ge 5 ] || { echo "usage: replay_cases.sh REPLAY PLUGIN TRACE CASES_TSV WORKDIR [options]" >&2; exit 2; }
replay=$1 plugin=$2 trace=$3 tsv=$4 work=$5
shift 5
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work/prom"
cp "$tsv" "$work/cases.tsv"
# The plugin's variables as the GPU run sets them; nothing recorded again, nothing inherited.
rc=0
env -u NCCLINSP_CAPTURE -u NCCLINSP_CAPTURE_MASK -u NCCLINSP_ENABLE -u NCCL_INSPECTOR_DUMP_DIR \
  NCCL_INSPECTOR_ENABLE=1 NCCL_INSPECTOR_PROM_DUMP=1 NCCL_INSPECTOR_DUMP_MIN_SIZE_BYTES=0 NCCLINSP_NODE_NAME=replay \
  timeout 120 "$replay" --plugin "$plugin" --out "$work/prom" "$trace" >"$work/replay.log" 2>&1 || rc=$?
if [ "$rc" != 0 ]; then
  tail -20 "$work/replay.log"
  echo "FAIL: ncclinsp-replay exited with $rc (124: past 120 s)"
  exit 1
fi
head -2 "$work/replay.log"
python3 "$here/table.py" cases "$work" --trace "$trace" "$@"
