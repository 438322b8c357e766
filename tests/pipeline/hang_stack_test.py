#!/usr/bin/env python3
"""Hang pages through the real stack: the built ncclinsp-sim drives the built plugin, 4 nodes x 2 GPUs
per job, into node_exporter (one per node, the textfile collector) -> Prometheus (5 s scrape and
evaluation, prometheus/rules) -> Alertmanager (prometheus/alertmanager.example.yml as shipped, its
webhooks pointed at a local receiver). Six jobs run at once, each its own job_id on the same four
node_exporters:

  job       simulator faults             thresholds             expected
  stall     --stall-rank 5@20            warn 20, page 45,      one page NcclinspRankNeverJoined naming
                                         fault 30 (per job)     node2 GPU1, global rank 5, within page + 30 s
  kill      --kill-rank 6@20             same                   one page NcclinspRankProcessGone naming
                                                                node3 GPU0, global rank 6, within fault + 30 s
  hang      --hang-rank 3@20             same                   one page NcclinspAllRanksStuck on a
                                                                communicator of global rank 3, within fault + 30 s
  netstall  --net-stall 20               same                   one page NcclinspAllRanksStuck on the network
                                                                communicators (n_nodes 4) stuck since the same
                                                                instant (one alert each), within fault + 30 s
  pause     --pause-rank 2@30:180        defaults               no critical alert, no page (a warning may fire)
  idle      --pause 41:40 (every rank    warn 10, page 15,      no hang alert at all, no notification
            idles 40 s of every 41)      fault 20: below its
                                         idle time

Per-job thresholds come from a textfile on node0 (ncclinsp_hang_threshold_seconds, docs/runbooks.md
"Thresholds"). Onset is when the job's peers started waiting: the paged communicator's
ncclinsp_comm:inflight_since_timestamp_seconds (file timestamp minus age, no scrape offset in it).
For each job the test prints onset -> page (Prometheus firing, and the webhook's page), the labels
the page names, and what Alertmanager inhibited (polled from its API while the jobs run); each job
gets one page notification, with one alert (netstall: one per communicator the stall caught in the
same instant), and its per-node NcclinspCollectiveHung pages are inhibited.

usage: hang_stack_test.py --plugin PATH --sim PATH [--backend prometheus|victoriametrics] [--root DIR] [--keep]
(--backend victoriametrics: vmagent, victoria-metrics and vmalert evaluate the same rules instead;
the pages then come 14-39 s later than Prometheus's, so the limit is threshold + 60 s.)
Exit 0 pass, 1 fail, 77 skip (plugin / simulator not built). Missing servers fail the test.
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import promapi as P  # noqa: E402

NODES, GPUS = 4, 2
SCRAPE = "5s"
FAST = {"warn": 20, "page": 45, "fault": 30}
DEFAULT = {"warn": 120, "page": 480, "fault": 60}
HANG_ALERTS = ("NcclinspRankNeverJoined", "NcclinspRankProcessGone", "NcclinspAllRanksStuck", "NcclinspCollectiveHung")
# name: (simulator arguments, duration s, thresholds or None for the defaults, fault time s,
#        expected page alertname or None, the threshold the page waits for, culprit labels)
SCENARIOS = {
    "stall": (["--stall-rank", "5@20"], 150, FAST, 20, "NcclinspRankNeverJoined", "page",
              {"node": "node2", "gpu": "GPU1", "global_rank": "5"}),
    "kill": (["--kill-rank", "6@20"], 150, FAST, 20, "NcclinspRankProcessGone", "fault",
             {"node": "node3", "gpu": "GPU0", "global_rank": "6"}),
    "hang": (["--hang-rank", "3@20"], 150, FAST, 20, "NcclinspAllRanksStuck", "fault", {}),
    "netstall": (["--net-stall", "20"], 150, FAST, 20, "NcclinspAllRanksStuck", "fault", {}),
    "pause": (["--pause-rank", "2@30:180"], 240, None, 30, None, None, {}),
    "idle": (["--pause", "41:40"], 240, {"warn": 10, "page": 15, "fault": 20}, 41, None, None, {}),
}


def log(msg):
    print(msg, flush=True)


def am_alerts(url):
    with urllib.request.urlopen(url + "/api/v2/alerts", timeout=5) as r:
        return json.load(r)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--plugin", required=True)
    ap.add_argument("--sim", required=True)
    ap.add_argument("--backend", choices=("prometheus", "victoriametrics"), default="prometheus")
    ap.add_argument("--root", help="work dir (default: a temp dir, removed on success)")
    ap.add_argument("--keep", action="store_true", help="keep the work dir")
    a = ap.parse_args()
    if (rc := P.missing_inputs(a.backend, [a.plugin, a.sim])) is not None:
        return rc
    t_start = time.monotonic()
    root = a.root or tempfile.mkdtemp(prefix="ncclinsp-hang-")
    nodes = [f"node{k}" for k in range(NODES)]
    for n in nodes:
        os.makedirs(os.path.join(root, n), exist_ok=True)
    os.makedirs(os.path.join(root, "logs"), exist_ok=True)
    jobs = {name: f"h{os.getpid()}-{name}" for name in SCENARIOS}
    # The per-job thresholds, as a job prolog would write them next to the plugin's files.
    with open(os.path.join(root, "node0", "ncclinsp_hang_thresholds.prom"), "w") as f:
        f.write("# HELP ncclinsp_hang_threshold_seconds Per-job hang alert thresholds.\n"
                "# TYPE ncclinsp_hang_threshold_seconds gauge\n")
        for name, sc in SCENARIOS.items():
            for k, v in (sc[2] or {}).items():
                f.write(f'ncclinsp_hang_threshold_seconds{{job_id="{jobs[name]}",threshold="{k}"}} {v}\n')
    fails = []
    procs = {}
    inhibited = {name: set() for name in SCENARIOS}
    hook = P.Webhook()
    try:
        with P.stack(root, nodes, scrape=SCRAPE, extra_args=["--backend", a.backend, "--webhook", hook.url]):
            prom = P.backends(root)[a.backend]
            with open(os.path.join(root, f"am_url_{a.backend}")) as f:
                am = f.read().strip()
            log(f"stack up: {a.backend} {prom.url}, Alertmanager {am}, {NODES} node_exporters, scrape {SCRAPE}")
            t0 = time.time() + 0.3  # the simulator starts its nodes 300 ms after launch
            for k, (name, sc) in enumerate(SCENARIOS.items()):
                # Each job writes into the same node directories (its --out holds links to them).
                out = os.path.join(root, "jobs", name)
                os.makedirs(out)
                for n in nodes:
                    os.symlink(os.path.join(root, n), os.path.join(out, n))
                env = dict(os.environ, SLURM_JOB_ID=jobs[name])
                cmd = [a.sim, "--plugin", a.plugin, "--nodes", str(NODES), "--gpus", str(GPUS), "--seed", str(10 + k),
                       "--duration", str(sc[1]), "--speed", "1", "--out", out, "--prom"] + sc[0]
                log(f"{name}: job {jobs[name]}: ncclinsp-sim " + " ".join(cmd[3:]))
                procs[name] = subprocess.Popen(cmd, env=env, stdout=open(os.path.join(root, "logs", f"sim-{name}.log"), "w"),
                                               stderr=subprocess.STDOUT, start_new_session=True)
            by_job = {v: k for k, v in jobs.items()}
            last = 0
            while any(p.poll() is None for p in procs.values()):
                el = time.time() - t0
                if el > max(sc[1] for sc in SCENARIOS.values()) + 60:
                    raise TimeoutError("a simulator did not finish")
                if el - last >= 30:
                    last = el
                    log(f"jobs running, t={el:.0f}s")
                for al in am_alerts(am):  # what Alertmanager holds back, while it holds it
                    lb = al["labels"]
                    if lb.get("job_id") in by_job and al["status"]["inhibitedBy"]:
                        inhibited[by_job[lb["job_id"]]].add(
                            (lb["alertname"], lb.get("severity", ""), lb.get("role", ""), lb.get("comm_name", ""),
                             lb.get("node", "")))
                time.sleep(2)
            t_end = time.time()
            for name, p in procs.items():
                if p.returncode != 0:
                    fails.append(f"{name}: simulator exited with {p.returncode} (see {root}/logs/sim-{name}.log)")
            time.sleep(15)  # a page fired near the end reaches the webhook after group_wait (10 s)
            log(f"jobs finished after {t_end - t0:.0f}s")
            rows = []
            for name, (args, dur, thr, t_fault, want, wait_on, culprit) in SCENARIOS.items():
                job = jobs[name]
                thr = thr or DEFAULT
                crit = [x for n in HANG_ALERTS for x in prom.firing(n, t0, t_end, job_id=job, severity="critical")]
                pages = [(t, d) for t, path, d in hook.notifications(f"/{a.backend}/page", "firing")
                         if d.get("groupLabels", {}).get("job_id") == job]
                tickets = [(t, d) for t, path, d in hook.notifications(f"/{a.backend}/ticket", "firing")
                           if d.get("groupLabels", {}).get("job_id") == job]
                warn = [x for n in HANG_ALERTS for x in prom.firing(n, t0, t_end, job_id=job, severity="warning")]
                inh = sorted(inhibited[name])
                if want is None:
                    if crit or pages:
                        fails.append(f"{name}: critical alerts {[c[0] for c in crit]}, pages {len(pages)}: expected none")
                    if name == "idle" and (warn or tickets):
                        fails.append(f"{name}: alerts {[w[0] for w in warn]}, tickets {len(tickets)}: expected none")
                    w = warn[0] if warn else None
                    rows.append((name, t_fault, None, None, None,
                                 f"warning {w[0]['alertname']} at t={w[1] - t0:.0f}s ({w[0].get('comm_name')}, "
                                 f"global rank {w[0].get('global_rank')})" if w
                                 else "nothing", inh))
                    continue
                prim = [c for c in crit if c[0]["alertname"] == want and c[0].get("role") == "primary"]
                if not prim:
                    fails.append(f"{name}: {want} (critical, primary) did not fire; critical: {[c[0] for c in crit]}")
                    continue
                lb, t_page = prim[0][0], prim[0][1]
                since = prom.values(f'ncclinsp_comm:inflight_since_timestamp_seconds{{job_id="{job}",comm_hash="{lb["comm_hash"]}"}}',
                                    at=t_page)
                onset = since[0][1] if since else float("nan")
                for k, v in culprit.items():
                    if lb.get(k) != v:
                        fails.append(f"{name}: the page names {k}={lb.get(k)!r}, expected {v!r}: {lb}")
                if name == "hang" and not prom.values(
                        f'ncclinsp_rank:member{{job_id="{job}",comm_hash="{lb["comm_hash"]}",node="node1",gpu="GPU1"}}',
                        at=t_page):
                    fails.append(f"{name}: the page's communicator {lb['comm_name']} {lb['comm_hash']} has no global rank 3")
                if name == "netstall" and lb.get("n_nodes") == "1":
                    fails.append(f"{name}: the page is on an NVLink-only communicator: {lb}")
                # vmalert reads each chained recording rule back from victoria-metrics after remote write,
                # so every level of the ncclinsp.hang group lags: measured +14 to +39 s over Prometheus.
                limit = thr[wait_on] + (30 if a.backend == "prometheus" else 60)
                if not t_page - onset <= limit:
                    fails.append(f"{name}: paged {t_page - onset:.0f}s after onset, expected within {limit}s")
                names = [(d["groupLabels"].get("alertname"), len(d["alerts"])) for _, d in pages]
                if len(names) != 1 or names[0][0] != want or (names[0][1] != 1 and name != "netstall"):
                    fails.append(f"{name}: page notifications {names}, expected one {want} with one alert")
                if name == "netstall" and pages and any(
                        x["labels"].get("n_nodes") == "1" or x["labels"].get("role") != "primary" for x in pages[0][1]["alerts"]):
                    fails.append(f"{name}: the page has an NVLink-only or secondary communicator: {pages[0][1]['alerts']}")
                if not any(i[0] == "NcclinspCollectiveHung" for i in inh):
                    fails.append(f"{name}: no per-node NcclinspCollectiveHung was inhibited: {inh}")
                t_note = pages[0][0] - onset if pages else float("nan")
                who = ", ".join(f"{k}={lb[k]}" for k in ("comm_name", "n_nodes", "node", "gpu", "rank", "global_rank")
                                if k in lb)
                rows.append((name, t_fault, onset - t0, t_page - onset, t_note, f"{want}: {who}", inh))
            log("\nscenario  fault_t  onset_t  onset->firing  onset->webhook  page / what fired")
            for name, tf, on, fire, note, what, inh in rows:
                f = lambda x: "   -  " if x is None else f"{x:6.1f}"  # noqa: E731
                log(f"{name:9} {tf:6.0f}s  {f(on)}s  {f(fire)}s        {f(note)}s       {what}")
                log(f"{'':9} inhibited: {inh or 'none'}")
    except (TimeoutError, RuntimeError, P.PromError, OSError, ValueError, KeyError) as e:
        fails.append(f"{type(e).__name__}: {e}")
    finally:
        hook.close()
        for p in procs.values():
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)  # our own session: the simulator and its processes
                p.wait()
    for f in fails:
        print("FAIL:", f)
    return P.finish("hang_stack", fails, root, t_start, keep=a.keep or bool(a.root))


if __name__ == "__main__":
    sys.exit(main())
