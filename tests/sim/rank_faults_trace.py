#!/usr/bin/env python3
"""Rank faults in the events the plugin receives: `ncclinsp-sim --trace` (every call into the real plugin's
table, shared trace text) on 2 nodes x 2 GPUs at --speed 0, the truth from `--summary`. Holds when:

  stall     --stall-rank 3@2: every rank in flight on the first blocked op (communicator, sequence number N)
            has that op's Coll and KernelCh started and no KernelCh stopped; rank 3 never starts a Coll
            numbered N or later there and has no KernelCh left open on any communicator.
  net_stall --net-stall 2 (NCCLINSP_PROXY=1, every op sampled): every member of the first blocked (multi-node)
            communicator has its Coll N with KernelCh started and none stopped; its network ProxyOps (some
            member has them) are started with every step posted and none stopped: each send ProxyOp has a
            step whose isend was accepted (SendWait) and stays there, the others' data never came
            (SendGPUWait); each recv step stays in RecvWait. Every ProxyOp and step of an op whose KernelCh
            all stopped is stopped.
  pause     --pause-rank 3@2:4: the peers' KernelCh of the op they waited in start before rank 3 launches
            it (by about the wait the summary gives) and stop after; rank 3's own are short; every KernelCh
            of the run is stopped.

Usage: rank_faults_trace.py SIM PLUGIN OUTDIR
"""
import collections
import glob
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from graph_soak import check  # noqa: E402

GPUS = 2


class Trace:
    """Per (global rank, communicator name): its Coll ops by sequence number (func, KernelCh starts and
    stops with their GPU timers) and its KernelCh still open at the end of the trace."""

    def __init__(self, paths):
        self.colls = collections.defaultdict(dict)  # (rank, comm) -> {(func, seq): {'kch': {id: [start, stop]}}}
        self.open = collections.defaultdict(set)  # (rank, comm) -> KernelCh ids never stopped
        # ProxyOp id -> {'op': the Coll's op dict, 'steps': {step id: [states]}, 'stopped': bool}
        self.proxy = {}
        for path in paths:
            self.read(path)

    def read(self, path):
        where, coll_of, kch_of, step_of = {}, {}, {}, {}
        with open(path) as f:
            for line in f:
                w = line.split()
                if not w or w[0] == '#':
                    continue
                if w[0] == 'I':
                    ctx, name, rank = w[3], w[5], int(w[8])
                    if name == 'tp':
                        node = int(path.rsplit('.node', 1)[1].split('.')[0])
                        g = node * GPUS + rank
                    elif name == 'fsdp':
                        g = rank
                    else:  # dp<l>, pp<l>: one rank per node, local GPU l
                        g = rank * GPUS + int(name[2:])
                    where[ctx] = (g, name)
                elif w[0] == 'S' and w[5] == '2':
                    kv = dict(x.split('=', 1) for x in w[8:] if '=' in x)
                    key = where[w[3]]
                    op = {'kch': {}}
                    self.colls[key][(kv['func'], int(kv['seq']))] = op
                    coll_of[w[4]] = (key, op)
                elif w[0] == 'S' and w[5] == '64' and w[6] in coll_of:
                    key, op = coll_of[w[6]]
                    kv = dict(x.split('=', 1) for x in w[8:] if '=' in x)
                    op['kch'][w[4]] = [int(kv['ptimer']), None]
                    kch_of[w[4]] = (key, op)
                    self.open[key].add(w[4])
                elif w[0] == 'S' and w[5] == '8' and w[6] in coll_of:  # ProxyOp under a Coll
                    op = coll_of[w[6]][1]
                    self.proxy[w[4]] = {'op': op, 'steps': {}, 'stopped': False}
                    op.setdefault('proxy', []).append(w[4])
                elif w[0] == 'S' and w[5] == '16' and w[6] in self.proxy:  # ProxyStep under a ProxyOp
                    self.proxy[w[6]]['steps'][w[4]] = {'states': [], 'stopped': False}
                    step_of[w[4]] = self.proxy[w[6]]['steps'][w[4]]
                elif w[0] == 'R' and w[3] in step_of:
                    step_of[w[3]]['states'].append(int(w[4]))
                elif w[0] == 'R' and w[4] == '22' and w[3] in kch_of:
                    kch_of[w[3]][1]['kch'][w[3]][1] = int(w[5].split('=')[1])
                elif w[0] == 'E' and w[3] in kch_of:
                    self.open[kch_of[w[3]][0]].discard(w[3])
                elif w[0] == 'E' and w[3] in self.proxy:
                    self.proxy[w[3]]['stopped'] = True
                elif w[0] == 'E' and w[3] in step_of:
                    step_of[w[3]]['stopped'] = True

    def op(self, rank, comm, func, seq):
        return self.colls[(rank, comm)].get((func, seq))

    def open_of(self, rank):
        return {k: v for k, v in self.open.items() if k[0] == rank and v}


def run(a, name, extra, env=None):
    work = os.path.join(a[3], name)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    summary = os.path.join(work, 'summary.json')
    cmd = [a[1], '--plugin', a[2], '--nodes', '2', '--gpus', str(GPUS), '--duration', '6', '--speed', '0', '--prom',
           '--out', os.path.join(work, 'job'), '--summary', summary, '--trace', os.path.join(work, 'calls.trace')] + extra
    r = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, **(env or {})))
    check(r.returncode == 0, f'{name}: ncclinsp-sim exited {r.returncode}: {r.stderr[-2000:]}')
    with open(summary) as f:
        summ = json.load(f)
    return Trace(sorted(glob.glob(os.path.join(work, 'calls.trace.*')))), summ


def blocked_open(t, b, rank, name):
    op = t.op(rank, b['comm'], b['func'], b['seq'])
    check(op is not None, f'{name}: rank {rank} never started {b["comm"]} {b["func"]} #{b["seq"]}')
    check(op['kch'] and all(s is None for _, s in op['kch'].values()),
          f'{name}: rank {rank} {b["comm"]} #{b["seq"]}: KernelCh {op["kch"]} (want started, none stopped)')
    return len(op['kch'])


def main():
    a = sys.argv
    if len(a) != 4:
        sys.exit(__doc__)
    # stall
    t, s = run(a, 'stall', ['--stall-rank', '3@2'])
    b = s['blocked'][0]
    check(b['missing'] == [3], f'stall: first block {b}')
    n = sum(blocked_open(t, b, r, 'stall') for r in b['in_flight'])
    later = [k for k in t.colls[(3, b['comm'])] if k[0] == b['func'] and k[1] >= b['seq']]
    check(not later, f'stall: rank 3 started {later} on {b["comm"]}')
    check(not t.open_of(3), f'stall: rank 3 has KernelCh open: {t.open_of(3)}')
    print(f'stall: {b["in_flight"]} hold {n} KernelCh of {b["comm"]} {b["func"]} #{b["seq"]} open, rank 3 none')
    # net_stall
    t, s = run(a, 'net_stall', ['--net-stall', '2'], {'NCCLINSP_PROXY': '1', 'NCCLINSP_PROXY_SAMPLE': '1'})
    b = s['blocked'][0]
    check(b['missing'] == [] and len(b['in_flight']) > 1, f'net_stall: first block {b}')
    n = sum(blocked_open(t, b, r, 'net_stall') for r in b['in_flight'])
    print(f'net_stall: every member {b["in_flight"]} holds {b["comm"]} {b["func"]} #{b["seq"]} open ({n} KernelCh)')
    stuck = [p for r in b['in_flight'] for p in t.op(r, b['comm'], b['func'], b['seq']).get('proxy', [])]
    check(stuck, f'net_stall: no ProxyOp on {b["comm"]} #{b["seq"]}')
    sends = 0
    for pid in stuck:
        p = t.proxy[pid]
        last = [st['states'][-1] for st in p['steps'].values() if st['states']]
        check(p['steps'] and len(last) == len(p['steps']), f'net_stall: ProxyOp {pid} steps {p["steps"]}')
        check(not p['stopped'] and not any(st['stopped'] for st in p['steps'].values()),
              f'net_stall: ProxyOp {pid} of the stalled op stopped: {p}')
        if 10 in last:  # a recv: posted, its data never arrives
            check(set(last) == {10}, f'net_stall: recv ProxyOp {pid} last states {last} (want RecvWait)')
        else:  # a send: its own data's isend accepted (SendWait), forwarded data never ready (SendGPUWait)
            check(9 in last and set(last) <= {8, 9}, f'net_stall: send ProxyOp {pid} last states {last}')
            sends += 1
    done = [p for p in t.proxy.values() if all(sp is not None for _, sp in p['op']['kch'].values())]
    open_done = [p for p in done if not p['stopped'] or not all(st['stopped'] for st in p['steps'].values())]
    check(done and not open_done, f'net_stall: {len(open_done)} ProxyOps of completed ops left open')
    print(f'net_stall: {len(stuck)} ProxyOps of the stalled op ({sends} send) stay posted, none stopped; '
          f'{len(done)} of completed ops all stopped')
    # pause
    t, s = run(a, 'pause', ['--pause-rank', '3@2:4'])
    w = s['waited'][0]
    mine = t.op(3, w['comm'], w['func'], w['seq'])
    check(mine is not None and mine['kch'], f'pause: rank 3 never ran {w}')
    launch = min(st for st, _ in mine['kch'].values())
    check(max(sp for _, sp in mine['kch'].values()) - launch < 1e9, 'pause: rank 3\'s own op is long')
    earliest = launch
    for r in w['waiting']:
        op = t.op(r, w['comm'], w['func'], w['seq'])
        check(op is not None and op['kch'], f'pause: rank {r} never ran {w}')
        starts = [st for st, _ in op['kch'].values()]
        stops = [sp for _, sp in op['kch'].values()]
        check(None not in stops and min(stops) >= launch, f'pause: rank {r}: KernelCh stops {stops}, launch {launch}')
        earliest = min(earliest, min(starts))
    waited = (launch - earliest) / 1e9
    check(abs(waited - (w['until'] - w['t'])) < 0.05, f'pause: waited {waited:.3f} s in KernelCh, summary {w}')
    check(not any(t.open.values()), f'pause: KernelCh left open {dict(t.open)}')
    print(f'pause: {w["waiting"]} waited {waited:.2f} s inside {w["comm"]} {w["func"]} #{w["seq"]} (KernelCh started '
          f'before rank 3 launched, stopped after)')
    print('rank fault trace: OK')


if __name__ == '__main__':
    main()
