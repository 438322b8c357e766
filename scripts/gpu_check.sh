#!/usr/bin/env bash
# The GPU check (README "The two commands"): the plugin on real NCCL. Builds the profiler plugin and
# examples/nccl_wrappers against this machine's CUDA and NCCL, then
#  1. runs an AllReduce / AllGather / ReduceScatter sweep (8 B .. 1 GiB, every local GPU, one
#     process) with the plugin off and on: the plugin's busbw (from its .prom files) against the
#     example's own CUDA-event busbw, the plugin's overhead (on vs off), finalize time, drops;
#  2. runs the event-path cases (examples/nccl_wrappers/cases.hpp) with the plugin on: eager P2P,
#     eager AllReduce, grouped ops (several Send/Recv and AllReduce in one ncclGroupStart/End), a
#     CUDA graph captured once and replayed, and replays mixed with eager launches on one
#     communicator; it checks that every op is counted once, none is left in flight, no event is
#     dropped, and that no GPU-timed number belongs to another work (the replay/eager desync of
#     NCCL <= 2.31.0a0, docs/nccl-versions.md).
# One GPU (a lent single-H200 machine) means one-rank communicators. NCCL's one-rank path
# (enqueue.cc taskAppend -> ncclLaunchOneRank, every release 2.27 .. 2.31.2) runs a collective as a
# cudaMemcpyAsync (nothing when in place; a small non-profiled kernel for PreMulSum and ncclAvg on
# floats) before any profiler call: no GroupApi, CollApi, Coll or KernelCh event, so the plugin
# sees no collective at all (the sweep's table shows "-"; busbw is 0 by definition for n = 1).
# Send/Recv to itself does go through an NCCL kernel (out of place; in place is skipped with no
# P2p event): P2p events with KernelCh, GPU-timed; the cases use them on one GPU. What one GPU
# cannot show is printed at the end.
# Exit: 0 pass, 1 a check failed, 77 skipped (nvidia-smi finds no GPU). Bound: ~8 min on one node
# (sweeps at most 200 s each, cases at most 90 s; typically a few minutes in all).
#   bash scripts/gpu_check.sh [build-dir]
# Environment: CUDAToolkit_ROOT / NCCL_HOME to pick the toolkit and NCCL; GPU_CHECK_MIN_BYTES,
# GPU_CHECK_MAX_BYTES (8, 1073741824), GPU_CHECK_TARGET_MS (time per point, 50),
# GPU_CHECK_ALLOW_NCCL_DESYNC=1 (report, not fail, the mixed case's foreign KernelCh timestamps on
# NCCL < 2.31.2, where NCCL itself pairs them wrongly).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  echo "SKIP: nvidia-smi finds no GPU"
  exit 77
fi
nvidia-smi -L

BUILD=${1:-build-gpu-check}
OUT=$BUILD/gpu-check
MIN=${GPU_CHECK_MIN_BYTES:-8}
MAX=${GPU_CHECK_MAX_BYTES:-1073741824}
TARGET_MS=${GPU_CHECK_TARGET_MS:-50}
command -v python3 >/dev/null || { echo "FAIL: python3 is needed for the table"; exit 1; }

start=$SECONDS
echo "== build (plugin + nccl_wrappers_example, Release)"
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DNCCLINSP_BUILD_TESTS=OFF -DNCCLINSP_BUILD_SIM=OFF \
  -DNCCLINSP_BUILD_BENCH=OFF -DNCCLINSP_BUILD_TOOLS=OFF -DNCCLINSP_BUILD_EXAMPLES=ON >"$BUILD.configure.log" 2>&1 ||
  { cat "$BUILD.configure.log"; exit 1; }
grep -E "examples: " "$BUILD.configure.log" || true
cmake --build "$BUILD" -j "$(nproc)" --target nccl-profiler-ncclinsp
if ! cmake --build "$BUILD" -j "$(nproc)" --target nccl_wrappers_example; then
  echo "FAIL: examples/nccl_wrappers did not build (CUDA Toolkit and NCCL found? set CUDAToolkit_ROOT / NCCL_HOME)"
  exit 1
fi
PLUGIN=$(find "$ROOT/$BUILD" -name 'libnccl-profiler-ncclinsp.so' -print -quit)
EXAMPLE=$ROOT/$BUILD/examples/nccl_wrappers_example
rm -rf "$OUT" && mkdir -p "$OUT/prom"

echo "== sweep, plugin off (+$((SECONDS - start)) s)"
env -u NCCL_PROFILER_PLUGIN NCCL_INSPECTOR_ENABLE=0 NCCLINSP_ENABLE=0 \
  timeout 200 "$EXAMPLE" --sweep "$MIN" "$MAX" "$TARGET_MS" >"$OUT/off.tsv" 2>"$OUT/off.err" ||
  { cat "$OUT/off.err"; echo "FAIL: sweep without the plugin"; exit 1; }
echo "== sweep, plugin on (+$((SECONDS - start)) s)"
NCCL_PROFILER_PLUGIN=$PLUGIN NCCL_INSPECTOR_ENABLE=1 NCCL_INSPECTOR_PROM_DUMP=1 NCCL_INSPECTOR_DUMP_DIR=$ROOT/$OUT/prom \
  NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS=1000000 NCCL_INSPECTOR_DUMP_MIN_SIZE_BYTES=0 NCCLINSP_NODE_NAME=gpu-check \
  NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,PROFILE \
  timeout 200 "$EXAMPLE" --sweep "$MIN" "$MAX" "$TARGET_MS" >"$OUT/on.tsv" 2>"$OUT/on.err" ||
  { tail -50 "$OUT/on.err"; echo "FAIL: sweep with the plugin"; exit 1; }
grep -i "ncclinsp\|profiler" "$OUT/on.err" | head -5 || true
echo "== table (+$((SECONDS - start)) s)"

rc=0
python3 - "$OUT" <<'EOF' || rc=$?
import glob, math, os, re, sys
out = sys.argv[1]
UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40, "PiB": 1 << 50, "EiB": 1 << 60}

def size_of(s):
    m = re.fullmatch(r"(\d+)(B|KiB|MiB|GiB|TiB|PiB|EiB)", s)
    return int(m.group(1)) * UNITS[m.group(2)] if m else None

def read_sweep(path):
    points, meta = {}, {}
    for line in open(path):
        f = line.rstrip("\n").split("\t")
        if f[0] == "sweep":
            points[(f[1], int(f[2]))] = {"rank_bytes": int(f[3]), "iters": int(f[4]), "us": float(f[5]), "busbw": float(f[6])}
        elif len(f) == 2:
            meta[f[0]] = float(f[1])
    return points, meta

off, off_meta = read_sweep(os.path.join(out, "off.tsv"))
on, on_meta = read_sweep(os.path.join(out, "on.tsv"))

# Per rank (file) and (collective, bucket [lo, hi)): bus bytes, busy seconds, ops; drops per file.
sample = re.compile(r'^(\w+)\{(.*)\} (\S+)$')
label = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
cells, drops, files = {}, 0.0, sorted(glob.glob(os.path.join(out, "prom", "*.prom")))
for path in files:
    for line in open(path):
        m = sample.match(line.strip())
        if not m:
            continue
        fam, labels, value = m.group(1), dict(label.findall(m.group(2))), float(m.group(3))
        if fam == "ncclinsp_dropped_events_total":
            drops += value
        if fam not in ("ncclinsp_bus_bytes_total", "ncclinsp_busy_seconds_total", "ncclinsp_ops_total"):
            continue
        lo, _, hi = labels.get("message_size", "").partition("-")
        lo, hi = size_of(lo), size_of(hi)
        if lo is None or hi is None:
            continue
        c = cells.setdefault((path, labels.get("collective"), lo, hi), {})
        c[fam] = c.get(fam, 0.0) + value

def prom_busbw(coll, rank_bytes):
    """Mean over ranks of bus bytes / busy seconds in the bucket holding rank_bytes (GB/s), ops per rank."""
    vals, ops = [], []
    for (path, c, lo, hi), v in cells.items():
        if c == coll and lo <= rank_bytes < hi and v.get("ncclinsp_busy_seconds_total", 0) > 0:
            vals.append(v.get("ncclinsp_bus_bytes_total", 0.0) / v["ncclinsp_busy_seconds_total"] / 1e9)
            ops.append(v.get("ncclinsp_ops_total", 0.0))
    return (sum(vals) / len(vals), sum(ops) / len(ops)) if vals else (None, 0)

def fmt_size(b):
    for u in ("GiB", "MiB", "KiB"):
        if b >= UNITS[u]:
            return "%g %s" % (b / UNITS[u], u)
    return "%d B" % b

ranks = int(on_meta.get("ranks", 0))
print("%d GPU(s), %d .prom file(s); busbw in GB/s; time per op in us (CUDA events, slowest GPU)" % (ranks, len(files)))
hdr = ("collective", "size", "iters", "t off", "t on", "busbw off", "busbw on", "busbw .prom", ".prom vs on", "overhead")
print("%-13s %9s %5s %10s %10s %9s %9s %11s %11s %9s" % hdr)
fail, over_goal = [], []
for (coll, total), p_on in sorted(on.items(), key=lambda kv: (kv[0][0] != "AllReduce", kv[0][0], kv[0][1])):
    p_off = off.get((coll, total))
    pb, ops = prom_busbw(coll, p_on["rank_bytes"])
    agree = overhead = None
    if pb is not None and p_on["busbw"] > 0:
        agree = (pb - p_on["busbw"]) / p_on["busbw"] * 100
    if p_off:
        overhead = (p_on["us"] - p_off["us"]) / p_off["us"] * 100
    big = total >= (1 << 20)
    flag = ""
    if big and ranks > 1 and (agree is None or abs(agree) > 5):
        flag += " DISAGREE"
        fail.append("%s %s: .prom busbw %s vs %.1f" % (coll, fmt_size(total), "missing" if pb is None else "%.1f" % pb, p_on["busbw"]))
    if big and overhead is not None and overhead > 1:
        flag += " OVERHEAD"
        over_goal.append("%s %s: %+.2f%%" % (coll, fmt_size(total), overhead))
    print("%-13s %9s %5d %10.1f %10.1f %9.2f %9.2f %11s %11s %9s%s" % (
        coll, fmt_size(total), p_on["iters"], p_off["us"] if p_off else float("nan"), p_on["us"],
        p_off["busbw"] if p_off else float("nan"), p_on["busbw"], "-" if pb is None else "%.2f" % pb,
        "-" if agree is None else "%+.1f%%" % agree, "-" if overhead is None else "%+.2f%%" % overhead, flag))
print()
print("finalize (ncclCommDestroy of %d communicators): %.1f ms with the plugin, %.1f ms without" % (
    ranks, on_meta.get("destroy_ms", float("nan")), off_meta.get("destroy_ms", float("nan"))))
print("init (ncclCommInitAll): %.1f ms with the plugin, %.1f ms without" % (on_meta.get("init_ms", float("nan")), off_meta.get("init_ms", float("nan"))))
print("ncclinsp_dropped_events_total (all files): %d" % drops)
if not files:
    fail.append("no .prom file written (was the plugin loaded? see %s/on.err)" % out)
if drops:
    fail.append("%d events dropped" % drops)
if ranks < 2:
    print("note: one GPU: bus bandwidth is 0 by definition (factor (n-1)/n), only times are compared")
if over_goal:
    print("overhead above the 1%% goal at >= 1 MiB (%d points): %s" % (len(over_goal), "; ".join(over_goal)))
if fail:
    print("FAIL: " + "; ".join(fail))
    sys.exit(1)
print("PASS: .prom busbw within 5% of the CUDA-event busbw for every size >= 1 MiB, no drops")
EOF

echo "== cases: eager, grouped, CUDA graph replays, replays mixed with eager launches (+$((SECONDS - start)) s)"
mkdir -p "$OUT/prom-cases"
crc=0
NCCL_PROFILER_PLUGIN=$PLUGIN NCCL_INSPECTOR_ENABLE=1 NCCL_INSPECTOR_PROM_DUMP=1 NCCL_INSPECTOR_DUMP_DIR=$ROOT/$OUT/prom-cases \
  NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS=1000000 NCCL_INSPECTOR_DUMP_MIN_SIZE_BYTES=0 NCCLINSP_NODE_NAME=gpu-check \
  NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,PROFILE \
  timeout 90 "$EXAMPLE" --cases >"$OUT/cases.tsv" 2>"$OUT/cases.err" || crc=$?
if [ "$crc" != 0 ]; then
  tail -30 "$OUT/cases.err"
  echo "FAIL: the cases program exited with $crc (124: it ran past 90 s)"
  rc=1
else
  python3 - "$OUT" <<'EOF' || rc=1
import glob, os, re, sys
out = sys.argv[1]
UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}

def size_of(s):
    m = re.fullmatch(r"(\d+)(B|KiB|MiB|GiB|TiB)", s)
    return int(m.group(1)) * UNITS[m.group(2)] if m else None

def fmt_size(b):
    for u in ("GiB", "MiB", "KiB"):
        if b >= UNITS[u]:
            return "%g %s" % (b / UNITS[u], u)
    return "%d B" % b

lines, meta = [], {}
for line in open(os.path.join(out, "cases.tsv")):
    f = line.rstrip("\n").split("\t")
    if f[0] == "case":
        lines.append({"phase": f[1], "coll": f[2], "bytes": int(f[3]), "ops": int(f[4]), "us": float(f[5])})
    elif len(f) == 2:
        meta[f[0]] = int(f[1])
ranks = meta.get("ranks", 0)

sample = re.compile(r'^(\w+)\{(.*)\} (\S+)$')
label = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
files = sorted(glob.glob(os.path.join(out, "prom-cases", "*.prom")))
cells, totals, abi = {}, {}, set()
for path in files:
    for line in open(path):
        m = sample.match(line.strip())
        if not m:
            continue
        fam, labels, value = m.group(1), dict(label.findall(m.group(2))), float(m.group(3))
        if fam == "ncclinsp_info":
            abi.add(labels.get("abi", "?"))
        if fam in ("ncclinsp_dropped_events_total", "ncclinsp_filtered_ops_total", "ncclinsp_invalid_ops_total",
                   "ncclinsp_abandoned_ops_total", "ncclinsp_inflight_ops", "ncclinsp_oldest_inflight_age_seconds"):
            key = fam + ("{%s}" % labels["reason"] if "reason" in labels else "")
            totals[key] = totals.get(key, 0.0) + value
        if fam in ("ncclinsp_ops_total", "ncclinsp_busy_seconds_total"):
            lo, _, hi = labels.get("message_size", "").partition("-")
            lo, hi = size_of(lo), size_of(hi)
            if lo is None or hi is None:
                continue
            c = cells.setdefault((labels.get("collective"), lo, hi), {})
            c[fam] = c.get(fam, 0.0) + value

def plugin(coll, nbytes):
    """Ops per rank and mean GPU-timed time per op (us) in the bucket holding nbytes."""
    for (c, lo, hi), v in cells.items():
        if c == coll and lo <= nbytes < hi:
            ops = v.get("ncclinsp_ops_total", 0.0)
            us = v.get("ncclinsp_busy_seconds_total", 0.0) / ops * 1e6 if ops else None
            return ops / max(ranks, 1), us
    return 0.0, None

fail, notes = [], []
print("NCCL %s (headers %s), %d rank(s) per communicator, plugin ABI %s, %d .prom file(s)" % (
    meta.get("runtime_nccl", "?"), meta.get("nccl", "?"), ranks, ",".join(sorted(abi)) or "?", len(files)))
print("%-10s %-9s %9s %7s %8s %10s %11s  %s" % ("case", "collective", "size", "issued", "counted", "t CUDA us", "t .prom us", "verdict"))
gap = 0.0
for l in lines:
    ops, us = plugin(l["coll"], l["bytes"])
    coll_one_rank = ranks == 1 and l["coll"] not in ("Send", "Recv")
    expect = 0 if coll_one_rank else l["ops"]
    verdict = "ok"
    if coll_one_rank:
        verdict = "no event (one rank)" if ops == 0 else "EVENTS on one rank"
        if ops:
            notes.append("NCCL emitted events for a one-rank %s: enqueue.cc's one-rank path changed; update docs/nccl-versions.md" % l["coll"])
    elif ops > expect:
        verdict = "EXTRA"
        fail.append("%s %s %s: %.0f counted for %d issued (counted twice?)" % (l["phase"], l["coll"], fmt_size(l["bytes"]), ops, expect))
    elif ops < expect:
        verdict = "short"
        gap += (expect - ops) * max(ranks, 1)
    if us is not None and l["us"] > 0 and not coll_one_rank:
        small_replay = l["phase"] == "mixed" and l["bytes"] < (1 << 20)
        if small_replay and us > 1.5 * l["us"]:
            verdict = "DESYNC"
            fail.append("mixed %s %s: %.1f us GPU-timed, longer than the whole replay (%.1f us): another work's KernelCh timestamps" % (
                l["coll"], fmt_size(l["bytes"]), us, l["us"]))
        elif l["phase"] == "mixed" and not small_replay and us < 0.5 * l["us"]:
            verdict = "DESYNC"
            fail.append("mixed %s %s: %.1f us GPU-timed for %.1f us of CUDA-event time: another work's KernelCh timestamps" % (
                l["coll"], fmt_size(l["bytes"]), us, l["us"]))
        elif l["phase"].startswith("eager") and l["bytes"] >= (64 << 20) and abs(us - l["us"]) > 0.1 * l["us"]:
            verdict = "DISAGREE"
            fail.append("%s %s %s: %.1f us in .prom vs %.1f us by CUDA events" % (l["phase"], l["coll"], fmt_size(l["bytes"]), us, l["us"]))
    print("%-10s %-9s %9s %7d %8.0f %10s %11s  %s" % (l["phase"], l["coll"], fmt_size(l["bytes"]), expect, ops,
          "-" if l["us"] < 0 else "%.1f" % l["us"], "-" if us is None else "%.1f" % us, verdict))
settled = sum(v for k, v in totals.items() if k.startswith(("ncclinsp_filtered_ops_total", "ncclinsp_invalid_ops_total", "ncclinsp_abandoned_ops_total")))
drops = sum(v for k, v in totals.items() if k.startswith("ncclinsp_dropped_events_total"))
print()
print("settled without a GPU time (filtered, invalid, abandoned): %s" % (
    ", ".join("%s %d" % (k.replace("ncclinsp_", ""), v) for k, v in sorted(totals.items()) if v and "inflight" not in k) or "none"))
if gap > settled:
    fail.append("%d op(s) neither counted nor settled by a reason (lost)" % (gap - settled))
elif gap:
    notes.append("%d op(s) settled without a GPU time instead of counted (see the reasons above)" % gap)
if totals.get("ncclinsp_inflight_ops", 0) or totals.get("ncclinsp_oldest_inflight_age_seconds", 0):
    fail.append("ops still in flight in the final files (a false hang signal)")
if drops:
    fail.append("%d events dropped" % drops)
if not files:
    fail.append("no .prom file written (was the plugin loaded? see %s/cases.err)" % out)
desync = [f for f in fail if f.startswith("mixed")]
if desync and os.environ.get("GPU_CHECK_ALLOW_NCCL_DESYNC") == "1" and meta.get("runtime_nccl", 0) < 23102:
    fail = [f for f in fail if not f.startswith("mixed")]
    notes.append("GPU_CHECK_ALLOW_NCCL_DESYNC=1: the mixed-case DESYNC is reported, not failed, on NCCL < 2.31.2")
if desync:
    notes.append("DESYNC is the documented NCCL <= 2.31.0a0 behaviour (proxy.cc SaveProxyProfiler advances the host work "
                 "counter at a replay only while comm->planner.persistent, which an eager launch clears); the plugin's "
                 "rule is to reject such timestamps and count the op, never to publish them as GPU-timed")
for n in notes:
    print("note: " + n)
if fail:
    print("FAIL (cases): " + "; ".join(fail))
    sys.exit(1)
print("PASS (cases): every op counted once or settled by a reason, none in flight, no drops%s" % (
    " (foreign timestamps allowed, see the note)" if desync else ", no foreign timestamps"))
EOF
fi

echo "== what this machine cannot check"
NGPU=$(nvidia-smi -L | grep -c '^GPU ' || true)
if [ "$NGPU" -le 1 ]; then
  cat <<'EOF'
One GPU: every communicator has one rank. Not checked here (simulator and conformance tests only):
 - collectives' events and bus bandwidth (one-rank collectives emit no event at all); Broadcast
   counter drift (2.29+), batch-shared timestamps of grouped collectives
 - a straggler or a hung peer (no peer): arrival skew, transitive hangs, the hang alerts
 - anything on the network: ProxyOp / ProxyStep / NetPlugin events, proxy wait states, re-started
   recv steps, PXN, NIC and fabric degradation
 - CollNet (SHARP), NVLS, symmetric kernels and KernelPhase (2.31.2), copy-engine collectives
 - communicators sharing a proxy or a profiler thread (ncclCommSplit with shareResources), abort
   with work in flight, non-blocking communicators (async group thread)
EOF
else
  cat <<EOF
$NGPU GPUs on one node: multi-rank collectives over NVLink/PCIe are checked. Not checked here: the
network (ProxyOp / ProxyStep / NetPlugin, proxy waits, PXN, NIC and fabric faults), CollNet (SHARP),
multi-node stragglers, hangs and clock offsets (simulator and conformance tests only).
EOF
fi
echo "== done in $((SECONDS - start)) s (files in $OUT)"
exit $rc
