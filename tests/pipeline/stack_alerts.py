#!/usr/bin/env python3
"""Live alert timing test on the real stack (slow: ~2.5 min; ctest only with
-DNCCLINSP_SLOW_PIPELINE_TESTS=ON).

Synthetic files as in stack_smoke.py, 1 s scrape. After --healthy seconds the network (n_nodes=2)
AllGather bandwidth drops 13% and an op on that communicator hangs. Checks:
  - nothing fires during the healthy phase;
  - NcclinspBusBandwidthDegraded fires for comm dp / AllGather / n_nodes=2 within 120 s of the drop,
    and never for the NVLink-only comm (tp) or any other collective;
  - NcclinspAllRanksStuck fires for comm dp within 120 s (both ranks are in the hung op: every
    rank inside, critical after the 60 s fault threshold);
  - NcclinspNetworkFabricDegraded fires within 120 s: every node's only network communicator is
    slower and no node or rank stands out, which is the fabric's signature;
  - nothing else fires.
Prints how long after the drop each alert fired. Exit 0 pass, 1 fail, 77 skip.
"""
import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import promapi as P  # noqa: E402
import stack_smoke as S  # noqa: E402


EXPECTED = ("NcclinspBusBandwidthDegraded", "NcclinspAllRanksStuck", "NcclinspNetworkFabricDegraded")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--healthy", type=float, default=70.0, help="seconds before the drop")
    ap.add_argument("--deadline", type=float, default=120.0, help="max seconds from drop to firing")
    a = ap.parse_args()
    for b in ("/usr/bin/prometheus", "/usr/bin/prometheus-node-exporter"):
        if not os.access(b, os.X_OK):
            print(f"SKIP: {b} not installed")
            return S.SKIP
    root = tempfile.mkdtemp(prefix="ncclinsp-alerts-")
    for n in S.NODES:
        os.makedirs(os.path.join(root, n))
    # Writer time starts at 30 s (see stack_smoke.Writer).
    w = S.Writer(root, degrade_at=30 + a.healthy, degrade=0.87, hang_at=30 + a.healthy)
    w.write_once()
    w.start()
    t_drop = time.monotonic() + a.healthy
    failures = []
    fired = {}
    try:
        with P.stack(root, S.NODES, scrape="1s") as prom:
            print(f"stack up at {prom.url}; drop in {t_drop - time.monotonic():.0f}s")
            while time.monotonic() < t_drop - 3:
                f = prom.alerts("firing") + prom.alerts("pending")
                if f:
                    failures.append(f"alerts before the drop: {[x['labels'] for x in f]}")
                    break
                time.sleep(2)
            while time.monotonic() < t_drop + a.deadline and len(fired) < len(EXPECTED):
                for al in prom.alerts("firing"):
                    lb = al["labels"]
                    name = lb["alertname"]
                    if name == "NcclinspBusBandwidthDegraded":
                        if (lb.get("comm_name"), lb.get("collective"), lb.get("n_nodes")) != ("dp", "AllGather", "2"):
                            failures.append(f"unexpected degradation alert {lb}")
                    if name not in fired:
                        fired[name] = time.monotonic() - t_drop
                        print(f"{name} firing {fired[name]:.0f}s after the drop: {lb}")
                time.sleep(1)
            for name in EXPECTED:
                if name not in fired:
                    failures.append(f"{name} did not fire within {a.deadline:.0f}s of the drop")
            extra = set(fired) - set(EXPECTED)
            if extra:
                failures.append(f"unexpected alerts: {extra}")
            nv = prom.values('ncclinsp_job:bus_bandwidth_gbs:ratio_to_baseline{n_nodes="1"}')
            if any(v < 0.97 for _, v in nv):
                failures.append(f"NVLink-only ratio moved: {nv}")
    except (TimeoutError, RuntimeError, P.PromError, OSError) as e:
        failures.append(f"{type(e).__name__}: {e}")
    finally:
        w.stop_ev.set()
        w.join(timeout=2)
    for f in failures:
        print("FAIL:", f)
    return P.finish("stack_alerts", failures, root)


if __name__ == "__main__":
    sys.exit(main())
