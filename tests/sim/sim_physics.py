#!/usr/bin/env python3
"""Physical invariants of ncclinsp-sim, asserted on the JSON records the real plugin writes
(sim/README.md "Timing model"):

  1. ranks of one op are coupled: KernelCh stops coincide within one hop (link latency), starts differ
     by each rank's arrival; a compute straggler starts last and has the shortest kernel time, its peers
     wait (lower busbw) although the network is healthy;
  2. a slow host lowers the kernel-time busbw of every rank of every communicator that routes through it
     by the same amount (kernel time cannot name it); a P2P pair without it stays healthy; NVLink-only
     communicators are unaffected by any network fault;
  3. a slow NIC slows the channels routed through it (visible per channel) and the communicators of the
     GPUs nearest to it; the others stay healthy;
  4. NVLink degradation slows only that node's NVLink-only communicator;
  5. a hung rank blocks its peers: no member completes the hung op or any later op; every member's
     final dump_stats counts it abandoned;
  6. --random-fault SEED: deterministic, written to the summary, size 10-50 %;
  7. ProxyOp/ProxyStep events (recording plugin): network communicators only, NCCL's state order per step,
     each step stopped after its last state; the wall-clock waits (straggler, slow NIC) are printed;
  8. network noise: a fabric burst slows network collectives by its depth and not NVLink-only ones, a
     heavy tail makes a few ops 2-10x slower, a pause leaves a gap without collectives, warm-up starts
     slower; the same seed draws the same bursts; --op-noise 3 spreads ops by about 3 % (lognormal).

usage: sim_physics.py SIM PLUGIN WORKDIR RECORDING_PLUGIN
"""
import collections
import glob
import json
import os
import shutil
import subprocess
import sys

SIM, PLUGIN, WORK, REC = sys.argv[1:5]
FAILS = []


def check(cond, msg):
    if not cond:
        FAILS.append(msg)
        print("FAIL:", msg)


def run(name, *args, verbose=False):
    out = os.path.join(WORK, name)
    shutil.rmtree(out, ignore_errors=True)
    env = dict(os.environ, NCCL_INSPECTOR_ENABLE="1", NCCL_INSPECTOR_PROM_DUMP="0",
               NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS="200000",
               NCCL_INSPECTOR_DUMP_VERBOSE="1" if verbose else "0")
    for k in ("NCCLINSP_SINKS", "NCCL_INSPECTOR_DUMP_DIR", "NCCLINSP_JSON_MAX_BYTES"):
        env.pop(k, None)
    cmd = [SIM, "--plugin", PLUGIN, "--speed", "10", "--out", out, "--summary", os.path.join(out, "summary.json")]
    p = subprocess.run(cmd + list(args), env=env, capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        print(p.stdout, p.stderr)
        raise SystemExit(f"FAIL: ncclinsp-sim {' '.join(args)} exited {p.returncode}")
    recs, stats = [], []
    for f in glob.glob(os.path.join(out, "*", "*.log")):
        for line in open(f):
            d = json.loads(line)
            if "dump_stats" in d:
                stats.append(d)
                continue
            p = d.get("coll_perf") or d.get("p2p_perf")
            if not p:
                continue
            pre = "coll" if "coll_perf" in d else "p2p"
            h = d["header"]
            recs.append(dict(comm=h["comm_name"], id=h["id"], rank=h["rank"], node=d["metadata"]["node"],
                             op=p[pre], sn=p[pre + "_sn"], start=p[pre + "_start_ts_ns"], end=p[pre + "_end_ts_ns"],
                             exec_us=p[pre + "_exec_time_us"], busbw=p[pre + "_busbw_gbs"],
                             size=p[pre + "_msg_size_bytes"], peer=p.get("p2p_peer"), raw=p))
    with open(os.path.join(out, "summary.json")) as f:
        summary = json.load(f)
    check(recs, f"{name}: no op records")
    return recs, stats, summary


def t_of(recs):
    """Seconds since the first op start (the sim's t=0 is a few ms earlier: the first compute segment)."""
    base = min(r["start"] for r in recs)
    return lambda r: (r["start"] - base) / 1e9


def ops_by_key(recs):
    ops = collections.defaultdict(list)
    for r in recs:
        ops[(r["id"], r["op"], r["sn"])].append(r)
    return ops


def mean(v):
    return sum(v) / len(v) if v else float("nan")


# ---- 1. coupling, straggler -------------------------------------------------------------------------------
recs, _, summ = run("straggler", "--nodes", "2", "--gpus", "2", "--duration", "4", "--straggler", "1:3@1.5-3")
T = t_of(recs)
ops = ops_by_key(recs)
lat = {"tp": 8e3, "fsdp": 20e3, "dp": 20e3, "pp": 20e3}  # ns, one hop
n_coll = n_late = n_short = 0
worst_stop = 0
for key, rs in ops.items():
    if len(rs) < 2 or rs[0]["peer"] is not None:
        continue
    comm = rs[0]["comm"].rstrip("0123456789")
    stops = [r["end"] for r in rs]
    worst_stop = max(worst_stop, (max(stops) - min(stops)) / lat[comm])
    check(max(stops) - min(stops) <= lat[comm] + 1000,
          f"{key}: KernelCh stops spread {(max(stops) - min(stops)) / 1e3:.1f} us > one hop")
    t = T(rs[0])
    # fsdp rank = global rank; tp rank 1 on node0 = global rank 1
    straggler = [r for r in rs if (r["comm"] == "fsdp" and r["rank"] == 1) or (r["comm"] == "tp" and r["node"] == "node0" and r["rank"] == 1)]
    starts = [r["start"] for r in rs]
    if straggler and 1.6 < t < 2.9 and max(starts) - min(starts) > 2e6:
        n_coll += 1
        s = straggler[0]
        n_late += s["start"] == max(starts)
        n_short += s["exec_us"] == min(r["exec_us"] for r in rs)
    if t < 1.4:  # healthy: launch jitter plus the cascade of the previous ops' different ends
        check(max(starts) - min(starts) < 300e3, f"{key}: healthy starts spread {(max(starts) - min(starts)) / 1e3:.0f} us")
check(n_coll >= 10, f"straggler: only {n_coll} ops with the straggler 3 ms late")
check(n_late == n_coll and n_short == n_coll,
      f"straggler: latest start in {n_late}/{n_coll}, shortest kernel time in {n_short}/{n_coll} ops")
# Its peers look slow: busbw of the other ranks of fsdp AllGather falls in the window, the network is healthy.
ag = [r for r in recs if r["comm"] == "fsdp" and r["op"] == "AllGather"]
before = mean([r["busbw"] for r in ag if 0.2 < T(r) < 1.4 and r["rank"] != 1])
during = mean([r["busbw"] for r in ag if 1.7 < T(r) < 2.9 and r["rank"] != 1])
strag = mean([r["busbw"] for r in ag if 1.7 < T(r) < 2.9 and r["rank"] == 1])
check(during < 0.9 * before, f"straggler: peers' AllGather busbw {before:.1f} -> {during:.1f} GB/s (expected a drop)")
check(strag > during, f"straggler: its own busbw {strag:.1f} should exceed its peers' {during:.1f}")
print(f"coupling: stops within {worst_stop:.2f} hop; straggler starts last and is shortest in {n_coll}/{n_coll} ops; "
      f"peers' AllGather busbw {before:.1f} -> {during:.1f} GB/s, straggler's own {strag:.1f}")

# ---- 2-4. link faults, one per window -----------------------------------------------------------------------
W = {"healthy": (0.2, 0.9), "host": (1.2, 1.9), "net": (2.2, 2.9), "nic": (3.2, 3.9), "nvl": (4.2, 4.9)}
recs, _, summ = run("links", "--nodes", "4", "--gpus", "2", "--duration", "5", "--slow-host", "1:40@1-2",
                    "--net-degrade", "50@2-3", "--slow-nic", "node1:0:40@3-4", "--nvlink-degrade", "0:60@4-5", verbose=True)
T = t_of(recs)


def bw(phase, pred):
    lo, hi = W[phase]
    return mean([r["busbw"] for r in recs if lo < T(r) < hi and pred(r)])


def ratio(phase, pred):
    return bw(phase, pred) / bw("healthy", pred)


def pace(phase, pred):
    """Mean over ops of the shortest kernel time among the op's ranks (its last arriver): healthy / phase."""
    def one(ph):
        lo, hi = W[ph]
        by = collections.defaultdict(list)
        for r in recs:
            if lo < T(r) < hi and pred(r):
                by[(r["id"], r["op"], r["sn"])].append(r["exec_us"])
        return mean([min(v) for v in by.values()])
    return one("healthy") / one(phase)


def per_node(phase, comm, op):
    return {n: ratio(phase, lambda r, n=n: r["comm"].startswith(comm) and r["op"] == op and r["node"] == n)
            for n in ("node0", "node1", "node2", "node3")}


for phase, want in (("host", 0.6), ("net", 0.5)):
    for comm, op in (("fsdp", "AllGather"), ("fsdp", "ReduceScatter"), ("dp", "AllReduce")):
        rn = per_node(phase, comm, op)
        check(all(abs(v - want) < 0.06 for v in rn.values()), f"{phase}: {comm} {op} busbw ratio per node {rn}, want ~{want}")
        check(max(rn.values()) - min(rn.values()) < 0.03, f"{phase}: {comm} {op} differs between nodes {rn}")
    # The pace of an NVLink-only op is its last arriver's kernel time (the others' include their wait,
    # which network ops earlier in the step may shift): unchanged by network faults.
    tp = pace(phase, lambda r: r["comm"] == "tp" and r["size"] >= 32 << 20)
    check(abs(tp - 1) < 0.03, f"{phase}: NVLink-only tp pace ratio {tp:.2f} (a network fault must not touch it)")
# P2P: pairs node0->1 and node1->2 include the slow host, node2->3 does not.
sends = {k: ratio("host", lambda r, k=k: r["op"] == "Send" and r["node"] == f"node{k}") for k in (0, 1, 2)}
check(sends[0] < 0.7 and sends[1] < 0.7 and sends[2] > 0.95, f"host: Send busbw ratio by sender node {sends}")
# Slow NIC 0 of node1: fsdp's even channels (NIC 0) end later; dp0/pp0 (GPU0 -> NIC0) slow, dp1/pp1 healthy.
d0 = ratio("nic", lambda r: r["comm"] == "dp0")
d1 = ratio("nic", lambda r: r["comm"] == "dp1")
check(d0 < 0.7 and d1 > 0.95, f"nic: dp0 ratio {d0:.2f} (want ~0.6), dp1 {d1:.2f} (want ~1)")
lag = collections.defaultdict(list)
for r in recs:
    lo, hi = W["nic"]
    if r["comm"] == "fsdp" and r["op"] == "AllGather" and lo < T(r) < hi:
        ev = r["raw"]["event_trace_ts"]["kernel_events"]
        first = min(e["kernel_gpu_start_ns"] for e in ev)
        for e in ev:
            lag[e["channel_id"] % 2].append(e["kernel_gpu_stop_ns"] - first)
check(lag[0] and lag[1] and mean(lag[0]) > 1.5 * mean(lag[1]),
      f"nic: fsdp channels on NIC0 {mean(lag[0]) / 1e3:.0f} us vs NIC1 {mean(lag[1]) / 1e3:.0f} us")
f = ratio("nic", lambda r: r["comm"] == "fsdp" and r["op"] == "AllGather")
check(abs(f - 0.6) < 0.06, f"nic: fsdp AllGather ratio {f:.2f} (the op ends with its slowest channel)")
# NVLink degradation of node0: its tp slows, node1's tp and the network comms do not.
t0 = ratio("nvl", lambda r: r["comm"] == "tp" and r["node"] == "node0" and r["size"] >= 32 << 20)
t1 = ratio("nvl", lambda r: r["comm"] == "tp" and r["node"] == "node1" and r["size"] >= 32 << 20)
fn = ratio("nvl", lambda r: r["comm"] == "fsdp")
check(t0 < 0.5 and abs(t1 - 1) < 0.05 and abs(fn - 1) < 0.05, f"nvl: tp node0 {t0:.2f}, tp node1 {t1:.2f}, fsdp {fn:.2f}")
print(f"links: slow host / fabric drop every node equally, NVLink-only unchanged; Send ratios {sends}; "
      f"slow NIC: dp0 {d0:.2f} dp1 {d1:.2f}, NIC0 channels {mean(lag[0]) / 1e3:.0f} us vs {mean(lag[1]) / 1e3:.0f} us; "
      f"NVLink: tp node0 {t0:.2f} node1 {t1:.2f}")

# ---- 5. hang ---------------------------------------------------------------------------------------------
recs, stats, summ = run("hang", "--nodes", "2", "--gpus", "2", "--duration", "3", "--hang-rank", "1@1.5")
T = t_of(recs)
last = max(T(r) for r in recs)
check(1.3 < last < 1.5 + 2 * summ["config"]["nominal_step_s"], f"hang: last completed op starts at t={last:.2f}s")
fin = collections.defaultdict(int)
hung_in = {}
for d in stats:
    if d["dump_stats"].get("final"):
        k = (d["metadata"]["node"], d["header"]["comm_name"], d["header"]["rank"])
        fin[k] = d["dump_stats"]["abandoned_total"]
per_node_ab = collections.Counter()
for (node, comm, rank), v in fin.items():
    per_node_ab[node] += v
# Every GPU ends blocked in exactly one op (its own hung op or one waiting for a blocked peer).
check(dict(per_node_ab) == {"node0": 2, "node1": 2}, f"hang: abandoned ops per node {dict(per_node_ab)}, want one per GPU")
# The communicator the hung rank (node0 GPU1) blocked in: every member holds the op.
mine = [k for k, v in fin.items() if v and k[0] == "node0" and (k[1] == "tp" and k[2] == 1 or k[1] == "fsdp" and k[2] == 1
                                                               or k[1] in ("dp1", "pp1") and k[2] == 0)]
check(len(mine) == 1, f"hang: rank 1 holds {mine}")
if mine:
    members = [k for k in fin if k[1] == mine[0][1] and (k[1] != "tp" or k[0] == "node0")]
    check(all(fin[k] >= 1 for k in members), f"hang: members of {mine[0][1]} without the hung op: {[(k, fin[k]) for k in members]}")
abandoned_fsdp = dict(per_node_ab)
print(f"hang: every rank stops by t={last:.2f}s; rank 1 hung in {mine}; abandoned per node {abandoned_fsdp}")

# ---- 6. random fault ---------------------------------------------------------------------------------------
got = []
for i in range(2):
    _, _, s = run(f"random{i}", "--nodes", "4", "--gpus", "2", "--duration", "2", "--random-fault", "7")
    got.append(s["random_fault"])
rf = got[0]
check(got[0] == got[1], f"random fault not deterministic: {got}")
check(rf and rf["random"] and rf["kind"] in ("net_degrade", "slow_host", "slow_nic", "straggler", "nvlink_degrade"),
      f"random fault: {rf}")
check(rf and (rf["kind"] == "straggler" or 10 <= rf["pct"] <= 50) and 0.4 <= rf["t0"] <= 1.0, f"random fault size/onset: {rf}")
kinds = set()
for seed in range(1, 40):
    _, _, s = run("random_k", "--nodes", "4", "--gpus", "2", "--steps", "1", "--random-fault", str(seed))
    kinds.add(s["random_fault"]["kind"])
    if len(kinds) == 5:
        break
check(len(kinds) == 5, f"random faults cover every kind: {kinds}")
print(f"random fault 7: {rf}; kinds seen {sorted(kinds)}")

# ---- 7. proxy steps --------------------------------------------------------------------------------------
out = os.path.join(WORK, "proxy")
os.makedirs(out, exist_ok=True)
trace = os.path.join(out, "trace.txt")
env = dict(os.environ, REC_PLUGIN_MASK=str(0x2 | 0x4 | 0x8 | 0x10 | 0x20 | 0x40), REC_PLUGIN_TRACE=trace)
# --speed 0.25: simulated waits last 4x longer in wall time (the plugin's clock), well above the sim's
# 200 us emission resolution.
p = subprocess.run([SIM, "--plugin", REC, "--single-process", "--nodes", "2", "--gpus", "2", "--duration", "2.4",
                    "--speed", "0.25", "--straggler", "1:5@0.8-1.6", "--slow-nic", "1:1:60@1.6-2.4"],
                   env=env, capture_output=True, text=True, timeout=120)
check(p.returncode == 0, f"proxy run exited {p.returncode}: {p.stderr[-500:]}")
pops, steps = {}, {}
for line in open(trace):
    call, typ, h, parent, state, arg, t, rank, peer, ch, is_send, comm = line.split()
    call, typ, state, t = int(call), int(typ), int(state), int(t) / 1e9
    if typ == 8 and call == 1:
        pops[h] = dict(rank=int(rank), peer=int(peer), ch=int(ch), send=is_send == "1", comm=comm, t=t)
    elif typ == 16 and call == 1:
        steps[h] = dict(op=parent, t=t, states=[], stop=None)
    elif typ == 16 and call == 3 and h in steps and steps[h]["stop"] is None:
        steps[h]["states"].append((state, t))
    elif typ == 16 and call == 2 and h in steps and steps[h]["stop"] is None:
        steps[h]["stop"] = t
check(pops and steps, "proxy: no ProxyOp/ProxyStep events")
check(all(not o["comm"].startswith("tp") for o in pops.values()), "proxy: ProxyOps on the NVLink-only communicator")
check({o["comm"].rstrip("0123456789") for o in pops.values()} == {"fsdp", "dp", "pp"},
      f"proxy: ProxyOps on {sorted({o['comm'] for o in pops.values()})}")
t_first = min(o["t"] for o in pops.values())
bad_order = 0
by = collections.defaultdict(list)  # (phase, comm, rank, peer, send, step_index) -> [waits]
PH = {"healthy": (0.4, 2.8), "straggler": (3.8, 6.0), "nic": (7.0, 9.2)}  # wall s (speed 0.25)
step_idx = collections.defaultdict(int)
for h, st in steps.items():
    op = pops.get(st["op"])
    if op is None:
        continue
    seq = [x[0] for x in st["states"]]
    want = [8, 20, 9] if op["send"] else [10, 11, 12]
    if seq != want or st["stop"] is None or st["stop"] < st["states"][-1][1]:
        bad_order += 1
        continue
    k = step_idx[st["op"]]
    step_idx[st["op"]] += 1
    ph = next((n for n, (lo, hi) in PH.items() if lo < op["t"] - t_first < hi), None)
    if ph is None:
        continue
    ts = [x[1] for x in st["states"]] + [st["stop"]]
    waits = [ts[1] - ts[0], ts[2] - ts[1], ts[3] - ts[2]]  # send: GPU, peer, network; recv: network, flush, GPU
    by[(ph, op["comm"], op["rank"], op["peer"], op["send"], k)].append((waits, op["ch"]))
check(bad_order == 0, f"proxy: {bad_order} steps out of NCCL's state order")


def wait_mean(ph, comm, rank, peer, send, k, idx, ch_parity=None):
    v = [w[idx] for key, lst in by.items() for (w, ch) in lst
         if key[0] == ph and key[1] == comm and (rank is None or key[2] == rank) and (peer is None or key[3] == peer)
         and key[4] == send and (k is None or key[5] == k) and (ch_parity is None or ch % 2 == ch_parity)]
    v.sort()
    return v[len(v) // 2] * 1e3 / 4 if v else float("nan")  # median, simulated ms


# fsdp rank = global rank: the straggler is rank 1 (node0 GPU1); rank 3 (node1 GPU1) shares its rail.
rw_s = wait_mean("straggler", "fsdp", 3, 1, False, 0, 0)
rw_h = wait_mean("healthy", "fsdp", 3, 1, False, 0, 0)
pw_s = wait_mean("straggler", "fsdp", 3, 1, True, 0, 1)
own = wait_mean("straggler", "fsdp", 1, 3, False, 0, 0)
sw = {ph: (wait_mean(ph, "fsdp", None, None, True, None, 2, 1), wait_mean(ph, "fsdp", None, None, True, None, 2, 0))
      for ph in ("healthy", "nic")}
# The waits are measured on the wall clock (as the plugin does); on a loaded machine the proxy thread runs late
# and they shrink, so they are reported here, not asserted (measured on an idle 2-core VM: successor's step-0
# RecvWait 0.5 -> 10 ms, predecessor's SendPeerWait 9 ms, slow-NIC SendWait/step 1.2 ms vs 0.03 ms).
print(f"proxy: {len(pops)} ProxyOps, {len(steps)} steps in NCCL order; straggler: successor's step-0 RecvWait "
      f"{rw_h:.2f} -> {rw_s:.2f} ms, predecessor's SendPeerWait {pw_s:.2f} ms, its own {own:.2f} ms; slow NIC: "
      f"SendWait/step {sw['nic'][0]:.2f} ms vs {sw['nic'][1]:.2f} ms (healthy {sw['healthy'][0]:.2f} / {sw['healthy'][1]:.2f})")

# ---- 8. network noise ------------------------------------------------------------------------------------
NOISE = ["--nodes", "2", "--gpus", "2", "--duration", "6", "--seed", "3", "--congestion", "1.2:0.8:40:fabric",
         "--heavy-tail", "0.03", "--pause", "3:0.5", "--warmup", "1:30"]
recs, _, summ = run("noise", *NOISE)
T = t_of(recs)
bursts = [(b["t0"], b["t1"]) for b in summ["noise"]["bursts"] if b["t0"] < 6]
check(len(bursts) >= 2, f"noise: {len(bursts)} bursts drawn in 6 s (mean gap 1.2 s)")
def in_burst(t, margin=0.05):
    return any(a - margin <= t <= b + margin for a, b in bursts)
def clear(t):
    return t > 1.1 and not in_burst(t, 0.1)
ag = [r for r in recs if r["comm"] == "fsdp" and r["op"] == "AllGather"]
tp = [r for r in recs if r["comm"] == "tp" and r["size"] == 32 << 20]
ag_clear = sorted(r["busbw"] for r in ag if clear(T(r)))
ag_mid = ag_clear[len(ag_clear) // 2] if ag_clear else float("nan")
ag_burst = [r["busbw"] / ag_mid for r in ag if any(a + 0.05 < T(r) < b - 0.05 for a, b in bursts) and T(r) > 1.1]
ag_burst.sort()
check(ag_burst and abs(ag_burst[len(ag_burst) // 2] - 0.6) < 0.05,
      f"noise: fsdp AllGather in a 40% burst at {ag_burst[len(ag_burst) // 2] if ag_burst else float('nan'):.2f} of its clear level")
tp_clear = sorted(r["busbw"] for r in tp if clear(T(r)))
tp_burst = sorted(r["busbw"] for r in tp if any(a + 0.05 < T(r) < b - 0.05 for a, b in bursts) and T(r) > 1.1)
check(tp_clear and tp_burst and abs(tp_burst[len(tp_burst) // 2] / tp_clear[len(tp_clear) // 2] - 1) < 0.03,
      "noise: NVLink-only tp AllReduce slowed by a network burst")
slow = [r for r in ag + tp if clear(T(r)) and r["busbw"] < 0.5 * (ag_mid if r["comm"] == "fsdp" else tp_clear[len(tp_clear) // 2])]
n_clear = len([r for r in ag + tp if clear(T(r))])
check(0.005 < len(slow) / max(n_clear, 1) < 0.08,
      f"noise: {len(slow)}/{n_clear} clear ops below half their level (heavy tail of 3% of op instances, 2-10x)")
starts = sorted({round(T(r), 4) for r in recs})
gaps = [(b - a, a) for a, b in zip(starts, starts[1:])]
check(any(g > 0.45 and 2.8 < a < 3.6 for g, a in gaps), f"noise: no 0.5 s pause without collectives near t=3 (largest gaps {sorted(gaps)[-2:]})")
early = sorted(r["busbw"] / ag_mid for r in ag if T(r) < 0.25)
check(early and 0.66 < early[len(early) // 2] < 0.85, f"noise: warm-up fsdp AllGather at {early[len(early) // 2] if early else float('nan'):.2f} of nominal in the first 0.25 s (30% at t=0)")
_, _, summ2 = run("noise2", *NOISE)
check(summ2["noise"] == summ["noise"], "noise: the same seed drew other bursts")
# --op-noise 3: each op's transfer time x lognormal (sigma 3 %), instead of +-2 % uniform (sd 1.15 %).
def ag_spread(*extra):
    r = [x["busbw"] for x in run("opnoise", "--nodes", "2", "--gpus", "2", "--duration", "3", "--seed", "3", *extra)[0]
         if x["comm"] == "fsdp" and x["op"] == "AllGather"]
    r.sort()
    mid = r[len(r) // 2]
    return (sum((v - mid) ** 2 for v in r) / len(r)) ** 0.5 / mid, r[len(r) // 100] / mid
sd_uniform, _ = ag_spread()
sd_lognormal, p1_lognormal = ag_spread("--op-noise", "3")
check(sd_uniform < 0.016, f"noise: fsdp AllGather busbw spread {sd_uniform:.4f} without --op-noise (uniform +-2 %)")
check(0.022 < sd_lognormal < 0.04 and p1_lognormal < 0.95,
      f"noise: fsdp AllGather busbw spread {sd_lognormal:.4f}, 1st percentile {p1_lognormal:.3f} of the median with --op-noise 3")
print(f"noise: {len(bursts)} bursts, fsdp AllGather in bursts {ag_burst[len(ag_burst) // 2]:.2f} of clear, "
      f"{len(slow)}/{n_clear} heavy-tail ops, warm-up {early[len(early) // 2]:.2f}; per-op spread "
      f"{sd_uniform:.4f} uniform, {sd_lognormal:.4f} lognormal (--op-noise 3)")

if FAILS:
    print(f"sim_physics: {len(FAILS)} failure(s)")
    sys.exit(1)
shutil.rmtree(WORK, ignore_errors=True)
print("PASS")
