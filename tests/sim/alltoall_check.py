#!/usr/bin/env python3
"""All-to-all (MoE expert parallelism) through the real plugin: `ncclinsp-sim --workload alltoall`, 2
ranks (the rank itself and one peer) as fast as it goes (--speed 0). Every step each rank issues one
group of a Send and a Recv to every rank, itself included. Holds when, per run:

  * every peer op is counted (ncclinsp_ops_total) and its bus bandwidth (bus bytes / busy seconds) is
    the simulator's truth (--truth, the kernels' real GPU spans) within 1 %;
  * every self op (no KernelCh: NCCL makes no proxy op for it) is in
    ncclinsp_filtered_ops_total{reason="no_kernel_events"};
  * with --bad-timer, the ops whose KernelCh carried a garbage timer are in
    filtered_ops_total{reason="rejected_timestamps"} and never published; the rest still match the truth;
  * nothing dropped, nothing in flight or abandoned at the end, no other filter reason.

Runs: two nodes of one GPU (forked, network: --nccl 2.31.2), one node of two GPUs in one process
(NVLink, --nccl 2.28: the peer pair's channels, from ncclP2pChannelBaseForRound, are not the self
pair's), both 10,000 steps; then two nodes with --bad-timer 0.02 for 2,000 steps.

Usage: alltoall_check.py SIM PLUGIN OUTDIR [--steps N]
"""
import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from graph_soak import parse_prom, size_label  # noqa: E402


def fail(msg):
    print('FAIL: ' + msg)
    sys.exit(1)


def run(a, name, nccl, shape, steps, extra=()):
    work = os.path.join(a.outdir, name)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    out = os.path.join(work, 'job')
    truth_path = os.path.join(work, 'truth.json')
    cmd = [a.sim, '--plugin', a.plugin, '--nccl', nccl, '--workload', 'alltoall', '--steps', str(steps),
           '--speed', '0', '--prom', '--out', out, '--truth', truth_path] + list(shape) + list(extra)
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.time() - t0
    if r.returncode != 0:
        fail(f'{name}: ncclinsp-sim exited {r.returncode}: {r.stderr[-2000:]}')
    final = []
    for path in glob.glob(os.path.join(out, '**', 'nccl_inspector_metrics_*.prom'), recursive=True):
        with open(path) as f:
            final += parse_prom(f.read())
    if not final:
        fail(f'{name}: no .prom file written')
    truth = []
    for path in glob.glob(truth_path + '*'):
        truth += [json.loads(line) for line in open(path)]
    if not truth:
        fail(f'{name}: no truth written')

    def total(metric, **want):
        return sum(v for n, l, v in final if n == metric and all(l.get(k) == w for k, w in want.items()))

    published = untimed = corrupted = 0
    worst = 0.0
    bws = []
    for t in truth:
        labels = dict(comm_hash=t['comm_hash'][2:], rank=str(t['rank']), collective=t['func'],
                      message_size=size_label(t['bytes']))
        ops = total('ncclinsp_ops_total', **labels)
        expect = t['ops'] - t['corrupted'] - t['untimed']
        if ops != expect:
            fail(f'{name} {labels}: {ops:.0f} ops published, {expect} peer ops with their own GPU timestamps '
                 f'({t["untimed"]} to the rank itself, {t["corrupted"]} with a garbage timer)')
        if expect == 0:
            fail(f'{name} {labels}: no peer op')
        busy = total('ncclinsp_busy_seconds_total', **labels)
        bus = total('ncclinsp_bus_bytes_total', **labels)
        if bus != expect * t['bytes']:
            fail(f'{name} {labels}: {bus:.0f} bus bytes, {expect} ops x {t["bytes"]} B expected (P2P bus factor 1)')
        bw, truth_bw = bus / busy / 1e9, expect * t['bytes'] / t['busy_s'] / 1e9
        err = abs(bw / truth_bw - 1.0)
        worst = max(worst, err)
        bws.append(bw)
        if err > 0.01:
            fail(f'{name} {labels}: bus bandwidth {bw:.3f} GB/s, truth {truth_bw:.3f} GB/s ({100 * err:.2f}% off)')
        published += int(ops)
        untimed += t['untimed']
        corrupted += t['corrupted']
    want = {'no_kernel_events': untimed, 'rejected_timestamps': corrupted}
    for reason in ('no_kernel_events', 'rejected_timestamps', 'foreign_timestamps', 'no_gpu_timing', 'enqueue_only',
                   'min_size'):
        got = total('ncclinsp_filtered_ops_total', reason=reason)
        if got != want.get(reason, 0):
            fail(f'{name}: filtered_ops_total{{reason="{reason}"}} = {got:.0f}, expected {want.get(reason, 0)}')
    for metric in ('ncclinsp_dropped_events_total', 'ncclinsp_inflight_ops', 'ncclinsp_abandoned_ops_total'):
        if total(metric) != 0:
            fail(f'{name}: {metric} = {total(metric):.0f}')
    print(f'{name}: {steps} steps in {wall:.1f} s wall, {published} peer ops published '
          f'(bus bandwidth {min(bws):.2f}-{max(bws):.2f} GB/s, worst {100 * worst:.3f}% off truth), '
          f'{untimed} self ops no_kernel_events, {corrupted} garbage timers rejected_timestamps, '
          f'0 dropped, 0 in flight')
    return corrupted


def main():
    p = argparse.ArgumentParser()
    for x in ('sim', 'plugin', 'outdir'):
        p.add_argument(x)
    p.add_argument('--steps', type=int, default=10000)
    a = p.parse_args()
    run(a, 'two-nodes-2.31.2', '2.31.2', ['--nodes', '2', '--gpus', '1'], a.steps)
    run(a, 'one-node-2.28', '2.28', ['--nodes', '1', '--gpus', '2', '--single-process'], a.steps)
    bad = run(a, 'bad-timer-2.31.2', '2.31.2', ['--nodes', '2', '--gpus', '1'], max(a.steps // 5, 100),
              ['--bad-timer', '0.02'])
    if bad == 0:
        fail('--bad-timer 0.02 gave no op a garbage timer')
    print('alltoall: OK')


if __name__ == '__main__':
    main()
