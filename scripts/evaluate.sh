#!/usr/bin/env bash
# Attribution evaluation (README "Evaluation"), report path: randomized faults (--random-fault SEED) through the
# real plugin ABI in JSON mode, attributed by ncclinsp-report; confusion matrix and share correct.
#   scripts/evaluate.sh [BUILD_DIR] [evaluate.py options, e.g. --trials 50]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
B=${1:-$here/../build}
[ $# -gt 0 ] && shift
for f in "$B/bin/ncclinsp-sim" "$B/bin/ncclinsp-report"; do [ -x "$f" ] || { echo "evaluate.sh: $f not built" >&2; exit 1; }; done
PL=""
for f in "$B"/lib/libnccl-profiler-ncclinsp.so "$B"/plugin/libnccl-profiler-ncclinsp.so; do [ -z "$PL" ] && [ -f "$f" ] && PL=$f; done
[ -n "$PL" ] || { echo "evaluate.sh: plugin not built under $B" >&2; exit 1; }
"$B/bin/ncclinsp-sim" --help 2>&1 | grep -q -- '--random-fault' || { echo "evaluate.sh: this ncclinsp-sim has no --random-fault" >&2; exit 1; }
exec python3 "$here/evaluate.py" --sim "$B/bin/ncclinsp-sim" --plugin "$PL" --report "$B/bin/ncclinsp-report" "$@"
