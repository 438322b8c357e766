#!/usr/bin/env python3
"""Generate grafana/ncclinsp.json and grafana/inspector-compat.json.

The JSON files are committed; edit this script and rerun it (python3 grafana/gen_dashboards.py)
rather than editing the JSON by hand, so both dashboards keep the same conventions:
every panel uses the `datasource` variable, has a unit, and every multi-value variable is
matched with `=~`.
"""
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
DS = {"type": "prometheus", "uid": "${datasource}"}
RATE = "$__rate_interval"


class Layout:
    """Places panels on the 24-column grid and assigns ids."""

    def __init__(self):
        self.panels = []
        self.next_id = 1
        self.y = 0
        self.x = 0
        self.row_h = 0
        self.row = None  # collapsed row collecting its panels

    def _id(self):
        i = self.next_id
        self.next_id += 1
        return i

    def add_row(self, title, collapsed=False):
        self._newline()
        row = {"type": "row", "id": self._id(), "title": title, "collapsed": collapsed,
               "gridPos": {"h": 1, "w": 24, "x": 0, "y": self.y}, "panels": []}
        self.panels.append(row)
        self.y += 1
        self.row = row if collapsed else None

    def _newline(self):
        if self.x:
            self.y += self.row_h
            self.x = 0
            self.row_h = 0

    def add(self, panel, w=12, h=8):
        if self.x + w > 24:
            self._newline()
        panel["id"] = self._id()
        panel["gridPos"] = {"h": h, "w": w, "x": self.x, "y": self.y}
        self.x += w
        self.row_h = max(self.row_h, h)
        if self.row is not None:
            self.row["panels"].append(panel)
        else:
            self.panels.append(panel)
        return panel


def target(expr, legend="__auto", ref="A", instant=False, fmt="time_series"):
    t = {"datasource": DS, "refId": ref, "expr": expr, "legendFormat": legend,
         "range": not instant, "instant": instant, "format": fmt, "editorMode": "code"}
    return t


def timeseries(title, unit, targets, description="", thresholds=None, decimals=None, min0=True):
    steps = [{"color": "green", "value": None}]
    mode = "off"
    if thresholds:
        steps += [{"color": c, "value": v} for v, c in thresholds]
        mode = "line"
    defaults = {
        "unit": unit,
        "color": {"mode": "palette-classic"},
        "custom": {"drawStyle": "line", "lineWidth": 1, "fillOpacity": 0, "showPoints": "never",
                   "spanNulls": False, "thresholdsStyle": {"mode": mode}},
        "thresholds": {"mode": "absolute", "steps": steps},
    }
    if min0:
        defaults["min"] = 0
    if decimals is not None:
        defaults["decimals"] = decimals
    return {
        "type": "timeseries", "title": title, "description": description, "datasource": DS,
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": {"legend": {"displayMode": "table", "placement": "bottom", "showLegend": True,
                               "calcs": ["lastNotNull", "min", "max"]},
                    "tooltip": {"mode": "multi", "sort": "desc"}},
        "targets": targets,
    }


def table(title, unit, targets, description="", sort_field="Value", thresholds=None):
    steps = [{"color": "red", "value": None}]
    steps += [{"color": c, "value": v} for v, c in (thresholds or [])]
    return {
        "type": "table", "title": title, "description": description, "datasource": DS,
        "fieldConfig": {"defaults": {"unit": unit, "custom": {"cellOptions": {"type": "auto"}},
                                     "thresholds": {"mode": "absolute", "steps": steps}},
                        "overrides": [{"matcher": {"id": "byName", "options": sort_field},
                                       "properties": [{"id": "custom.cellOptions",
                                                       "value": {"type": "color-background"}}]}]},
        "options": {"showHeader": True, "sortBy": [{"displayName": sort_field, "desc": False}]},
        "transformations": [
            {"id": "organize", "options": {"excludeByName": {"Time": True}}},
            {"id": "sortBy", "options": {"fields": {}, "sort": [{"field": sort_field, "desc": False}]}},
        ],
        "targets": targets,
    }


def query_var(name, label, query, multi=True):
    return {
        "name": name, "label": label, "type": "query", "datasource": DS,
        "query": {"query": query, "refId": "PrometheusVariableQueryEditor-VariableQuery"},
        "definition": query, "refresh": 2, "sort": 1, "multi": multi, "includeAll": True,
        "allValue": ".*", "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "options": [], "regex": "", "hide": 0,
    }


DATASOURCE_VAR = {
    "name": "datasource", "label": "Data source", "type": "datasource", "query": "prometheus",
    "current": {}, "options": [], "refresh": 1, "regex": "", "hide": 0, "includeAll": False,
    "multi": False,
}


def dashboard(uid, title, description, tags, panels, variables):
    return {
        "uid": uid, "title": title, "description": description, "tags": tags,
        "editable": True, "graphTooltip": 1, "schemaVersion": 39, "version": 1,
        "time": {"from": "now-30m", "to": "now"}, "refresh": "10s",
        "timepicker": {}, "timezone": "", "fiscalYearStartMonth": 0, "liveNow": False,
        "annotations": {"list": [{
            "builtIn": 1, "datasource": {"type": "grafana", "uid": "-- Grafana --"}, "enable": True,
            "hide": True, "iconColor": "rgba(0, 211, 255, 1)", "name": "Annotations & Alerts",
            "type": "dashboard"}]},
        "links": [], "templating": {"list": [DATASOURCE_VAR] + variables}, "panels": panels,
    }


# --------------------------------------------------------------------------------------------
# Native dashboard
# --------------------------------------------------------------------------------------------

def busbw(sel, by):
    """Window bus bandwidth (GB/s) from the counters, aggregated by `by`."""
    return (f"sum by ({by}) (rate(ncclinsp_bus_bytes_total{{{sel}}}[{RATE}]))\n"
            f"/\nsum by ({by}) (rate(ncclinsp_busy_seconds_total{{{sel}}}[{RATE}]))\n/ 1e9")


def native():
    L = Layout()
    # The job key of the rules (job_id: Slurm/PBS/LSF/Flux job id, <namespace>/<name> on
    # Kubernetes), not the Slurm-only label, which is "unknown" elsewhere and would merge jobs.
    J = 'job_id=~"$job"'
    N = 'node=~"$node"'
    C = 'comm_name=~"$comm_name"'
    K = 'collective=~"$collective"'
    COLL = f'{J}, {N}, {C}, {K}, collective!~"Send|Recv"'
    P2P = f'{J}, {N}, {C}, collective=~"Send|Recv"'

    L.add_row("Bus bandwidth (from counters: rate(bus bytes) / rate(busy seconds))")
    L.add(timeseries(
        "Bus bandwidth: NVLink only (n_nodes=1)", "GBs",
        [target(busbw(f'{COLL}, n_nodes="1"', "collective, message_size"),
                "{{collective}} {{message_size}}")],
        "Time-weighted window bus bandwidth of communicators within one node "
        "(n_nodes=\"1\"), all selected nodes/GPUs merged."))
    L.add(timeseries(
        "Bus bandwidth: network (n_nodes>1)", "GBs",
        [target(busbw(f'{COLL}, n_nodes!="1"', "collective, message_size, n_nodes"),
                "{{collective}} {{message_size}} ({{n_nodes}} nodes)")],
        "Communicators spanning nodes (n_nodes!=\"1\"): traffic goes over the network as well "
        "as NVLink. A drop here and not in the NVLink panel points at the network."))
    L.add(timeseries(
        "Framework throughput (optional: ncclinsp_sim_step_tflops)", "tflops",
        [target('avg by (node) (ncclinsp_sim_step_tflops{node=~"$node"})', "{{node}}"),
         target('avg(ncclinsp_sim_step_tflops{node=~"$node"})', "job mean", ref="B")],
        "Per-GPU step throughput as the training framework reports it. ncclinsp itself does "
        "not emit this: the job simulator writes ncclinsp_sim_step_tflops; a real job needs its "
        "own exporter (rename the metric here). Empty when absent.", min0=False), w=24, h=7)

    L.add_row("Execution time (histogram ncclinsp_op_duration_seconds)")
    for q in ("0.5", "0.99"):
        L.add(timeseries(
            f"Exec time p{int(float(q) * 100)} by collective and size", "s",
            [target(f"histogram_quantile({q}, sum by (le, collective, message_size, n_nodes) "
                    f"(rate(ncclinsp_op_duration_seconds_bucket{{{COLL}}}[{RATE}])))",
                    "{{collective}} {{message_size}} n_nodes={{n_nodes}}")],
            "Quantile estimated from the duration histogram (linear interpolation inside a "
            "bucket), all selected ranks merged.", min0=False))
    L.add(timeseries(
        "Ops per second by collective", "ops",
        [target(f"sum by (collective, n_nodes) (rate(ncclinsp_ops_total{{{J}, {N}, {C}, {K}}}[{RATE}]))",
                "{{collective}} n_nodes={{n_nodes}}")]), w=24, h=7)

    L.add_row("P2P Send / Recv")
    L.add(timeseries(
        "P2P bus bandwidth (Send / Recv)", "GBs",
        [target(busbw(P2P, "collective, message_size, n_nodes"),
                "{{collective}} {{message_size}} n_nodes={{n_nodes}}")],
        "Send/Recv have bus factor 1. n_nodes=\"1\": NVLink peers; otherwise the peer may be "
        "remote."))
    L.add(timeseries(
        "P2P exec time p99 (Send / Recv)", "s",
        [target(f"histogram_quantile(0.99, sum by (le, collective, message_size) "
                f"(rate(ncclinsp_op_duration_seconds_bucket{{{P2P}}}[{RATE}])))",
                "{{collective}} {{message_size}}")], min0=False))

    L.add_row("Per-host attribution (host bus bandwidth / job median)")
    by_node = "job_id, node, comm_name, n_nodes, collective, message_size"
    by_grp = "job_id, comm_name, n_nodes, collective, message_size"
    sel_all = f"{J}, {C}, {K}"  # median over ALL nodes of the job, not only the selected ones
    host = busbw(f"{sel_all}, {N}", by_node)
    med = f"quantile by ({by_grp}) (0.5,\n{busbw(sel_all, by_node)}\n)"
    ratio = f"(\n{host}\n)\n/ on ({by_grp}) group_left\n{med}"
    L.add(table(
        "Hosts vs job median (lowest first)", "percentunit",
        [target(f"sort(\n{ratio}\n)", instant=True, fmt="table")],
        "Each node's bus bandwidth divided by the median over the job's nodes for the same "
        "comm_name, collective and message size (1 = typical host). The most deviating hosts "
        "are at the top. Alert NcclinspHostBelowJobMedian fires below 0.85.",
        thresholds=[(0.85, "orange"), (0.95, "green")]), w=12, h=10)
    L.add(timeseries(
        "Worst ratio to job median per host", "percentunit",
        [target(f"min by (node) (\n{ratio}\n)", "{{node}}")],
        "For each node, its lowest bandwidth ratio to the job median over all "
        "comm/collective/size groups. One line dipping alone names the slow host.",
        thresholds=[(0.85, "red")], min0=False), w=12, h=10)

    L.add_row("Attribution: fabric, host/NIC, straggler rank or NVLink (docs/diagnosis.md)")
    L.add(timeseries(
        "Degraded communicators (in-process detector)", "short",
        [target(f"max by (comm_name, n_nodes) (ncclinsp_busbw_degraded{{{J}, {C}}})",
                "{{comm_name}} n_nodes={{n_nodes}}")],
        "1 while the in-process detector flags a communicator (any rank, collective, size). Every "
        "n_nodes>1 comm at once: fabric or a host on every path; only the n_nodes=1 comm of one "
        "node: its NVLink. The panels beside name the culprit."), w=12)
    L.add(timeseries(
        "Network wire time per byte, in and out, per GPU / job median (slow host or NIC)", "short",
        [target(f"ncclinsp_gpu:proxy_link_slowness_ratio_to_job_median:rate1m{{{J}, {N}}}", "{{node}} {{uuid}}")],
        "Each GPU's sampled proxy send/network seconds per byte (the steps' own time on the wire, "
        "queueing behind earlier steps excluded), the faster of its in and out edges, over the job's "
        "median GPU (NCCLINSP_PROXY=1). A GPU's edges run over the NIC next to it; a slow NIC or host "
        "is an endpoint of every slow edge, its neighbours of one each: one line rising alone names "
        "the NIC (both lines of a node: the host); alert NcclinspHostNetworkSlow fires above 1.15 "
        "while a network comm is degraded.",
        thresholds=[(1.15, "red")], min0=False), w=12)
    L.add(timeseries(
        "Transient degradations (congestion bursts) per 10 min, and their mean depth", "short",
        [target(f"sum by (comm_name, n_nodes) (increase(ncclinsp_busbw_transients_total{{{J}, {C}}}[10m]))",
                "{{comm_name}} n_nodes={{n_nodes}} episodes"),
         target(f"sum by (comm_name, n_nodes) (increase(ncclinsp_busbw_transient_depth_total{{{J}, {C}}}[10m]))\n"
                f"/ sum by (comm_name, n_nodes) (increase(ncclinsp_busbw_transients_total{{{J}, {C}}}[10m]))",
                "{{comm_name}} n_nodes={{n_nodes}} mean depth")],
        "Short drops the in-process detector saw end before they were sustained "
        "(NCCLINSP_DETECT_PERSIST_S, 10 s): congestion from other jobs on a shared fabric, never an "
        "alert. Episodes are counted per rank and key (collective, size), so one burst on a "
        "communicator counts once per rank; depth = 1 - lowest ratio to baseline. Many, or deep, "
        "bursts say the fabric is shared and busy."), w=12)
    L.add(timeseries(
        "Rank exec time per op / communicator median (straggler: lowest)", "percentunit",
        [target(f"min by (node, comm_name, rank) (ncclinsp:exec_ratio_to_comm_median:rate1m{{{J}, {N}, {C}}})",
                "{{node}} {{comm_name}} rank {{rank}}")],
        "The last rank to arrive has the shortest exec time (its peers wait inside the kernel): "
        "a line well below 1 names the straggler rank and node. Network faults leave every "
        "line at 1. Alert NcclinspRankStraggler fires below 0.80.",
        thresholds=[(0.8, "red")], min0=False), w=12)
    L.add(timeseries(
        "Proxy wait per node by direction and state", "s",
        [target(f"ncclinsp_node:proxy_wait_seconds:rate1m{{{J}, {N}}}", "{{node}} {{direction}}/{{state}}")],
        "Seconds per second the sampled proxy steps waited: send/network on the slow sender, "
        "recv/network downstream of it, send/gpu on a late GPU."), w=12)

    L.add_row("Health")
    HC = f"{J}, {N}, {C}"
    L.add(timeseries(
        "In-flight ops", "short",
        [target(f"sum by (node, comm_name) (ncclinsp_inflight_ops{{{HC}}})", "{{node}} {{comm_name}}")]),
        w=8)
    L.add(timeseries(
        "Oldest in-flight op age (hang signal)", "s",
        [target(f"max by (node, comm_name) (ncclinsp_oldest_inflight_age_seconds{{{HC}}})",
                "{{node}} {{comm_name}}")],
        "Age of the oldest op started and not completed. The hang alerts name the rank that keeps it waiting "
        "(docs/runbooks.md, Hung communicators): NcclinspAllRanksStuck after 60 s, NcclinspRankNeverJoined "
        "after 120 s (warning) and 480 s (page).", thresholds=[(60, "red")]), w=8)
    L.add(timeseries(
        "Seconds since last completion", "s",
        [target(f"max by (node, comm_name) (ncclinsp_seconds_since_last_completion{{{HC}}})",
                "{{node}} {{comm_name}}")]), w=8)
    L.add(timeseries(
        "Dropped events per second", "eps",
        [target(f"sum by (node, reason) (rate(ncclinsp_dropped_events_total{{{J}, {N}}}[{RATE}]))",
                "{{node}} {{reason}}")],
        "Events the plugin could not record (pool/table/ring full). Non-zero means the other "
        "panels undercount. Alert NcclinspDroppedEvents."), w=8)
    L.add(timeseries(
        "Invalid / abandoned / filtered ops per second", "ops",
        [target(f"sum by (node) (rate(ncclinsp_invalid_ops_total{{{HC}}}[{RATE}]))", "{{node}} invalid"),
         target(f"sum by (node) (rate(ncclinsp_abandoned_ops_total{{{HC}}}[{RATE}]))",
                "{{node}} abandoned", ref="B"),
         target(f"sum by (node, reason) (rate(ncclinsp_filtered_ops_total{{{J}, {N}}}[{RATE}]))",
                "{{node}} filtered {{reason}}", ref="C")]), w=8)
    L.add(timeseries(
        "Time since last file rewrite (exporter age)", "s",
        [target(f"max by (node, gpu) (time() - ncclinsp_export_timestamp_seconds{{{J}, {N}}})",
                "{{node}} {{gpu}}")],
        "Alert NcclinspExporterStale fires above 60 s.", thresholds=[(60, "red")]), w=8)

    variables = [
        query_var("job", "Job", "label_values(ncclinsp_ops_total, job_id)"),
        query_var("node", "Node", 'label_values(ncclinsp_ops_total{job_id=~"$job"}, node)'),
        query_var("comm_name", "Communicator",
                  'label_values(ncclinsp_ops_total{job_id=~"$job", node=~"$node"}, comm_name)'),
        query_var("collective", "Collective",
                  'label_values(ncclinsp_ops_total{job_id=~"$job", node=~"$node", '
                  'comm_name=~"$comm_name"}, collective)'),
    ]
    return dashboard(
        "ncclinsp-job", "ncclinsp: NCCL job communication",
        "NCCL collective bandwidth, latency, per-host attribution and health from the ncclinsp "
        "profiler plugin (native counters and histograms). See grafana/README.md.",
        ["ncclinsp", "nccl"], L.panels, variables)


# --------------------------------------------------------------------------------------------
# Inspector-compatible dashboard: only Inspector's four gauge families and Inspector's labels.
# --------------------------------------------------------------------------------------------

def compat():
    L = Layout()
    sel = 'slurm_job_id=~"$job", node=~"$node", comm_name=~"$comm_name"'
    nv, net = 'n_nodes="1"', 'n_nodes!="1"'

    def four(metric_bw, metric_t, op_sel):
        out = []
        for fabric, fsel, by, leg in (
                ("NVLink only", nv, "message_size, nranks", "{{message_size}} nranks={{nranks}}"),
                ("NET", net, "message_size, nranks, n_nodes",
                 "{{message_size}} nranks={{nranks}} n_nodes={{n_nodes}}")):
            out.append(timeseries(
                f"Bus bandwidth, {fabric}", "GBs",
                [target(f"avg by ({by}) ({metric_bw}{{{sel}, {op_sel}, {fsel}}})", leg)],
                "Mean over ranks of Inspector's per-window geometric-mean bus bandwidth."))
            out.append(timeseries(
                f"Exec time, {fabric}", "µs",
                [target(f"avg by ({by}) ({metric_t}{{{sel}, {op_sel}, {fsel}}})", leg)],
                "Mean over ranks of Inspector's per-window mean execution time.", min0=False))
        # order: NVLink bw, NVLink time, NET bw, NET time
        return out

    rows = [("P2P Recv", False, "nccl_p2p_bus_bandwidth_gbs", "nccl_p2p_exec_time_microseconds",
             'p2p_operation="Recv"'),
            ("P2P Send", True, "nccl_p2p_bus_bandwidth_gbs", "nccl_p2p_exec_time_microseconds",
             'p2p_operation="Send"')]
    for coll, collapsed in (("ReduceScatter", False), ("AllReduce", False), ("AllGather", False),
                            ("Broadcast", True), ("Reduce", True), ("AlltoAll", True)):
        rows.append((coll, collapsed, "nccl_bus_bandwidth_gbs",
                     "nccl_collective_exec_time_microseconds", f'collective="{coll}"'))
    for title, collapsed, mbw, mt, op in rows:
        L.add_row(f"{title}", collapsed=collapsed)
        for p in four(mbw, mt, op):
            L.add(p, w=6, h=8)

    variables = [
        query_var("job", "Slurm job", "label_values(nccl_bus_bandwidth_gbs, slurm_job_id)"),
        query_var("node", "Node", 'label_values(nccl_bus_bandwidth_gbs{slurm_job_id=~"$job"}, node)'),
        query_var("comm_name", "Communicator",
                  'label_values(nccl_bus_bandwidth_gbs{slurm_job_id=~"$job", node=~"$node"}, comm_name)'),
    ]
    return dashboard(
        "ncclinsp-inspector-compat", "NCCL Inspector compatible: job performance",
        "Uses only NCCL Inspector's four gauge families and labels, so it works with files "
        "written by NVIDIA's Inspector plugin or by ncclinsp. No placeholders, no cluster label "
        "required. See grafana/README.md.",
        ["ncclinsp", "nccl-inspector"], L.panels, variables)


def main():
    for name, d in (("ncclinsp.json", native()), ("inspector-compat.json", compat())):
        with open(os.path.join(HERE, name), "w", encoding="utf-8") as f:
            json.dump(d, f, indent=2, ensure_ascii=False)
            f.write("\n")
        print("wrote", os.path.join(HERE, name))


if __name__ == "__main__":
    main()
