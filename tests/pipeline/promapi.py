"""Helpers shared by the pipeline tests and the end-to-end test (stdlib only).

- Prom: a small Prometheus HTTP API client (query, query_range, targets, rules, alerts, waits).
- Dashboard helpers: iterate panels/targets of a Grafana dashboard JSON, know which variables are
  multi-value, substitute Grafana variables with concrete values or `.*`.
- PromQL helpers: extract metric names, label matchers and grouping labels from an expression
  (a light tokenizer, good enough for lint; not a full PromQL parser).
- stack(): context manager around scripts/stack.sh start/stop; backends(root): a Prom client per
  backend the stack runs (Prometheus, VictoriaMetrics).
- Webhook: a local Alertmanager webhook receiver that records every notification.

Typical end-to-end use:

    from promapi import Prom, stack, check_dashboard
    with stack(root, ["node0", "node1"]) as prom:
        prom.wait_for_series('ncclinsp_ops_total', timeout=30)
        for r in check_dashboard(prom, "grafana/ncclinsp.json", {"job": "4242"}):
            assert r.ok, r
"""
from __future__ import annotations

import contextlib
import http.server
import json
import math
import os
import re
import shutil
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
STACK_SH = os.path.join(REPO, "scripts", "stack.sh")


class PromError(RuntimeError):
    pass


class Prom:
    def __init__(self, url: str, timeout: float = 5.0, targets_url: str | None = None, name: str = ""):
        self.url = url.rstrip("/")
        self.timeout = timeout
        # VictoriaMetrics: the query API is victoria-metrics', the scrape targets are vmagent's.
        self.targets_url = (targets_url or url).rstrip("/")
        self.name = name or "prometheus"

    def _get(self, path: str, params: dict | None = None, base: str | None = None):
        q = ("?" + urllib.parse.urlencode(params)) if params else ""
        try:
            with urllib.request.urlopen((base or self.url) + path + q, timeout=self.timeout) as r:
                body = r.read().decode()
        except urllib.error.HTTPError as e:  # Prometheus reports query errors as 400/422 + JSON
            body = e.read().decode()
        d = json.loads(body)
        if d.get("status") != "success":
            raise PromError(f"{path} {params}: {d.get('errorType')}: {d.get('error')}")
        return d["data"]

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + "/-/ready", timeout=self.timeout) as r:
                return r.status == 200
        except Exception:
            return False

    def query(self, expr: str, at: float | None = None) -> list:
        p = {"query": expr}
        if at is not None:
            p["time"] = f"{at:.3f}"
        return self._get("/api/v1/query", p)["result"]

    def query_range(self, expr: str, start: float, end: float, step: float = 1.0) -> list:
        return self._get("/api/v1/query_range",
                         {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": step})["result"]

    def series(self, match: str, start: float | None = None) -> list:
        p = {"match[]": match}
        if start is not None:
            p["start"] = f"{start:.3f}"
        return self._get("/api/v1/series", p)

    def targets(self) -> list:
        return self._get("/api/v1/targets", {"state": "active"}, base=self.targets_url)["activeTargets"]

    def rules(self) -> list:
        return self._get("/api/v1/rules")["groups"]

    def alerts(self, state: str | None = "firing") -> list:
        a = self._get("/api/v1/alerts")["alerts"]
        return [x for x in a if state is None or x["state"] == state]

    def label_values(self, label: str, match: str | None = None, start: float | None = None,
                     end: float | None = None) -> list[str]:
        """What Grafana's label_values(match, label) returns (the /api/v1/label/<l>/values API)."""
        p = {}
        if match:
            p["match[]"] = match
        if start is not None:
            p["start"] = f"{start:.3f}"
        if end is not None:
            p["end"] = f"{end:.3f}"
        return self._get(f"/api/v1/label/{urllib.parse.quote(label)}/values", p or None)

    def range_values(self, expr: str, start: float, end: float, step: float = 1.0):
        """Range query -> [(labels, [(t, float value), ...])]."""
        return [(r["metric"], [(float(t), float(v)) for t, v in r["values"]])
                for r in self.query_range(expr, start, end, step)]

    def firing(self, alertname: str, start: float, end: float, step: float = 1.0, state: str = "firing",
               **labels) -> list[tuple[dict, float, float]]:
        """When an alert was in `state` between start and end, from Prometheus's own ALERTS series:
        [(alert labels, first t, last t)], earliest first. labels: exact-match filters."""
        sel = [f'alertname="{alertname}"', f'alertstate="{state}"']
        sel += [f'{k}="{v}"' for k, v in labels.items()]
        out = []
        for m, pts in self.range_values("ALERTS{" + ",".join(sel) + "}", start, end, step):
            if pts:
                m = {k: v for k, v in m.items() if k not in ("__name__", "alertstate")}
                out.append((m, pts[0][0], pts[-1][0]))
        return sorted(out, key=lambda x: x[1])

    def values(self, expr: str, at: float | None = None) -> list[tuple[dict, float]]:
        """Instant query -> [(labels, float value)]."""
        out = []
        for r in self.query(expr, at):
            out.append((r["metric"], float(r["value"][1])))
        return out

    def wait_for(self, pred, timeout: float, interval: float = 0.5, what: str = "condition"):
        """Poll pred() until it returns a truthy value; return it, or raise TimeoutError."""
        deadline = time.monotonic() + timeout
        last_exc = None
        while True:
            try:
                v = pred()
                if v:
                    return v
            except (PromError, OSError, ValueError) as e:
                last_exc = e
            if time.monotonic() >= deadline:
                raise TimeoutError(f"timed out after {timeout}s waiting for {what}"
                                   + (f" (last error: {last_exc})" if last_exc else ""))
            time.sleep(interval)

    def wait_for_series(self, expr: str, timeout: float = 30, min_results: int = 1, finite=True):
        def ok():
            r = self.values(expr)
            if finite:
                r = [x for x in r if math.isfinite(x[1])]
            return r if len(r) >= min_results else None
        return self.wait_for(ok, timeout, what=f"{min_results} result(s) of {expr!r}")

    def wait_for_alert(self, name: str, timeout: float, state: str = "firing", **labels):
        def ok():
            return [a for a in self.alerts(state) if a["labels"].get("alertname") == name
                    and all(a["labels"].get(k) == v for k, v in labels.items())]
        return self.wait_for(ok, timeout, interval=1.0, what=f"alert {name} {labels} {state}")


def missing_inputs(backend: str, built: list[str]) -> int | None:
    """Before a real-stack test: the servers scripts/stack.sh starts for `backend` (prometheus,
    victoriametrics or both; $NODE_EXPORTER_BIN etc. override the Debian paths) and the files it needs
    built. 1 (fail) where a server is missing, 77 (skip) where a file is not built, else None."""
    need = [("NODE_EXPORTER_BIN", "/usr/bin/prometheus-node-exporter"),
            ("ALERTMANAGER_BIN", "/usr/bin/prometheus-alertmanager")]
    if backend != "victoriametrics":
        need.append(("PROMETHEUS_BIN", "/usr/bin/prometheus"))
    if backend != "prometheus":
        need += [("VM_BIN", "/usr/bin/victoria-metrics"), ("VMAGENT_BIN", "/usr/bin/vmagent"),
                 ("VMALERT_BIN", "/usr/bin/vmalert")]
    for env, b in need:
        if not os.access(os.environ.get(env, b), os.X_OK):
            print(f"FAIL: {b} not installed (scripts/test.sh installs it)")
            return 1
    for f in built:
        if not os.path.exists(f):
            print(f"SKIP: {f} not built")
            return 77
    return None


@contextlib.contextmanager
def stack(root: str, nodes: list[str], scrape: str = "1s", extra_args: list[str] | None = None,
          timeout: float = 40):
    """Start scripts/stack.sh under root, yield a Prom client, always stop it again."""
    cmd = [STACK_SH, "start", "--nodes", ",".join(nodes), "--root", root, "--scrape", scrape,
           "--timeout", str(int(timeout))] + (extra_args or [])
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           timeout=timeout + 30)
        if p.returncode != 0:
            raise RuntimeError(f"stack.sh start failed ({p.returncode}): {p.stderr.strip()}")
        url = p.stdout.strip().splitlines()[-1]
        yield Prom(url)
    finally:
        subprocess.run([STACK_SH, "stop", "--root", root], timeout=30)


def backends(root: str) -> dict[str, Prom]:
    """{"prometheus": Prom, "victoriametrics": Prom} for the backends a stack under root runs."""
    def rd(name):
        try:
            with open(os.path.join(root, name)) as f:
                return f.read().strip()
        except OSError:
            return None
    out = {}
    if rd("prom_url"):
        out["prometheus"] = Prom(rd("prom_url"))
    if rd("vm_url"):
        out["victoriametrics"] = Prom(rd("vm_url"), targets_url=rd("vmagent_url"), name="victoriametrics")
    return out


class Webhook:
    """Alertmanager webhook receiver on a free loopback port. Every POST is recorded as
    (arrival time, path, JSON payload); `url` is the base to give stack.sh --webhook."""

    def __init__(self, port: int = 0):
        self.received: list[tuple[float, str, dict]] = []
        self._lock = threading.Lock()
        hook = self

        class H(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n)
                try:
                    d = json.loads(body)
                except ValueError:
                    d = {"unparsable": body.decode(errors="replace")}
                with hook._lock:
                    hook.received.append((time.time(), self.path, d))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *a):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", port), H)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def notifications(self, prefix: str = "", status: str | None = None) -> list[tuple[float, str, dict]]:
        with self._lock:
            return [x for x in self.received if x[1].startswith(prefix)
                    and (status is None or x[2].get("status") == status)]

    def close(self):
        self.server.shutdown()
        self.server.server_close()


# ---------------------------------------------------------------------------------------------
# Grafana dashboards
# ---------------------------------------------------------------------------------------------

def load_dashboard(path: str) -> dict:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def iter_panels(dash: dict):
    """All non-row panels, including those nested in collapsed rows."""
    def walk(ps):
        for p in ps:
            if p.get("type") == "row":
                yield from walk(p.get("panels", []))
            else:
                yield p
                yield from walk(p.get("panels", []))
    yield from walk(dash.get("panels", []))


def iter_targets(dash: dict):
    """(panel, target) for every panel target with an expr."""
    for p in iter_panels(dash):
        for t in p.get("targets", []):
            if t.get("expr"):
                yield p, t


def variables(dash: dict) -> list[dict]:
    return dash.get("templating", {}).get("list", [])


def multi_value_vars(dash: dict) -> set[str]:
    return {v["name"] for v in variables(dash) if v.get("multi") or v.get("includeAll")}


def variable_query(v: dict) -> str:
    q = v.get("query")
    if isinstance(q, dict):
        q = q.get("query", "")
    return q or ""


_VAR_RE = re.compile(r"\$\{(\w+)(?::(\w+))?\}|\[\[(\w+)\]\]|\$(\w+)")


def substitute(expr: str, values: dict | None = None, rate_interval: str = "1m",
               interval: str = "15s", range_: str = "5m", default: str = ".*") -> str:
    """Replace Grafana variables as Grafana would for a Prometheus query.

    values: {var: str or list}; a list becomes a regex alternation of escaped values (what
    Grafana does for multi-value variables); missing variables become `default` (`.*`, i.e. the
    dashboards' All value)."""
    values = dict(values or {})
    builtins = {"__rate_interval": rate_interval, "__interval": interval, "__range": range_,
                "__range_s": str(_dur_seconds(range_)), "__interval_ms": str(int(_dur_seconds(interval) * 1000))}

    def rep(m):
        name = m.group(1) or m.group(3) or m.group(4)
        if name in builtins:
            return builtins[name]
        v = values.get(name, default)
        if isinstance(v, (list, tuple)):
            v = v[0] if len(v) == 1 else "(" + "|".join(re.escape(x) for x in v) + ")"
        return str(v)
    return _VAR_RE.sub(rep, expr)


def _dur_seconds(d: str) -> float:
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}
    total = 0.0
    for n, u in re.findall(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w|y)", d):
        total += float(n) * units[u]
    return total


@dataclass
class PanelResult:
    panel: str
    ref: str
    expr: str
    n: int = 0
    finite: int = 0
    error: str = ""
    ok: bool = False
    sample: list = field(default_factory=list)


def check_dashboard(prom: Prom, dash, values: dict | None = None, rate_interval: str = "1m",
                    require_finite: bool = True) -> list[PanelResult]:
    """Run every panel query of a dashboard (path or dict) as an instant query."""
    if isinstance(dash, str):
        dash = load_dashboard(dash)
    out = []
    for p, t in iter_targets(dash):
        expr = substitute(t["expr"], values, rate_interval=rate_interval)
        r = PanelResult(p.get("title", "?"), t.get("refId", "A"), expr)
        try:
            res = prom.values(expr)
            r.n = len(res)
            r.finite = sum(1 for _, v in res if math.isfinite(v))
            r.sample = res[:2]
            r.ok = r.n > 0 and (r.finite > 0 or not require_finite)
        except PromError as e:
            r.error = str(e)
        out.append(r)
    return out


# ---------------------------------------------------------------------------------------------
# PromQL helpers (lint-grade)
# ---------------------------------------------------------------------------------------------

KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "offset", "bool",
            "and", "or", "unless", "inf", "nan", "atan2"}
_STR_RE = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_GROUP_RE = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^()]*)\)")
_MATCHER_RE = re.compile(r'([A-Za-z_]\w*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"')
_SEL_RE = re.compile(r"([A-Za-z_:][\w:]*)?\s*\{([^{}]*)\}")


def _strip_vars(expr: str) -> str:
    return substitute(expr, default="X")


def metric_names(expr: str) -> set[str]:
    """Metric names referenced by a PromQL expression (also inside {__name__="..."})."""
    e = _strip_vars(expr)
    names = set()
    for m in _SEL_RE.finditer(e):
        for lab, op, val in _MATCHER_RE.findall(m.group(2)):
            if lab == "__name__" and op == "=":
                names.add(val)
    e = _SEL_RE.sub(lambda m: (m.group(1) or "") + " ", _STR_RE.sub('""', e))
    e = _STR_RE.sub(" ", e)
    e = re.sub(r"\[[^\]]*\]", " ", e)
    e = _GROUP_RE.sub(lambda m: " " + m.group(1) + " ", e)
    e = re.sub(r"(?<![\w:.])\d+(?:\.\d+)?(?:[eE][+-]?\d+)?(?:ms|s|m|h|d|w|y)?(?![\w:])", " ", e)
    e = re.sub(r"(?<![\w:.])0x[0-9a-fA-F]+", " ", e)
    toks = list(re.finditer(r"[A-Za-z_:][\w:]*", e))
    for m in toks:
        t = m.group(0)
        if t.lower() in KEYWORDS:
            continue
        rest = e[m.end():]
        if re.match(r"\s*\(", rest) or re.match(r"\s*(by|without)\b", rest):
            continue  # function or aggregation
        names.add(t)
    return names


def matchers(expr: str) -> list[tuple[str, str, str]]:
    """(label, op, value) for every label matcher in selectors; values keep Grafana variables."""
    out = []
    for m in _SEL_RE.finditer(expr):
        out.extend(_MATCHER_RE.findall(m.group(2)))
    return out


def selectors(expr: str) -> list[tuple[str, list[tuple[str, str, str]]]]:
    """(metric name or '', matchers) for every `{...}` selector."""
    return [((m.group(1) or ""), _MATCHER_RE.findall(m.group(2))) for m in _SEL_RE.finditer(expr)]


def grouping_labels(expr: str) -> set[str]:
    """Labels named in by/without/on/ignoring/group_left/group_right clauses."""
    labs = set()
    for m in _GROUP_RE.finditer(_STR_RE.sub('""', expr)):
        labs.update(x.strip() for x in m.group(2).split(",") if x.strip())
    return labs


def uses_var(value: str, names: set[str]) -> set[str]:
    found = set()
    for m in _VAR_RE.finditer(value):
        n = m.group(1) or m.group(3) or m.group(4)
        if n in names:
            found.add(n)
    return found


def finish(name: str, failures: list, root: str, t_start: float | None = None, keep: bool = False) -> int:
    """A test script's verdict line and exit code; on success its scratch folder goes unless keep."""
    took = f" in {time.monotonic() - t_start:.1f}s" if t_start is not None else ""
    if failures:
        print(f"{name}: FAILED ({len(failures)} problem(s)){took}; files and logs under {root}")
        return 1
    print(f"{name}: OK{took}")
    if not keep:
        shutil.rmtree(root, ignore_errors=True)
    return 0
