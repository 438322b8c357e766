#!/usr/bin/env bash
# The plugin's cost per collective against both floors, robust to a noisy machine: runs
# bench_plugin's BM_driver_coll for ours, null (NULL handles: NCCL then makes one callback per
# channel) and null_handles (a constant handle: every callback ncclinsp receives is made) with
# random interleaving, several rounds, alternating two plugin builds when a second is given, and
# prints the minimum and the median of every benchmark and the ratios.
#   bench/compare_floor.sh <build-dir> [rounds] [other-plugin.so]     (default rounds: 6)
# e.g. bench/compare_floor.sh build-bench 8 /tmp/before/lib/libnccl-profiler-ncclinsp.so
set -euo pipefail
build=${1:?usage: compare_floor.sh <build-dir> [rounds] [other-plugin.so]}
bin="$build/bench/bench_plugin"
[[ -x "$bin" ]] || { echo "compare_floor.sh: $bin not built" >&2; exit 1; }
plugins=("$build/lib/libnccl-profiler-ncclinsp.so")
rounds=${2:-6}
[[ -n "${3:-}" ]] && plugins+=("$3")
out=$(mktemp -d /tmp/ncclinsp-floor.XXXXXX)
trap 'rm -rf "$out"' EXIT
for r in $(seq 1 "$rounds"); do
  for p in "${!plugins[@]}"; do
    NCCL_INSPECTOR_DUMP_DIR="$out/dump" NCCLINSP_BENCH_PLUGIN_PATH="${plugins[$p]}" "$bin" \
      --benchmark_filter='BM_driver_coll/(ours|null|null_handles)/' --benchmark_min_time=0.05 \
      --benchmark_repetitions=3 --benchmark_enable_random_interleaving=true --benchmark_format=json \
      >"$out/$p.$r.json" 2>/dev/null
  done
done
python3 - "$out" "${plugins[@]}" <<'PY'
import collections, glob, json, statistics, sys
out, plugins = sys.argv[1], sys.argv[2:]
for p, path in enumerate(plugins):
    t = collections.defaultdict(list)
    for f in glob.glob(f"{out}/{p}.*.json"):
        for b in json.load(open(f))["benchmarks"]:
            if b.get("run_type") == "iteration":
                t[b["run_name"]].append(b["real_time"])
    print(f"{path} (ns per collective: min / median of {len(t['BM_driver_coll/ours/1'])} runs)")
    print("| channels | ncclinsp | null | null_handles | x null (min / median) | x null_handles (min / median) |")
    print("|---|---|---|---|---|---|")
    for n in (1, 4, 16):
        o, z, h = (t[f"BM_driver_coll/{w}/{n}"] for w in ("ours", "null", "null_handles"))
        lo, md = min, statistics.median
        print(f"| {n} | {lo(o):.0f} / {md(o):.0f} | {lo(z):.0f} / {md(z):.0f} | {lo(h):.0f} / {md(h):.0f} "
              f"| {lo(o)/lo(z):.2f} / {md(o)/md(z):.2f} | {lo(o)/lo(h):.2f} / {md(o)/md(h):.2f} |")
PY
