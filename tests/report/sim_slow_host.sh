#!/usr/bin/env bash
# End to end: ncclinsp-sim drives the plugin in JSON mode (NCCL_INSPECTOR_PROM_DUMP=0), then
# ncclinsp-report must name the injected slow host, and only it.
#   sim_slow_host.sh SIM PLUGIN REPORT OUTDIR
set -u
SIM=$1 PLUGIN=$2 REPORT=$3 OUT=$4
fail() { echo "FAIL: $*"; exit 1; }
[ -x "$SIM" ] || { echo "SKIP: $SIM not built"; exit 77; }
rm -rf "$OUT"; mkdir -p "$OUT"
export NCCL_INSPECTOR_ENABLE=1 NCCL_INSPECTOR_PROM_DUMP=0 NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS=250000
unset NCCLINSP_SINKS NCCLINSP_JSON_MAX_BYTES NCCL_INSPECTOR_DUMP_DIR

# --speed 10: 2 s of wall time, so the periodic exports carry the records (the plugin's final flush
# at finalize is bounded to 100 ms).
run_sim() { "$SIM" --plugin "$PLUGIN" --duration 20 --speed 10 "$@" >"$OUT/sim.log" 2>&1 || { cat "$OUT/sim.log"; fail "ncclinsp-sim $*"; }; }

# 1. Slow host: node1 of 3 (the simulator takes the node index).
run_sim --nodes 3 --gpus 4 --out "$OUT/slow" --slow-host 1:30@0-1000
for n in node0 node1 node2; do
  f=$(ls "$OUT/slow/$n"/*-pid*.log 2>/dev/null | head -1)
  [ -n "$f" ] || fail "no JSON log in $OUT/slow/$n"
  grep -q "\"node\":\"$n\"" "$f" || fail "$f: metadata.node is not $n"
  grep -q '"coll_start_ts_ns":' "$f" || fail "$f: no coll_start_ts_ns"
  grep -q '"final":true' "$f" || fail "$f: no final dump_stats record"
done
"$REPORT" "$OUT/slow" -o "$OUT/slow/report" --fail-on-straggler >"$OUT/slow/report.txt" 2>"$OUT/slow/report.err"
rc=$?
cat "$OUT/slow/report.txt" "$OUT/slow/report.err"
[ $rc -eq 3 ] || fail "expected exit status 3 (straggler found), got $rc"
grep -Eq '^node1 +.*STRAGGLER$' "$OUT/slow/report.txt" || fail "node1 not marked STRAGGLER"
grep -Eq '^node[02] +.*STRAGGLER$' "$OUT/slow/report.txt" && fail "a healthy node is marked STRAGGLER"
grep -q '^Verdict: straggler host: node1 (busbw -' "$OUT/slow/report.txt" || fail "verdict does not name node1"
grep -q 'op seen on fewer ranks' "$OUT/slow/report.err" && fail "ops missing ranks in a complete run"
grep -q '<tr class="straggler"><td class="l">node1</td>' "$OUT/slow/report/report.html" || fail "HTML does not flag node1"
grep -q '"stragglers":\["node1"\]' "$OUT/slow/report/report.json" || fail "JSON does not list node1"
grep -q '^node1,4,.*,true$' "$OUT/slow/report/hosts.csv" || fail "hosts.csv does not flag node1"

# 2. Healthy job: no straggler (no false positive).
run_sim --nodes 2 --gpus 2 --out "$OUT/healthy"
"$REPORT" "$OUT/healthy" --fail-on-straggler >"$OUT/healthy/report.txt" 2>&1 || { cat "$OUT/healthy/report.txt"; fail "straggler reported on a healthy job"; }
grep -q '^Verdict: no straggler host' "$OUT/healthy/report.txt" || fail "healthy verdict missing"

# 3. Rotation: NCCLINSP_JSON_MAX_BYTES rotates to .log.1; the records lost with an older .1 are counted.
NCCLINSP_JSON_MAX_BYTES=100000 run_sim --nodes 2 --gpus 2 --out "$OUT/rotate"
ls "$OUT"/rotate/node0/*.log.1 >/dev/null 2>&1 || fail "no rotated .log.1 file"
"$REPORT" "$OUT/rotate" -q >"$OUT/rotate/report.txt" 2>&1 || { cat "$OUT/rotate/report.txt"; fail "report on rotated files"; }
cat "$OUT/rotate/report.txt"
grep -q 'records dropped by the writer' "$OUT/rotate/report.txt" || fail "rotation drops not reported"
echo PASS
