#!/usr/bin/env python3
"""Writes tests/gpu_check/fixtures/: the files scripts/gpu_check.sh leaves, for table.py's tests.

  python3 tests/gpu_check/make_fixtures.py [DIR]    (rewrites fixtures/, or writes DIR; deterministic)

The .tsv files are `nccl_wrappers_example --sweep` / `--cases` output (examples/nccl_wrappers/
sweep.hpp, cases.hpp); the .prom files are the plugin's final files in its format (family order,
labels, owner line, histogram buckets as a real run writes them; the sweep fixtures and
cases-2rank-desync as with NCCLINSP_HISTOGRAM=off, to keep them small: table.py reads no
histogram), with the values a run of that shape gives: one H200 on NCCL 2.28.9 (one-rank
communicators: collectives send no event, self Send/Recv no KernelCh), or two GPUs (every op
GPU-timed). The one-rank cases fixtures go with the real trace of that run,
tests/traces/nccl-2.28.9-h200-onerank-cases.trace (326 self Send/Recv announced).
"""
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "fixtures")
KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
JOB = "host:gpu-check:4242"
LE = ["1e-05", "2.5e-05", "5e-05", "1e-04", "0.00025", "5e-04", "0.001", "0.0025", "0.005", "0.01", "0.025", "0.05",
      "0.1", "0.25", "0.5", "1", "2.5", "5", "10", "+Inf"]
FILTER_REASONS = ["min_size", "no_gpu_timing", "enqueue_only", "rejected_timestamps", "foreign_timestamps",
                  "no_kernel_events"]
DROP_REASONS = ["op_pool_full", "table_full", "record_ring_full", "comm_table_full", "exit_deadline"]
HELP = {
    "nccl_bus_bandwidth_gbs": ("gauge", "Geometric mean bus bandwidth (GB/s, 1e9 bytes) of collectives completed in the last export window (Inspector-compatible)."),
    "nccl_collective_exec_time_microseconds": ("gauge", "Mean execution time (microseconds) of collectives completed in the last export window (Inspector-compatible)."),
    "nccl_p2p_bus_bandwidth_gbs": ("gauge", "Geometric mean bus bandwidth (GB/s, 1e9 bytes) of P2P operations completed in the last export window (Inspector-compatible)."),
    "nccl_p2p_exec_time_microseconds": ("gauge", "Mean execution time (microseconds) of P2P operations completed in the last export window (Inspector-compatible)."),
    "ncclinsp_ops_total": ("counter", "Completed NCCL operations."),
    "ncclinsp_bytes_total": ("counter", "Message bytes per rank as NCCL reports them (AllGather: send bytes, ReduceScatter: receive bytes)."),
    "ncclinsp_bus_bytes_total": ("counter", "Bus bytes (traffic x nccl-tests bus factor: AllReduce 2(n-1)/n, AllGather/ReduceScatter (n-1)/n on n x bytes, Broadcast/Reduce/Send/Recv 1); rate(bus_bytes)/rate(busy_seconds)/1e9 is bus bandwidth in GB/s."),
    "ncclinsp_busy_seconds_total": ("counter", "Sum of operation durations (GPU kernel span when available)."),
    "ncclinsp_op_duration_seconds": ("histogram", "Operation duration."),
    "ncclinsp_inflight_ops": ("gauge", "Operations handed to the GPU and not yet completed."),
    "ncclinsp_oldest_inflight_age_seconds": ("gauge", "Age of the oldest in-flight operation (0 when none): the hang signal."),
    "ncclinsp_seconds_since_last_completion": ("gauge", "Seconds since the communicator last completed an operation (0 before the first)."),
    "ncclinsp_invalid_ops_total": ("counter", "Operations with zero duration, zero or overflowing size, or unknown function/datatype."),
    "ncclinsp_abandoned_ops_total": ("counter", "Operations still in flight when their communicator was destroyed."),
    "ncclinsp_last_completed_seq": ("gauge", "Last completed NCCL sequence number per communicator and function."),
    "ncclinsp_dropped_events_total": ("counter", "Events lost, by reason (never silent)."),
    "ncclinsp_filtered_ops_total": ("counter", "Operations skipped on purpose (minimum size, missing GPU timing), by reason."),
    "ncclinsp_series_overflow": ("gauge", "Series left out of this file by the per-file cap (NCCLINSP_MAX_SERIES): op series sets folded into comm_name=\"_overflow\", communicators and Inspector-compatible sets not written."),
    "ncclinsp_export_timestamp_seconds": ("gauge", "Unix time at which this file was written (stale-exporter signal)."),
    "ncclinsp_info": ("gauge", "ncclinsp build and profiler ABI; 'final' is 1 in the file written at shutdown."),
}


def bucket(n):
    if n == 0:
        return "0B"
    lo = 1 << (n.bit_length() - 1)

    def name(b):
        for u, s in ((GiB, "GiB"), (MiB, "MiB"), (KiB, "KiB")):
            if b >= u:
                return "%d%s" % (b // u, s)
        return "%dB" % b
    return "%s-%s" % (name(lo), name(lo * 2))


def inspector_size(n):
    for u, s in ((GiB, "GB"), (MiB, "MB"), (KiB, "KB")):
        if n >= u:
            return "%d-%d%s" % (n // u, n // u + 1, s)
    return "%d-%dB" % (n, n + 1)


def bus_bytes(coll, nbytes, n):
    if coll == "AllReduce":
        return nbytes * 2 * (n - 1) / n
    if coll in ("AllGather", "ReduceScatter"):
        return nbytes * (n - 1)
    return nbytes


def labels(d):
    return "{" + ",".join('%s="%s"' % kv for kv in d.items()) + "}"


def prom_file(path, gpu, ranks_here, nranks, ops, filtered=None, inflight=0, abandoned=0, dropped=None, final=1,
              abi="v5", histogram=True):
    """One GPU's final file. ranks_here: the ranks of the communicator on this GPU; ops: list of
    dicts coll, bytes, count, seconds (busy), algo (ops of every rank here, split evenly).
    histogram False: as with NCCLINSP_HISTOGRAM=off (no ncclinsp_op_duration_seconds family)."""
    uuid = "GPU-%08x-1111-2222-3333-4444%08x" % (0x5d1e0000 + gpu, gpu)
    ident = {"job_id": JOB, "slurm_job_id": JOB, "node": "gpu-check", "gpu": "GPU%d" % gpu, "uuid": uuid}
    comm = lambda r: dict(ident, comm_name="unknown", comm_hash="b3058da3693a3324", rank=str(r), nranks=str(nranks),
                          n_nodes="1")
    fam = {}

    def add(f, lab, v, family=None):
        fam.setdefault(family or f, []).append("%s%s %s" % (f, labels(lab), v if isinstance(v, str) else "%.10g" % v))
    for r in ranks_here:
        for o in ops:
            share = 1 / len(ranks_here)
            count, secs = o["count"] * share, o["seconds"] * share
            lab = dict(comm(r), collective=o["coll"], message_size=bucket(o["bytes"]), algo_proto=o["algo"])
            p2p = o["coll"] in ("Send", "Recv")
            compat = {"version": "v5.1", "slurm_job_id": JOB, "node": "gpu-check", "gpu": "GPU%d" % gpu,
                      "comm_name": "unknown", "n_nodes": "1", "nranks": str(nranks)}
            if p2p:
                compat.update(p2p_operation=o["coll"], message_size=inspector_size(o["bytes"]))
            else:
                compat.update(collective=o["coll"], message_size=inspector_size(o["bytes"]), algo_proto=o["algo"])
            compat.update(job_id=JOB, uuid=uuid)
            mean = secs / count
            add("nccl_p2p_bus_bandwidth_gbs" if p2p else "nccl_bus_bandwidth_gbs", compat,
                bus_bytes(o["coll"], o["bytes"], nranks) / mean / 1e9)
            add("nccl_p2p_exec_time_microseconds" if p2p else "nccl_collective_exec_time_microseconds", compat, mean * 1e6)
            add("ncclinsp_ops_total", lab, count)
            add("ncclinsp_bytes_total", lab, count * o["bytes"])
            add("ncclinsp_bus_bytes_total", lab, count * bus_bytes(o["coll"], o["bytes"], nranks))
            add("ncclinsp_busy_seconds_total", lab, secs)
            for le in LE if histogram else []:
                add("ncclinsp_op_duration_seconds_bucket", dict(lab, le=le),
                    count if le == "+Inf" or mean <= float(le) else 0, "ncclinsp_op_duration_seconds")
            if histogram:
                add("ncclinsp_op_duration_seconds_sum", lab, secs, "ncclinsp_op_duration_seconds")
                add("ncclinsp_op_duration_seconds_count", lab, count, "ncclinsp_op_duration_seconds")
        add("ncclinsp_inflight_ops", comm(r), inflight / len(ranks_here))
        add("ncclinsp_oldest_inflight_age_seconds", comm(r), 72 if inflight else 0)
        add("ncclinsp_seconds_since_last_completion", comm(r), 0)
        add("ncclinsp_invalid_ops_total", comm(r), 0)
        add("ncclinsp_abandoned_ops_total", comm(r), abandoned / len(ranks_here))
        for coll in sorted({o["coll"] for o in ops}):
            add("ncclinsp_last_completed_seq", dict(comm(r), collective=coll),
                sum(o["count"] for o in ops if o["coll"] == coll) / len(ranks_here))
    for reason in DROP_REASONS:
        add("ncclinsp_dropped_events_total", dict(ident, reason=reason), (dropped or {}).get(reason, 0))
    for reason in FILTER_REASONS:
        add("ncclinsp_filtered_ops_total", dict(ident, reason=reason), (filtered or {}).get(reason, 0))
    for kind in ("op_sets", "comms", "compat"):
        add("ncclinsp_series_overflow", dict(ident, kind=kind), 0)
    add("ncclinsp_export_timestamp_seconds", ident, "1796392755.854")
    add("ncclinsp_info", dict(ident, version="0.1.0", abi=abi, final=str(final)), 1)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write("# ncclinsp-owner v1 uid=1000 pid=4242 start=981234 boot=95ddced5-1de1-4d47-8bba-fd5b543e355c "
                "pidns=4026531836 ts=1796392755.854 final=%d host=gpu-check job=%s\n" % (final, JOB.replace(":", "%3A")))
        for name, (typ, text) in HELP.items():
            series = fam.get(name)
            if not series:
                continue
            f.write("# HELP %s %s\n# TYPE %s %s\n" % (name, text, name, typ))
            f.write("".join(l + "\n" for l in series))
    return path


def prom_name(gpu):
    return "nccl_inspector_metrics_GPU-%08x-1111-2222-3333-4444%08x.job-host_gpu-check_4242.prom" % (0x5d1e0000 + gpu, gpu)


# ---- sweep -----------------------------------------------------------------------------------------

def sweep_points(ranks, sizes):
    """(coll, total, rank_bytes, iters, us, busbw) of one `--sweep` run: one H200 memcpy path for one
    rank (t = 6 us + bytes / 2 TB/s), NVLink at 300 GB/s bus bandwidth for two."""
    pts = []
    for coll in ("AllReduce", "AllGather", "ReduceScatter"):
        for total in sizes:
            rank_bytes = total if coll == "AllReduce" else total // ranks
            if ranks == 1:
                us = 6 + total / 2.0e6
            else:
                us = 10 + bus_bytes(coll, rank_bytes, ranks) / 300e3
            iters = max(5, min(100, int(50 / max(us / 1e3, 1e-3))))
            busbw = bus_bytes(coll, rank_bytes, ranks) / (us * 1e3)
            pts.append((coll, total, rank_bytes, iters, us, busbw))
    return pts


def write_sweep_tsv(path, pts, scale, init_ms, destroy_ms, ranks):
    with open(path, "w") as f:
        f.write("init_ms\t%.1f\n" % init_ms)
        for coll, total, rank_bytes, iters, us, busbw in pts:
            s = scale(coll, total)
            f.write("sweep\t%s\t%d\t%d\t%d\t%.3f\t%.3f\n" % (coll, total, rank_bytes, iters, us * s, busbw / s))
        f.write("destroy_ms\t%.1f\nranks\t%d\n" % (destroy_ms, ranks))


def sweep_fixture(name, ranks=1, rounds=3, on=None, noop=None, prom_busy=1.0, prom_files=True):
    """on(k, coll, total), noop(k, ...): the time factor of that arm in round k (1 = as off);
    round 0 is the warm-up. prom_busy: the .prom busy time / CUDA-event time. One rank: a run of
    `--sweep 262144 268435456` (256 KiB .. 256 MiB); two: `--sweep 1048576 4194304` (small files)."""
    d = os.path.join(OUT, name)
    os.makedirs(d)
    pts = sweep_points(ranks, [256 * KiB << i for i in range(11)] if ranks == 1 else [MiB, 2 * MiB, 4 * MiB])
    wobble = [1.0, 1.004, 0.997, 1.002, 0.999, 1.003]  # off itself varies a little between rounds
    for k in range(rounds + 1):
        for arm, fn in (("off", None), ("noop", noop), ("on", on)):
            scale = lambda c, t, fn=fn, k=k: wobble[k] * (fn(k, c, t) if fn else 1.0)
            write_sweep_tsv(os.path.join(d, "r%d-%s.tsv" % (k, arm)), pts, scale,
                            1850.0 + 40 * k + (12 if arm == "on" else 0), 3.2 + (0.8 if arm == "on" else 0), ranks)
        os.makedirs(os.path.join(d, "prom-r%d" % k))
        if not prom_files:
            continue
        ops = []
        if ranks > 1:  # one-rank collectives send the plugin nothing
            for coll, total, rank_bytes, iters, us, busbw in pts:
                n = (iters + 2) * ranks  # the probe's 2 ops and the timed ones, on every rank
                ops.append({"coll": coll, "bytes": rank_bytes, "count": n, "seconds": n * us * wobble[k] * prom_busy / 1e6,
                            "algo": "RING_LL" if rank_bytes < 64 * KiB else "RING_SIMPLE"})
        for g in range(ranks):
            prom_file(os.path.join(d, "prom-r%d" % k, prom_name(g)), g, [g], ranks,
                      [dict(o, count=o["count"] / ranks, seconds=o["seconds"] / ranks) for o in ops], histogram=False)


# ---- cases -----------------------------------------------------------------------------------------

def case_lines(ranks):
    """`--cases` lines: (phase, coll, bytes, ops, us, launch), times as on one H200 (ranks 1) or two."""
    p2p = lambda b: 4 + b / (1.7e6 if ranks == 1 else 0.45e6)  # self copy vs NVLink, us
    ar = lambda b: 6 + b / (2.0e6 if ranks == 1 else 0.3e6)
    return [("eager", "Send", 256 * MiB, 41, p2p(256 * MiB), "eager"),
            ("eager", "Recv", 256 * MiB, 41, p2p(256 * MiB), "eager"),
            ("eager_coll", "AllReduce", 64 * MiB, 41, ar(64 * MiB), "eager"),
            ("grouped", "Send", 8 * MiB, 80, -1, "eager"), ("grouped", "Recv", 8 * MiB, 80, -1, "eager"),
            ("grouped", "AllReduce", MiB, 80, -1, "eager"),
            ("graph", "Send", 256 * KiB, 60, -1, "graph"), ("graph", "Recv", 256 * KiB, 60, -1, "graph"),
            ("graph", "AllReduce", 256 * KiB, 60, -1, "graph"),
            ("mixed", "Send", 512 * KiB, 40, p2p(512 * KiB) + 5, "graph"),
            ("mixed", "Recv", 512 * KiB, 40, p2p(512 * KiB) + 5, "graph"),
            ("mixed", "Send", 128 * MiB, 40, p2p(128 * MiB), "eager"),
            ("mixed", "Recv", 128 * MiB, 40, p2p(128 * MiB), "eager")]


def write_cases_tsv(path, lines, ranks):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        for phase, coll, nbytes, ops, us, launch in lines:
            f.write("case\t%s\t%s\t%d\t%d\t%.3f\t%s\n" % (phase, coll, nbytes, ops, us, launch))
        f.write("ranks\t%d\nnccl\t22809\nruntime_nccl\t22809\n" % ranks)


def cases_onerank(name, filtered=326, inflight=0, abandoned=0, dropped=None, final=1):
    """NCCL 2.28.9, one H200: 326 self Send/Recv announced (the real trace), no KernelCh: the fixed
    plugin counts each under no_kernel_events; collectives send nothing."""
    d = os.path.join(OUT, name)
    write_cases_tsv(os.path.join(d, "cases.tsv"), case_lines(1), 1)
    prom_file(os.path.join(d, "prom", prom_name(0)), 0, [0], 1, [], filtered={"no_kernel_events": filtered},
              inflight=inflight, abandoned=abandoned, dropped=dropped, final=final)


def cases_tworank(name, desync=False):
    """Two GPUs: every eager op GPU-timed on both ranks; a captured op announced at capture (no
    GPU time: filtered no_gpu_timing) and at each replay (GPU-timed). desync: the mixed replays
    carry the eager op's KernelCh timestamps (NCCL <= 2.31.0a0)."""
    d = os.path.join(OUT, name)
    lines = case_lines(2)
    write_cases_tsv(os.path.join(d, "cases.tsv"), lines, 2)
    ops, capture = [], 0
    for phase, coll, nbytes, n, us, launch in lines:
        t = us if us > 0 else (4 + nbytes / 0.45e6 if coll in ("Send", "Recv") else 6 + nbytes / 0.3e6)
        if desync and phase == "mixed" and launch == "graph":
            t = 2.4 * us  # the replay carries the eager op's timestamps
        count = n * 2
        ops.append({"coll": coll, "bytes": nbytes, "count": count, "seconds": count * t * 0.985 / 1e6,
                    "algo": "none" if coll in ("Send", "Recv") else "RING_SIMPLE"})
        capture += 2 if launch == "graph" else 0
    for g in range(2):
        prom_file(os.path.join(d, "prom", prom_name(g)), g, [g], 2,
                  [dict(o, count=o["count"] / 2, seconds=o["seconds"] / 2) for o in ops],
                  filtered={"no_gpu_timing": capture / 2}, histogram=not desync)


def main():
    global OUT
    OUT = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else OUT
    shutil.rmtree(OUT, ignore_errors=True)
    big = lambda t: t >= MiB
    # The ncclinsp arm: 30 % slower in the warm-up round and 10 % in the first measured round (a
    # cold start, not overhead), as fast as off after that.
    sweep_fixture("sweep-1rank-pass", on=lambda k, c, t: {0: 1.30, 1: 1.10}.get(k, 1.0),
                  noop=None)
    # ncclinsp 5 % slower in every round at >= 1 MiB, noop within 0.5 % of off.
    sweep_fixture("sweep-1rank-overhead", on=lambda k, c, t: 1.05 if big(t) else 1.0,
                  noop=lambda k, c, t: 1.0 + 0.005 * (k % 2))
    # ncclinsp 3 % slower, but noop itself spreads up to 4 % above off: noise, not overhead.
    sweep_fixture("sweep-1rank-noisy", on=lambda k, c, t: 1.03 if big(t) else 1.0,
                  noop=lambda k, c, t: {1: 1.04, 2: 0.98, 3: 1.01}.get(k, 1.0))
    # The first GPU run: the plugin removed its .prom files at exit (NCCLINSP_PROM_KEEP_FILES unset).
    sweep_fixture("sweep-1rank-no-prom", prom_files=False)
    sweep_fixture("sweep-2rank-pass", ranks=2, rounds=1, prom_busy=0.985)
    sweep_fixture("sweep-2rank-disagree", ranks=2, rounds=1, prom_busy=1.3)
    cases_onerank("cases-1rank-pass")
    cases_onerank("cases-1rank-inflight", filtered=320, inflight=6)
    cases_onerank("cases-1rank-abandoned", filtered=0, abandoned=326)  # ncclinsp 0.1.0 on the H200
    cases_onerank("cases-1rank-lost", filtered=300)
    cases_onerank("cases-1rank-extra", filtered=330)
    cases_onerank("cases-1rank-dropped", filtered=321, dropped={"op_pool_full": 5})
    cases_onerank("cases-1rank-not-final", final=0)
    cases_tworank("cases-2rank-pass")
    cases_tworank("cases-2rank-desync", desync=True)


if __name__ == "__main__":
    main()
