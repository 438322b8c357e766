#!/usr/bin/env python3
"""Demo driver (called by scripts/demo.sh once the stack is up): runs the simulated job through
the two scenarios (live network degradation, 310 -> 268 TFLOP/s; attribution of a
short dip to a host) and a compute straggler against a running Prometheus and prints what
Prometheus saw, who the alerts name, and how long after each onset they fired.

    demo.py --prom URL --root DIR --sim BIN --plugin SO [--nodes 4 --gpus 4] [--quick] [--webhook-port P]

Timeline (simulated seconds = wall seconds, --speed 1):
    default (~10 min): healthy 0-90 | scenario 1: --net-degrade 50@90-210 | healthy 210-260 |
                      scenario 2: --slow-host 1:25@260-380 | healthy 380-450 |
                      scenario 3: --straggler R:3@450-550 (node2's second GPU) | healthy 550-580
    --quick (~6.5 min): healthy 0-40 | net 50@40-100 | healthy 100-160 | slow 1:25@160-240 |
                      240-300 | straggler R:3@300-370 | 370-385
The job runs with proxy accounting on (NCCLINSP_PROXY=1): the slow host is named from its sampled
proxy network wire time per byte on its in and out edges (NcclinspHostNetworkSlow), the straggler
from its exec time against its communicators' median rank (NcclinspRankStraggler); both signals exist on real hardware, unlike
per-rank kernel time, which the coupled collectives equalize (docs/diagnosis.md). The gap before
scenario 3 outlasts the host signal's 1 m window, so its alert does not carry into the straggler;
the gap before scenario 2 lets the fabric change of scenario 1 settle out of that window (a host is
not named while the median node's 1m rate still moves, ~90 s after a fabric-wide change).
(The degradation alert compares with the job's own median of the previous 10 min, offset 1 min:
it cannot fire before ~90 s into a job, hence the 100 s end of scenario 1 in --quick.)
The node directories DIR/node<k> are the ones the stack's node_exporters read. The readout uses
20 s rate windows (every phase is longer than that), the alert timeline comes from Prometheus's
own ALERTS series. With --webhook-port, a webhook receiver on that port (the one scripts/stack.sh
--webhook gave Alertmanager) prints every notification as it arrives: what an on-call person gets.
stdlib only; the HTTP client and the receiver are tests/pipeline/promapi.py.
"""
import argparse
import json
import math
import os
import signal
import subprocess
import sys
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.join(REPO, "tests", "pipeline"))
import promapi as P  # noqa: E402

W = "20s"  # readout rate window


def say(msg):
    print(f"[demo {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def schedule(quick):
    # straggler: (node, local GPU, delay ms, t0, t1)
    if quick:
        return dict(duration=385, net=(40, 100, 50), slow=(1, 160, 240, 25), strag=(2, 1, 3, 300, 370))
    return dict(duration=580, net=(90, 210, 50), slow=(1, 260, 380, 25), strag=(2, 1, 3, 450, 550))


class Readout:
    def __init__(self, prom, job, t0):
        self.prom, self.job, self.t0 = prom, job, t0

    def one(self, expr, t):
        r = [v for _, v in self.prom.values(expr, at=self.t0 + t) if math.isfinite(v)]
        return r[0] if r else float("nan")

    def bw(self, t, extra):
        sel = f'slurm_job_id="{self.job}",{extra}'
        return self.one(f"sum(rate(ncclinsp_bus_bytes_total{{{sel}}}[{W}])) / "
                        f"sum(rate(ncclinsp_busy_seconds_total{{{sel}}}[{W}])) / 1e9", t)

    def tflops(self, t):
        return self.one("quantile(0.5, ncclinsp_sim_step_tflops)", t)


def group_key(lb):
    """Alerts shown on one line: same alert name, collective (or host) and fabric."""
    return (lb["alertname"], lb.get("collective") or lb.get("node") or lb.get("instance", ""), lb.get("n_nodes", ""))


def comms_text(names):
    """dp0 dp1 dp2 dp3 -> dp0-3."""
    by = {}
    for n in sorted(set(x for x in names if x)):
        base = n.rstrip("0123456789")
        by.setdefault(base, []).append(n[len(base):])
    out = []
    for base, nums in by.items():
        nums = [x for x in nums if x]
        out.append(f"{base}{min(nums, key=int)}-{max(nums, key=int)}" if len(nums) > 1 else base + "".join(nums))
    return ",".join(out)


def describe(als):
    """One line for a group of live alerts (from /api/v1/alerts)."""
    lb = als[0]["labels"]
    if len(als) == 1:
        return als[0]["annotations"].get("summary", "")
    vals = [float(a["value"]) for a in als if a.get("value") not in (None, "")]
    v = f", down to {min(vals):.0%}" if vals and lb["alertname"] == "NcclinspBusBandwidthDegraded" else ""
    return (f"{lb.get('collective', '')} on {comms_text(a['labels'].get('comm_name') for a in als)}"
            f" (n_nodes {lb.get('n_nodes', '?')}{v})")


def fmt(v, unit=""):
    return "    n/a" if not math.isfinite(v) else f"{v:7.1f}{unit}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--prom", required=True)
    ap.add_argument("--root", required=True)
    ap.add_argument("--sim", required=True)
    ap.add_argument("--plugin", required=True)
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--gpus", type=int, default=4)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--webhook-port", type=int, default=0)
    a = ap.parse_args()
    hook = P.Webhook(a.webhook_port) if a.webhook_port else None
    s = schedule(a.quick)
    net0, net1, net_pct = s["net"]
    slow_node, slow0, slow1, slow_pct = s["slow"]
    slow_name = f"node{slow_node}"
    st_node, st_gpu, st_ms, st0, st1 = s["strag"]
    st_rank = st_node * a.gpus + st_gpu
    prom = P.Prom(a.prom)
    job = "demo-" + time.strftime("%H%M%S")
    summary_path = os.path.join(a.root, "summary.json")
    cmd = [a.sim, "--plugin", a.plugin, "--nodes", str(a.nodes), "--gpus", str(a.gpus),
           "--duration", str(s["duration"]), "--speed", "1", "--out", a.root, "--prom",
           "--summary", summary_path,
           "--net-degrade", f"{net_pct}@{net0}-{net1}",
           "--slow-host", f"{slow_node}:{slow_pct}@{slow0}-{slow1}",
           "--straggler", f"{st_rank}:{st_ms}@{st0}-{st1}"]
    env = dict(os.environ, SLURM_JOB_ID=job, NCCL_INSPECTOR_ENABLE="1", NCCL_INSPECTOR_PROM_DUMP="1",
               NCCLINSP_PROXY=os.environ.get("NCCLINSP_PROXY", "1"),
               NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS="1000000")
    say(f"job {job}: {a.nodes} nodes x {a.gpus} GPUs for {s['duration']} s "
        f"({'quick' if a.quick else 'full'} timeline)")
    say(f"  scenario 1: network degraded {net_pct}% on n_nodes>1 communicators, t={net0}-{net1}s")
    say(f"  scenario 2: {slow_name}'s network links {slow_pct}% slower, t={slow0}-{slow1}s")
    say(f"  scenario 3: global rank {st_rank} (node{st_node}) launches every op {st_ms} ms late, t={st0}-{st1}s")
    say("  " + " ".join(os.path.relpath(x, REPO) if x.startswith(REPO) else x for x in cmd))
    log = open(os.path.join(a.root, "logs", "sim.log"), "w")
    t0 = time.time() + 0.3  # the simulator's nodes start 300 ms after launch
    # Own session/process group (pgid = pid): stopping the job is one killpg, from here or from
    # demo.sh's trap, and reaches the simulator's per-node child processes too.
    sim = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    with open(os.path.join(a.root, "sim.pid"), "w") as f:
        f.write(str(sim.pid))
    r = Readout(prom, job, t0)
    events = [(net0, f"scenario 1 starts: network degraded {net_pct}%"), (net1, "scenario 1 ends: network restored"),
              (slow0, f"scenario 2 starts: {slow_name} links {slow_pct}% slower"), (slow1, f"scenario 2 ends: {slow_name} restored"),
              (st0, f"scenario 3 starts: rank {st_rank} (node{st_node}) {st_ms} ms late"), (st1, "scenario 3 ends")]
    seen_alerts = set()
    n_notified = 0
    last_status = -1e9
    try:
        while sim.poll() is None:
            t = time.time() - t0
            while events and t >= events[0][0]:
                say(f"t={events[0][0]:>3}s  {events.pop(0)[1]}")
            if t - last_status >= 30 and t > 5:
                last_status = t
                net = r.bw(t, 'n_nodes!="1",collective="AllGather"')
                nv = r.bw(t, 'n_nodes="1"')
                say(f"t={t:3.0f}s  AllGather network {fmt(net).strip()} GB/s, NVLink-only {fmt(nv).strip()} GB/s, "
                    f"step {fmt(r.tflops(t)).strip()} TFLOP/s/GPU")
            try:
                new = {}
                for al in prom.alerts("firing"):
                    lb = al["labels"]
                    if lb.get("job_id", job) != job:
                        continue
                    key = (lb["alertname"], lb.get("node"), lb.get("comm_name"), lb.get("collective"))
                    if key not in seen_alerts:
                        seen_alerts.add(key)
                        new.setdefault(group_key(lb), []).append(al)
                for g, als in new.items():
                    say(f"t={t:3.0f}s  ALERT {g[0]} firing: " + describe(als))
            except (P.PromError, OSError):
                pass
            if hook:
                got = hook.notifications()
                for _, path, d in got[n_notified:]:
                    say(f"t={t:3.0f}s  NOTIFICATION {notification_line(path, d)}")
                n_notified = len(got)
            time.sleep(1)
    except KeyboardInterrupt:
        os.killpg(sim.pid, signal.SIGKILL)
        sim.wait()
        raise
    if sim.returncode != 0:
        say(f"simulator exited with {sim.returncode}; see {a.root}/logs/sim.log")
        return 1
    t_end = time.time()
    time.sleep(2)  # last scrape + rule evaluation
    with open(summary_path) as f:
        model = json.load(f)
    report(prom, r, job, t0, t_end, model, s, a, hook)
    return 0


def notification_line(path, d):
    """One line for one webhook notification: receiver, status, alert name x count, first summary."""
    als = d.get("alerts", [])
    where = path.rstrip("/").rsplit("/", 1)[-1]
    first = als[0]["annotations"].get("summary", "") if als else ""
    return (f"-> {where}: {d.get('status')} {d.get('groupLabels', {}).get('alertname')} "
            f"({len(als)} alert{'s' if len(als) != 1 else ''}): {first}")


def report(prom, r, job, t0, t_end, model, s, a, hook=None):
    net0, net1, net_pct = s["net"]
    slow_node, slow0, slow1, slow_pct = s["slow"]
    slow_name = f"node{slow_node}"
    st_node, st_gpu, st_ms, st0, st1 = s["strag"]
    st_rank = st_node * a.gpus + st_gpu
    # Readout times: just before a fault, at its end (20 s window fully inside), and at the end
    # of the healthy phase after it.
    pts1 = [("before", net0 - 1), ("during", net1 - 1), ("after", slow0 - 1)]
    pts2 = [("before", slow0 - 1), ("during", slow1 - 1), ("after", s["duration"] - 1)]
    bar = "=" * 78
    print()
    print(bar)
    print(f" ncclinsp demo summary: job {job}, {a.nodes} nodes x {a.gpus} GPUs, read from Prometheus {prom.url}")
    print(f" (bus bandwidth = rate(ncclinsp_bus_bytes_total[{W}]) / rate(ncclinsp_busy_seconds_total[{W}]);"
          " throughput = median rank)")
    print(bar)

    def row(label, f, pts, unit):
        vals = [f(t) for _, t in pts]
        print(f"  {label:<38}" + "".join(fmt(v) + "   " for v in vals) + unit)
        return vals

    print(f"\n Scenario 1: network degraded {net_pct}% on n_nodes>1 communicators, t={net0}-{net1}s")
    print(f"  {'':<38}" + "".join(f"{n:>7}   " for n, _ in pts1) + f"   (t={', '.join(str(t) for _, t in pts1)}s)")
    ag = row("AllGather, network (n_nodes>1)", lambda t: r.bw(t, 'n_nodes!="1",collective="AllGather"'), pts1, "GB/s")
    row("ReduceScatter, network (n_nodes>1)", lambda t: r.bw(t, 'n_nodes!="1",collective="ReduceScatter"'), pts1, "GB/s")
    nv = row("AllReduce, NVLink only (n_nodes=1)", lambda t: r.bw(t, 'n_nodes="1",collective="AllReduce"'), pts1, "GB/s")
    tf1 = row("step throughput", r.tflops, pts1, "TFLOP/s/GPU")

    print(f"\n Scenario 2: {slow_name}'s network links {slow_pct}% slower, t={slow0}-{slow1}s")
    print(f"  {'':<38}" + "".join(f"{n:>7}   " for n, _ in pts2) + f"   (t={', '.join(str(t) for _, t in pts2)}s)")
    rs = row("ReduceScatter, network (job)", lambda t: r.bw(t, 'n_nodes!="1",collective="ReduceScatter"'), pts2, "GB/s")
    row(f"ReduceScatter, network, {slow_name}",
        lambda t: r.bw(t, f'n_nodes!="1",collective="ReduceScatter",node="{slow_name}"'), pts2, "GB/s")
    row("ReduceScatter, network, other nodes",
        lambda t: r.bw(t, f'n_nodes!="1",collective="ReduceScatter",node!="{slow_name}"'), pts2, "GB/s")
    row("AllReduce, NVLink only (n_nodes=1)", lambda t: r.bw(t, 'n_nodes="1",collective="AllReduce"'), pts2, "GB/s")
    tf2 = row("step throughput", r.tflops, pts2, "TFLOP/s/GPU")

    # Attribution of scenario 2: each GPU's network wire time per byte (sampled proxy send/network
    # state), the faster of its in and out edges, against the job's median GPU (the rule
    # NcclinspHostNetworkSlow alerts on: a slow host or NIC is the endpoint of every slow edge).
    t_a = slow1 - 1
    rows = sorted(((m, v) for m, v in prom.values(
        f'ncclinsp_gpu:proxy_link_slowness_ratio_to_job_median:rate1m{{job_id="{job}"}}', at=t0 + t_a)
        if math.isfinite(v)), key=lambda x: -x[1])
    print(f"\n Attribution, scenario 2 (network wire time per byte, min of in/out edges, vs the job's median GPU, at t={t_a}s, 1m):")
    for m, v in rows[:4]:
        print(f"  {m.get('node'):<8} {m.get('uuid', '')[:13]:<13} {v:5.2f}x the median GPU")
    named = rows[0][0].get("node") if rows and rows[0][1] > 1.15 else None
    print(f"  -> host named: {named or '(none above 1.15x)'}")

    print(f"\n Scenario 3: rank {st_rank} (node{st_node}) launches every op {st_ms} ms late, t={st0}-{st1}s")
    pts3 = [("before", st0 - 1), ("during", st1 - 1), ("after", s["duration"] - 1)]
    print(f"  {'':<38}" + "".join(f"{n:>7}   " for n, _ in pts3) + f"   (t={', '.join(str(t) for _, t in pts3)}s)")
    row("AllGather, network (job)", lambda t: r.bw(t, 'n_nodes!="1",collective="AllGather"'), pts3, "GB/s")
    row("AllReduce, NVLink only (n_nodes=1)", lambda t: r.bw(t, 'n_nodes="1",collective="AllReduce"'), pts3, "GB/s")
    row("step throughput", r.tflops, pts3, "TFLOP/s/GPU")
    t_s = st1 - 1
    # The late process (ncclinsp:late_rank_exec_ratio:rate1m: below 0.80 of its communicator's
    # median rank and waiting in none of its communicators), named by node, GPU and its rank in
    # the communicator that spans the whole job.
    late = sorted(((m, v) for m, v in prom.values(
        f'ncclinsp:late_rank_exec_ratio:rate1m{{job_id="{job}"}}', at=t0 + t_s) if math.isfinite(v)),
        key=lambda x: x[1])
    print(f"  late ranks: exec time per op vs the communicator's median rank, waiting in none of their"
          f" communicators (t={t_s}s, 1m):")
    for m, v in late[:4]:
        print(f"  {m.get('node'):<8} {m.get('gpu', ''):<6} rank {m.get('rank'):<3} of {m.get('comm_name'):<6}"
              f" {m.get('collective'):<14} {v:6.0%} of the median rank")
    if not late:
        print("  (none)")
    late_named = None
    if late:
        m0 = late[0][0]
        world = [m.get("rank") for m, _ in prom.values(
            f'ncclinsp:exec_seconds_per_op:rate1m{{job_id="{job}",uuid="{m0.get("uuid")}",'
            f'nranks="{a.nodes * a.gpus}"}}', at=t0 + t_s)]
        late_named = (m0.get("node"), m0.get("gpu", ""), world[0] if world else "?")
    print("  -> straggler named: " + (f"{late_named[0]} {late_named[1]}, global rank {late_named[2]}" if late_named
                                       else "(none)"))

    # Alerts: from Prometheus's ALERTS series over the job.
    print("\n Alerts that fired (from Prometheus's ALERTS series; t = seconds into the job):")
    fired = []
    for m, pts in prom.range_values('ALERTS{alertstate="firing"}', t0, time.time(), step=1):
        if m.get("job_id", job) != job or not pts:
            continue
        fired.append((pts[0][0], pts[-1][0], m))
    if not fired:
        print("  (none)")
    groups = {}
    for a0, a1, m in fired:
        g = groups.setdefault(group_key(m), [a0, a1, []])
        g[0], g[1] = min(g[0], a0), max(g[1], a1)
        g[2].append(m)
    for (name, what, n_nodes), (a0, a1, ms) in sorted(groups.items(), key=lambda x: (x[1][0], x[0])):
        comms = comms_text(m.get("comm_name") for m in ms)
        where = f"{what} on {comms}" if comms else what
        if n_nodes:
            where += f" (n_nodes={n_nodes})"
        nodes = sorted({m["node"] for m in ms if "node" in m and m.get("node") != what})
        if nodes:
            where += " node " + ",".join(nodes)
        print(f"  t={a0 - t0:4.0f}s ({time.strftime('%H:%M:%S', time.localtime(a0))}) to t={a1 - t0:4.0f}s  "
              f"{name:<30} {where}")

    print("\n Time to alert (alerts of this job that started firing during each fault), and who they name:")
    host_alerts = ("NcclinspHostNetworkSlow", "NcclinspHostBelowJobMedian")
    for label, on, off, want in ((f"scenario 1 (network -{net_pct}%)", net0, net1, "the fabric, no host, no rank"),
                                 (f"scenario 2 ({slow_name} -{slow_pct}%)", slow0, slow1, f"host {slow_name}"),
                                 (f"scenario 3 (rank {st_rank} +{st_ms} ms)", st0, st1,
                                  f"rank {st_rank} on node{st_node} GPU{st_gpu}")):
        hits = sorted(((a0 - t0 - on, m) for a0, _, m in fired if on <= a0 - t0 <= off), key=lambda x: x[0])
        if not hits:
            print(f"  {label:<32} no alert                      (expected: {want})")
            continue
        first = hits[0]
        names = []
        for d, m in hits:
            n = m["alertname"]
            if n not in [x[0] for x in names]:
                names.append((n, d, m))
        print(f"  {label:<32} {first[0]:5.0f} s  " + ", ".join(
            f"{n} +{d:.0f}s" + (f" ({m['node']}" + (f" {m.get('gpu', '')} rank {m['rank']} of {m.get('comm_name')}"
                                                    if m.get('rank') else "") + ")"
                                if n in ("NcclinspHostNetworkSlow", "NcclinspRankStraggler", "NcclinspNvlinkDegraded")
                                and m.get("node") else "")
            for n, d, m in names[:4]))
        # Who the attribution alerts named during this fault: the expected culprit and nobody else.
        hosts = sorted({m.get("node") for _, m in hits if m["alertname"] in host_alerts})
        ranks = sorted({(m.get("node"), m.get("gpu", "")) for _, m in hits if m["alertname"] == "NcclinspRankStraggler"})
        who = ([f"host {h}" for h in hosts] + [f"late rank on {n} {g}" for n, g in ranks]) or ["no host, no rank"]
        if on == net0:
            ok = not hosts and not ranks
        elif on == slow0:
            ok = hosts == [slow_name] and not ranks
        else:
            ok = not hosts and ranks == [(f"node{st_node}", f"GPU{st_gpu}")]
        first_named = min((d for d, m in hits if (on == slow0 and m["alertname"] == "NcclinspHostNetworkSlow") or
                           (on == st0 and m["alertname"] == "NcclinspRankStraggler")), default=None)
        print(f"  {'':<32} named: {', '.join(who)}; expected {want}: {'RIGHT' if ok else 'WRONG'}"
              + (f" (culprit named {first_named:.0f} s after onset)" if first_named is not None else ""))

    if hook:
        print("\n Notifications (Alertmanager, prometheus/alertmanager.example.yml: grouped per alert name and job,"
              " explained alerts inhibited):")
        got = hook.notifications()
        if not got:
            print("  (none: the config sends a group's first notification group_wait after its first alert, 1m (10 s"
                  " for pages), the next group_interval (5m) later, and drops alerts another explains: every alert"
                  " above was inhibited when its group was due, or it or the job ended first)")
        for at, path, d in got:
            print(f"  t={at - t0:4.0f}s {notification_line(path, d)}")
            rb = d.get("commonAnnotations", {}).get("runbook_url")
            if rb:
                print(f"         runbook: {rb}")

    exp = {p["faults"]: p["tflops"] for p in model["phases"]}
    print("\n Reading it:")
    drop = 1 - tf1[1] / tf1[0] if tf1[0] else float("nan")
    print(f"  1. network AllGather {fmt(ag[0]).strip()} -> {fmt(ag[1]).strip()} GB/s while NVLink-only stayed "
          f"{fmt(nv[0]).strip()} -> {fmt(nv[1]).strip()} GB/s; step throughput {tf1[0]:.0f} -> {tf1[1]:.0f} TFLOP/s "
          f"(-{drop:.0%}; model {exp.get('none', 0):.0f} -> {exp.get('net_degrade', 0):.0f}): the network is the cause.")
    print(f"  2. throughput {tf2[0]:.0f} -> {tf2[1]:.0f} -> {tf2[2]:.0f} TFLOP/s, network ReduceScatter "
          f"{fmt(rs[0]).strip()} -> {fmt(rs[1]).strip()} GB/s with NVLink flat. Every rank's kernel time slows alike"
          f" (collectives are coupled); the proxy send/network wait names {named or 'no host'}.")
    print(f"  3. a late rank makes its peers wait: their bandwidth drops while its own exec time is the shortest;"
          f" the exec-time ratio names " + (f"{late_named[0]} {late_named[1]}, global rank {late_named[2]}." if late_named
                                            else "no rank."))
    print(bar)


def _term(signum, frame):
    raise KeyboardInterrupt


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _term)
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        sys.exit(130)
