#!/usr/bin/env python3
"""Replays a recorded NCCL trace through the plugin (ncclinsp-replay) and checks what it published.

  replay_check.py REPLAY PLUGIN TRACE [--abi N] [--hold S] [--roundtrip]

Checks: every op the trace starts (Coll, P2p, CeColl) is counted, published (ncclinsp_ops_total) or
filtered by a documented reason (ncclinsp_filtered_ops_total); none is dropped or abandoned; in every
sample of the hold (one a second, the first 1 s after the last stop) no op is in flight, so the hang
rule (ncclinsp_oldest_inflight_age_seconds > 60 for 15 s) has nothing to fire on. --roundtrip also
captures the replay with NCCLINSP_CAPTURE, checks that the capture holds every call the plugin got and
no drop, and that replaying the capture publishes the same counts.
"""
import argparse, collections, glob, os, re, subprocess, sys, tempfile

OP_TYPES = {2, 4, 4096}  # Coll, P2p, CeColl
REASONS = {"min_size", "no_gpu_timing", "enqueue_only", "rejected_timestamps", "foreign_timestamps",
           "no_kernel_events"}
SAMPLE = re.compile(r"^hold ([\d.]+) s: ncclinsp_inflight_ops (\S+), ncclinsp_oldest_inflight_age_seconds (\S+)$")


def ops_in(trace):
    n = 0
    with open(trace) as f:
        for line in f:
            w = line.split()
            if w and w[0] == "S" and int(w[5]) in OP_TYPES:
                n += 1
    return n


def published(out_dir):
    """Sums of the final .prom files' series by (metric, reason)."""
    sums = collections.Counter()
    for path in glob.glob(os.path.join(out_dir, "**", "*.prom"), recursive=True):
        for line in open(path):
            if line.startswith("#") or not line.strip():
                continue
            m = re.match(r"^(\w+)(\{.*\})? (\S+)$", line.strip())
            if not m:
                continue
            reason = re.search(r'reason="([^"]*)"', m.group(2) or "")
            sums[(m.group(1), reason.group(1) if reason else "")] += float(m.group(3))
    return sums


def replay(args, trace, out_dir, hold, env=None, abi=None):
    cmd = [args.replay, "--plugin", args.plugin, "--out", out_dir, "--hold", str(hold), trace]
    if abi:
        cmd[1:1] = ["--abi", str(abi)]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=hold + 120)
    print(r.stdout, end="")
    if r.returncode != 0:
        sys.exit(f"FAIL: ncclinsp-replay exited {r.returncode}: {r.stderr}")
    return r.stdout


def check(args, trace, out_dir, stdout, hold):
    errors = []
    samples = [SAMPLE.match(l) for l in stdout.splitlines()]
    samples = [(float(m.group(1)), float(m.group(2)), float(m.group(3))) for m in samples if m]
    if hold and len(samples) < int(hold) - 1:
        errors.append(f"only {len(samples)} hold samples in {hold} s")
    for at, inflight, age in samples:
        if inflight or age:
            errors.append(f"{at:.0f} s after the last stop: {inflight:g} ops in flight, oldest {age:g} s")
            break
    p = published(out_dir)
    expected = ops_in(trace)
    counted = p[("ncclinsp_ops_total", "")] + sum(p[("ncclinsp_filtered_ops_total", r)] for r in REASONS)
    unknown = [k for k in p if k[0] == "ncclinsp_filtered_ops_total" and k[1] not in REASONS]
    if unknown:
        errors.append(f"undocumented filter reasons {unknown}")
    if counted != expected:
        errors.append(f"{counted:g} ops counted (published or filtered by a reason), the trace starts {expected}")
    for m in ("ncclinsp_dropped_events_total", "ncclinsp_abandoned_ops_total", "ncclinsp_invalid_ops_total"):
        total = sum(v for k, v in p.items() if k[0] == m)
        if total:
            errors.append(f"{m} {total:g}")
    print(f"{os.path.basename(trace)}: {expected} ops; published {p[('ncclinsp_ops_total', '')]:g}; filtered " +
          ", ".join(f"{r} {p[('ncclinsp_filtered_ops_total', r)]:g}" for r in sorted(REASONS)
                    if p[("ncclinsp_filtered_ops_total", r)]))
    return p, errors


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("replay")
    ap.add_argument("plugin")
    ap.add_argument("trace")
    ap.add_argument("--abi", type=int)
    ap.add_argument("--hold", type=float, default=3)
    ap.add_argument("--roundtrip", action="store_true")
    args = ap.parse_args()
    errors = []
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "prom")
        env = dict(os.environ)
        if args.roundtrip:
            env["NCCLINSP_CAPTURE"] = os.path.join(tmp, "capture")
        stdout = replay(args, args.trace, out, args.hold, env=env, abi=args.abi)
        first, errs = check(args, args.trace, out, stdout, args.hold)
        errors += errs
        if args.roundtrip:
            captured = glob.glob(os.path.join(tmp, "capture", "*.trace"))
            if len(captured) != 1:
                sys.exit(f"FAIL: expected one captured trace, found {captured}")
            lines = open(captured[0]).read().splitlines()
            if not lines[0].startswith("# ncclinsp-trace abi="):
                errors.append(f"captured trace starts with {lines[0]!r}")
            end = [l for l in lines if l.startswith("# end")]
            if not end or not re.search(r"ring_full=0 file_full=0 write_failed=0", end[-1]):
                errors.append(f"capture closing note {end}")
            starts = sum(1 for l in open(args.trace) if l.startswith("S "))
            if sum(1 for l in lines if l.startswith("S ")) != starts:
                errors.append("the capture does not hold every startEvent of the replay")
            out2 = os.path.join(tmp, "prom2")
            env2 = {k: v for k, v in os.environ.items() if k != "NCCLINSP_CAPTURE"}
            replay(args, captured[0], out2, 0, env=env2)
            second = published(out2)
            for k in set(first) | set(second):
                if k[0] in ("ncclinsp_ops_total", "ncclinsp_filtered_ops_total") and first[k] != second[k]:
                    errors.append(f"replaying the capture: {k} {second[k]:g}, the original {first[k]:g}")
    for e in errors:
        print("FAIL:", e)
    if errors:
        sys.exit(1)
    print("OK")


if __name__ == "__main__":
    main()
