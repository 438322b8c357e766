#!/usr/bin/env python3
"""Attribution evaluation through the real plugin ABI (README "Evaluation", report path).

Each trial runs ncclinsp-sim with --random-fault SEED (one fault of a random kind, culprit, size 10-50 %
and onset; 2 % per-op jitter) through the plugin in JSON mode, then ncclinsp-report on the records, and
compares the report's first incident (kind, culprit) with the fault the simulator wrote to its summary.
Prints a confusion matrix of kinds and the share of trials attributed correctly: kind AND culprit (the
straggler's node and rank, the NVLink node, the slow host's or NIC's node, no culprit for a fabric fault).
Kernel-time records cannot name a slow host (coupled collectives slow every rank alike): the trials run
with proxy accounting (NCCLINSP_PROXY=1), the JSON sink writes each rank's cumulative proxy_stats lines,
and the report names the host whose network wire time per byte (SendWait) is slow on its in AND out
edges, as NcclinspHostNetworkSlow does (docs/diagnosis.md). At --speed 0 the simulator gives the plugin's
proxy thread the simulated time of each step transition (sim/README.md), so the wait times are the model's.
Jobs of fewer than 3 nodes are not drawn (--min-nodes must be >= 3): with 2 nodes every network edge
touches both hosts, and no signal on real hardware can tell which of them is slow.

  scripts/evaluate.py --sim build/bin/ncclinsp-sim --plugin build/lib/libnccl-profiler-ncclinsp.so \
      --report build/bin/ncclinsp-report --trials 50 --out /tmp/eval
"""
import argparse, json, os, random, re, shutil, subprocess, sys
from collections import Counter

KIND = {"net_degrade": "network", "slow_host": "network", "slow_nic": "network",
        "straggler": "straggler", "nvlink_degrade": "nvlink"}


def trial(a, seed, nodes):
    out = os.path.join(a.out, f"t{seed}")
    shutil.rmtree(out, ignore_errors=True)
    env = dict(os.environ, NCCL_INSPECTOR_ENABLE="1", NCCL_INSPECTOR_PROM_DUMP="0", NCCLINSP_PROXY="1")
    for k in ("NCCLINSP_SINKS", "NCCL_INSPECTOR_DUMP_DIR", "NCCLINSP_JSON_MAX_BYTES"):
        env.pop(k, None)
    summ = os.path.join(out, "summary.json")
    os.makedirs(out)
    cmd = [a.sim, "--plugin", a.plugin, "--nodes", str(nodes), "--gpus", str(a.gpus), "--duration", str(a.duration),
           "--speed", "0", "--out", out, "--summary", summ, "--random-fault", str(seed), "--seed", str(seed)]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        sys.exit(f"simulator failed: {' '.join(cmd)}\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
    fault = json.load(open(summ))["random_fault"]
    r = subprocess.run([a.report, out, "-q", "-o", os.path.join(out, "report")], capture_output=True, text=True, timeout=300)
    rep = json.load(open(os.path.join(out, "report", "report.json")))
    inc = rep["timeline"]["incidents"]
    kind, culprit = ("none", "")
    if inc:
        # The incident that starts nearest the onset (a 1-bin wobble elsewhere is not the fault).
        t0 = fault["t0"]
        best = min(inc, key=lambda i: abs(i["start_s"] + rep_t0_offset(rep, out) - t0))
        kind, culprit = best["kind"], best["culprit"]
    truth = KIND[fault["kind"]]
    ok_kind = kind == truth
    if truth == "straggler":
        m = re.match(r"(\S+) rank (\d+) \(fsdp\)", culprit)
        ok = ok_kind and m is not None and m.group(1) == fault["node_name"] and int(m.group(2)) == fault["rank"]
    elif truth == "nvlink":
        ok = ok_kind and (a.hosts_by_kind or culprit == fault["node_name"])
    elif fault["kind"] == "net_degrade":
        ok = ok_kind and culprit == ""
    else:  # slow host / NIC: the culprit is the node (a NIC is named by its node), from the proxy_stats lines
        ok = ok_kind and (a.hosts_by_kind or culprit == fault["node_name"])
    if not a.keep:
        shutil.rmtree(out, ignore_errors=True)
    return fault, truth, kind, culprit, ok


def rep_t0_offset(rep, out):
    return 0.0  # the timeline starts at the first op's end, within one step of the simulated t=0


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--sim", required=True)
    p.add_argument("--plugin", required=True)
    p.add_argument("--report", required=True)
    p.add_argument("--trials", type=int, default=50)
    p.add_argument("--first-seed", type=int, default=1)
    p.add_argument("--min-nodes", type=int, default=4)
    p.add_argument("--max-nodes", type=int, default=16)
    p.add_argument("--gpus", type=int, default=2)
    p.add_argument("--duration", type=float, default=40)
    p.add_argument("--out", default="/tmp/ncclinsp-eval")
    p.add_argument("--keep", action="store_true")
    p.add_argument("--hosts-by-kind", action="store_true",
                   help="judge slow host/NIC trials by kind only (what kernel-time records can do; ctest's short run)")
    p.add_argument("--min-correct", type=float, default=0.0, help="exit 1 below this share of correct trials")
    a = p.parse_args()
    if a.min_nodes < 3:
        p.error("--min-nodes must be >= 3: with 2 nodes every network edge touches both hosts (a slow one cannot be told apart)")
    os.makedirs(a.out, exist_ok=True)
    rng = random.Random(a.first_seed)
    conf, n_ok, n_kind, rows = Counter(), 0, 0, []
    by_fault = Counter()  # (injected fault kind, reported kind or "right"): kind AND culprit per fault kind
    for s in range(a.first_seed, a.first_seed + a.trials):
        nodes = rng.randint(a.min_nodes, a.max_nodes)
        fault, truth, kind, culprit, ok = trial(a, s, nodes)
        conf[(truth, kind)] += 1
        by_fault[(fault["kind"], kind)] += 1
        by_fault[(fault["kind"], "right")] += ok
        by_fault[(fault["kind"], "n")] += 1
        n_ok += ok
        n_kind += kind == truth
        desc = {k: fault[k] for k in ("kind", "node_name", "rank", "nic", "pct", "ms") if k in fault}
        print(f"seed {s:4d} nodes {nodes:2d} onset {fault['t0']:5.1f}s {json.dumps(desc)} -> {kind} [{culprit}] "
              f"{'ok' if ok else 'WRONG'}", flush=True)
    kinds = ["network", "straggler", "nvlink", "none", "unknown"]
    print("\nconfusion matrix (rows: injected, columns: reported)")
    print(f"{'':12}" + "".join(f"{k:>11}" for k in kinds))
    for t in kinds[:3]:
        print(f"{t:12}" + "".join(f"{conf[(t, k)]:>11}" for k in kinds))
    print("\nper injected fault kind (reported kind; right = kind AND culprit)")
    print(f"{'':16}" + "".join(f"{k:>11}" for k in kinds[:4]) + f"{'right':>11}")
    for fk in ("net_degrade", "slow_host", "slow_nic", "straggler", "nvlink_degrade"):
        if by_fault[(fk, "n")]:
            print(f"{fk:16}" + "".join(f"{by_fault[(fk, k)]:>11}" for k in kinds[:4])
                  + f"{by_fault[(fk, 'right')]:>7}/{by_fault[(fk, 'n')]:<3}")
    share = n_ok / max(a.trials, 1)
    print(f"\nkind correct: {n_kind}/{a.trials}; kind AND culprit correct (straggler node and rank, NVLink node, "
          f"slow host/NIC node, no culprit for the fabric): {n_ok}/{a.trials} = {share:.1%}")
    sys.exit(0 if share >= a.min_correct else 1)


if __name__ == "__main__":
    main()
