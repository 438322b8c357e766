#!/usr/bin/env python3
"""What an on-call person receives: the shipped prometheus/alertmanager.example.yml in a real
Alertmanager, a local webhook receiver, and the alerts each demo scenario makes the rules fire
(sent the way Prometheus and vmalert send them: POST /api/v2/alerts).

The alert label sets are the rules' own (labels of each alert's `by` clause, from
prometheus/rules/ncclinsp.rules.yml) for the demo's job: 4 nodes x 4 GPUs, communicators tp
(NVLink only), fsdp (all 16 ranks), dp0-3 and pp0-3 (one rank per node). Annotations come from
the rules file too, so the runbook text checked here is the one Prometheus sends.

Scenarios (one job id each, all sent at once, as they fire within seconds of each other):
  1. network degradation: 14 NcclinspBusBandwidthDegraded (fsdp AllGather/ReduceScatter,
     dp0-3 AllReduce, pp0-3 Send/Recv), the same 14 from the in-process detector, and
     NcclinspNetworkFabricDegraded -> one ticket: the fabric alert; the 28 others are inhibited.
  2. slow host node1: NcclinspHostBelowJobMedian for node1 on every network communicator it is
     in + NcclinspBusBandwidthDegraded for the job's collectives it drags down
     -> one ticket naming node1; the job-level alerts are inhibited.
  3. hang: NcclinspCollectiveHung for dp1 + the bandwidth alert of dp1
     -> one page; dp1's bandwidth alert is inhibited.
  4. hang of dp1 + a degradation of pp0 (not explained by the hang)
     -> one page (dp1) and one ticket (pp0).
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import promapi as P  # noqa: E402

AM_BIN = os.environ.get("ALERTMANAGER_BIN", "/usr/bin/prometheus-alertmanager")
CONFIG = os.path.join(P.REPO, "prometheus", "alertmanager.example.yml")
RULES = os.path.join(P.REPO, "prometheus", "rules", "ncclinsp.rules.yml")
NODES, GPUS = 4, 4


def load_alert_rules():
    """{alertname: (static labels, annotations)} from the rules file (stdlib only: a small reader
    for this file's layout, checked against promtool's view by pipeline.promtool_check_rules)."""
    out, cur, section = {}, None, None
    for line in open(RULES, encoding="utf-8"):
        m = re.match(r"^      - alert: (\w+)", line)
        if m:  # an alert defined twice (e.g. two detectors): the first definition
            cur = m.group(1) if m.group(1) not in out else None
            if cur:
                out[cur] = ({}, {})
            section = None
            continue
        if re.match(r"^      - ", line):
            cur = None
        if cur is None:
            continue
        m = re.match(r"^        (labels|annotations):\s*$", line)
        if m:
            section = m.group(1)
            continue
        m = re.match(r'^          (\w+): "?(.*?)"?\s*$', line)
        if m and section:
            out[cur][0 if section == "labels" else 1][m.group(1)] = m.group(2).replace('\\"', '"')
        elif not line.startswith("          "):
            section = None
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


def degraded(job, comms=None, in_process=False):
    """The PromQL rule's alerts; in_process: also the in-process detector's (label detector)."""
    out = []
    for c, nr, nn, colls, size in demo_comms():
        if comms and c not in comms:
            continue
        for coll in colls:
            out.append(alert("NcclinspBusBandwidthDegraded", slurm_job_id=job, comm_name=c, nranks=nr,
                             n_nodes=nn, collective=coll, message_size=size))
            if in_process:
                out.append(alert("NcclinspBusBandwidthDegraded", slurm_job_id=job, comm_name=c, nranks=nr,
                                 n_nodes=nn, collective=coll, message_size=size, comm_hash="5a0c2e61f00d00%02x" % len(out),
                                 detector="in_process"))
    return out


def scenarios():
    s = {}
    s["s1-network"] = ([alert("NcclinspNetworkFabricDegraded", slurm_job_id="s1-network")]
                       + degraded("s1-network", in_process=True))
    host = [alert("NcclinspHostBelowJobMedian", slurm_job_id="s2-slowhost", node="node1", comm_name=c,
                  nranks=nr, n_nodes=nn, collective=coll, message_size=size)
            for c, nr, nn, colls, size in demo_comms() for coll in colls]
    s["s2-slowhost"] = host + degraded("s2-slowhost", {"fsdp", "dp0", "dp1", "dp2", "dp3"})
    hung = alert("NcclinspCollectiveHung", slurm_job_id="s3-hang", node="node0", comm_name="dp1",
                 comm_hash="5a0c2e61f00d0001")
    s["s3-hang"] = [hung] + degraded("s3-hang", {"dp1"})
    hung4 = dict(hung, labels=dict(hung["labels"], slurm_job_id="s4-hang-and-pp0"))
    s["s4-hang-and-pp0"] = [hung4] + degraded("s4-hang-and-pp0", {"dp1", "pp0"})
    return s


# job -> [(receiver path, alertname, number of alerts, extra common labels)]
EXPECTED = {
    "s1-network": [("/ticket", "NcclinspNetworkFabricDegraded", 1, {"fabric": "network"})],
    "s2-slowhost": [("/ticket", "NcclinspHostBelowJobMedian", 2 + GPUS + 2 * GPUS, {"node": "node1"})],
    "s3-hang": [("/page", "NcclinspCollectiveHung", 1, {"comm_name": "dp1", "severity": "critical"})],
    "s4-hang-and-pp0": [("/page", "NcclinspCollectiveHung", 1, {"comm_name": "dp1"}),
                        ("/ticket", "NcclinspBusBandwidthDegraded", 2, {"comm_name": "pp0"})],
}


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
                 "NcclinspCollectiveHung"):
        if name not in RULE:
            fails.append(f"rule {name} missing from {RULES}")
    for name, (_, ann) in RULE.items():  # every alert: a runbook for the person it reaches
        if len(ann.get("runbook", "")) < 80:
            fails.append(f"rule {name}: no runbook annotation")
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
        for job, alerts in sc.items():
            post(url, alerts)
        want_n = sum(len(v) for v in EXPECTED.values())
        deadline = time.time() + 20
        while time.time() < deadline and len(hook.notifications()) < want_n:
            time.sleep(0.2)
        time.sleep(3)  # anything else would arrive within another group_wait
        got = hook.notifications()
        print(f"{len(got)} notifications for {sum(len(v) for v in sc.values())} alerts in {len(sc)} scenarios:")
        for job, exp in EXPECTED.items():
            mine = [(path, d) for _, path, d in got if d.get("groupLabels", {}).get("slurm_job_id") == job]
            print(f"  {job}: {len(sc[job])} alerts sent -> {len(mine)} notification(s)")
            for path, d in mine:
                print(f"    {path} {d['status']} {d['groupLabels']['alertname']} x{len(d['alerts'])}: "
                      f"common labels {sorted(d['commonLabels'].items())}")
                print(f"      runbook: {d['commonAnnotations'].get('runbook', '')[:100]}...")
            if len(mine) != len(exp):
                fails.append(f"{job}: {len(mine)} notifications, expected {len(exp)}: "
                             f"{[(pa, d['groupLabels']) for pa, d in mine]}")
                continue
            for path, name, n, common in exp:
                m = [d for pa, d in mine if pa == path and d["groupLabels"].get("alertname") == name]
                if len(m) != 1:
                    fails.append(f"{job}: no single {path} notification for {name}")
                    continue
                d = m[0]
                if d["status"] != "firing" or len(d["alerts"]) != n:
                    fails.append(f"{job} {name}: status {d['status']}, {len(d['alerts'])} alerts, expected firing x{n}")
                if set(d["groupLabels"]) != {"alertname", "slurm_job_id"}:
                    fails.append(f"{job} {name}: grouped by {sorted(d['groupLabels'])}")
                for k, v in common.items():
                    if d["commonLabels"].get(k) != v:
                        fails.append(f"{job} {name}: common label {k}={d['commonLabels'].get(k)!r}, expected {v!r}")
                if d["commonAnnotations"].get("runbook") != RULE[name][1]["runbook"]:
                    fails.append(f"{job} {name}: runbook {d['commonAnnotations'].get('runbook')!r}")
                if d["receiver"] != ("ncclinsp-page" if path == "/page" else "ncclinsp-ticket"):
                    fails.append(f"{job} {name}: receiver {d['receiver']}")
        extra = [d.get("groupLabels") for _, _, d in got if d.get("groupLabels", {}).get("slurm_job_id") not in EXPECTED]
        if extra:
            fails.append(f"notifications for unknown groups: {extra}")
        # Inhibition as Alertmanager reports it: the explained alerts are there, but muted.
        with urllib.request.urlopen(url + "/api/v2/alerts", timeout=5) as r:
            live = json.load(r)
        muted = {}
        for a in live:
            if a["status"]["inhibitedBy"]:
                muted[a["labels"]["slurm_job_id"]] = muted.get(a["labels"]["slurm_job_id"], 0) + 1
        want_muted = {"s1-network": 28, "s2-slowhost": 6, "s3-hang": 1, "s4-hang-and-pp0": 1}
        print(f"  inhibited alerts per scenario: {muted}")
        if muted != want_muted:
            fails.append(f"inhibited alerts {muted}, expected {want_muted}")
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
