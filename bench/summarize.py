#!/usr/bin/env python3
"""Prints the Markdown summary of a bench/run.sh results folder: every number next to the
baseline measured in the same run, ratios, and the targets (README "Performance"). Standard library only.

Usage: bench/summarize.py <results-dir>
"""
import json
import os
import sys

TARGET_RATIO = 2.5         # per collective through the ABI, vs the do-nothing plugin
TARGET_PER_CHANNEL = 15.0  # ns per extra channel (our cost above the floor's)
TARGET_EXPORT_10K = 20.0   # ms for snapshot + Prometheus text of 10k series
TARGET_FINALIZE = 100.0    # ms for the last finalize (final export)

UNIT = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}


def load(path):
    """run name -> benchmark entry (the median when repetitions were aggregated)."""
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        data = json.load(f)
    out = {}
    for b in data.get("benchmarks", []):
        if b.get("run_type") == "aggregate":
            if b.get("aggregate_name") != "median":
                continue
        elif b.get("run_name") in out and b.get("repetitions", 1) > 1:
            continue
        out[b.get("run_name", b["name"])] = b
    return out


def ns(b, field="real_time"):
    return b[field] * UNIT[b.get("time_unit", "ns")] if b else float("nan")


def fmt(v, digits=1):
    if v != v:  # NaN
        return "n/a"
    return f"{v:,.{digits}f}"


def ok(cond):
    return "met" if cond else "**missed**"


def get(d, name):
    return d.get(name)


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    res = sys.argv[1]
    hot = load(os.path.join(res, "bench_hotpath.json"))
    plug = load(os.path.join(res, "bench_plugin.json"))
    exp = load(os.path.join(res, "bench_export.json"))
    verdicts = []

    allocs = [b.get("allocs_per_op") for d in (hot, plug) for b in d.values()
              if "allocs_per_op" in b and not b["run_name"].startswith("BM_naive")]
    max_allocs = max(allocs) if allocs else float("nan")

    if hot:
        print("## Hot path: collector::record (one op)\n")
        print("| threads | ncclinsp ns/op (per thread) | total Mops/s | naive mutex+map ns/op | total Mops/s | speed-up (throughput) | allocs/op ours / naive |")
        print("|---|---|---|---|---|---|---|")
        for t in (1, 2, 8):
            o = get(hot, f"BM_collector_record/real_time/threads:{t}")
            n = get(hot, f"BM_naive_record/real_time/threads:{t}")
            if not o or not n:
                continue
            print(f"| {t} | {fmt(ns(o))} | {fmt(o['items_per_second'] / 1e6)} | {fmt(ns(n))} | {fmt(n['items_per_second'] / 1e6)} | "
                  f"{fmt(o['items_per_second'] / n['items_per_second'])}x | {o.get('allocs_per_op', 0):g} / {n.get('allocs_per_op', 0):g} |")
        for t in (2, 8):
            o = get(hot, f"BM_collector_record_one_comm/real_time/threads:{t}")
            if o:
                print(f"| {t}, one shared comm | {fmt(ns(o))} | {fmt(o['items_per_second'] / 1e6)} | | | | {o.get('allocs_per_op', 0):g} |")
        print()
        print("## Bucketing (one index)\n")
        print("| bucketer | ns | lower_bound baseline ns | speed-up |")
        print("|---|---|---|---|")
        for name, base, label in (("BM_bucket_pow2", "BM_bucket_lower_bound_pow2", "pow2_bucketer (65 bounds)"),
                                  ("BM_bucket_inspector", "BM_bucket_lower_bound_inspector", "inspector_bucketer (~5k bounds)"),
                                  ("BM_duration_bucket_scan", "BM_duration_bucket_lower_bound", "duration histogram scan (19 bounds)")):
            a, b = get(hot, name), get(hot, base)
            if a and b:
                print(f"| {label} | {fmt(ns(a), 2)} | {fmt(ns(b), 2)} | {fmt(ns(b) / ns(a))}x |")
        print()
        print("## Counters (one increment)\n")
        print("| threads | shard store ns (Mops/s) | shard fetch_add ns (Mops/s) | shared atomic ns (Mops/s) | mutex ns (Mops/s) | shard vs atomic | shard vs mutex |")
        print("|---|---|---|---|---|---|---|")
        for t in (1, 2, 8):
            row = [get(hot, f"{n}/real_time/threads:{t}") for n in
                   ("BM_counter_shard_store", "BM_counter_shard_fetch_add", "BM_counter_shared_atomic", "BM_counter_mutex")]
            if not all(row):
                continue
            cells = [f"{fmt(ns(b), 2)} ({fmt(b['items_per_second'] / 1e6, 0)})" for b in row]
            print(f"| {t} | " + " | ".join(cells) +
                  f" | {fmt(row[0]['items_per_second'] / row[2]['items_per_second'])}x | {fmt(row[0]['items_per_second'] / row[3]['items_per_second'])}x |")
        print()

    if plug:
        print("## Plugin through the exported v7 table (one collective, all its callbacks)\n")
        print("| channels | ncclinsp via driver ns | null plugin via driver ns | ratio | null (handles) via driver ns | ncclinsp direct ns | null direct ns | null (handles) direct ns | driver's own overhead ns |")
        print("|---|---|---|---|---|---|---|---|---|")
        rows = {}
        for c in (1, 4, 16):
            r = {k: get(plug, f"BM_{m}_coll/{w}/{c}") for k, m, w in (
                ("do", "driver", "ours"), ("dn", "driver", "null"), ("dh", "driver", "null_handles"),
                ("to", "direct", "ours"), ("tn", "direct", "null"), ("th", "direct", "null_handles"))}
            if not all(r.values()):
                continue
            rows[c] = {k: ns(v) for k, v in r.items()}
            x = rows[c]
            ratio = x["do"] / x["dn"]
            verdicts.append((f"collective at {c} channel(s): ncclinsp / do-nothing floor (driver) <= {TARGET_RATIO}x",
                             f"{fmt(ratio, 2)}x ({fmt(x['do'])} / {fmt(x['dn'])} ns)", ratio <= TARGET_RATIO))
            print(f"| {c} | {fmt(x['do'])} | {fmt(x['dn'])} | {fmt(ratio, 2)}x | {fmt(x['dh'])} | {fmt(x['to'])} | {fmt(x['tn'])} | {fmt(x['th'])} | {fmt(x['dn'] - x['tn'])} |")
        if 1 in rows and 16 in rows:
            a, b = rows[1], rows[16]
            slope = {k: (b[k] - a[k]) / 15.0 for k in a}
            print()
            print("Per extra channel (slope 1 -> 16 channels), ns:\n")
            print("| path | ncclinsp | do-nothing floor | ncclinsp above floor |")
            print("|---|---|---|---|")
            print(f"| driver (NCCL's sequence) | {fmt(slope['do'])} | {fmt(slope['dn'])} (NULL handles) | {fmt(slope['do'] - slope['dn'])} |")
            print(f"| direct table calls | {fmt(slope['to'])} | {fmt(slope['th'])} (handles, same calls) | {fmt(slope['to'] - slope['th'])} |")
            extra = max(slope["do"] - slope["dn"], slope["to"] - slope["th"])
            verdicts.append((f"per extra channel, ncclinsp above the floor <= {TARGET_PER_CHANNEL} ns",
                             f"{fmt(slope['do'] - slope['dn'])} ns (driver), {fmt(slope['to'] - slope['th'])} ns (direct); "
                             f"total {fmt(slope['to'])} ns direct", extra <= TARGET_PER_CHANNEL))
        print()
        print("| other | ncclinsp ns | null ns | null (handles) ns | ratio vs null |")
        print("|---|---|---|---|---|")
        for label, pat in (("P2P Send, 1 channel (driver)", "BM_driver_p2p_send/{}/1"),
                           ("P2P Send, 4 channels (driver)", "BM_driver_p2p_send/{}/4"),
                           ("ping-pong, 4 channels: enqueue CPU0, complete CPU1 (per op)", "BM_pingpong_coll/{}/4/real_time")):
            o, n, h = (get(plug, pat.format(w)) for w in ("ours", "null", "null_handles"))
            if o and n and h:
                print(f"| {label} | {fmt(ns(o))} | {fmt(ns(n))} | {fmt(ns(h))} | {fmt(ns(o) / ns(n), 2)}x |")
        print()

    if exp:
        print("## Export\n")
        print("| what | series | time ms | size |")
        print("|---|---|---|---|")
        for t in (1000, 10000):
            e, s = get(exp, f"BM_export_prometheus/{t}"), get(exp, f"BM_snapshot_only/{t}")
            if e:
                print(f"| snapshot + Prometheus text, ~{t} series | {e['series']:.0f} | {fmt(ns(e) / 1e6, 3)} | {e['text_bytes'] / 1e3:,.0f} kB |")
                if t == 10000:
                    verdicts.append((f"10k series exported <= {TARGET_EXPORT_10K} ms", f"{fmt(ns(e) / 1e6, 2)} ms ({e['series']:.0f} series)",
                                     ns(e) / 1e6 <= TARGET_EXPORT_10K))
            if s:
                print(f"| of which take_snapshot(), ~{t} series | | {fmt(ns(s) / 1e6, 3)} | |")
        f = next((b for n, b in exp.items() if n.startswith("BM_plugin_finalize_typical_job")), None)
        if f:
            print(f"| plugin finalize of the last comm (final export), typical job | | {fmt(ns(f) / 1e6, 2)} | "
                  f"{f['file_bytes'] / 1e3:,.0f} kB .prom per GPU ({f.get('dropped_table_full', 0):g} ops dropped, table_full) |")
            verdicts.append((f"finalize <= {TARGET_FINALIZE} ms", f"{fmt(ns(f) / 1e6, 2)} ms", ns(f) / 1e6 <= TARGET_FINALIZE))
        print()

    mem_path = os.path.join(res, "bench_memory.jsonl")
    if os.path.exists(mem_path):
        with open(mem_path) as f:
            mem = [json.loads(line) for line in f if line.strip().startswith("{")]
        print("## Resident memory (bounded state)\n")
        print("| path | ops | RSS MiB | ns/op (cumulative) |")
        print("|---|---|---|---|")
        for m in mem:
            if m["path"] == "start":
                continue
            print(f"| {m['path']} | {m['ops']:.0e} | {m['rss_bytes'] / 2**20:.2f} | {fmt(m['seconds'] * 1e9 / max(m['ops'], 1))} |")
        for path in ("collector", "plugin"):
            pts = [m for m in mem if m["path"] == path]
            if len(pts) >= 2:
                grow = pts[-1]["rss_bytes"] - pts[0]["rss_bytes"]
                verdicts.append((f"flat memory ({path}: {pts[0]['ops']:.0e} -> {pts[-1]['ops']:.0e} ops)",
                                 f"{grow / 1024:+.0f} KiB", grow <= 256 * 1024))
        print()

    prox = load(os.path.join(res, "bench_proxy.json"))
    if prox:
        base = ns(get(prox, "proxy/none"))
        print("## Proxy accounting (NCCLINSP_PROXY=1): one 4-channel collective, 8 ProxyOps x 8 steps when emitted\n")
        print("| mode | ns per collective | vs no proxy events | allocs/op |")
        print("|---|---|---|---|")
        for name, label in (("proxy/none", "no proxy events (NCCLINSP_PROXY unset)"), ("proxy/unsampled", "proxy on, op not sampled (8 NULL ProxyOps)"),
                            ("proxy/mix_1_in_16", "proxy on, 1 op in 16 sampled (default)"), ("proxy/sampled", "every op sampled (320 step callbacks)"),
                            ("proxy/none_null_plugin", "do-nothing plugin, no proxy events"),
                            ("proxy/sampled_null_plugin", "do-nothing plugin (handles), every proxy callback")):
            b = get(prox, name)
            if b:
                print(f"| {label} | {fmt(ns(b))} | {fmt(ns(b) / base, 2)}x | {b.get('allocs_per_op', 0):g} |")
        print()

    if allocs:
        verdicts.append(("0 heap allocations per op after warm-up (every ncclinsp and null benchmark)", f"max {max_allocs:g}", max_allocs == 0))
    if verdicts:
        print("## Targets\n")
        print("| target | measured | verdict |")
        print("|---|---|---|")
        for t, m, good in verdicts:
            print(f"| {t} | {m} | {ok(good)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
