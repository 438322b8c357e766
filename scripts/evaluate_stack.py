#!/usr/bin/env python3
"""Time to alert and attribution through the real stack (README "Evaluation", Prometheus path).

One simulated job (ncclinsp-sim at --speed 1: real time, so the plugin's 1 s exports, the proxy
thread's CPU-clock step timing and every rule window are what they would be on a cluster) runs
through the real plugin ABI with proxy accounting (NCCLINSP_PROXY=1). Its node directories are read
by real node_exporters and scraped by one real Prometheus per scrape interval (default 5 s and
15 s; each Prometheus evaluates the shipped rules at its scrape interval), all on the same files.
The job goes through a sequence of fault episodes, each followed by a healthy gap:
  * timing episodes: the fabric at -13 % (the seed's throughput-drop size) and at -50 % (the seed's
    scenario 1, network halved), alternating;
  * attribution episodes: a random kind (fabric, slow host, slow NIC, compute straggler), culprit
    and size 10-50 % (straggler: late by 10-50 % of a step's exposed communication per op group).
From each Prometheus's own ALERTS samples (their timestamps are the rule evaluations) it reports:
  * time to alert: first NcclinspBusBandwidthDegraded or NcclinspNetworkFabricDegraded firing after
    each onset, minus the onset; percentiles per (drop, scrape interval);
  * attribution per episode: kind AND culprit (host alerts: `node`; straggler: `rank`); a confusion
    matrix of kinds; a straggler reported with any host alert, or a network fault with a straggler
    alert, is wrong;
  * false alerts: any alert that starts outside the episodes (warm-up excluded).

  scripts/evaluate_stack.py --sim build/bin/ncclinsp-sim --plugin build/lib/libnccl-profiler-ncclinsp.so \\
      [--nodes 4 --gpus 2 --scrapes 5s,15s --net-reps 8 --attr-reps 6 --seed 1 --json OUT.json]
A run takes warmup + reps x (episode + gap): ~30 min with the defaults. --quick: 2 + 2 reps (~9 min).
Healthy check: --healthy 1800 --sim-args '--wobble 5' (30 min, fabric +-5 %, 2 % per-op jitter): every alert
after the warm-up is a false one.
Network noise (--noise, docs/evaluation.md, "Under network noise"): the job also runs with NOISE below (congestion bursts of
4-8 s at -13 % every 30-90 s, each fabric-wide, on one rail or on one NIC, every op's transfer time x a
lognormal factor of sigma 3 %, 0.5 % of ops 2-10x slower, a 20 s pause without collectives every 10 min, a 30 s
warm-up), in the healthy check and under the fault episodes alike.
Reported besides: precision (alert starts explained by an episode / all alert starts after the warm-up),
recall (episodes with an alert), false pages per hour (alert starts outside every episode, per hour outside
them), and the transient episodes the detector counted (ncclinsp_busbw_transients_total).
stdlib only (tests/pipeline/promapi.py for the HTTP API, scripts/stack.sh for the stack).
"""
import argparse, json, math, os, random, shutil, signal, subprocess, sys, time
from collections import Counter, defaultdict

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.join(REPO, "tests", "pipeline"))
import promapi as P  # noqa: E402

STACK = os.path.join(REPO, "scripts", "stack.sh")
NETWORK_ALERTS = ("NcclinspBusBandwidthDegraded", "NcclinspNetworkFabricDegraded")
HOST_ALERTS = ("NcclinspHostNetworkSlow", "NcclinspHostBelowJobMedian")
IGNORED = ("NcclinspExporterStale", "NcclinspTextfileStale", "NcclinspScrapeDown")  # job start/stop
# --noise: what a shared fabric adds to a healthy job (sim/README.md "Network noise").
NOISE = "--congestion 60:8:13:mixed --op-noise 3 --heavy-tail 0.005:10 --pause 600:20 --warmup 30:20"


def say(msg):
    print(f"[evaluate_stack {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def secs(s):
    return float(s[:-1]) * (60 if s.endswith("m") else 1) if s[-1] in "sm" else float(s)


def nominal(a):
    """nominal_step_s and compute_s of this job shape (the simulator's summary, no job run)."""
    d = os.path.join(a.root, "nominal")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    f = os.path.join(d, "summary.json")
    subprocess.run([a.sim, "--plugin", a.plugin, "--nodes", str(a.nodes), "--gpus", str(a.gpus), "--steps", "1",
                    "--speed", "0", "--summary", f], check=True, capture_output=True, timeout=120,
                   env=dict(os.environ, NCCL_INSPECTOR_ENABLE="0"))
    m = json.load(open(f))["config"]
    return m["nominal_step_s"], m["compute_s"]


def schedule(a, rng, step_s, compute_s):
    """[(kind, truth culprit, sim flag, onset, end, size text)] and the job's duration."""
    eps, t = [], a.warmup
    groups = 8  # op groups per step (sim/README.md "Schedule"), the straggler's delay is per group
    for i in range(max(a.net_reps, a.attr_reps)):
        todo = []
        if i < a.net_reps:
            todo += [("timing13", None), ("timing50", None)]
        if i < a.attr_reps:
            todo.append(("attr", None))
        for what, _ in todo:
            # A random phase against the scrape and rule-evaluation grid (onsets on a fixed grid of
            # whole seconds would all meet the same phase and give one time-to-alert value).
            t = round(t + rng.uniform(0, 15), 1)
            if what.startswith("timing"):
                pct = int(what[6:])
                eps.append(dict(kind="net_degrade", truth=("network", ""), pct=pct, t0=t, t1=t + a.net_len,
                                flag=["--net-degrade", f"{pct}@{t}-{t + a.net_len}"], timing=pct))
                t += a.net_len + a.net_gap
                continue
            kind = rng.choice(["net_degrade", "slow_host", "slow_nic", "straggler"])
            pct = rng.randint(10, 50)
            node = rng.randrange(a.nodes)
            t0, t1 = t, t + a.attr_len
            if kind == "net_degrade":
                e = dict(truth=("network", ""), flag=["--net-degrade", f"{pct}@{t0}-{t1}"])
            elif kind == "slow_host":
                e = dict(truth=("host", f"node{node}"), flag=["--slow-host", f"{node}:{pct}@{t0}-{t1}"])
            elif kind == "slow_nic":
                nic = rng.randrange(a.gpus)
                e = dict(truth=("host", f"node{node}"), nic=nic, flag=["--slow-nic", f"{node}:{nic}:{pct}@{t0}-{t1}"])
            else:
                rank = rng.randrange(a.nodes * a.gpus)
                ms = round(1e3 * (step_s - compute_s) * pct / 100.0 / groups, 3)
                e = dict(truth=("straggler", str(rank)), ms=ms, flag=["--straggler", f"{rank}:{ms}@{t0}-{t1}"])
            e.update(kind=kind, pct=pct, t0=t0, t1=t1, timing=None)
            eps.append(e)
            t = t1 + a.attr_gap
    return eps, t + 5


def alert_samples(prom, t_from, t_to, ev):
    """{(alertname, labels...): [sample timestamps]} of firing alerts, from the raw ALERTS samples."""
    span = int(math.ceil(t_to - t_from)) + 1
    res = prom.query(f'ALERTS{{alertstate="firing"}}[{span}s]', at=t_to)
    out = {}
    for r in res:
        m = {k: v for k, v in r["metric"].items() if k not in ("__name__", "alertstate")}
        key = tuple(sorted(m.items()))
        out[key] = sorted(float(t) for t, _ in r["values"] if float(t) >= t_from)
    return out


def rising_edges(ts, ev):
    """Start times of firing runs (a gap longer than 1.5 evaluation intervals ends a run)."""
    edges, prev = [], None
    for t in ts:
        if prev is None or t - prev > 1.5 * ev:
            edges.append(t)
        prev = t
    return edges


def global_rank(lb, gpus):
    """The job-wide rank of an alert's (node, comm_name, rank): the workload's communicators
    (sim/README.md): tp = one node's GPUs, fsdp = every rank, dp<l>/pp<l> = GPU l of every node."""
    node, comm, r = lb.get("node", ""), lb.get("comm_name", ""), lb.get("rank", "")
    if not node.startswith("node") or not r.isdigit():
        return f"{node}/{comm}/{r}"
    n = int(node[4:])
    if comm == "fsdp":
        return r
    if comm == "tp":
        return str(n * gpus + int(r))
    if comm[:2] in ("dp", "pp") and comm[2:].isdigit():
        return str(n * gpus + int(comm[2:]))
    return f"{node}/{comm}/{r}"


def classify(starts, gpus):
    """starts: [(t, alertname, labels)] in an episode -> (kind, culprit)."""
    names = {n for _, n, _ in starts}
    strag = sorted({global_rank(lb, gpus) for _, n, lb in starts if n == "NcclinspRankStraggler"})
    hosts = [lb.get("node", "") for _, n, lb in sorted(starts, key=lambda x: x[0]) if n in HOST_ALERTS]
    if strag and hosts:
        return "mixed", f"ranks {','.join(strag)} hosts {','.join(sorted(set(hosts)))}"
    if strag:
        return "straggler", ",".join(strag)
    if hosts:
        return "host", ",".join(dict.fromkeys(hosts))  # first named first
    if "NcclinspNvlinkDegraded" in names:
        return "nvlink", ",".join(sorted({lb.get("node", "") for _, n, lb in starts if n == "NcclinspNvlinkDegraded"}))
    if names & set(NETWORK_ALERTS):
        return "network", ""
    return "none", ""


def pct(v, q):
    if not v:
        return float("nan")
    s = sorted(v)
    k = (len(s) - 1) * q
    lo, hi = math.floor(k), math.ceil(k)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sim", required=True)
    p.add_argument("--plugin", required=True)
    p.add_argument("--root", default="/tmp/ncclinsp-evaluate-stack")
    p.add_argument("--nodes", type=int, default=4)
    p.add_argument("--gpus", type=int, default=2)
    p.add_argument("--scrapes", default="5s,15s")
    p.add_argument("--net-reps", type=int, default=8, help="episodes of each timing drop (13%%, 50%%)")
    p.add_argument("--attr-reps", type=int, default=6, help="random attribution episodes")
    p.add_argument("--warmup", type=int, default=60)
    p.add_argument("--net-len", type=int, default=30)
    p.add_argument("--net-gap", type=int, default=45)
    p.add_argument("--attr-len", type=int, default=75)
    p.add_argument("--attr-gap", type=int, default=60)
    p.add_argument("--grace", type=float, default=20, help="alerts starting this long after an episode's end still count for it")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--quick", action="store_true", help="2 timing reps, 2 attribution reps")
    p.add_argument("--json", help="write the results here")
    p.add_argument("--healthy", type=float, metavar="SECONDS",
                   help="no fault: a healthy job this long (add --sim-args '--wobble 5'); reports every alert after the warm-up")
    p.add_argument("--sim-args", default="", help="extra ncclinsp-sim arguments, e.g. '--wobble 5:120'")
    p.add_argument("--noise", action="store_true", help=f"add the network noise: {NOISE}")
    p.add_argument("--rules", action="append", default=[],
                   help="rule files for Prometheus (stack.sh --rules; default prometheus/rules/*.yml)")
    a = p.parse_args()
    if a.quick:
        a.net_reps, a.attr_reps = 2, 2
    if a.noise:
        a.sim_args = (NOISE + " " + a.sim_args).strip()
    if a.nodes < 3:
        sys.exit("evaluate_stack: --nodes >= 3 (a slow host cannot be told from its ring neighbour with 2)")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the cleanup below
    signal.signal(signal.SIGINT, lambda *_: sys.exit(130))
    a.root = os.path.abspath(a.root)
    scrapes = a.scrapes.split(",")
    rng = random.Random(a.seed)
    os.makedirs(a.root, exist_ok=True)
    step_s, compute_s = nominal(a)
    eps, duration = schedule(a, rng, step_s, compute_s) if not a.healthy else ([], a.healthy)
    say(f"{len(eps)} episodes, job {duration:.0f} s ({a.nodes} nodes x {a.gpus} GPUs, step {step_s * 1e3:.1f} ms), "
        f"scrape {', '.join(scrapes)}")
    nodes = [f"node{k}" for k in range(a.nodes)]
    roots = {s: os.path.join(a.root, f"scrape{s}") for s in scrapes}
    proms, started = {}, []
    sim = None
    try:
        first = roots[scrapes[0]]
        for s in scrapes:
            r = roots[s]
            if os.path.isdir(os.path.join(r, "pids")):
                subprocess.run([STACK, "stop", "--root", r], timeout=60)
            shutil.rmtree(r, ignore_errors=True)
            os.makedirs(r)
            if r != first:  # the same node directories: every Prometheus reads the same job
                for n in nodes:
                    os.makedirs(os.path.join(first, n), exist_ok=True)
                    os.symlink(os.path.join(first, n), os.path.join(r, n))
            rules = [x for f in a.rules for x in ("--rules", os.path.abspath(f))]
            out = subprocess.run([STACK, "start", "--nodes", ",".join(nodes), "--root", r, "--scrape", s,
                                  "--no-alertmanager"] + rules, capture_output=True, text=True, timeout=120)
            if out.returncode != 0:
                sys.exit(f"stack.sh start failed: {out.stderr[-2000:]}")
            started.append(r)
            proms[s] = P.Prom(out.stdout.strip().splitlines()[-1])
            say(f"Prometheus scraping every {s} at {proms[s].url}")
        flags = [x for e in eps for x in e["flag"]] + a.sim_args.split()
        env = dict(os.environ, NCCLINSP_PROXY="1", SLURM_JOB_ID=f"eval{a.seed}")
        cmd = [a.sim, "--plugin", a.plugin, "--nodes", str(a.nodes), "--gpus", str(a.gpus), "--duration",
               str(duration), "--speed", "1", "--out", first, "--prom", "--seed", str(a.seed),
               "--summary", os.path.join(a.root, "summary.json")] + flags
        log = open(os.path.join(a.root, "sim.log"), "w")
        t_start = time.time()
        sim = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        say(f"job running (log {a.root}/sim.log): {' '.join(cmd)}")
        for e in eps:
            desc = f"{e['kind']} {e['pct']}%" + (f" culprit {e['truth'][1]}" if e['truth'][1] else "")
            say(f"  t={e['t0']:5.0f}-{e['t1']:5.0f}s {desc}" + (f" (NIC {e['nic']})" if "nic" in e else "")
                + (f" ({e['ms']} ms late per op group)" if "ms" in e else ""))
        rc = sim.wait(timeout=duration + 120)
        sim = None
        if rc != 0:
            sys.exit(f"simulator exited {rc}; see {a.root}/sim.log")
        time.sleep(max(secs(s) for s in scrapes) * 2 + 1)  # the last evaluations
        results = dict(config=vars(a) | {"duration_s": duration, "step_s": step_s}, scrapes={})
        try:
            bursts = json.load(open(os.path.join(a.root, "summary.json"))).get("noise", {}).get("bursts", [])
        except (OSError, ValueError):
            bursts = []
        results["bursts"] = len([b for b in bursts if b["t0"] < duration])
        results["longest_burst_s"] = max([b["t1"] - b["t0"] for b in bursts if b["t0"] < duration], default=0)
        # Time outside every episode (and its grace) after the warm-up: the denominator of false pages per hour.
        busy, last = 0.0, a.warmup
        for e in sorted(eps, key=lambda e: e["t0"]):
            lo, hi = max(e["t0"], last), min(e["t1"] + a.grace, duration)
            busy += max(0.0, hi - lo)
            last = max(last, hi)
        quiet_h = max(duration - a.warmup - busy, 1.0) / 3600
        for s in scrapes:
            ev = secs(s)
            samples = alert_samples(proms[s], t_start, t_start + duration, ev)
            starts = []  # (t rel. to job start, alertname, labels)
            for key, ts in samples.items():
                lb = dict(key)
                for t in rising_edges(ts, ev):
                    starts.append((t - t_start, lb["alertname"], lb))
            starts.sort(key=lambda x: x[0])
            per_ep, tta = [], defaultdict(list)
            used = set()
            for e in eps:
                win = [x for x in starts if e["t0"] <= x[0] <= e["t1"] + a.grace and x[1] not in IGNORED]
                used.update(id(x) for x in win)
                kind, culprit = classify(win, a.gpus)
                net = [x[0] for x in win if x[1] in NETWORK_ALERTS]
                first = min(net) - e["t0"] if net else None
                if e["timing"]:
                    tta[e["timing"]].append(first if first is not None else float("inf"))
                ok = (kind, culprit) == e["truth"]
                per_ep.append(dict(kind=e["kind"], pct=e["pct"], t0=e["t0"], truth=list(e["truth"]), reported=[kind, culprit],
                                   ok=ok, time_to_network_alert_s=first, alerts=sorted({x[1] for x in win}),
                                   starts=[(round(x[0], 1), x[1], x[2]) for x in win]))
            false = [dict(t=x[0], alert=x[1], labels=x[2]) for x in starts
                     if id(x) not in used and x[0] > a.warmup and x[1] not in IGNORED]
            inside = sum(1 for x in starts if id(x) in used and x[0] > a.warmup)
            detected = sum(1 for e in per_ep if e["alerts"])
            transients = proms[s].query(
                f'sum(last_over_time(ncclinsp_busbw_transients_total[{int(duration) + 60}s]))', at=t_start + duration)
            results["scrapes"][s] = dict(
                episodes=per_ep, time_to_alert={str(k): v for k, v in tta.items()}, false_alerts=false,
                precision=inside / (inside + len(false)) if inside + len(false) else float("nan"),
                recall=detected / len(per_ep) if per_ep else float("nan"),
                false_pages_per_hour=len(false) / quiet_h, quiet_hours=quiet_h,
                transient_episodes=float(transients[0]["value"][1]) if transients else 0.0)
        report(results, eps)
        if a.json:
            with open(a.json, "w") as f:
                json.dump(results, f, indent=1, default=str)
            say(f"results in {a.json}")
    finally:
        if sim is not None:
            os.killpg(sim.pid, signal.SIGKILL)
        for r in started:
            subprocess.run([STACK, "stop", "--root", r], timeout=60)


def report(results, eps):
    print()
    print(f"bursts injected: {results.get('bursts', 0)} (longest {results.get('longest_burst_s', 0):.1f} s)")
    for s, r in results["scrapes"].items():
        print(f"scrape {s}: precision {r['precision']:.3f}, recall {r['recall']:.3f}, false pages "
              f"{len(r['false_alerts'])} in {r['quiet_hours']:.2f} h outside the episodes = "
              f"{r['false_pages_per_hour']:.2f}/h; transient episodes counted by the detectors (all keys, all "
              f"ranks): {r['transient_episodes']:.0f}")
    print("time to alert after onset, s (first NcclinspBusBandwidthDegraded/NcclinspNetworkFabricDegraded; "
          "1 s exports, rules evaluated at the scrape interval)")
    print(f"  {'drop':>6} {'scrape':>7} {'n':>3} {'p50':>6} {'p90':>6} {'max':>6} {'missed':>6}   values")
    for s, r in results["scrapes"].items():
        for k, v in sorted(r["time_to_alert"].items(), key=lambda x: int(x[0])):
            fin = [x for x in v if math.isfinite(x)]
            print(f"  {k + '%':>6} {s:>7} {len(v):>3} {pct(v, .5):6.1f} {pct(v, .9):6.1f} {max(v):6.1f} "
                  f"{len(v) - len(fin):>6}   {' '.join(f'{x:.1f}' for x in v)}")
    kinds = ["network", "host", "straggler", "nvlink", "mixed", "none"]
    for s, r in results["scrapes"].items():
        conf = Counter()
        ok = 0
        for e in r["episodes"]:
            conf[(e["kind"], e["reported"][0])] += 1
            ok += e["ok"]
        n = len(r["episodes"])
        if not n:
            print(f"\nscrape {s}: alerts after the warm-up ({results['config']['warmup']} s) of a healthy job: "
                  f"{len(r['false_alerts'])}" + "".join(f"\n    t={x['t']:.0f}s {x['alert']} {x['labels']}" for x in r["false_alerts"][:20]))
            continue
        print(f"\nattribution, scrape {s}: kind AND culprit correct in {ok}/{n} episodes "
              f"(rows: injected, columns: reported kind)")
        print(f"  {'':12}" + "".join(f"{k:>10}" for k in kinds))
        for t in ["net_degrade", "slow_host", "slow_nic", "straggler"]:
            if any(k[0] == t for k in conf):
                print(f"  {t:12}" + "".join(f"{conf[(t, k)]:>10}" for k in kinds))
        for e in r["episodes"]:
            if not e["ok"]:
                print(f"  wrong: t={e['t0']}s {e['kind']} {e['pct']}% truth {e['truth']} reported {e['reported']} "
                      f"alerts {e['alerts']}")
        print(f"  false alerts outside the episodes (after warm-up): {len(r['false_alerts'])}"
              + "".join(f"\n    t={x['t']:.0f}s {x['alert']} {x['labels'].get('node', '')}" for x in r["false_alerts"][:10]))


if __name__ == "__main__":
    main()
