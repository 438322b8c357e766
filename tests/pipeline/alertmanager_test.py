#!/usr/bin/env python3
"""What an on-call person receives: the shipped prometheus/alertmanager.example.yml in a real
Alertmanager, a local webhook receiver, and the alerts each demo scenario makes the rules fire
(sent the way Prometheus and vmalert send them: POST /api/v2/alerts).

The alert label sets are the rules' own (labels of each alert's `by` clause, from
prometheus/rules/ncclinsp.rules.yml) for the demo's job: 4 nodes x 4 GPUs, communicators tp
(NVLink only), fsdp (all 16 ranks), dp0-3 and pp0-3 (one rank per node). Static labels and
annotations come from the rules file too, so the runbook_url checked here is the one Prometheus
sends. The job key is `job_id`.

Scenarios (one job id each, all sent at once, as they fire within seconds of each other):
  1. network degradation: 14 NcclinspBusBandwidthDegraded (fsdp AllGather/ReduceScatter,
     dp0-3 AllReduce, pp0-3 Send/Recv), the same 14 from the in-process detector, and
     NcclinspNetworkFabricDegraded -> one ticket: the fabric alert; the 28 others are inhibited.
  2. slow host node1: NcclinspHostBelowJobMedian for node1 on every network communicator it is
     in + NcclinspBusBandwidthDegraded for the job's collectives it drags down
     -> one ticket naming node1; the job-level alerts are inhibited.
  3. hang: global rank 5 (node1 GPU1) never joins dp1: NcclinspRankNeverJoined (critical and
     its earlier warning, role=primary) on dp1, its secondary on fsdp (warning), the per-node
     NcclinspCollectiveHung of the three waiting nodes and the bandwidth alert of dp1
     -> one page naming rank 5 on dp1; the 6 others are inhibited.
  4. that hang + a degradation of pp0 (not explained by the hang)
     -> one page (dp1) and one ticket (pp0).
  5. slow NIC on node2, named by proxy timing: NcclinspHostNetworkSlow for node2 + the 28
     network bandwidth alerts + NcclinspHostBelowJobMedian for node2 on pp2 Send/Recv (P2P pairs
     are where a host's own bandwidth can show) -> one ticket naming node2; 30 inhibited.
  6. a killed rank on node1: NcclinspExporterStale for node1's 4 GPU files, the detector's 14
     frozen degraded keys, NcclinspNvlinkDegraded for node1 (frozen), and the peers' hang on dp1:
     NcclinspRankProcessGone (primary on dp1, secondary on fsdp) and the per-node pages
     -> one ticket (stale, node1) and one page (rank 5's process is gone); 19 inhibited.
  7. two Kubernetes jobs, team-a/train and team-b/train, each with a degraded communicator dp0
     -> two tickets, one per job, never one merged.
  8. node_exporter-side: a parse error on two targets, a stale foreign textfile on two targets
     whose job is not known and on one whose job is -> one notification per target and alert.
The test's copy of the config only shortens group_wait (1m/10s -> 2s/1s) and points the
webhooks at the receiver. Exit 0 pass, 1 fail (also when amtool/alertmanager are missing).
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import promapi as P  # noqa: E402

AM_BIN = os.environ.get("ALERTMANAGER_BIN", "/usr/bin/prometheus-alertmanager")
CONFIG = os.path.join(P.REPO, "prometheus", "alertmanager.example.yml")
RULES = os.path.join(P.REPO, "prometheus", "rules", "ncclinsp.rules.yml")
NODES, GPUS = 4, 4


def load_alert_rules():
    """{alertname: (static labels, annotations)} from the rules file; an alert defined twice (two
    detectors): the first definition, with the second's static labels where they differ
    (detector="in_process" is passed explicitly by the scenarios)."""
    out = {}
    with open(RULES, encoding="utf-8") as f:
        for group in yaml.safe_load(f)["groups"]:
            for r in group["rules"]:
                if "alert" in r and r["alert"] not in out:
                    lb = {k: v for k, v in r.get("labels", {}).items() if k != "detector"}
                    out[r["alert"]] = (lb, dict(r.get("annotations", {})))
    return out


RULE = load_alert_rules()


def alert(name, **labels):
    static, ann = RULE[name]
    lb = dict(static, alertname=name, **{k: str(v) for k, v in labels.items()})
    return {"labels": lb, "annotations": dict(ann)}


def demo_comms():
    """(comm_name, nranks, n_nodes, collectives, message_size) of the demo's network comms."""
    return ([("fsdp", NODES * GPUS, NODES, ("AllGather", "ReduceScatter"), "32MiB-64MiB")]
            + [(f"dp{g}", NODES, NODES, ("AllReduce",), "128MiB-256MiB") for g in range(GPUS)]
            + [(f"pp{g}", NODES, NODES, ("Send", "Recv"), "16MiB-32MiB") for g in range(GPUS)])


def degraded(job, comms=None, in_process=False, promql=True):
    """The PromQL rule's alerts; in_process: also the in-process detector's (label detector)."""
    out = []
    for c, nr, nn, colls, size in demo_comms():
        if comms and c not in comms:
            continue
        for coll in colls:
            if promql:
                out.append(alert("NcclinspBusBandwidthDegraded", job_id=job, comm_name=c, nranks=nr,
                                 n_nodes=nn, collective=coll, message_size=size))
            if in_process:
                out.append(alert("NcclinspBusBandwidthDegraded", job_id=job, comm_name=c, nranks=nr,
                                 n_nodes=nn, collective=coll, message_size=size, comm_hash="5a0c2e61f00d00%02x" % len(out),
                                 detector="in_process"))
    return out


def host_below(job, node):
    return [alert("NcclinspHostBelowJobMedian", job_id=job, node=node, comm_name=c, nranks=nr, n_nodes=nn,
                  collective=coll, message_size=size)
            for c, nr, nn, colls, size in demo_comms() for coll in colls]


def hang(job, kind):
    """A hang whose culprit is global rank 5 (node1 GPU1, rank 1 of dp1): the culprit alert of
    `kind` on dp1 (primary, critical; a never-joined rank's warning still fires beside it) and on
    fsdp (secondary, warning), and the per-node pages of the three nodes that wait in dp1."""
    who = dict(job_id=job, node="node1", gpu="GPU1", uuid="GPU-5a0c2e61-0000-0000-0000-000000000011", global_rank=5)
    dp1 = dict(comm_name="dp1", comm_hash="5a0c2e61f00d0001", rank=1, nranks=NODES, n_nodes=NODES, role="primary", **who)
    warn = [alert(kind, severity="warning", **dp1)] if kind == "NcclinspRankNeverJoined" else []
    return warn + [alert(kind, **dp1),
            alert(kind, severity="warning", comm_name="fsdp", comm_hash="5a0c2e61f00d00f5", rank=5,
                  nranks=NODES * GPUS, n_nodes=NODES, role="secondary", **who)] + [
        alert("NcclinspCollectiveHung", job_id=job, node=f"node{n}", comm_name="dp1", comm_hash="5a0c2e61f00d0001")
        for n in (0, 2, 3)]


def scenarios():
    s = {}
    s["s1-network"] = ([alert("NcclinspNetworkFabricDegraded", job_id="s1-network")]
                       + degraded("s1-network", in_process=True))
    s["s2-slowhost"] = host_below("s2-slowhost", "node1") + degraded("s2-slowhost", {"fsdp", "dp0", "dp1", "dp2", "dp3"})
    s["s3-hang"] = hang("s3-hang", "NcclinspRankNeverJoined") + degraded("s3-hang", {"dp1"})
    s["s4-hang-and-pp0"] = hang("s4-hang-and-pp0", "NcclinspRankNeverJoined") + degraded("s4-hang-and-pp0", {"dp1", "pp0"})
    s["s5-slownic"] = ([alert("NcclinspHostNetworkSlow", job_id="s5-slownic", node="node2")]
                       + degraded("s5-slownic", in_process=True)
                       + [a for a in host_below("s5-slownic", "node2") if a["labels"]["comm_name"] == "pp2"])
    stale = [alert("NcclinspExporterStale", job_id="s6-killed", slurm_job_id="s6-killed", node="node1", gpu=f"GPU{g}",
                   uuid=f"GPU-5a0c2e61-0000-0000-0000-00000000001{g}", job="node-exporter", instance="10.0.0.1:9100")
             for g in range(GPUS)]
    s["s6-killed"] = (stale + degraded("s6-killed", in_process=True, promql=False)
                      + [alert("NcclinspNvlinkDegraded", job_id="s6-killed", node="node1", comm_name="tp",
                               comm_hash="5a0c2e61f00d00ff")]
                      + hang("s6-killed", "NcclinspRankProcessGone"))
    s["team-a/train"] = degraded("team-a/train", {"dp0"})
    s["team-b/train"] = degraded("team-b/train", {"dp0"})
    parse = [alert("NcclinspTextfileParseError", job="node-exporter", instance=f"10.0.1.{i}:9100") for i in (1, 2)]
    foreign = [alert("NcclinspTextfileStale", job="node-exporter", instance=f"10.0.1.{i}:9100", job_id=j,
                     file=f"/host/textfile/nccl_inspector_metrics_5a0c2e61-0000-0000-0000-00000000000{i}.prom",
                     uuid=f"5a0c2e61-0000-0000-0000-00000000000{i}")
               for i, j in ((1, "unknown"), (2, "unknown"), (3, "77"))]
    s["node_exporter"] = parse + foreign
    return s


# (group job_id, group instance, receiver path, alertname, number of alerts, extra common labels)
EXPECTED = [
    ("s1-network", None, "/ticket", "NcclinspNetworkFabricDegraded", 1, {"fabric": "network"}),
    ("s2-slowhost", None, "/ticket", "NcclinspHostBelowJobMedian", 2 + GPUS + 2 * GPUS, {"node": "node1"}),
    ("s3-hang", None, "/page", "NcclinspRankNeverJoined", 1,
     {"comm_name": "dp1", "severity": "critical", "role": "primary", "node": "node1", "gpu": "GPU1", "global_rank": "5"}),
    ("s4-hang-and-pp0", None, "/page", "NcclinspRankNeverJoined", 1, {"comm_name": "dp1", "global_rank": "5"}),
    ("s4-hang-and-pp0", None, "/ticket", "NcclinspBusBandwidthDegraded", 2, {"comm_name": "pp0"}),
    ("s5-slownic", None, "/ticket", "NcclinspHostNetworkSlow", 1, {"node": "node2", "culprit": "host"}),
    ("s6-killed", None, "/ticket", "NcclinspExporterStale", GPUS, {"node": "node1"}),
    ("s6-killed", None, "/page", "NcclinspRankProcessGone", 1, {"comm_name": "dp1", "global_rank": "5", "node": "node1"}),
    ("team-a/train", None, "/ticket", "NcclinspBusBandwidthDegraded", 1, {"comm_name": "dp0"}),
    ("team-b/train", None, "/ticket", "NcclinspBusBandwidthDegraded", 1, {"comm_name": "dp0"}),
    (None, "10.0.1.1:9100", "/ticket", "NcclinspTextfileParseError", 1, {}),
    (None, "10.0.1.2:9100", "/ticket", "NcclinspTextfileParseError", 1, {}),
    ("unknown", "10.0.1.1:9100", "/ticket", "NcclinspTextfileStale", 1, {}),
    ("unknown", "10.0.1.2:9100", "/ticket", "NcclinspTextfileStale", 1, {}),
    ("77", "10.0.1.3:9100", "/ticket", "NcclinspTextfileStale", 1, {}),
]
# Alerts that Alertmanager holds but mutes, per job_id.
WANT_MUTED = {"s1-network": 28, "s2-slowhost": 6, "s3-hang": 1 + 1 + 3 + 1, "s4-hang-and-pp0": 1 + 1 + 3 + 1,
              "s5-slownic": 28 + 2, "s6-killed": 14 + 1 + 1 + 3}


def test_config(src, dst, hook_url):
    with open(src, encoding="utf-8") as f:
        cfg = f.read()
    n = len(re.findall(r"group_wait: \S+", cfg))
    cfg = re.sub(r"group_wait: 1m", "group_wait: 2s", cfg)
    cfg = re.sub(r"group_wait: 10s", "group_wait: 1s", cfg)
    cfg = cfg.replace("http://127.0.0.1:9095", hook_url)
    if n != 2 or "group_wait: 2s" not in cfg or "group_wait: 1s" not in cfg or hook_url not in cfg:
        raise RuntimeError(f"{src}: expected group_wait 1m (root) and 10s (critical) and the 9095 webhooks")
    with open(dst, "w", encoding="utf-8") as f:
        f.write(cfg)


def post(url, alerts):
    now = time.time()
    ts = lambda t: time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(t))  # noqa: E731
    body = [dict(a, startsAt=ts(now), endsAt=ts(now + 300), generatorURL="http://test/graph") for a in alerts]
    req = urllib.request.Request(url + "/api/v2/alerts", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(req, timeout=5) as r:
        if r.status != 200:
            raise RuntimeError(f"POST alerts: HTTP {r.status}")


def group_key(d):
    g = d.get("groupLabels", {})
    return g.get("job_id"), g.get("instance")


def main():
    fails = []
    for tool in (AM_BIN, shutil.which("amtool") or "/usr/bin/amtool"):
        if not os.access(tool, os.X_OK):
            print(f"FAIL: {tool} not installed (Debian: prometheus-alertmanager)")
            return 1
    p = subprocess.run(["amtool", "check-config", CONFIG], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True)
    if p.returncode != 0:
        print(p.stdout)
        print("FAIL: amtool check-config")
        return 1
    for name in ("NcclinspBusBandwidthDegraded", "NcclinspNetworkFabricDegraded", "NcclinspHostBelowJobMedian",
                 "NcclinspCollectiveHung", "NcclinspRankNeverJoined", "NcclinspRankProcessGone",
                 "NcclinspAllRanksStuck", "NcclinspHostNetworkSlow", "NcclinspExporterStale"):
        if name not in RULE:
            fails.append(f"rule {name} missing from {RULES}")
    for name, (_, ann) in RULE.items():  # every alert: what it means and where the runbook is
        if len(ann.get("description", "")) < 60 or not ann.get("runbook_url", "").count("#"):
            fails.append(f"rule {name}: no description or runbook_url annotation")
    root = tempfile.mkdtemp(prefix="ncclinsp-am-")
    hook = P.Webhook()
    am = None
    try:
        cfg = os.path.join(root, "alertmanager.yml")
        test_config(CONFIG, cfg, hook.url)
        s = __import__("socket").socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        url = f"http://127.0.0.1:{port}"
        log = open(os.path.join(root, "alertmanager.log"), "w")
        am = subprocess.Popen([AM_BIN, f"--config.file={cfg}", f"--storage.path={root}/data",
                               f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address="],
                              stdout=log, stderr=subprocess.STDOUT)
        P.Prom(url).wait_for(lambda: P.Prom(url).ready(), timeout=20, what="Alertmanager ready")
        sc = scenarios()
        for alerts in sc.values():
            post(url, alerts)
        want_n = len(EXPECTED)
        deadline = time.time() + 20
        while time.time() < deadline and len(hook.notifications()) < want_n:
            time.sleep(0.2)
        time.sleep(3)  # anything else would arrive within another group_wait
        got = [(path, d) for _, path, d in hook.notifications()]
        print(f"{len(got)} notifications for {sum(len(v) for v in sc.values())} alerts in {len(sc)} scenarios:")
        for path, d in sorted(got, key=lambda x: (str(group_key(x[1])), x[0])):
            print(f"  {group_key(d)} {path} {d['status']} {d['groupLabels'].get('alertname')} x{len(d['alerts'])}: "
                  f"common labels {sorted(d['commonLabels'].items())}")
            print(f"      {d['commonAnnotations'].get('runbook_url', '')}")
        unmatched = list(got)
        for job, inst, path, name, n, common in EXPECTED:
            m = [(pa, d) for pa, d in unmatched
                 if group_key(d) == (job, inst) and pa == path and d["groupLabels"].get("alertname") == name]
            if len(m) != 1:
                fails.append(f"{job} {inst}: {len(m)} {path} notifications for {name}, expected 1")
                continue
            unmatched.remove(m[0])
            d = m[0][1]
            if d["status"] != "firing" or len(d["alerts"]) != n:
                fails.append(f"{job} {name}: status {d['status']}, {len(d['alerts'])} alerts, expected firing x{n}")
            want_group = {"alertname"} | ({"job_id"} if job else set()) | ({"instance"} if inst else set())
            if set(d["groupLabels"]) != want_group:
                fails.append(f"{job} {name}: grouped by {sorted(d['groupLabels'])}, expected {sorted(want_group)}")
            for k, v in common.items():
                if d["commonLabels"].get(k) != v:
                    fails.append(f"{job} {name}: common label {k}={d['commonLabels'].get(k)!r}, expected {v!r}")
            for k in ("runbook_url", "description"):
                if d["commonAnnotations"].get(k) != RULE[name][1][k]:
                    fails.append(f"{job} {name}: {k} {d['commonAnnotations'].get(k)!r}")
            if d["receiver"] != ("ncclinsp-page" if path == "/page" else "ncclinsp-ticket"):
                fails.append(f"{job} {name}: receiver {d['receiver']}")
        if unmatched:
            fails.append(f"unexpected notifications: {[(pa, d.get('groupLabels'), len(d['alerts'])) for pa, d in unmatched]}")
        # Inhibition as Alertmanager reports it: the explained alerts are there, but muted.
        with urllib.request.urlopen(url + "/api/v2/alerts", timeout=5) as r:
            live = json.load(r)
        muted = {}
        for a in live:
            if a["status"]["inhibitedBy"]:
                j = a["labels"].get("job_id")
                muted[j] = muted.get(j, 0) + 1
        print(f"  inhibited alerts per job: {muted}")
        if muted != WANT_MUTED:
            fails.append(f"inhibited alerts {muted}, expected {WANT_MUTED}")
    except (RuntimeError, OSError, TimeoutError, ValueError, KeyError) as e:
        fails.append(f"{type(e).__name__}: {e}")
    finally:
        hook.close()
        if am is not None:
            am.terminate()
            try:
                am.wait(timeout=5)
            except subprocess.TimeoutExpired:
                am.kill()
                am.wait()
    for f in fails:
        print("FAIL:", f)
    return P.finish("alertmanager", fails, root)


if __name__ == "__main__":
    sys.exit(main())
