#!/usr/bin/env python3
"""Stack smoke test: synthetic .prom files -> node_exporter x2 -> Prometheus -> rules/dashboards.

1. Writes a synthetic, docs/metrics.md-conformant `nccl_inspector_metrics_<uuid>.prom` (plus the
   simulator's `ncclinsp_sim.prom`) into two node directories, rewriting them atomically every
   0.5 s with growing counters (node1 runs at 80% of node0's bandwidth).
2. Validates one rendering with `promtool check metrics` (when promtool exists).
3. Starts scripts/stack.sh (1 s scrape), waits for two scrapes and rule evaluations.
4. Checks through the HTTP API: targets up; series carry the documented labels plus
   job/instance/node_instance, `node` is not renamed to exported_node; the recording rules
   produce data; every panel query of both dashboards (variables = `.*`, $__rate_interval = 1m)
   returns finite data; the per-host ratio names node1.
5. Stops the stack (always). Bounded: gives up after --budget seconds (default 55).

Exit codes: 0 pass, 1 fail, 77 skipped (binaries missing).
"""
import argparse
import math
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import promapi as P  # noqa: E402

SKIP = 77
JOB = "4242"
NODES = ["node0", "node1"]
LE = ["1e-05", "2.5e-05", "5e-05", "0.0001", "0.00025", "0.0005", "0.001", "0.0025", "0.005", "0.01",
      "0.025", "0.05", "0.1", "0.25", "0.5", "1", "2.5", "5", "10", "+Inf"]
COLLS = ["AllReduce", "AllGather", "ReduceScatter", "Broadcast", "Reduce", "AlltoAll"]
# (comm_name, comm_hash, nranks, n_nodes)
COMMS = [("tp", "1a2b3c4d5e6f7081", 2, 1), ("dp", "9f8e7d6c5b4a3921", 2, 2)]
OP_LABELS = ["job_id", "slurm_job_id", "node", "gpu", "uuid", "comm_name", "comm_hash", "rank", "nranks",
             "n_nodes", "collective", "message_size", "algo_proto"]
SCRAPE_LABELS = {"job", "instance", "node_instance"}


def esc(v):
    return str(v).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def lab(d):
    return "{" + ",".join(f'{k}="{esc(v)}"' for k, v in d.items()) + "}"


def render(node, idx, t, speed, degrade_at=None, degrade=1.0, hang_at=None):
    """One GPU's .prom text at elapsed time t (s). speed scales bandwidth (node1 slower).

    degrade_at/degrade: from t=degrade_at on, AllGather on the n_nodes>1 comm runs at `degrade` x
    its bandwidth (counters stay monotonic). hang_at: from then on, the n_nodes>1 comm has an op
    in flight that never completes (oldest_inflight_age_seconds grows)."""
    uuid = f"GPU-0000000{idx}-1111-2222-3333-44444444444{idx}"
    ident = {"job_id": JOB, "slurm_job_id": JOB, "node": node, "gpu": "GPU0", "uuid": uuid}
    fam = {}  # name -> (type, help, [lines])

    def add(name, typ, help_, labels, value):
        fam.setdefault(name, (typ, help_, []))[2].append(f"{name}{lab(labels)} {value:.10g}")

    for comm, chash, nranks, n_nodes in COMMS:
        rank = idx if n_nodes > 1 else 0
        base = 300e9 if n_nodes == 1 else 40e9 * speed  # bus bytes per busy second
        ops_per_s = 50.0
        comm_l = dict(ident, comm_name=comm, comm_hash=chash, rank=rank, nranks=nranks, n_nodes=n_nodes)
        for coll in COLLS + ["Send", "Recv"]:
            size = "16MiB-32MiB"
            ap = "none" if coll in ("Send", "Recv") else "RING_SIMPLE"
            op_l = dict(comm_l, collective=coll, message_size=size, algo_proto=ap)
            ops = ops_per_s * t
            msg = 24 * 2**20
            busy = ops * (msg * 1.5 / base)  # each op moves ~1.5x msg bus bytes
            if degrade_at is not None and n_nodes > 1 and coll == "AllGather" and t > degrade_at:
                busy += ops_per_s * (t - degrade_at) * (msg * 1.5 / base) * (1.0 / degrade - 1.0)
            add("ncclinsp_ops_total", "counter", "Completed ops.", op_l, ops)
            add("ncclinsp_bytes_total", "counter", "Message bytes.", op_l, ops * msg)
            add("ncclinsp_bus_bytes_total", "counter", "Bus bytes.", op_l, ops * msg * 1.5)
            add("ncclinsp_busy_seconds_total", "counter", "Sum of op durations.", op_l, busy)
            dur = busy / ops if ops else 0.001
            cum = 0.0
            for le in LE:
                if le == "+Inf" or float(le) >= dur:
                    cum = ops
                elif float(le) >= dur / 2:
                    cum = ops * 0.3
                add("ncclinsp_op_duration_seconds_bucket", "histogram", "Op duration.", dict(op_l, le=le), cum)
            add("ncclinsp_op_duration_seconds_sum", "histogram", "Op duration.", op_l, busy)
            add("ncclinsp_op_duration_seconds_count", "histogram", "Op duration.", op_l, ops)
            if coll in ("Send", "Recv"):
                il = {"version": "v5.1", "slurm_job_id": JOB, "node": node, "gpu": "GPU0", "comm_name": comm,
                      "n_nodes": n_nodes, "nranks": nranks, "p2p_operation": coll, "message_size": "24-25MB",
                      "uuid": uuid, "job_id": JOB}
                add("nccl_p2p_bus_bandwidth_gbs", "gauge", "Window geomean busbw (GB/s).", il, base / 1e9)
                add("nccl_p2p_exec_time_microseconds", "gauge", "Window mean exec time (us).", il, dur * 1e6)
            else:
                il = {"version": "v5.1", "slurm_job_id": JOB, "node": node, "gpu": "GPU0", "comm_name": comm,
                      "n_nodes": n_nodes, "nranks": nranks, "collective": coll, "message_size": "24-25MB",
                      "algo_proto": ap, "uuid": uuid, "job_id": JOB}
                add("nccl_bus_bandwidth_gbs", "gauge", "Window geomean busbw (GB/s).", il, base / 1e9)
                add("nccl_collective_exec_time_microseconds", "gauge", "Window mean exec time (us).", il, dur * 1e6)
        # In-process detector gauges (per comm x collective x size) and sampled proxy accounting
        # (NCCLINSP_PROXY=1: network comms only, per peer and direction).
        for coll in COLLS:
            dl = dict(comm_l, collective=coll, message_size="16MiB-32MiB")
            slow = degrade_at is not None and n_nodes > 1 and coll == "AllGather" and t > degrade_at
            add("ncclinsp_busbw_ratio_to_baseline", "gauge", "Recent / baseline busbw.", dl, degrade if slow else 1.0)
            add("ncclinsp_busbw_degraded", "gauge", "1 while degraded.", dl, 1 if slow else 0)
            # Short drops (congestion bursts): one every 2 s, 12% deep on average.
            add("ncclinsp_busbw_transients_total", "counter", "Transient degradations.", dl, int(t / 2))
            add("ncclinsp_busbw_transient_depth_total", "counter", "Depth sum of transients.", dl, 0.12 * int(t / 2))
        if n_nodes > 1:
            peer = 1 - rank
            for direction, states in (("send", ("gpu", "peer_credit", "network")), ("recv", ("network", "flush", "gpu"))):
                pl = dict(comm_l, peer=peer, direction=direction)
                for k, st in enumerate(states):
                    # node1's sends wait on the network longer (its links are slower)
                    w = t * 0.01 * (k + 1) * (1.0 / speed if (direction, st) == ("send", "network") else 1.0)
                    add("ncclinsp_proxy_wait_seconds_total", "counter", "Sampled proxy step wait.", dict(pl, state=st), w)
                add("ncclinsp_proxy_bytes_total", "counter", "Sampled proxy bytes.", pl, t * 1e8)
                add("ncclinsp_proxy_steps_total", "counter", "Sampled proxy steps.", pl, int(t * 100))
        add("ncclinsp_inflight_ops", "gauge", "In-flight ops.", comm_l, 1)
        hung = hang_at is not None and n_nodes > 1 and t > hang_at
        add("ncclinsp_oldest_inflight_age_seconds", "gauge", "Oldest in-flight op age.", comm_l,
            (t - hang_at) if hung else 0.002)
        add("ncclinsp_seconds_since_last_completion", "gauge", "Since last completion.", comm_l, 0.01)
        add("ncclinsp_last_completed_seq", "gauge", "Last completed seq.", dict(comm_l, collective="AllReduce"),
            int(50 * t))
        add("ncclinsp_invalid_ops_total", "counter", "Invalid ops.", comm_l, int(t))
        add("ncclinsp_abandoned_ops_total", "counter", "Abandoned ops.", comm_l, 0)
    add("ncclinsp_dropped_events_total", "counter", "Dropped events.", dict(ident, reason="op_pool_full"), 0)
    add("ncclinsp_dropped_events_total", "counter", "Dropped events.", dict(ident, reason="record_ring_full"), 0)
    add("ncclinsp_filtered_ops_total", "counter", "Filtered ops.", dict(ident, reason="min_size"), int(10 * t))
    add("ncclinsp_export_timestamp_seconds", "gauge", "Last rewrite.", ident, time.time())
    add("ncclinsp_info", "gauge", "Build info.", dict(ident, version="0.1.0", abi="v7"), 1)

    out = []
    for name, (typ, help_, lines) in fam.items():
        if name.endswith(("_bucket", "_sum", "_count")) and typ == "histogram":
            base_name = name.rsplit("_", 1)[0]
            if name.endswith("_bucket"):
                out.append(f"# HELP {base_name} {help_}\n# TYPE {base_name} histogram")
        else:
            out.append(f"# HELP {name} {help_}\n# TYPE {name} {typ}")
        out.extend(lines)
    return "\n".join(out) + "\n", uuid


def render_sim(node, t, tflops):
    return ("# HELP ncclinsp_sim_step_tflops Simulated framework step throughput per GPU.\n"
            "# TYPE ncclinsp_sim_step_tflops gauge\n"
            f'ncclinsp_sim_step_tflops{{node="{node}",rank="0"}} {tflops}\n'
            "# HELP ncclinsp_sim_steps_total Simulated training steps.\n"
            "# TYPE ncclinsp_sim_steps_total counter\n"
            f'ncclinsp_sim_steps_total{{node="{node}",rank="0"}} {int(2 * t)}\n')


def write_atomic(path, text):
    tmp = path + ".tmp"  # not *.prom: node_exporter ignores it
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


class Writer(threading.Thread):
    def __init__(self, root, period=0.5, **scenario):
        super().__init__(daemon=True)
        self.root, self.period, self.scenario = root, period, scenario
        self.stop_ev = threading.Event()
        self.t0 = time.monotonic() - 30  # counters start "30 s into the job"
        self.error = None

    def write_once(self):
        t = time.monotonic() - self.t0
        for i, node in enumerate(NODES):
            text, uuid = render(node, i, t, 1.0 if i == 0 else 0.8, **self.scenario)
            write_atomic(os.path.join(self.root, node, f"nccl_inspector_metrics_{uuid}.prom"), text)
            write_atomic(os.path.join(self.root, node, "ncclinsp_sim.prom"),
                         render_sim(node, t, 310.0 if i == 0 else 300.0))

    def run(self):
        try:
            while not self.stop_ev.wait(self.period):
                self.write_once()
        except Exception as e:  # surfaced by the main thread
            self.error = e


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", help="work dir (default: a fresh temp dir, removed on success)")
    ap.add_argument("--budget", type=float, default=55.0)
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()
    t_start = time.monotonic()
    for env, b in (("PROMETHEUS_BIN", "/usr/bin/prometheus"),
                   ("NODE_EXPORTER_BIN", "/usr/bin/prometheus-node-exporter")):
        b = os.environ.get(env, b)
        if not os.access(b, os.X_OK):
            print(f"SKIP: {b} not installed")
            return SKIP
    root = a.root or tempfile.mkdtemp(prefix="ncclinsp-smoke-")
    for n in NODES:
        os.makedirs(os.path.join(root, n), exist_ok=True)
    failures = []

    def fail(msg):
        failures.append(msg)
        print("FAIL:", msg)

    def left():
        return max(1.0, a.budget - (time.monotonic() - t_start))

    w = Writer(root)
    w.write_once()
    promtool = shutil.which("promtool")
    if promtool:
        f = next(x for x in os.listdir(os.path.join(root, "node0")) if x.startswith("nccl_inspector_metrics_"))
        p = subprocess.run([promtool, "check", "metrics"], input=open(os.path.join(root, "node0", f)).read(),
                           text=True, capture_output=True, timeout=10)
        # Inspector's compat family names end in _microseconds; promtool's lint flags that
        # (expected: the names are fixed by Inspector). Anything else is a fixture bug.
        findings = [ln for ln in (p.stdout + p.stderr).splitlines()
                    if ln.strip() and not ln.startswith(("nccl_collective_exec_time_microseconds use base unit",
                                                         "nccl_p2p_exec_time_microseconds use base unit"))]
        if findings:
            fail("promtool check metrics on fixture: " + "; ".join(findings))
    w.start()
    try:
        with P.stack(root, NODES, scrape="1s", timeout=min(30, left())) as prom:
            print(f"stack up at {prom.url} after {time.monotonic() - t_start:.1f}s")
            # Enough scrapes for rate(): wait for a recording rule built on rate() to have data.
            prom.wait_for_series("ncclinsp:bus_bandwidth_gbs:rate1m", timeout=min(25, left()), min_results=4)
            # ... including both nodes' dp AllGather rows checked below (on a loaded machine the
            # rule may have evaluated before a node's second scrape).
            prom.wait_for_series('ncclinsp:bus_bandwidth_gbs:rate1m{comm_name="dp", collective="AllGather"}',
                                 timeout=min(15, left()), min_results=2)
            print(f"rates available after {time.monotonic() - t_start:.1f}s")

            # Targets and labels.
            tg = prom.targets()
            if sorted(t["labels"].get("node_instance") for t in tg) != NODES or any(t["health"] != "up" for t in tg):
                fail(f"targets: {[(t['labels'], t['health']) for t in tg]}")
            for lbls, _ in prom.values(f'ncclinsp_ops_total{{slurm_job_id="{JOB}"}}'):
                got = set(lbls) - {"__name__"}
                want = set(OP_LABELS) | SCRAPE_LABELS
                if got != want:
                    fail(f"ncclinsp_ops_total labels {sorted(got)} != {sorted(want)}")
                    break
                if lbls["node"] != lbls["node_instance"]:
                    fail(f"node {lbls['node']} scraped from node_instance {lbls['node_instance']}")
                    break
            if prom.query('{__name__=~"ncclinsp_.*|nccl_.*", exported_node!=""}'):
                fail("some series got exported_node (label clash with target labels)")
            nodes = sorted({l["node"] for l, _ in prom.values("ncclinsp_info")})
            if nodes != NODES:
                fail(f"ncclinsp_info nodes {nodes}")
            compat = prom.values('nccl_bus_bandwidth_gbs{collective="AllReduce", n_nodes="1"}')
            if not compat or set(compat[0][0]) - {"__name__"} != {"version", "slurm_job_id", "node", "gpu",
                                                                 "comm_name", "n_nodes", "nranks", "collective",
                                                                 "message_size", "algo_proto", "uuid", "job_id"} | SCRAPE_LABELS:
                fail(f"compat labels: {compat[:1]}")

            # Recording rules (those without an offset/baseline window).
            for rec in ["ncclinsp:bus_bandwidth_gbs:rate1m", "ncclinsp_job:bus_bandwidth_gbs:rate1m",
                        "ncclinsp_job_fabric:bus_bandwidth_gbs:rate1m",
                        "ncclinsp_job:bus_bandwidth_gbs:median_over_nodes_rate1m",
                        "ncclinsp:bus_bandwidth_gbs:ratio_to_job_median", "ncclinsp_job:ops:rate1m",
                        "ncclinsp_job:op_duration_seconds:p99_1m"]:
                try:
                    prom.wait_for_series(rec, timeout=min(5, left()))
                except TimeoutError as e:
                    fail(str(e))
            fab = {l["fabric"] for l, _ in prom.values("ncclinsp_job_fabric:bus_bandwidth_gbs:rate1m")}
            if fab != {"nvlink", "network"}:
                fail(f"fabric split: {fab}")
            bw = {(l["node"], l["comm_name"], l["collective"]): v
                  for l, v in prom.values('ncclinsp:bus_bandwidth_gbs:rate1m')}
            v0 = bw.get(("node0", "dp", "AllGather"))
            if v0 is None or not 39 < v0 < 41:
                fail(f"node0 dp AllGather bus bandwidth {v0} GB/s, expected 40")

            # Every dashboard panel query returns finite data.
            repo = P.REPO
            n_ok = 0
            for d in ("ncclinsp.json", "inspector-compat.json"):
                for r in P.check_dashboard(prom, os.path.join(repo, "grafana", d), rate_interval="1m"):
                    if r.ok:
                        n_ok += 1
                    else:
                        fail(f"{d} panel {r.panel!r} {r.ref}: n={r.n} finite={r.finite} {r.error}\n    {r.expr}")
            print(f"{n_ok} dashboard queries returned data")
            # Concrete variable values too (multi-value -> regex alternation).
            for r in P.check_dashboard(prom, os.path.join(repo, "grafana", "ncclinsp.json"),
                                       {"job": [JOB], "node": NODES, "comm_name": ["dp", "tp"],
                                        "collective": ["AllGather", "Send"]}):
                if not r.ok:
                    fail(f"ncclinsp.json with concrete vars, panel {r.panel!r} {r.ref}: n={r.n} {r.error}")

            # Attribution: node1 (80%) is the lowest host and below the 0.85 threshold on dp.
            d = P.load_dashboard(os.path.join(repo, "grafana", "ncclinsp.json"))
            table = next(t for p, t in P.iter_targets(d) if p["type"] == "table")
            # Both nodes need two scrapes before their rates (and the median) exist: poll briefly.
            deadline = time.monotonic() + 20
            while True:
                rows = prom.values(P.substitute(table["expr"], rate_interval="1m"))
                if rows and rows[0][0].get("node") == "node1" and rows[0][1] < 0.95:
                    break
                if time.monotonic() > deadline:
                    fail(f"attribution table first row: {rows[:1]}")
                    break
                time.sleep(0.5)
            if w.error:
                fail(f"fixture writer: {w.error!r}")
    except (TimeoutError, RuntimeError, P.PromError, OSError) as e:
        fail(f"{type(e).__name__}: {e}")
    finally:
        w.stop_ev.set()
        w.join(timeout=2)
    return P.finish("stack_smoke", failures, root, t_start, keep=a.keep or bool(a.root))


if __name__ == "__main__":
    sys.exit(main())
