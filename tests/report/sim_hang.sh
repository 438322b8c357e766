#!/usr/bin/env bash
# `ncclinsp-report hang` on state dumps written by the real plugin under the simulator (2 nodes x 2 GPUs,
# real time): a healthy run has no hang (exit 0); each fault the simulator knows (--hang-rank always,
# --stall-rank / --kill-rank / --pause-rank / --net-stall when its --help lists them) gives the verdict
# of its kind, naming the rank the simulator's --summary names (as its global rank), and, where the
# summary lists the blocked op, its communicator, function and sequence number. The opt-in signal
# (NCCLINSP_STATE_SIGNAL=USR1 sent to the node processes) writes dumps on demand.
# Usage: sim_hang.sh SIM PLUGIN REPORT OUTDIR
set -euo pipefail
sim=$1 plugin=$2 report=$3 out=$4
rm -rf "$out"
mkdir -p "$out"
help=$("$sim" --help 2>&1 || true)
export NCCLINSP_STATE_WARN_S=2 NCCLINSP_STATE_EVERY_S=1 NCCLINSP_JOB_ID=simhang

run() {  # run NAME DURATION SIM-ARGS...: the simulator, then the merge (its JSON and exit status)
  local name=$1 dur=$2
  shift 2
  "$sim" --plugin "$plugin" --nodes 2 --gpus 2 --duration "$dur" --speed 1 --out "$out/$name" --prom \
    --summary "$out/$name/summary.json" "$@" >"$out/$name.sim.log" 2>&1 || true
  set +e
  "$report" hang "$out/$name" >"$out/$name.txt" 2>"$out/$name.err"
  echo $? >"$out/$name.rc"
  "$report" hang --json "$out/$name" >"$out/$name.json" 2>>"$out/$name.err"
  set -e
  echo "== $name: exit $(cat "$out/$name.rc")"
  cat "$out/$name.txt"
}

# check NAME KIND: the exit status says hang, the first (root) verdict has KIND and names the summary's rank.
check() {
  python3 - "$out/$1" "$2" <<'PY'
import json, sys
base, kind = sys.argv[1], sys.argv[2]
rc = int(open(base + ".rc").read())
v = json.load(open(base + ".json"))
s = json.load(open(base + "/summary.json"))
assert rc == 3 and v["hang"], f"no hang found (exit {rc})"
sc = s.get("scenarios") or [{"kind": "hang", "rank": f["rank"]} for f in s["faults"]["hang_rank"]]
want = sc[0]["rank"]
job = v["jobs"][0]
root = job["comms"][0]
assert root["kind"] == kind, f"root verdict {root['kind']} on {root['name']}, want {kind}"
if kind == "fault_in_collective":
    inside = [r for r in root["ranks"] if r["state"] == "inside"]
    assert len(inside) == len(root["ranks"]) or all(r["state"] in ("inside", "passed") for r in root["ranks"])
    if want is not None:
        assert any(r.get("global_rank") == want for r in inside), f"rank {want} not among {inside}"
else:
    named = [root["ranks"][i] for i in range(len(root["ranks"])) if root["ranks"][i]["rank"] in root["culprits"]]
    got = [r.get("global_rank") for r in named]
    assert got == [want], f"culprits {got} (global ranks), summary names {want}"
    if "node_name" in sc[0]:
        assert named[0]["node"] == sc[0]["node_name"] and named[0]["gpu"] == sc[0]["gpu"], named[0]
blocks = s.get("blocked") or s.get("blocks")
if isinstance(blocks, list) and blocks and kind != "process_gone":
    b = blocks[0]
    if b.get("seq", -1) >= 0 and not any(c["name"] == b["comm"] and c["op"] == b["func"] and c["seq"] == b["seq"]
                                         for c in job["comms"]):
        raise SystemExit(f"no verdict on the blocked op {b}: {[(c['name'], c['op'], c['seq']) for c in job['comms']]}")
print(f"ok: {kind}, rank {want}")
PY
}

# Healthy: dumps every second, no op stuck.
run healthy 5
python3 - "$out/healthy" <<'PY'
import json, sys
base = sys.argv[1]
assert int(open(base + ".rc").read()) == 0, "a healthy job reported a hang"
v = json.load(open(base + ".json"))
assert not v["hang"] and v["jobs"][0]["dumps"] == 4, v
print("ok: healthy, 4 dumps, no hang")
PY
grep -q "Verdict: no hang" "$out/healthy.txt"

# A fault inside the collective: every member in flight.
run hang 9 --hang-rank 1@3
check hang fault_in_collective

if grep -q -- --stall-rank <<<"$help"; then
  run stall 9 --stall-rank 2@3
  check stall never_joined
  grep -q "never joined" "$out/stall.txt"
else
  echo "== stall: skipped (this ncclinsp-sim has no --stall-rank)"
fi
if grep -q -- --kill-rank <<<"$help"; then
  run kill 16 --kill-rank 3@4
  check kill process_gone
else
  echo "== kill: skipped (this ncclinsp-sim has no --kill-rank)"
fi
if grep -q -- --net-stall <<<"$help"; then
  NCCLINSP_PROXY=1 NCCLINSP_PROXY_SAMPLE=1 run net 9 --net-stall 3
  check net fault_in_collective
else
  echo "== net: skipped (this ncclinsp-sim has no --net-stall)"
fi
if grep -q -- --pause-rank <<<"$help"; then
  # A checkpoint: rank 2 issues nothing for 7 s from t=2. While it lasts the merge names it; once it is
  # over, nothing is stuck.
  "$sim" --plugin "$plugin" --nodes 2 --gpus 2 --duration 12 --speed 1 --out "$out/pause" --prom \
    --summary "$out/pause/summary.json" --pause-rank 2@2:7 >"$out/pause.sim.log" 2>&1 &
  sim_pid=$!
  sleep 6.5
  set +e
  "$report" hang --json "$out/pause" >"$out/pause.json" 2>"$out/pause.err"
  echo $? >"$out/pause.rc"
  set -e
  wait "$sim_pid"
  check pause never_joined
  set +e
  "$report" hang "$out/pause" >"$out/pause-after.txt" 2>>"$out/pause.err"
  rc=$?
  set -e
  cat "$out/pause-after.txt"
  [[ $rc == 0 ]] || { echo "a pause that ended still reads as a hang"; exit 1; }
else
  echo "== pause: skipped (this ncclinsp-sim has no --pause-rank)"
fi

# The opt-in signal, in the real plugin: no heartbeat, no threshold reached; SIGUSR1 to each node process.
export NCCLINSP_STATE_EVERY_S=0 NCCLINSP_STATE_WARN_S=600 NCCLINSP_STATE_SIGNAL=USR1
"$sim" --plugin "$plugin" --nodes 2 --gpus 2 --duration 8 --speed 1 --out "$out/signal" --prom >"$out/signal.sim.log" 2>&1 &
parent=$!
# The handler is installed with the first communicator: wait for every GPU's .prom file (written once
# its communicators exist), then one second more.
for _ in $(seq 1 100); do
  [[ $(find "$out/signal" -name 'nccl_inspector_metrics_*.prom' 2>/dev/null | wc -l) == 4 ]] && break
  sleep 0.2
done
sleep 1
[[ -z $(find "$out/signal" -name '*.state.json' 2>/dev/null) ]] || { echo "dumps before the signal"; exit 1; }
for p in $(pgrep -P "$parent"); do kill -USR1 "$p"; done
sleep 2
n=$(grep -l '"reason":"signal"' $(find "$out/signal" -name '*.state.json') | wc -l)
wait "$parent" || { echo "the simulator failed after the signal (a handler that did not chain?)"; exit 1; }
[[ $n == 4 ]] || { echo "signal: $n dumps, want 4"; exit 1; }
echo "ok: signal, 4 dumps"
