#!/usr/bin/env python3
"""Lint the Grafana dashboards (and the metric names used by the Prometheus rules).

usage: lint_dashboards.py [--repo DIR] [dashboard.json ...]
Default dashboards: grafana/ncclinsp.json (native) and grafana/inspector-compat.json (compat).

Checks
  - valid JSON; a `datasource` variable of type datasource with query `prometheus`;
  - every non-row panel has fieldConfig.defaults.unit and uses {"type":"prometheus",
    "uid":"${datasource}"} (panel and each target); template query variables too;
  - no other datasource reference (private uids, ${prom_datasource}, __inputs placeholders);
  - no `your_` placeholder anywhere;
  - every metric name in every expr / variable query is documented in docs/metrics.md
    (histograms: _bucket/_sum/_count) or is a recording rule in prometheus/rules/*.yml;
    node_exporter/scrape metrics are allowed in the native dashboard only if listed in SCRAPE_METRICS;
  - every label in matchers and grouping clauses is one we emit (docs/metrics.md) or a scrape label;
  - no `=` / `!=` matcher whose value uses a multi-value/All variable (needs =~ / !~);
  - the compat dashboard uses only Inspector's four families and Inspector's labels;
  - metric names in the rule files exist too.
Exit 0 when clean, 1 with one line per finding.
"""
import argparse
import glob
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import promapi as P  # noqa: E402

COMPAT_FAMILIES = {"nccl_bus_bandwidth_gbs", "nccl_collective_exec_time_microseconds",
                   "nccl_p2p_bus_bandwidth_gbs", "nccl_p2p_exec_time_microseconds"}
INSPECTOR_LABELS = {"version", "slurm_job_id", "node", "gpu", "comm_name", "n_nodes", "nranks",
                    "collective", "message_size", "algo_proto", "p2p_operation"}
SCRAPE_LABELS = {"job", "instance", "node_instance", "le", "__name__", "fabric", "file"}
SCRAPE_METRICS = {"up", "node_textfile_mtime_seconds", "node_textfile_scrape_error", "ALERTS"}
# dcgm-exporter's families, joined by UUID in the rules (docs/dcgm.md).
DCGM_PREFIX = "DCGM_FI_"
# Per-job parameters the rules read, written by the operator (docs/runbooks.md "Thresholds").
PARAMETER_METRICS = {"ncclinsp_hang_threshold_seconds"}
DS_REF = {"type": "prometheus", "uid": "${datasource}"}


def documented(repo):
    """(metric names, label names) from docs/metrics.md."""
    text = open(os.path.join(repo, "docs", "metrics.md"), encoding="utf-8").read()
    ticks = re.findall(r"`([^`]+)`", text)
    metrics, labels, hist = set(), set(), set()
    for row in text.splitlines():
        m = re.match(r"\|\s*`((?:nccl|ncclinsp)_\w+)`\s*\|\s*(\w+)", row)
        if m and m.group(2) == "histogram":
            hist.add(m.group(1))
    for t in ticks:
        for w in re.findall(r"\b(?:nccl|ncclinsp)_[a-z0-9_]+\b", t):
            metrics.add(w)
        for w in re.split(r"[,\s{}=\"]+", t):
            if re.fullmatch(r"[a-z_][a-z0-9_]*", w):
                labels.add(w)
    for h in hist:
        metrics |= {h + "_bucket", h + "_sum", h + "_count"}
    metrics.discard("nccl_inspector_metrics_")
    return metrics, labels


def recording_rules(repo):
    recs = set()
    exprs = []
    for f in sorted(glob.glob(os.path.join(repo, "prometheus", "rules", "*.yml"))):
        text = open(f, encoding="utf-8").read()
        recs |= set(re.findall(r"^\s*-?\s*record:\s*([\w:]+)", text, re.M))
        # expr: single line or block scalar
        for m in re.finditer(r"^(\s*)expr:\s*(\|[-+]?\s*\n((?:\1\s+.*\n?)+)|(.+))", text, re.M):
            exprs.append((f, m.group(3) if m.group(3) else m.group(4)))
    return recs, exprs


def lint_dashboard(path, compat, metrics, labels, recs, findings):
    def bad(msg):
        findings.append(f"{os.path.relpath(path)}: {msg}")

    try:
        raw = open(path, encoding="utf-8").read()
        dash = json.loads(raw)
    except (OSError, json.JSONDecodeError) as e:
        bad(f"invalid JSON: {e}")
        return
    if re.search(r"your_", raw, re.I):
        bad("contains a `your_` placeholder")
    if "__inputs" in dash or "${DS_" in raw:
        bad("contains export placeholders (__inputs / ${DS_...})")

    vars_ = P.variables(dash)
    dsv = [v for v in vars_ if v.get("type") == "datasource"]
    if len(dsv) != 1 or dsv[0].get("name") != "datasource" or dsv[0].get("query") != "prometheus":
        bad("needs exactly one variable `datasource` of type datasource with query `prometheus`")
    multi = P.multi_value_vars(dash)
    allowed_metrics = COMPAT_FAMILIES if compat else (metrics | recs | SCRAPE_METRICS)
    allowed_labels = INSPECTOR_LABELS if compat else (labels | SCRAPE_LABELS)

    def check_expr(where, expr):
        for n in sorted(P.metric_names(expr)):
            if n not in allowed_metrics:
                bad(f"{where}: metric {n!r} is not " + ("one of Inspector's four families" if compat
                                                         else "in docs/metrics.md nor a recording rule"))
        labs = P.grouping_labels(expr) | {m[0] for m in P.matchers(expr)}
        for lab in sorted(labs):
            if lab not in allowed_labels and not (lab == "le" and not compat):
                bad(f"{where}: label {lab!r} is not one we emit" + (" (Inspector labels only)" if compat else ""))
        for lab, op, val in P.matchers(expr):
            used = P.uses_var(val, multi)
            if used and op in ("=", "!="):
                bad(f"{where}: `{lab}{op}\"{val}\"` uses multi-value variable(s) {sorted(used)}; use =~ / !~")

    for v in vars_:
        if v.get("type") == "query":
            if v.get("datasource") != DS_REF:
                bad(f"variable {v.get('name')}: datasource must be {DS_REF}")
            q = P.variable_query(v)
            m = re.match(r"\s*label_values\((.*),\s*(\w+)\)\s*$", q, re.S)
            if not m:
                bad(f"variable {v.get('name')}: expected label_values(selector, label), got {q!r}")
                continue
            check_expr(f"variable {v['name']}", m.group(1))
            if m.group(2) not in allowed_labels:
                bad(f"variable {v['name']}: label {m.group(2)!r} is not one we emit")
        elif v.get("type") not in ("datasource", "custom", "interval", "constant", "textbox"):
            bad(f"variable {v.get('name')}: unexpected type {v.get('type')}")

    panels = list(P.iter_panels(dash))
    if not panels:
        bad("no panels")
    ids = [p.get("id") for p in panels]
    if len(ids) != len(set(ids)):
        bad("duplicate panel ids")
    for p in panels:
        title = p.get("title") or f"id {p.get('id')}"
        where = f"panel {title!r}"
        unit = p.get("fieldConfig", {}).get("defaults", {}).get("unit")
        if not unit:
            bad(f"{where}: no unit (fieldConfig.defaults.unit)")
        if p.get("datasource") != DS_REF:
            bad(f"{where}: datasource must be {DS_REF}, got {p.get('datasource')}")
        targets = p.get("targets") or []
        if not targets:
            bad(f"{where}: no targets")
        for t in targets:
            if "datasource" in t and t["datasource"] != DS_REF:
                bad(f"{where} target {t.get('refId')}: datasource must be {DS_REF}")
            if not t.get("expr"):
                bad(f"{where} target {t.get('refId')}: empty expr")
                continue
            check_expr(f"{where} target {t.get('refId')}", t["expr"])

    # Any datasource reference anywhere must be the variable (or Grafana's built-in annotations).
    def walk(o, path="$"):
        if isinstance(o, dict):
            ds = o.get("datasource")
            if isinstance(ds, dict) and ds.get("uid") not in ("${datasource}", "-- Grafana --"):
                bad(f"{path}: private datasource reference {ds}")
            if isinstance(ds, str) and ds not in ("${datasource}", "$datasource", "-- Grafana --"):
                bad(f"{path}: datasource reference {ds!r}")
            for k, v in o.items():
                walk(v, f"{path}.{k}")
        elif isinstance(o, list):
            for i, v in enumerate(o):
                walk(v, f"{path}[{i}]")
    walk(dash)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser()
    ap.add_argument("--repo", default=os.path.abspath(os.path.join(here, "..", "..")))
    ap.add_argument("dashboards", nargs="*")
    a = ap.parse_args()
    metrics, labels = documented(a.repo)
    recs, rule_exprs = recording_rules(a.repo)
    findings = []
    dashboards = a.dashboards or [os.path.join(a.repo, "grafana", "ncclinsp.json"),
                                  os.path.join(a.repo, "grafana", "inspector-compat.json")]
    for d in dashboards:
        lint_dashboard(d, "compat" in os.path.basename(d), metrics, labels, recs, findings)
    # Parameter series the operator writes (not the plugin) are documented where they are used.
    runbooks = open(os.path.join(a.repo, "docs", "runbooks.md"), encoding="utf-8").read()
    params = {n for n in PARAMETER_METRICS if f"`{n}" in runbooks}
    for f, expr in rule_exprs:
        for n in sorted(P.metric_names(expr)):
            if n not in metrics | recs | SCRAPE_METRICS | params and not n.startswith(DCGM_PREFIX):
                findings.append(f"{os.path.relpath(f)}: metric {n!r} in `{expr.strip()[:60]}` is undocumented")
    for line in findings:
        print(line)
    n_panels = sum(len(list(P.iter_panels(json.load(open(d))))) for d in dashboards if os.path.exists(d))
    print(f"lint_dashboards: {len(dashboards)} dashboards, {n_panels} panels, "
          f"{len(rule_exprs)} rule exprs, {len(findings)} finding(s)")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
