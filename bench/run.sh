#!/usr/bin/env bash
# Runs the whole overhead suite and writes JSON into a results folder, then prints the summary.
#   bench/run.sh [build-dir] [results-dir]        (defaults: build-bench, <build-dir>/bench/results)
# Env: MIN_TIME (default 0.2 s per benchmark), REPS (repetitions, default 1),
#      MEM_COLLECTOR_OPS (1e8), MEM_PLUGIN_OPS (1e7), NCCLINSP_SINKS (prom; json measures the JSON mode),
#      RATE_SECONDS (3: seconds per rate of bench_json_rate, run when built).
# Builds nothing: configure and build first, e.g.
#   cmake -S . -B build-bench -G Ninja -DCMAKE_BUILD_TYPE=Release -DNCCLINSP_BUILD_TESTS=OFF
#   ninja -C build-bench bench_hotpath bench_plugin bench_export bench_memory bench_proxy bench_json_rate ncclinsp_null_plugin nccl-profiler-ncclinsp
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="${1:-$here/../build-bench}"
out="${2:-$build/bench/results}"
min_time="${MIN_TIME:-0.2}"
reps="${REPS:-1}"
mkdir -p "$out"
bin="$build/bench"
for b in bench_hotpath bench_plugin bench_export bench_memory bench_proxy; do
  [[ -x "$bin/$b" ]] || { echo "run.sh: $bin/$b not built" >&2; exit 1; }
done

common=(--benchmark_min_time="$min_time" --benchmark_repetitions="$reps" --benchmark_out_format=json)
[[ "$reps" -gt 1 ]] && common+=(--benchmark_report_aggregates_only=true)

lscpu > "$out/lscpu.txt" 2>/dev/null || true
dump="$(mktemp -d /tmp/ncclinsp-bench.XXXXXX)"  # the plugin's dump dir; the final .prom is kept in results
trap 'rm -rf "$dump"' EXIT
rm -f "$out"/*.prom
for b in bench_hotpath bench_plugin bench_export bench_proxy; do
  echo "== $b" >&2
  NCCL_INSPECTOR_DUMP_DIR="$dump/$b" "$bin/$b" "${common[@]}" --benchmark_out="$out/$b.json"
done
echo "== bench_memory" >&2
NCCL_INSPECTOR_DUMP_DIR="$dump/bench_memory" "$bin/bench_memory" "${MEM_COLLECTOR_OPS:-1e8}" "${MEM_PLUGIN_OPS:-1e7}" | tee "$out/bench_memory.jsonl"
for f in "$dump"/bench_export/*.prom; do [[ -e "$f" ]] && cp "$f" "$out/typical_job.prom"; done  # last finalize's file
if [[ -x "$bin/bench_json_rate" ]]; then
  echo "== bench_json_rate" >&2
  NCCL_INSPECTOR_DUMP_DIR="$dump/bench_json_rate" "$bin/bench_json_rate" "${RATE_SECONDS:-3}" | tee "$out/bench_json_rate.md"
fi
python3 "$here/summarize.py" "$out" | tee "$out/summary.md"
