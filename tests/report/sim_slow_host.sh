#!/usr/bin/env bash
# End to end: ncclinsp-sim drives the plugin in JSON mode (NCCL_INSPECTOR_PROM_DUMP=0), then
# ncclinsp-report reads it: a slow host is a job-wide slowdown on kernel time (no host named), a healthy
# job has no straggler, rotation drops are reported.
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

# 1. Slow host: node1 of 3 (the simulator takes the node index). The ranks of a collective are coupled
# (sim/README.md "Timing model"): a slow host lowers the kernel-time bandwidth of EVERY rank of each
# communicator that routes through it by the same amount, so per-host kernel time must not name it (nor
# anyone): the report sees a job-wide drop and no straggler host. Naming the host needs other signals
# (proxy step timing, membership; docs/diagnosis.md).
run_sim --nodes 3 --gpus 4 --out "$OUT/slow" --slow-host 1:30@8-1000
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
[ $rc -eq 0 ] || fail "expected exit status 0 (kernel time cannot single out a slow host), got $rc"
grep -Eq '^node[0-9] +.*STRAGGLER$' "$OUT/slow/report.txt" && fail "a host is marked STRAGGLER from per-host kernel time"
grep -q '^Verdict: no straggler host' "$OUT/slow/report.txt" || fail "verdict is not 'no straggler host'"
grep -q 'op seen on fewer ranks' "$OUT/slow/report.err" && fail "ops missing ranks in a complete run"
grep -q '"stragglers":\[\]' "$OUT/slow/report/report.json" || fail "JSON lists a straggler"
for n in node0 node1 node2; do
  grep -q "^$n,4,.*,false\$" "$OUT/slow/report/hosts.csv" || fail "hosts.csv: $n missing or flagged"
done
# The timeline marks the window as a network incident (every network comm degraded), never a straggler.
grep -q '^incident t+.*: network: ' "$OUT/slow/report.txt" || fail "no network incident in the timeline"
grep -q '^incident .*: straggler' "$OUT/slow/report.txt" && fail "a slow host reported as a straggler"

# 1b. Compute straggler (global rank 3 = node1 GPU 1 launches every op group 20 ms late): its peers wait, it has
# the shortest exec time; the report names node1 and rank 3 of fsdp, and no network incident. Needs the
# coupled simulator (--straggler, sim/README.md "Timing model").
if "$SIM" --help 2>&1 | grep -q -- '--straggler'; then
  run_sim --nodes 3 --gpus 2 --out "$OUT/strag" --straggler 3:20@8-1000
  "$REPORT" "$OUT/strag" --fail-on-straggler >"$OUT/strag/report.txt" 2>"$OUT/strag/report.err"
  rc=$?
  cat "$OUT/strag/report.txt"
  [ $rc -eq 3 ] || fail "straggler run: expected exit status 3, got $rc"
  grep -q '^Verdict: straggler host: node1 (rank 3 of fsdp arrives' "$OUT/strag/report.txt" || fail "verdict does not name node1 rank 3"
  grep -Eq '^node[02] +.*STRAGGLER$' "$OUT/strag/report.txt" && fail "a waiting peer's host marked STRAGGLER"
  grep -q '^incident t+.*: straggler \[node1 rank 3 (fsdp)\]' "$OUT/strag/report.txt" || fail "timeline incident does not name node1 rank 3"
  grep -q '^incident .*: network' "$OUT/strag/report.txt" && fail "a straggler reported as a network fault"
  "$REPORT" "$OUT/strag" -q -o "$OUT/strag/report" >/dev/null 2>&1; grep -q '"straggler_ranks":\[{"comm_name":"fsdp","comm_id":"[^"]*","rank":3,"host":"node1"' "$OUT/strag/report/report.json" || fail "JSON straggler_ranks"
fi
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
