#!/usr/bin/env python3
"""All-to-all (MoE expert parallelism) through the real plugin: `ncclinsp-sim --workload alltoall` as
fast as it goes (--speed 0). Every step each rank issues one group of a Send and a Recv to every rank,
itself included. Holds when, per run:

  * every peer op with its own GPU timestamps is counted (ncclinsp_ops_total) and its bus bandwidth (bus
    bytes / busy seconds) is the simulator's truth (--truth, the kernels' real GPU spans) within 1 %;
  * every self op is in ncclinsp_filtered_ops_total{reason="no_kernel_events"}: up to 2.31.0a NCCL
    makes no proxy op for it (no KernelCh); at 2.31.2 its KernelCh come (ncclProfilerPostPlanWork) and
    name an op the plugin already settled at its stop, so they change nothing;
  * the ops the truth marks corrupted are filtered by their reason and never published: up to 2.31.0a
    (ABI <= 6) the peer ops on the channels a self pair ran on read an earlier work's device-ring slot
    (the device counts the self work, the host does not): foreign_timestamps; with --bad-timer the
    garbage timers: rejected_timestamps;
  * nothing dropped, nothing in flight or abandoned at the end, no other filter reason.

Runs (the shape decides which pairs share the self pair's channels 0..15: init.cc ncclP2pSchedule,
ncclP2pChannelBaseForRound): two nodes of one GPU (the peer pair runs on channels 32..47) at 2.31.2 and
2.28, one node of two GPUs in one process (NVLink, 2.28; channels 32..47 too), 10,000 steps each; two
nodes of two GPUs (the pair to the other GPU of the node is round 1 and shares channels 0..15 with the
self pair) at 2.28, 2.30 (every such op foreign_timestamps: 2 per rank and step) and 2.31.2 (none);
then two nodes of one GPU with --bad-timer 0.02; and a short traced run at 2.28 and 2.31.2 counting the
KernelCh under self P2p events (none; 2 x 16 per rank and step).

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


def run(a, name, nccl, shape, steps, extra=(), corrupt_reason='rejected_timestamps'):
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
                 f'({t["untimed"]} to the rank itself, {t["corrupted"]} {corrupt_reason})')
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
    want = {'no_kernel_events': untimed, corrupt_reason: corrupted}
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
          f'{untimed} self ops no_kernel_events, {corrupted} {corrupt_reason} (truth: corrupted), '
          f'0 dropped, 0 in flight')
    return corrupted


def self_kernel_ch(a, name, nccl, shape, steps):
    """KernelCh starts under P2p events whose peer is the rank itself, in a --trace of the run."""
    work = os.path.join(a.outdir, name)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    trace = os.path.join(work, 'calls.trace')
    cmd = [a.sim, '--plugin', a.plugin, '--nccl', nccl, '--workload', 'alltoall', '--steps', str(steps),
           '--speed', '0', '--prom', '--out', os.path.join(work, 'job'), '--trace', trace] + list(shape)
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        fail(f'{name}: ncclinsp-sim exited {r.returncode}: {r.stderr[-2000:]}')
    n_self = n_all = 0
    for path in glob.glob(trace + '*'):
        rank_of, peer_of = {}, {}  # context -> rank; (context, P2p handle) -> peer
        for line in open(path):
            f = line.split()
            if not f or f[0] not in ('I', 'S'):
                continue
            if f[0] == 'I':
                rank_of[f[3]] = int(f[8])
            elif f[5] == '4':
                peer = next(int(x[5:]) for x in f if x.startswith('peer='))
                peer_of[(f[3], f[4])] = peer
            elif f[5] == '64':
                n_all += 1
                n_self += peer_of.get((f[3], f[6])) == rank_of.get(f[3])
    print(f'{name}: {steps} steps, {n_all} KernelCh, {n_self} of them under a self P2p')
    return n_self, n_all


def main():
    p = argparse.ArgumentParser()
    for x in ('sim', 'plugin', 'outdir'):
        p.add_argument(x)
    p.add_argument('--steps', type=int, default=10000)
    a = p.parse_args()
    two_by_one, two_by_two = ['--nodes', '2', '--gpus', '1'], ['--nodes', '2', '--gpus', '2']
    run(a, 'two-nodes-2.31.2', '2.31.2', two_by_one, a.steps)
    run(a, 'two-nodes-2.28', '2.28', two_by_one, a.steps, corrupt_reason='foreign_timestamps')
    run(a, 'one-node-2.28', '2.28', ['--nodes', '1', '--gpus', '2', '--single-process'], a.steps)
    # Two GPUs per node: round 1 (the other GPU of the node) runs on the self pair's channels.
    for nccl, steps, shifted in (('2.28', max(a.steps // 2, 100), True), ('2.30', max(a.steps // 4, 100), True),
                                 ('2.31.2', max(a.steps // 2, 100), False)):
        got = run(a, f'two-by-two-{nccl}', nccl, two_by_two, steps, corrupt_reason='foreign_timestamps')
        want = 2 * 4 * steps if shifted else 0  # Send and Recv to the node's other GPU, per rank and step
        if got != want:
            fail(f'two-by-two-{nccl}: {got} ops read an earlier work\'s slot, expected {want}')
    bad = run(a, 'bad-timer-2.31.2', '2.31.2', two_by_one, max(a.steps // 5, 100), ['--bad-timer', '0.02'])
    if bad == 0:
        fail('--bad-timer 0.02 gave no op a garbage timer')
    # KernelCh under self P2p: none up to 2.31.0a, one per channel of each direction at 2.31.2.
    for nccl, per_step in (('2.28', 0), ('2.31.2', 2 * 16)):
        n_self, n_all = self_kernel_ch(a, f'trace-{nccl}', nccl, two_by_two, 20)
        if n_self != 4 * 20 * per_step:
            fail(f'trace-{nccl}: {n_self} KernelCh under self P2p events, expected {4 * 20 * per_step}')
        if n_all - n_self != 4 * 20 * 2 * 3 * 16:
            fail(f'trace-{nccl}: {n_all - n_self} KernelCh under peer P2p events, expected {4 * 20 * 2 * 3 * 16}')
    print('alltoall: OK')


if __name__ == '__main__':
    main()
