#!/usr/bin/env python3
"""Capacity measurement (docs/scale.md): N nodes x G GPUs of .prom files at a 15 s scrape into
one Prometheus and, on the same node_exporters, vmagent -> VictoriaMetrics + vmalert, both
evaluating prometheus/rules/ (scripts/stack.sh --backend both).

The files: 512 simulated ranks cannot keep real time on 2 cores, so one real GPU file is made by
the real plugin under the simulator (the demo's 4x4 job, any NCCLINSP_* cardinality variables
in the environment apply), and every node/GPU gets a copy with its own node, gpu and uuid labels,
rewritten atomically every --write-interval seconds with counters advancing (the plugin's export
rate; node_exporter serves whatever the files hold at scrape time).

Measured over the run, after a warm-up of two scrapes: active series (Prometheus head series;
VictoriaMetrics' series seen in the current hour), samples/s ingested, rule evaluation time per
cycle (Prometheus: sum of the groups' last duration; vmalert: iteration duration), CPU seconds
per second and RSS of every process, node_exporter CPU per node, and data directory growth
(bytes per sample, extrapolated to a day). Prints a markdown table and writes DIR/capacity.json.

    scripts/capacity.py [--nodes 64 --gpus 8 --minutes 10 --scrape 15s] [--root DIR] [--template FILE]
"""
import argparse
import glob
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.join(REPO, "tests", "pipeline"))
import promapi as P  # noqa: E402

COUNTER = re.compile(r"^(\w+?)(_total|_bucket|_sum|_count)\{")


def make_template(out_dir):
    """One GPU file of a network rank, written by the real plugin under the simulator."""
    sim = os.path.join(REPO, "build", "bin", "ncclinsp-sim")
    plugin = os.path.join(REPO, "build", "lib", "libnccl-profiler-ncclinsp.so")
    run = os.path.join(out_dir, "template-run")
    env = dict(os.environ, SLURM_JOB_ID="capacity", NCCL_INSPECTOR_ENABLE="1", NCCL_INSPECTOR_PROM_DUMP="1",
               NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS="1000000")
    subprocess.run([sim, "--plugin", plugin, "--nodes", "4", "--gpus", "4", "--duration", "20", "--speed", "1",
                    "--out", run, "--prom"], env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    files = sorted(glob.glob(os.path.join(run, "node1", "nccl_inspector_metrics_*.prom")))
    return files[0]


class Files:
    """512 copies of the template with their own identity labels; counters advance per rewrite."""

    def __init__(self, template, root, nodes, gpus):
        text = open(template, encoding="utf-8").read()
        self.lines = []
        for l in text.splitlines():
            if not l or l.startswith("#"):
                self.lines.append((l, None, False))
                continue
            lab, v = l.rsplit(" ", 1)
            self.lines.append((lab, float(v), bool(COUNTER.match(l))))
        self.node0 = re.search(r'node="([^"]*)"', text).group(1)
        self.gpu0 = re.search(r'gpu="([^"]*)"', text).group(1)
        self.uuid0 = re.search(r'uuid="([^"]*)"', text).group(1)
        self.targets = []
        for k in range(nodes):
            d = os.path.join(root, f"node{k}")
            os.makedirs(d, exist_ok=True)
            for g in range(gpus):
                uuid = f"GPU-{k:08x}-{g:04x}-4000-8000-{k * gpus + g:012x}"
                self.targets.append((d, f"node{k}", f"GPU{g}", uuid))
        self.series_per_file = sum(1 for _, v, _ in self.lines if v is not None)

    def write(self, step):
        now = time.time()
        for d, node, gpu, uuid in self.targets:
            out = []
            for lab, v, counter in self.lines:
                if v is None:
                    out.append(lab)
                    continue
                lab = lab.replace(f'node="{self.node0}"', f'node="{node}"').replace(
                    f'gpu="{self.gpu0}"', f'gpu="{gpu}"').replace(f'uuid="{self.uuid0}"', f'uuid="{uuid}"')
                if lab.startswith("ncclinsp_export_timestamp_seconds"):
                    val = round(now, 3)
                elif counter:
                    val = v * (1 + step)  # counters grow at the template's own pace
                else:
                    val = v
                out.append(f"{lab} {val:.10g}")
            path = os.path.join(d, f"nccl_inspector_metrics_{uuid}.prom")
            with open(path + ".tmp", "w", encoding="utf-8") as f:
                f.write("\n".join(out) + "\n")
            os.replace(path + ".tmp", path)


def metrics(url):
    """Prometheus text from a /metrics endpoint -> {name{labels}: value}."""
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        text = r.read().decode()
    out = {}
    for l in text.splitlines():
        if l and not l.startswith("#"):
            k, _, v = l.rpartition(" ")
            try:
                out[k] = float(v)
            except ValueError:
                pass
    return out


def pick(m, name, **labels):
    """Sum of the samples of `name` whose labels include `labels`."""
    s = 0.0
    for k, v in m.items():
        if k == name or k.startswith(name + "{"):
            if all(f'{a}="{b}"' in k for a, b in labels.items()):
                s += v
    return s


def proc_cpu(pid):
    with open(f"/proc/{pid}/stat") as f:
        st = f.read().rsplit(")", 1)[1].split()
    return (int(st[11]) + int(st[12])) / os.sysconf("SC_CLK_TCK")


def proc_rss(pid):
    with open(f"/proc/{pid}/status") as f:
        for l in f:
            if l.startswith("VmRSS:"):
                return int(l.split()[1]) * 1024
    return 0


def du(path):
    total = 0
    for dp, _, fs in os.walk(path):
        for f in fs:
            try:
                total += os.path.getsize(os.path.join(dp, f))
            except OSError:
                pass
    return total


def pids(root):
    out = {}
    for f in glob.glob(os.path.join(root, "pids", "*.pid")):
        out[os.path.basename(f)[:-4]] = int(open(f).read().strip())
    return out


def snapshot(root, prom_url, vm_url, vmagent_url, vmalert_url):
    ps = pids(root)
    s = {"t": time.time(), "cpu": {n: proc_cpu(p) for n, p in ps.items()}, "rss": {n: proc_rss(p) for n, p in ps.items()},
         "disk": {"prometheus": du(os.path.join(root, "prometheus-data")), "victoriametrics": du(os.path.join(root, "vm-data"))}}
    pm = metrics(prom_url)
    s["prom"] = {"series": pick(pm, "prometheus_tsdb_head_series"),
                 "samples": pick(pm, "prometheus_tsdb_head_samples_appended_total"),
                 "rule_seconds": pick(pm, "prometheus_rule_group_last_duration_seconds")}
    vm = metrics(vm_url)
    s["vm"] = {"series_hour": pick(vm, "vm_cache_entries", type="storage/hour_metric_ids"),
               "rows": pick(vm, "vm_rows_inserted_total"),
               "data_bytes": pick(vm, "vm_data_size_bytes")}
    va = metrics(vmalert_url)
    groups = {m.group(1) for k in va for m in [re.search(r'group="([^"]*)"', k)]
              if m and k.startswith("vmalert_iteration_duration_seconds_sum")}
    s["vmalert"] = {g: (pick(va, "vmalert_iteration_duration_seconds_sum", group=g),
                        pick(va, "vmalert_iteration_duration_seconds_count", group=g)) for g in groups}
    ag = metrics(vmagent_url)
    s["vmagent"] = {"scraped": pick(ag, "vm_promscrape_scraped_samples_sum")}
    return s


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=64)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--minutes", type=float, default=10)
    ap.add_argument("--scrape", default="15s")
    ap.add_argument("--write-interval", type=float, default=15)
    ap.add_argument("--root")
    ap.add_argument("--template", help="a .prom file of the plugin (default: made by the simulator)")
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()
    root = a.root or tempfile.mkdtemp(prefix="ncclinsp-capacity-")
    os.makedirs(root, exist_ok=True)
    template = a.template or make_template(root)
    files = Files(template, root, a.nodes, a.gpus)
    print(f"template {template}: {files.series_per_file} series per GPU file; "
          f"{a.nodes}x{a.gpus} = {a.nodes * a.gpus} files, {files.series_per_file * a.nodes * a.gpus} series", flush=True)
    files.write(0)
    nodes = ",".join(f"node{k}" for k in range(a.nodes))
    stack = os.path.join(REPO, "scripts", "stack.sh")
    scrape_s = float(a.scrape.rstrip("s"))
    p = subprocess.run([stack, "start", "--nodes", nodes, "--root", root, "--scrape", a.scrape, "--backend", "both",
                        "--timeout", "400"], stdout=subprocess.PIPE, text=True)
    if p.returncode != 0:
        print("stack.sh start failed")
        return 1
    rd = lambda n: open(os.path.join(root, n)).read().strip()  # noqa: E731
    urls = (rd("prom_url"), rd("vm_url"), rd("vmagent_url"), rd("vmalert_url"))
    try:
        step = 0
        t_begin = time.time()
        warm = 2 * scrape_s + 5
        s0 = None
        end = t_begin + warm + a.minutes * 60
        next_write = t_begin + a.write_interval
        while time.time() < end:
            if s0 is None and time.time() >= t_begin + warm:
                s0 = snapshot(root, *urls)
                print(f"measuring for {a.minutes} min from {time.strftime('%H:%M:%S')}", flush=True)
            if time.time() >= next_write:
                step += 1
                tw = time.time()
                files.write(step)
                next_write += a.write_interval
                if step % 8 == 0:
                    print(f"  t={time.time() - t_begin:4.0f}s  rewrote {len(files.targets)} files in {time.time() - tw:.1f}s",
                          flush=True)
            time.sleep(0.5)
        s1 = snapshot(root, *urls)
    finally:
        if not a.keep:
            subprocess.run([stack, "stop", "--root", root])
    dt = s1["t"] - s0["t"]
    gpus = a.nodes * a.gpus
    cpu = {n: (s1["cpu"][n] - s0["cpu"].get(n, 0)) / dt for n in s1["cpu"]}
    ne = [v for n, v in cpu.items() if n.startswith("node_exporter-")]
    r = {
        "nodes": a.nodes, "gpus": gpus, "series_per_gpu_file": files.series_per_file, "scrape_s": scrape_s,
        "window_s": round(dt),
        "prometheus": {
            "active_series": s1["prom"]["series"],
            "samples_per_s": (s1["prom"]["samples"] - s0["prom"]["samples"]) / dt,
            "rule_eval_s_per_cycle": s1["prom"]["rule_seconds"],
            "cpu_cores": cpu.get("prometheus", 0), "rss_bytes": s1["rss"].get("prometheus", 0),
            "disk_bytes_end": s1["disk"]["prometheus"],
            "disk_bytes_growth_per_s": (s1["disk"]["prometheus"] - s0["disk"]["prometheus"]) / dt,
        },
        "victoriametrics": {
            "active_series": s1["vm"]["series_hour"],
            "samples_per_s": (s1["vm"]["rows"] - s0["vm"]["rows"]) / dt,
            # per cycle: every group's mean iteration time over the window, summed
            "rule_eval_s_per_cycle": sum((s1["vmalert"][g][0] - s0["vmalert"].get(g, (0, 0))[0])
                                         / max(1.0, s1["vmalert"][g][1] - s0["vmalert"].get(g, (0, 0))[1])
                                         for g in s1["vmalert"]),
            "cpu_cores": {k: cpu.get(k, 0) for k in ("victoria-metrics", "vmagent", "vmalert")},
            "rss_bytes": {k: s1["rss"].get(k, 0) for k in ("victoria-metrics", "vmagent", "vmalert")},
            "disk_bytes_end": s1["disk"]["victoriametrics"],
            "disk_bytes_growth_per_s": (s1["disk"]["victoriametrics"] - s0["disk"]["victoriametrics"]) / dt,
        },
        "node_exporter_cpu_cores_per_node": {"mean": sum(ne) / len(ne), "max": max(ne)},
        "node_exporter_rss_bytes_mean": sum(v for n, v in s1["rss"].items() if n.startswith("node_exporter-")) / len(ne),
    }
    with open(os.path.join(root, "capacity.json"), "w") as f:
        json.dump(r, f, indent=1)
    pr, vm = r["prometheus"], r["victoriametrics"]
    mb = lambda b: f"{b / 2**20:.0f} MiB"  # noqa: E731
    print(f"\n{a.nodes} nodes x {a.gpus} GPUs, {files.series_per_file} series per GPU file, {scrape_s:g} s scrape, "
          f"measured over {dt:.0f} s (results in {root}/capacity.json)\n")
    print("| | Prometheus 2.42 | VictoriaMetrics 1.79 (vmagent + single node + vmalert) |")
    print("|---|---|---|")
    print(f"| active series | {pr['active_series']:.0f} | {vm['active_series']:.0f} |")
    print(f"| samples/s ingested | {pr['samples_per_s']:.0f} | {vm['samples_per_s']:.0f} |")
    print(f"| rule evaluation per cycle | {pr['rule_eval_s_per_cycle']:.2f} s | {vm['rule_eval_s_per_cycle']:.2f} s |")
    print(f"| CPU (cores) | {pr['cpu_cores']:.2f} | " + ", ".join(f"{k} {v:.2f}" for k, v in vm["cpu_cores"].items()) + " |")
    print(f"| RSS | {mb(pr['rss_bytes'])} | " + ", ".join(f"{k} {mb(v)}" for k, v in vm["rss_bytes"].items()) + " |")
    print(f"| data dir at end / growth | {mb(pr['disk_bytes_end'])} / {pr['disk_bytes_growth_per_s'] / 1024:.0f} KiB/s | "
          f"{mb(vm['disk_bytes_end'])} / {vm['disk_bytes_growth_per_s'] / 1024:.0f} KiB/s |")
    print(f"| node_exporter per node | CPU {r['node_exporter_cpu_cores_per_node']['mean'] * 1000:.1f} mcores mean, "
          f"{r['node_exporter_cpu_cores_per_node']['max'] * 1000:.1f} max; RSS {mb(r['node_exporter_rss_bytes_mean'])} | |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
