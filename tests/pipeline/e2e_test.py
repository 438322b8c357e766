#!/usr/bin/env python3
"""End-to-end test: ncclinsp-sim -> NCCL profiler plugin -> .prom files -> node_exporter (one per
simulated node) -> Prometheus (2 s scrape, our rules) -> Alertmanager -> webhook, and the same
node_exporters -> vmagent -> VictoriaMetrics with vmalert evaluating the same rule files ->
its own Alertmanager; assertions through each backend's Prometheus-compatible HTTP API.

Both backends watch the same run (--backend both, the default: one run, ~0 s extra wall time)
and every check below runs against each of them; `--backend prometheus|victoriametrics` runs one.

Two simulator runs side by side, real time (--speed 1) (~3 min):
the main job, N nodes x G GPUs (default 2 x 4):

    t=0       job starts (healthy: baseline for the rules)
    t=35-126  --net-degrade 50@35-126    every n_nodes>1 communicator at 50 % bus bandwidth
    t=126-160 --slow-host 1:25@126-160   all of node1's NICs at 75 %
    t=162     job ends (every plugin writes its final file)

and a one-node hang job (SLURM job "<job>-hang", node0, 2 GPUs): --hang-rank 1@10. A hung rank blocks
its peers (they spin in the same op and issue nothing more), and one communicator spanning every rank
(fsdp) freezes a whole job, so the hang gets its own job.

The degradation alert compares the 1m bandwidth with the median of the job's own previous 10m
(offset 1m), so it cannot fire before ~t=62 (first baseline sample) + 30 s `for`: Prometheus
fires at ~t=94. vmalert's recording rules go through remote write, and VictoriaMetrics makes a
new series searchable only seconds after its first sample, so on a fresh job each rule level
adds that (measured: rate1m at t=14, baseline at t=75, alert at t=~123). The degradation window
covers both, and the fabric alert stays up past Alertmanager's 30 s group_wait.

Checks (all through Prometheus's HTTP API; analysis happens after the run on stored data, at the
times given above, so the result does not depend on polling luck):
  1. targets up; the simulator exited 0.
  2. every metric family listed in docs/metrics.md (and the simulator's two) is present for
     every node with exactly the documented labels (+ user label from NCCLINSP_LABELS and the
     scrape labels job/instance/node_instance), and label values have the documented shape;
     measured bus bandwidth matches the simulator's model (--summary) at a healthy time.
  3. every dashboard variable query returns the job's values and every panel query of both
     dashboards ($job/$node set to this job's values, other variables All, $__rate_interval 1m)
     returns data over the run; compat panels for collectives/fabrics the workload never runs
     must be empty (anything else would mean mislabelled n_nodes/collective).
  4. scenario 1: NcclinspBusBandwidthDegraded fires for AllGather on the n_nodes>1 comm during
     the degradation and never for n_nodes="1"; network AllGather bandwidth (recording rule
     ncclinsp_job_fabric:bus_bandwidth_gbs:rate1m) falls to ~50 % while every NVLink-only
     series stays within 5 %; step throughput (median over ranks) 310 -> ~268 TFLOP/s.
  5. scenario 2, on the physics of coupled collectives: a slow host lowers the kernel-time bus
     bandwidth of EVERY rank of the communicators that route through it, so the per-host
     attribution table (kernel time vs the job median) must show no host below 97 % while the
     network bandwidth of every host falls to ~75 % (naming the host needs the proxy signals,
     docs/diagnosis.md).
  6. hang: every rank of the hung communicator shows a growing ncclinsp_oldest_inflight_age_seconds
     on that one communicator (the hung rank and its blocked peer), and NcclinspAllRanksStuck
     ("every rank is inside") fires for that communicator only, role="primary", node0, 60 s (the
     default fault threshold) + 10 s after the hang.
  7. finished job: every file ends with ncclinsp_info{final="1"}; the stale-exporter alerts'
     own expressions (read from /api/v1/rules), evaluated 90 s / 150 s after the end, return
     nothing for this job, while the bare age condition would (so the exclusion is what holds).
  8. no other alert fires.
  9. Alertmanager (shipped prometheus/alertmanager.example.yml, production timers) delivers to the
     webhook exactly one page (NcclinspAllRanksStuck, the hung communicator) per backend and
     one ticket per alert name for scenario 1: from Prometheus the NcclinspNetworkFabricDegraded
     ticket (text and runbook_url checked); the per-collective alerts are inhibited by the fabric
     alert (at most one earlier ticket from the in-process detector, which fires before this
     short job has a PromQL baseline). See check_notifications for VictoriaMetrics' timing.

usage: e2e_test.py --plugin PATH --sim PATH [--nodes 2 --gpus 4] [--backend both] [--keep] [--root DIR]
Exit 0 pass, 1 fail, 77 skip (plugin / simulator not built). Missing servers fail the test.
"""
import argparse
import json
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import promapi as P  # noqa: E402

# The fault schedule (simulated seconds == wall seconds at --speed 1).
HANG_RANK, HANG_AT, HANG_GPUS = 1, 10, 2   # the hang job: 1 node x HANG_GPUS GPUs
NET = (35, 126, 50)         # t0, t1, percent
SLOW = (1, 126, 160, 25)    # node, t0, t1, percent
DURATION = 162
ATTRIB_AT = 157             # attribution table evaluated here (31 s into the slow-host window)
# Scrape interval (= scrape_timeout) of both backends. 2 s, not 1 s: the whole stack (two backends,
# two Alertmanagers, two node_exporters, two simulators) shares a 2-core machine, and at load ~10
# a third of 1 s scrapes timed out (each one makes that node's series stale and restarts `for:`).
SCRAPE_INTERVAL = "2s"
# Families that exist only once the in-process detector has its baseline (30 export windows of
# 1 s, then 3 recent ones): checked later than the others.
LATE_FAMILIES = {"ncclinsp_busbw_ratio_to_baseline", "ncclinsp_busbw_degraded", "ncclinsp_busbw_degradations_total",
                 "ncclinsp_busbw_transients_total", "ncclinsp_busbw_transient_depth_total"}
LATE_AT = 60
# Ops the workload runs only in its first step: their Inspector-compatible gauges exist for one
# export window (~1 s) and may or may not be caught by a scrape.
FIRST_STEP_ONLY = {"Broadcast"}

IDENT = {"job_id", "slurm_job_id", "node", "gpu", "uuid"}
COMM = {"comm_name", "comm_hash", "rank", "nranks", "n_nodes"}
OP = {"collective", "message_size", "algo_proto"}
SCRAPE = {"job", "instance", "node_instance"}
USER = {"cluster": "e2e"}   # NCCLINSP_LABELS=cluster=e2e
COMPAT_COLL = {"version", "slurm_job_id", "node", "gpu", "comm_name", "n_nodes", "nranks", "collective",
               "message_size", "algo_proto", "job_id", "uuid"}
COMPAT_P2P = {"version", "slurm_job_id", "node", "gpu", "comm_name", "n_nodes", "nranks", "p2p_operation",
              "message_size", "job_id", "uuid"}
# Expected label names per family (besides SCRAPE); user labels are added where the plugin writes them.
EXPECTED = {
    "nccl_bus_bandwidth_gbs": COMPAT_COLL,
    "nccl_collective_exec_time_microseconds": COMPAT_COLL,
    "nccl_p2p_bus_bandwidth_gbs": COMPAT_P2P,
    "nccl_p2p_exec_time_microseconds": COMPAT_P2P,
    "ncclinsp_ops_total": IDENT | COMM | OP,
    "ncclinsp_bytes_total": IDENT | COMM | OP,
    "ncclinsp_bus_bytes_total": IDENT | COMM | OP,
    "ncclinsp_busy_seconds_total": IDENT | COMM | OP,
    "ncclinsp_op_duration_seconds_bucket": IDENT | COMM | OP | {"le"},
    "ncclinsp_op_duration_seconds_sum": IDENT | COMM | OP,
    "ncclinsp_op_duration_seconds_count": IDENT | COMM | OP,
    "ncclinsp_inflight_ops": IDENT | COMM,
    "ncclinsp_oldest_inflight_age_seconds": IDENT | COMM,
    "ncclinsp_seconds_since_last_completion": IDENT | COMM,
    "ncclinsp_last_completed_seq": IDENT | COMM | {"collective"},
    "ncclinsp_invalid_ops_total": IDENT | COMM,
    "ncclinsp_abandoned_ops_total": IDENT | COMM,
    "ncclinsp_dropped_events_total": IDENT | {"reason"},
    "ncclinsp_filtered_ops_total": IDENT | {"reason"},
    "ncclinsp_export_timestamp_seconds": IDENT,
    # docs/metrics.md names version and abi; the plugin also writes final="0|1" (end-of-job marker).
    "ncclinsp_info": IDENT | {"version", "abi", "final"},
    "ncclinsp_series_overflow": IDENT | {"kind"},
    # NCCLINSP_PROXY=1 (the e2e job sets it): network communicators only.
    "ncclinsp_proxy_wait_seconds_total": IDENT | COMM | {"peer", "direction", "state"},
    "ncclinsp_proxy_bytes_total": IDENT | COMM | {"peer", "direction"},
    "ncclinsp_proxy_steps_total": IDENT | COMM | {"peer", "direction"},
    # In-process detector (on by default): per communicator x collective x size.
    "ncclinsp_busbw_ratio_to_baseline": IDENT | COMM | {"collective", "message_size"},
    "ncclinsp_busbw_degraded": IDENT | COMM | {"collective", "message_size"},
    "ncclinsp_busbw_degradations_total": IDENT | COMM | {"collective", "message_size"},
    "ncclinsp_busbw_transients_total": IDENT | COMM | {"collective", "message_size"},
    "ncclinsp_busbw_transient_depth_total": IDENT | COMM | {"collective", "message_size"},
}
PROXY_STATES = {"send": {"gpu", "peer_credit", "network", "queue"}, "recv": {"network", "flush", "gpu"}}
SIM_FAMILIES = {"ncclinsp_sim_step_tflops": {"node", "rank"}, "ncclinsp_sim_steps_total": {"node", "rank"}}
HIST_LE = ["1e-05", "2.5e-05", "5e-05", "0.0001", "0.00025", "0.0005", "0.001", "0.0025", "0.005", "0.01",
           "0.025", "0.05", "0.1", "0.25", "0.5", "1", "2.5", "5", "10", "+Inf"]
FUNCS = {"AllReduce", "AllGather", "ReduceScatter", "Broadcast", "Reduce", "AlltoAll", "Gather", "Scatter",
         "Send", "Recv", "SendRecv", "unknown"}
DROP_REASONS = {"op_pool_full", "table_full", "record_ring_full", "comm_table_full", "exit_deadline"}
# Families that only count congestion bursts: this job's drops are sustained, so its panels may be
# empty here (stack_smoke checks that their queries return data).
BURSTS_ONLY = ("ncclinsp_busbw_transients_total",)
FILTER_REASONS = {"min_size", "no_gpu_timing", "enqueue_only", "rejected_timestamps", "foreign_timestamps",
                  "no_kernel_events"}
SHAPES = {
    "gpu": re.compile(r"^GPU\d+$"),
    "uuid": re.compile(r"^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"),
    "comm_hash": re.compile(r"^[0-9a-f]{16}$"),
    "rank": re.compile(r"^\d+$"),
    "nranks": re.compile(r"^\d+$"),
    "abi": re.compile(r"^v[4-7]$"),
    "algo_proto": re.compile(r"^([A-Z_]+_(SIMPLE|LL|LL128)|SYM|none)$"),
}
# `invalid`: ops with an unknown datatype (the workload's ncclUint8 AllReduce) are counted under
# message_size="invalid" (not in docs/metrics.md's bucket list; reported as a docs gap).
NATIVE_SIZE = re.compile(r"^(0B|invalid|\d+(B|KiB|MiB|GiB|TiB|PiB|EiB)-\d+(B|KiB|MiB|GiB|TiB|PiB|EiB))$")
COMPAT_SIZE = re.compile(r"^\d+-\d+(B|KB|MB|GB)$")


class Failures(list):
    def __call__(self, msg):
        self.append(msg)
        print("FAIL:", msg, flush=True)


def log(msg):
    print(f"[e2e {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def doc_families(repo):
    """Family names from the tables of docs/metrics.md (histograms expanded)."""
    names = []
    with open(os.path.join(repo, "docs", "metrics.md"), encoding="utf-8") as f:
        for line in f:
            m = re.match(r"^\|\s*`((?:nccl|ncclinsp)_[a-z0-9_]+)`\s*\|\s*(\w+)", line)
            if m:
                if m.group(2) == "histogram":
                    names += [m.group(1) + s for s in ("_bucket", "_sum", "_count")]
                else:
                    names.append(m.group(1))
    return names


def coll_of(expr):
    ms = {k: v for k, op, v in P.matchers(expr) if op == "="}
    return ms.get("collective") or ms.get("p2p_operation")


def pow2_label(n):
    units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"]

    def fmt(v):
        u = 0
        while v >= 1024 and v % 1024 == 0 and u < len(units) - 1:
            v //= 1024
            u += 1
        return f"{v}{units[u]}"
    lo = 1 << (n.bit_length() - 1)
    return f"{fmt(lo)}-{fmt(lo * 2)}"


class Run:
    def __init__(self, a, prom, job, t0, summary):
        self.a, self.prom, self.job, self.t0, self.summary = a, prom, job, t0, summary
        self.nodes = [f"node{k}" for k in range(a.nodes)]
        self.fail = Failures()

    def T(self, t):  # simulated seconds -> Unix time
        return self.t0 + t

    def q(self, expr, t):
        return self.prom.values(expr, at=self.T(t))

    def log_scrape_health(self, t_end):
        """Failed scrapes per node over the run (a failed scrape makes every series of that node
        stale for that instant and resets every `for:` timer; with a scrape_timeout of SCRAPE_INTERVAL
        this happens when the machine is too busy). Logged, so a timing failure below can be read against it."""
        rng = f"{max(1, int(t_end - self.t0))}s"
        ups = {lb.get("node_instance"): v for lb, v in self.prom.values(f"count_over_time(up[{rng}])", at=t_end)}
        oks = {lb.get("node_instance"): v for lb, v in self.prom.values(f"sum_over_time(up[{rng}])", at=t_end)}
        dur = {lb.get("node_instance"): v for lb, v in
               self.prom.values(f"max_over_time(scrape_duration_seconds[{rng}])", at=t_end)}
        parts = [f"{n}: {int(ups[n] - oks.get(n, 0))}/{int(ups[n])} failed, slowest {dur.get(n, float('nan')):.3f}s"
                 for n in sorted(ups, key=str)]
        log("scrapes over the run: " + "; ".join(parts))

    # -- 2. families and labels -----------------------------------------------------------------
    def check_families(self, t):
        fams = doc_families(P.REPO)
        missing_exp = [f for f in fams if f not in EXPECTED]
        if missing_exp:
            self.fail(f"docs/metrics.md lists families this test has no expectation for: {missing_exp}")
        if len(fams) < 20:
            self.fail(f"parsed only {len(fams)} families from docs/metrics.md: {fams}")
        n_series = 0
        for fam in list(dict.fromkeys(fams + list(SIM_FAMILIES))):
            want = SIM_FAMILIES.get(fam)
            sim = want is not None
            if not sim:
                want = EXPECTED.get(fam, set()) | set(USER)
            sel = f'{fam}{{node_instance=~".+"}}' if sim else f'{fam}{{slurm_job_id="{self.job}"}}'
            tf = LATE_AT if fam in LATE_FAMILIES else t
            res = self.q(sel, tf)
            n_series += len(res)
            if not res:
                self.fail(f"family {fam}: no series at t={tf}")
                continue
            nodes = sorted({m.get("node") for m, _ in res})
            if nodes != self.nodes:
                self.fail(f"family {fam}: nodes {nodes}, expected {self.nodes}")
            bad = 0
            for m, v in res:
                got = set(m) - {"__name__"} - SCRAPE
                if got != want or not SCRAPE <= set(m):
                    self.fail(f"family {fam}: labels {sorted(set(m) - {'__name__'})}, expected "
                              f"{sorted(want | SCRAPE)}")
                    break
                if m["node"] != m["node_instance"]:
                    self.fail(f"family {fam}: node {m['node']} served by node_instance {m['node_instance']}")
                    break
                bad += self.check_values(fam, m, v)
                if bad:
                    break
        log(f"families: {len(fams)} documented + {len(SIM_FAMILIES)} simulator families present, "
            f"{n_series} series checked at t={t}s (detector families at t={LATE_AT}s)")
        # Histogram buckets complete.
        les = {m["le"] for m, _ in self.q(f'ncclinsp_op_duration_seconds_bucket{{slurm_job_id="{self.job}"}}', t)}
        if les != set(HIST_LE):
            self.fail(f"histogram le values {sorted(les)} != documented {HIST_LE}")
        # Communicators of the workload.
        comms = {(m["comm_name"], m["nranks"], m["n_nodes"])
                 for m, _ in self.q(f'ncclinsp_ops_total{{slurm_job_id="{self.job}"}}', t)}
        N, G = self.a.nodes, self.a.gpus
        want = {("tp", str(G), "1"), ("fsdp", str(N * G), str(N))}
        want |= {(f"{k}{l}", str(N), str(N)) for k in ("dp", "pp") for l in range(G)}
        if comms != want:
            self.fail(f"communicators {sorted(comms)} != {sorted(want)}")

    def check_values(self, fam, m, v):
        def bad(msg):
            self.fail(f"family {fam}: {msg} in {m}")
            return 1
        if fam in SIM_FAMILIES:
            return 0 if math.isfinite(v) else bad("non-finite value")
        if m.get("slurm_job_id") != self.job:
            return bad("slurm_job_id")
        for k, rx in SHAPES.items():
            if k in m and not rx.match(m[k]):
                return bad(f"{k}={m[k]!r} has the wrong shape")
        for k, v0 in USER.items():
            if m.get(k) != v0:
                return bad(f"user label {k}")
        if "n_nodes" in m and m["n_nodes"] not in ("1", str(self.a.nodes)):
            return bad("n_nodes")
        for k in ("collective", "p2p_operation"):
            if k in m and m[k] not in FUNCS:
                return bad(f"{k}={m[k]!r}")
        if "message_size" in m:
            rx = COMPAT_SIZE if fam.startswith("nccl_") else NATIVE_SIZE
            if not rx.match(m["message_size"]):
                return bad(f"message_size={m['message_size']!r}")
        if fam == "ncclinsp_dropped_events_total" and m["reason"] not in DROP_REASONS:
            return bad("reason")
        if fam == "ncclinsp_filtered_ops_total" and m["reason"] not in FILTER_REASONS:
            return bad("reason")
        if fam.startswith("ncclinsp_proxy_"):
            if m["n_nodes"] == "1" or m["direction"] not in PROXY_STATES or not m["peer"].isdigit():
                return bad("proxy series of a non-network communicator, or bad direction/peer")
            if "state" in m and m["state"] not in PROXY_STATES[m["direction"]]:
                return bad("state")
        if fam == "ncclinsp_busbw_degraded" and v not in (0.0, 1.0):
            return bad(f"value {v}")
        if not math.isfinite(v) or v < 0:
            return bad(f"value {v}")
        return 0

    def check_model_bandwidth(self, t):
        """Measured window bus bandwidth vs the simulator's model, healthy phase."""
        rows = self.q(f'ncclinsp_job:bus_bandwidth_gbs:rate1m{{job_id="{self.job}"}}', t)
        got = {}
        for m, v in rows:
            comm = re.sub(r"\d+$", "", m["comm_name"])
            got.setdefault((comm, m["collective"], m["message_size"]), []).append(v)
        checked = 0
        for b in self.summary["busbw"]:
            if b["bytes_per_rank"] < (1 << 20):
                continue
            key = (b["comm"], b["collective"], pow2_label(b["bytes_per_rank"]))
            vals = got.get(key)
            if not vals:
                self.fail(f"no measured bus bandwidth for {key} at t={t}s")
                continue
            exp = b["nominal_busbw_gbs"]
            for v in vals:
                if not abs(v / exp - 1) < 0.05:
                    self.fail(f"{key}: measured {v:.1f} GB/s, model {exp:.1f} GB/s")
            checked += 1
        log(f"bus bandwidth matches the simulator's model (+-5%) for {checked} comm/collective/size rows")

    # -- 3. dashboards --------------------------------------------------------------------------
    def expected_ops(self):
        """(collective, network?) pairs the workload runs."""
        return {(b["collective"], bool(b["network"])) for b in self.summary["busbw"]}

    def check_dashboards(self, t_end):
        values = {"job": [self.job], "node": self.nodes}
        present = self.expected_ops()
        n_ok = n_empty = 0
        for name in ("ncclinsp.json", "inspector-compat.json"):
            dash = P.load_dashboard(os.path.join(P.REPO, "grafana", name))
            for v in P.variables(dash):
                q = P.variable_query(v)
                m = re.match(r"^label_values\((.*),\s*(\w+)\)$", q.strip())
                if not m:
                    continue
                sel = P.substitute(m.group(1), values)
                got = set(self.prom.label_values(m.group(2), sel, start=self.T(0), end=t_end))
                want = {"job": {self.job}, "node": set(self.nodes)}.get(v["name"])
                if not got or (want and not want <= got):
                    self.fail(f"{name} variable {v['name']}: {sorted(got)} (query {q})")
            for p, tg in P.iter_targets(dash):
                expr = P.substitute(tg["expr"], values, rate_interval="1m")
                # Expected empty: a compat panel for a collective/fabric the workload never runs.
                expect = True
                if name == "inspector-compat.json":
                    ms = dict((k, val) for k, op, val in P.matchers(tg["expr"]) if op == "=")
                    coll = ms.get("collective") or ms.get("p2p_operation")
                    net = not any(k == "n_nodes" and op == "=" and val == "1"
                                  for k, op, val in P.matchers(tg["expr"]))
                    expect = (coll, net) in present
                try:
                    if tg.get("instant") or p.get("type") == "table":
                        res = self.prom.values(expr, at=self.T(ATTRIB_AT))
                        n = sum(1 for _, v in res if math.isfinite(v))
                    else:
                        res = self.prom.range_values(expr, self.T(0), t_end, step=1)
                        n = sum(1 for _, pts in res for _, v in pts if math.isfinite(v))
                except P.PromError as e:
                    self.fail(f"{name} panel {p.get('title')!r} {tg.get('refId')}: {e}")
                    continue
                if expect and n == 0 and (coll_of(tg["expr"]) in FIRST_STEP_ONLY or any(f in expr for f in BURSTS_ONLY)):
                    n_empty += 1
                elif expect and n == 0:
                    self.fail(f"{name} panel {p.get('title')!r} {tg.get('refId')}: no data\n    {expr}")
                elif not expect and n:
                    self.fail(f"{name} panel {p.get('title')!r}: data for an op the workload never runs\n    {expr}")
                elif expect:
                    n_ok += 1
                else:
                    n_empty += 1
        log(f"dashboards: {n_ok} panel queries returned data, {n_empty} compat queries empty as expected "
            f"(collective/fabric not in the workload)")

    # -- 4. scenario 1 --------------------------------------------------------------------------
    def check_net_degrade(self, t_end):
        t0, t1, pct = NET
        N = str(self.a.nodes)
        fired = self.prom.firing("NcclinspBusBandwidthDegraded", self.T(0), t_end, job_id=self.job)
        ag = [f for f in fired if f[0].get("collective") == "AllGather" and f[0].get("n_nodes") == N
              and f[0].get("comm_name") == "fsdp"]
        if not ag:
            self.fail(f"NcclinspBusBandwidthDegraded did not fire for fsdp AllGather (fired: {[f[0] for f in fired]})")
        else:
            at = ag[0][1] - self.t0
            log(f"scenario 1: NcclinspBusBandwidthDegraded fired for fsdp AllGather n_nodes={N} at t={at:.0f}s "
                f"(degradation {t0}-{t1}s)")
            if not t0 < at <= t1:
                self.fail(f"degradation alert fired at t={at:.0f}s, outside the fault window {t0}-{t1}s")
        for m, a, b in fired:
            if m.get("n_nodes") == "1":
                self.fail(f"NcclinspBusBandwidthDegraded fired for NVLink-only {m} at t={a - self.t0:.0f}s")
            if a - self.t0 < t0:
                self.fail(f"NcclinspBusBandwidthDegraded fired before the fault: {m} at t={a - self.t0:.0f}s")
        fab = self.prom.firing("NcclinspNetworkFabricDegraded", self.T(0), t_end, job_id=self.job)
        if not fab:
            self.fail("NcclinspNetworkFabricDegraded did not fire")
        else:
            at = fab[0][1] - self.t0
            log(f"scenario 1: NcclinspNetworkFabricDegraded fired at t={at:.0f}s ({fab[0][0].get('fabric')})")
            if not t0 < at <= t1 or fab[0][0].get("fabric") != "network":
                self.fail(f"fabric alert {fab[0][0]} at t={at:.0f}s, expected fabric=network within {t0}-{t1}s")
        self.fabric_at = fab[0][1] if fab else None
        rule = f'ncclinsp_job_fabric:bus_bandwidth_gbs:rate1m{{job_id="{self.job}"}}'
        before = {(m["fabric"], m["collective"], m["message_size"]): v for m, v in self.q(rule, t0 - 1)}
        during = {(m["fabric"], m["collective"], m["message_size"]): v for m, v in self.q(rule, t1 - 1)}
        nv = [k for k in before if k[0] == "nvlink" and math.isfinite(before[k])]
        if not nv:
            self.fail("no NVLink-only fabric series")
        for k in nv:
            r = during.get(k, float("nan")) / before[k]
            if not abs(r - 1) < 0.05:
                self.fail(f"NVLink-only {k} moved: {before[k]:.1f} -> {during.get(k)} GB/s")
        key = next((k for k in before if k[:2] == ("network", "AllGather")), None)
        if key is None or key not in during:
            self.fail(f"no network AllGather fabric series: {sorted(before)}")
        else:
            r = during[key] / before[key]
            log(f"scenario 1: network AllGather {before[key]:.1f} -> {during[key]:.1f} GB/s ({r:.0%}); "
                "NVLink-only: " + ", ".join(f"{k[1]} {k[2]} {before[k]:.0f}->{during.get(k, float('nan')):.0f}"
                                            for k in sorted(nv)))
            if not abs(r - (1 - pct / 100)) < 0.08:
                self.fail(f"network AllGather ratio {r:.2f}, expected ~{1 - pct / 100:.2f}")
        self.check_throughput()

    def check_throughput(self):
        """Step throughput (median over ranks) at the end of every phase of the summary."""
        out = []
        for ph in self.summary["phases"]:
            if ph["t1"] - ph["t0"] < 10:
                continue
            t = ph["t1"] - 1
            v = self.q("quantile(0.5, ncclinsp_sim_step_tflops)", t)
            if not v:
                self.fail(f"no ncclinsp_sim_step_tflops at t={t}")
                continue
            out.append(f"{ph['t0']:g}-{ph['t1']:g}s {ph['faults']}: {v[0][1]:.0f} (model {ph['tflops']:.0f})")
            if not abs(v[0][1] / ph["tflops"] - 1) < 0.03:
                self.fail(f"throughput {v[0][1]:.0f} TFLOP/s at t={t}, model {ph['tflops']:.0f} ({ph['faults']})")
        log("step throughput, TFLOP/s per GPU: " + "; ".join(out))

    # -- 5. scenario 2 --------------------------------------------------------------------------
    def check_attribution(self):
        slow_node = f"node{SLOW[0]}"
        dash = P.load_dashboard(os.path.join(P.REPO, "grafana", "ncclinsp.json"))
        table = next(t for p, t in P.iter_targets(dash) if p.get("type") == "table")
        expr = P.substitute(table["expr"], {"job": [self.job], "node": self.nodes}, rate_interval="1m")
        rows = [(m, v) for m, v in self.q(expr, ATTRIB_AT) if math.isfinite(v)]
        if not rows:
            self.fail("attribution table empty")
            return
        low = [(m.get("node"), m.get("comm_name"), m.get("collective"), round(v, 3)) for m, v in rows if v < 0.97]
        if low:
            self.fail(f"attribution: hosts below 97% of the job median on kernel time (coupled ranks slow "
                      f"together, so none may be): {low}")
        rs = {m["node"]: v for m, v in rows if m.get("collective") == "ReduceScatter" and m.get("n_nodes") != "1"}
        if len(rs) != len(self.nodes) or max(rs.values()) - min(rs.values()) > 0.03:
            self.fail(f"attribution: ReduceScatter (network) per host differs: {rs}")
        # ...while every host's network bandwidth is down alike (the window at ATTRIB_AT holds ~30 s of the
        # 50 % fabric degradation and ~30 s of the slow host at 75 %, so between those against healthy t=28).
        sel = f'ncclinsp:bus_bandwidth_gbs:rate1m{{job_id="{self.job}",n_nodes!="1",collective="ReduceScatter"}}'
        healthy = {m.get("node", "job"): v for m, v in self.q(sel, 28)}
        during = {m.get("node", "job"): v for m, v in self.q(sel, ATTRIB_AT)}
        ratios = {k: during[k] / v for k, v in healthy.items() if k in during and v > 0}
        if not ratios or any(not 0.5 < r < 0.8 for r in ratios.values()) or max(ratios.values()) - min(ratios.values()) > 0.03:
            self.fail(f"slow host: network ReduceScatter bandwidth at t={ATTRIB_AT}s vs healthy {ratios}, expected "
                      f"every host alike between 0.5 and 0.8")
        log(f"scenario 2: no host singled out on kernel time at t={ATTRIB_AT}s (ReduceScatter per host: "
            + ", ".join(f"{k} {v:.0%}" for k, v in sorted(rs.items())) + f"); {slow_node}'s slow NICs pace every "
            f"rank: network ReduceScatter vs healthy {', '.join(f'{k} {v:.2f}' for k, v in sorted(ratios.items()))}")

    # -- 6. hang --------------------------------------------------------------------------------
    def check_hang(self, t_end):
        job = self.job + "-hang"
        fired = self.prom.firing("NcclinspAllRanksStuck", self.T(0), t_end, job_id=job)
        if not fired:
            self.fail("NcclinspAllRanksStuck did not fire")
            return
        at = fired[0][1]
        ages = self.prom.values(f'ncclinsp_oldest_inflight_age_seconds{{slurm_job_id="{job}"}} > 30', at=at)
        hung = {(m["node"], m["gpu"], m["comm_name"], m["comm_hash"]) for m, _ in ages}
        # The hung rank (GPU1) and its peer (GPU0), blocked in the same op of one communicator.
        want_gpus = {("node0", f"GPU{g}") for g in range(HANG_GPUS)}
        if {(h[0], h[1]) for h in hung} != want_gpus or len({h[3] for h in hung}) != 1:
            self.fail(f"hung ops at t={at - self.t0:.0f}s on {sorted(hung)}, expected every GPU of {sorted(want_gpus)} "
                      f"in one communicator")
        want = {(h[0], h[2], h[3], "primary") for h in hung}
        got = {(m.get("node"), m["comm_name"], m["comm_hash"], m.get("role")) for m, _, _ in fired}
        if got != want:
            self.fail(f"NcclinspAllRanksStuck fired for {sorted(got)}, expected {sorted(want)}")
        self.hang_at = at
        self.hung_comms = {(g[0], g[1]) for g in got}
        log(f"hang: NcclinspAllRanksStuck fired at t={at - self.t0:.0f}s for {sorted(got)} "
            f"(rank {HANG_RANK} hung at t={HANG_AT}s; its peer blocked in the same op: {sorted(hung)})")
        if not HANG_AT + 60 < at - self.t0 < HANG_AT + 60 + 10 + 20:
            self.fail(f"hang alert at t={at - self.t0:.0f}s, expected ~{HANG_AT + 70}s")
        for name in ("NcclinspAllRanksStuck", "NcclinspRankNeverJoined", "NcclinspRankProcessGone",
                     "NcclinspCollectiveHung"):
            quiet = self.prom.firing(name, self.T(0), t_end, job_id=self.job)
            if quiet:
                self.fail(f"{name} fired for the healthy job: {quiet[:2]}")

    # -- 7. finished job --------------------------------------------------------------------------
    def check_final(self, n_files):
        sel = f'ncclinsp_info{{slurm_job_id="{self.job}",final="1"}}'
        try:
            self.prom.wait_for_series(sel, timeout=15, min_results=n_files)
        except TimeoutError as e:
            self.fail(f"final files: {e}")
            return
        ab = self.prom.values(f'sum(ncclinsp_abandoned_ops_total{{slurm_job_id="{self.job}-hang"}})')
        if not ab or ab[0][1] < HANG_GPUS:
            self.fail(f"the hung op was not counted as abandoned on every blocked rank at teardown: {ab}")
        rules = {r["name"]: r for g in self.prom.rules() for r in g["rules"] if r.get("type") == "alerting"}
        now = time.time()
        for name, later, bare in (
                ("NcclinspExporterStale", 90, f'time() - ncclinsp_export_timestamp_seconds{{slurm_job_id="{self.job}"}} > 60'),
                ("NcclinspTextfileStale", 150, 'time() - node_textfile_mtime_seconds{file=~"(.*/)?nccl_inspector_metrics_[^/]*[.]prom"} > 120')):
            r = rules.get(name)
            if not r:
                self.fail(f"rule {name} not loaded")
                continue
            # VictoriaMetrics makes the final="1" series (new at the last export) searchable only
            # seconds after its first sample: give the index up to 20 s (Prometheus: at once).
            deadline = time.time() + 20
            while True:
                mine = [m for m, _ in self.prom.values(r["query"], at=now + later)
                        if m.get("job_id", self.job) == self.job]
                if not mine or time.time() > deadline:
                    break
                time.sleep(1)
            control = self.prom.values(bare, at=now + later)
            if mine:
                self.fail(f"{name} would fire {later}s after the job ended for finished files: {mine[:2]}")
            if len(control) < n_files:
                self.fail(f"control: bare staleness condition of {name} found {len(control)} files, expected {n_files}")
        log(f"finished job: {n_files} files final=\"1\"; stale alerts stay quiet 90/150 s later "
            f"(bare age condition would fire for all of them)")

    def check_other_alerts(self, t_end):
        allowed = {"NcclinspBusBandwidthDegraded", "NcclinspAllRanksStuck", "NcclinspHostBelowJobMedian",
                   "NcclinspNetworkFabricDegraded", "NcclinspHostNetworkSlow"}
        seen = {}
        for m, pts in self.prom.range_values('ALERTS{alertstate="firing"}', self.T(0), t_end, step=1):
            seen.setdefault(m["alertname"], m)
        extra = set(seen) - allowed
        if extra:
            self.fail(f"unexpected alerts fired: {[seen[x] for x in extra]}")
        log(f"alerts that fired: {sorted(seen)}")


    # -- 9. Alertmanager ------------------------------------------------------------------------
    def check_notifications(self, hook, backend):
        """What the on-call person got from this backend's Alertmanager (webhook paths
        /<backend>/page and /<backend>/ticket, see scripts/stack.sh --webhook)."""
        runbooks = {r["name"]: r.get("annotations", {}).get("runbook_url")
                    for g in self.prom.rules() for r in g["rules"] if r.get("type") == "alerting"}
        # group_wait is 1m (10 s for pages) after the first alert of a group reaches Alertmanager.
        fab, hang = getattr(self, "fabric_at", None), getattr(self, "hang_at", None)
        deadline = max([t + 75 for t in (fab, hang) if t] or [0])

        def mine():
            return [(path, d) for _, path, d in hook.notifications(f"/{backend}/", "firing")
                    if d.get("groupLabels", {}).get("job_id") in (self.job, self.job + "-hang")]
        while time.time() < deadline and not {"NcclinspNetworkFabricDegraded", "NcclinspAllRanksStuck"} <= \
                {d["groupLabels"].get("alertname") for _, d in mine()}:
            time.sleep(1)
        got = mine()
        for path, d in got:
            log(f"notification {path}: {d['groupLabels'].get('alertname')} x{len(d['alerts'])}: "
                + "; ".join(a["annotations"].get("summary", "") for a in d["alerts"][:2]))
        names = [(path.rsplit("/", 1)[-1], d["groupLabels"].get("alertname")) for path, d in got]
        # One page (the hang) and one ticket for scenario 1 (the fabric alert, which inhibits the
        # per-collective alerts). In this short job the in-process detector fires ~60 s before
        # the PromQL baseline exists, so its own per-collective ticket may precede the fabric
        # verdict: at most one such ticket. A slow host with 2 nodes moves the median (= mean),
        # so scenario 2 stays inside the fabric alert: no host ticket.
        if names.count(("page", "NcclinspAllRanksStuck")) != (1 if hang else 0):
            self.fail(f"page notifications {names}: expected one for the hang")
        # VictoriaMetrics' fabric alert fires ~30 s later on a fresh job (new-series latency, see
        # docs/scale.md) and, in a job this short, the 10m baseline has absorbed the degraded level
        # ~60 s later: it may end before its group_wait, leaving the per-collective ticket as the
        # one notification of scenario 1. Prometheus must deliver the fabric ticket.
        n_fab = names.count(("ticket", "NcclinspNetworkFabricDegraded"))
        n_coll = names.count(("ticket", "NcclinspBusBandwidthDegraded"))
        if backend == "prometheus" and n_fab != (1 if fab else 0):
            self.fail(f"ticket notifications {names}: expected one NcclinspNetworkFabricDegraded")
        if n_fab > 1 or n_coll > 1 or n_fab + n_coll == 0:
            self.fail(f"ticket notifications {names}: expected one ticket for the fabric (at most one earlier "
                      "per-collective ticket)")
        extra = [n for n in names if n[1] not in ("NcclinspAllRanksStuck", "NcclinspNetworkFabricDegraded",
                                                   "NcclinspBusBandwidthDegraded")]
        if extra:
            self.fail(f"unexpected notifications {extra}")
        for path, d in got:
            name = d["groupLabels"].get("alertname")
            if not runbooks.get(name) or d["commonAnnotations"].get("runbook_url") != runbooks.get(name):
                self.fail(f"{name}: runbook_url in the notification {d['commonAnnotations'].get('runbook_url')!r}")
            if name == "NcclinspAllRanksStuck":
                comms = {(a["labels"].get("node"), a["labels"].get("comm_name")) for a in d["alerts"]}
                if comms != getattr(self, "hung_comms", None):
                    self.fail(f"page names {sorted(comms)}, the hang alert fired for {getattr(self, 'hung_comms', None)}")
            if name == "NcclinspNetworkFabricDegraded":
                s = d["alerts"][0]["annotations"].get("summary", "")
                if f"job {self.job}" not in s or "network collectives" not in s:
                    self.fail(f"fabric notification text: {s!r}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--plugin", required=True)
    ap.add_argument("--sim", required=True)
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--gpus", type=int, default=4)
    ap.add_argument("--backend", choices=("prometheus", "victoriametrics", "both"), default="both")
    ap.add_argument("--root", help="work dir (default: a temp dir, removed on success)")
    ap.add_argument("--keep", action="store_true", help="keep the work dir")
    a = ap.parse_args()
    if a.nodes < 2 or a.gpus < 2:
        ap.error("needs at least 2 nodes x 2 GPUs")
    if (rc := P.missing_inputs(a.backend, [a.plugin, a.sim])) is not None:
        return rc
    t_start = time.monotonic()
    root = a.root or tempfile.mkdtemp(prefix="ncclinsp-e2e-")
    os.makedirs(root, exist_ok=True)
    nodes = [f"node{k}" for k in range(a.nodes)]
    job = f"e2e-{os.getpid()}"
    failures = Failures()
    sim = hang_sim = None
    hook = P.Webhook()
    try:
        with P.stack(root, nodes, scrape=SCRAPE_INTERVAL, extra_args=["--backend", a.backend, "--webhook", hook.url]):
            backends = P.backends(root)
            log(f"stack up: {', '.join(f'{k} at {v.url}' for k, v in backends.items())} "
                f"({len(nodes)} node_exporters, root {root})")
            env = dict(os.environ, SLURM_JOB_ID=job, NCCLINSP_LABELS=",".join(f"{k}={v}" for k, v in USER.items()),
                       NCCL_INSPECTOR_ENABLE="1", NCCL_INSPECTOR_PROM_DUMP="1", NCCLINSP_PROXY="1",
                       NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS="1000000")
            summary_path = os.path.join(root, "summary.json")
            cmd = [a.sim, "--plugin", a.plugin, "--nodes", str(a.nodes), "--gpus", str(a.gpus),
                   "--duration", str(DURATION), "--speed", "1", "--out", root, "--prom",
                   "--summary", summary_path,
                   "--net-degrade", f"{NET[2]}@{NET[0]}-{NET[1]}",
                   "--slow-host", f"{SLOW[0]}:{SLOW[3]}@{SLOW[1]}-{SLOW[2]}"]
            log("simulator: " + " ".join(cmd[1:]))
            # The hang job: its own SLURM job on node0's exporter (no --out: the plugin writes to the dump dir
            # given here; no simulator .prom), another seed so its communicator hashes differ.
            hang_env = dict(env, SLURM_JOB_ID=job + "-hang", NCCL_INSPECTOR_DUMP_DIR=os.path.join(root, "node0"))
            hang_cmd = [a.sim, "--plugin", a.plugin, "--nodes", "1", "--gpus", str(HANG_GPUS), "--seed", "2",
                        "--duration", str(DURATION), "--speed", "1", "--prom", "--hang-rank", f"{HANG_RANK}@{HANG_AT}"]
            log("hang job: " + " ".join(hang_cmd[1:]))
            with open(os.path.join(root, "logs", "sim.log"), "w") as lf, \
                    open(os.path.join(root, "logs", "sim-hang.log"), "w") as hf:
                t0 = time.time() + 0.3  # the simulator starts its nodes 300 ms after launch
                sim = subprocess.Popen(cmd, env=env, stdout=lf, stderr=subprocess.STDOUT, start_new_session=True)
                hang_sim = subprocess.Popen(hang_cmd, env=hang_env, stdout=hf, stderr=subprocess.STDOUT,
                                            start_new_session=True)
                last = -30
                while sim.poll() is None or hang_sim.poll() is None:
                    el = time.time() - t0
                    if el - last >= 30:
                        last = el
                        log(f"job running, t={el:.0f}s of {DURATION}s")
                    if el > DURATION + 60:
                        raise TimeoutError("simulator did not finish")
                    time.sleep(0.5)
            if sim.returncode != 0:
                failures(f"simulator exited with {sim.returncode} (see {root}/logs/sim.log)")
            if hang_sim.returncode != 0:
                failures(f"hang simulator exited with {hang_sim.returncode} (see {root}/logs/sim-hang.log)")
            t_end = time.time()
            log(f"job finished after {t_end - t0:.0f}s")
            with open(summary_path) as f:
                summary = json.load(f)
            runs = []
            for name, prom in backends.items():
                log(f"== checks against {name} ({prom.url})")
                r = Run(a, prom, job, t0, summary)
                r.fail = lambda msg, name=name: failures(f"[{name}] {msg}")
                tg = prom.targets()
                if len(tg) != a.nodes or any(x["health"] != "up" for x in tg):
                    r.fail(f"targets: {[(x['labels'], x['health']) for x in tg]}")
                r.log_scrape_health(t_end)
                r.check_families(25)
                r.check_model_bandwidth(28)
                r.check_dashboards(t_end)
                r.check_net_degrade(t_end)
                r.check_attribution()
                r.check_hang(t_end)
                runs.append((name, r))
            for name, r in runs:  # after the live checks: these wait for the final files/notifications
                log(f"== final files, alerts and notifications: {name}")
                r.check_final(a.nodes * a.gpus)
                r.check_other_alerts(time.time())
                r.check_notifications(hook, name)
    except (TimeoutError, RuntimeError, P.PromError, OSError, ValueError, KeyError) as e:
        failures(f"{type(e).__name__}: {e}")
    finally:
        hook.close()
        for p in (sim, hang_sim):
            if p is not None and p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)  # our own session: the simulator and its node processes
                p.wait()
    return P.finish("e2e", failures, root, t_start, keep=a.keep or bool(a.root))


if __name__ == "__main__":
    sys.exit(main())
