#!/usr/bin/env python3
"""The simulator's event grammar against a real NCCL trace.

Runs `ncclinsp-sim --nccl 2.28 --workload cases` with the recording plugin (every event type,
REC_PLUGIN_MASK=4095, as the real recorder asked) and `--trace`, then compares its trace with the real
NCCL 2.28.9 one (tests/traces/nccl-2.28.9-h200-onerank-cases.trace, recorded from
examples/nccl_wrappers --cases on an H200). Ids, pointers, times and thread ids differ between the two
by nature; what must be equal:

  * per API group (a GroupApi and every event under it: P2pApi/CollApi, KernelLaunch, the plans'
    Group and Coll/P2p, their KernelCh/ProxyOp/ProxyStep, wherever they come from) the sequence of
    calls: event types, record states, which event is whose parent (by type, within the group or in
    another one), the descriptor fields that are no addresses (func, count, datatype, peer, nChannels,
    graph, depth, ...), and on which thread each call came (the GroupApi's thread or another);
  * events outside any API group (a replay's Group and Coll/P2p from a host-callback thread, ProxyCtrl),
    the same way;
  * the order and number of these groups: runs of identical groups, i.e. the counts per case;
  * per op kind (event type, function, size, capture): how many starts and which record states;
  * init (nNodes, nRanks, rank, mask) and finalize.

Fails on the first difference and prints it. `--self-test` first checks that the comparison finds
each of a set of mutations of the real trace (an added KernelCh, a lost group, a thread change, a
replay that emits, a lost state, another channel count) and none in the trace itself.

Usage: trace_grammar.py SIM RECORDING_PLUGIN REAL_TRACE OUTDIR [--issued TSV] [--self-test]
       trace_grammar.py --compare A B       (two traces, no simulator run)
"""
import argparse
import collections
import os
import subprocess
import sys

TYPES = {1: 'Group', 2: 'Coll', 4: 'P2p', 8: 'ProxyOp', 16: 'ProxyStep', 32: 'ProxyCtrl', 64: 'KernelCh',
         128: 'NetPlugin', 256: 'GroupApi', 512: 'CollApi', 1024: 'P2pApi', 2048: 'KernelLaunch',
         4096: 'CeColl', 8192: 'CeSync', 16384: 'CeBatch', 32768: 'KernelPhase'}
# Descriptor fields compared per type (the rest are addresses, times or sequence numbers).
KEYS = {'GroupApi': ('graph', 'depth'), 'CollApi': ('func', 'count', 'dt', 'root', 'graph'),
        'P2pApi': ('func', 'count', 'dt', 'graph'), 'KernelLaunch': (),
        'Coll': ('func', 'count', 'dt', 'root', 'nch', 'algo', 'proto'), 'P2p': ('func', 'dt', 'count', 'peer', 'nch'),
        'ProxyOp': ('ch', 'peer', 'nsteps', 'send'), 'ProxyStep': ('step',), 'KernelCh': ('ch',), 'Group': ()}


class Event:
    __slots__ = ('id', 'type', 'tid', 'unit', 'local', 'fields')


class Unit:
    """An API group (GroupApi and its descendants) or a stand-alone root (a Group outside any open
    GroupApi on its thread, an orphan event)."""

    def __init__(self, kind, tid, first_line):
        self.kind, self.tid, self.first_line = kind, tid, first_line
        self.tokens, self.events = [], []

    def sig(self):
        return tuple(self.tokens)

    def name(self):
        ops = collections.Counter()
        for e in self.events:
            if e.type in ('P2pApi', 'CollApi'):
                ops[f"{e.fields.get('func')} count={e.fields.get('count')} graph={e.fields.get('graph')}"] += 1
        head = ', '.join(f'{n}x {k}' if n > 1 else k for k, n in ops.items())
        return f"{self.kind}[{head or ','.join(e.type for e in self.events[:3])}]"


class Trace:
    def __init__(self, lines, label):
        self.label = label
        self.inits, self.finals, self.units = [], 0, []
        self.per_kind = collections.Counter()
        events, open_api = {}, {}
        for no, raw in enumerate(lines, 1):
            line = raw.strip()
            if not line or line.startswith('#'):
                continue
            f = line.split(' ')
            kind = f[0]
            if kind == 'I':
                self.inits.append(tuple(f[5:]))  # name nNodes nranks rank mask=
                continue
            if kind == 'F':
                self.finals += 1
                continue
            tid = f[2]
            if kind == 'S':
                ev = Event()
                ev.id, ev.type, ev.tid = f[4], TYPES.get(int(f[5]), f[5]), tid
                parent = f[6]
                ev.fields = dict(kv.split('=', 1) for kv in f[8:] if '=' in kv)
                pgroup = ev.fields.get('pgroup')
                if ev.type == 'GroupApi':
                    unit = Unit('api', tid, no)
                    self.units.append(unit)
                    open_api[tid] = unit
                elif ev.type == 'Group':
                    unit = open_api.get(tid)
                    if unit is None:  # a plan's host callback outside the API call (a replay)
                        unit = Unit('callback', tid, no)
                        self.units.append(unit)
                elif pgroup in events:
                    unit = events[pgroup].unit
                elif parent in events:
                    unit = events[parent].unit
                else:
                    unit = Unit('orphan', tid, no)
                    self.units.append(unit)
                ev.unit, ev.local = unit, len(unit.events)
                unit.events.append(ev)
                events[ev.id] = ev

                def ref(x):
                    if x in ('0', None):
                        return '-'
                    p = events.get(x)
                    if p is None:
                        return '?'
                    return f'#{p.local}' if p.unit is unit else f'ext:{p.type}'
                keys = ' '.join(f'{k}={ev.fields.get(k)}' for k in KEYS.get(ev.type, ()))
                pg = f' pgroup={ref(pgroup)}' if pgroup is not None else ''
                unit.tokens.append(f'S {ev.type} #{ev.local} parent={ref(parent)}{pg} {self.thread(unit, tid)} {keys}'.rstrip())
                size = ev.fields.get('count', '')
                self.per_kind[(ev.type, ev.fields.get('func', ''), size, ev.fields.get('graph', ''), 'start')] += 1
            elif kind in ('E', 'R'):
                ev = events.get(f[3])
                if ev is None:
                    unit = Unit('orphan', tid, no)
                    self.units.append(unit)
                    unit.tokens.append(f'{kind} unknown-handle {line.split(" ", 4)[4:] if kind == "R" else ""}')
                    continue
                unit = ev.unit
                if kind == 'E':
                    unit.tokens.append(f'E #{ev.local} {self.thread(unit, tid)}')
                    if ev.type == 'GroupApi' and open_api.get(tid) is unit:
                        del open_api[tid]
                else:
                    arg = f[5].split('=')[0] if len(f) > 5 else ''
                    unit.tokens.append(f'R #{ev.local} {f[4]} {arg} {self.thread(unit, tid)}'.rstrip())
                    self.per_kind[(ev.type, ev.fields.get('func', ''), ev.fields.get('count', ''),
                                   ev.fields.get('graph', ''), f'R{f[4]}')] += 1

    @staticmethod
    def thread(unit, tid):
        return 'main' if tid == unit.tid else 'other'

    def runs(self):
        out = []
        for u in self.units:
            s = u.sig()
            if out and out[-1][0] == s:
                out[-1][1] += 1
            else:
                out.append([s, 1, u])
        return out


def load(path, label=None):
    with open(path) as f:
        return Trace(f.read().splitlines(), label or os.path.basename(path))


def first_difference(real, sim):
    """None if the grammar matches, else a message naming the first difference."""
    if [i[1:] for i in real.inits] != [i[1:] for i in sim.inits] or len(real.inits) != len(sim.inits):
        return f'init: {real.label} {real.inits} vs {sim.label} {sim.inits} (nNodes nRanks rank mask)'
    ra, sa = real.runs(), sim.runs()
    for i in range(max(len(ra), len(sa))):
        if i >= len(ra) or i >= len(sa):
            extra, who = (sa[i], sim.label) if i >= len(ra) else (ra[i], real.label)
            return f'group run {i}: only {who} has {extra[1]}x {extra[2].name()} (line {extra[2].first_line})'
        (rs, rn, ru), (ss, sn, su) = ra[i], sa[i]
        if rs != ss:
            for k in range(max(len(rs), len(ss))):
                a = rs[k] if k < len(rs) else '(end)'
                b = ss[k] if k < len(ss) else '(end)'
                if a != b:
                    return (f'group run {i} ({ru.name()}, {real.label} line {ru.first_line}, {sim.label} line '
                            f'{su.first_line}), call {k}:\n  {real.label}: {a}\n  {sim.label}: {b}')
        if rn != sn:
            return f'group run {i} ({ru.name()}): {rn} in a row in {real.label}, {sn} in {sim.label}'
    for k in sorted(set(real.per_kind) | set(sim.per_kind)):
        if real.per_kind[k] != sim.per_kind[k]:
            return f'op kind {k}: {real.per_kind[k]} in {real.label}, {sim.per_kind[k]} in {sim.label}'
    if real.finals != sim.finals:
        return f'finalize: {real.finals} in {real.label}, {sim.finals} in {sim.label}'
    return None


def per_case(issued, real, sim):
    """Per issued case (phase, collective, bytes): API events in each trace (a capture: once)."""
    rows = []
    for line in open(issued):
        f = line.rstrip('\n').split('\t')
        if len(f) < 5 or f[0] != 'case':
            continue
        phase, coll, nbytes, ops = f[1], f[2], int(f[3]), int(f[4])
        graph = '1' if phase == 'graph' or (phase == 'mixed' and nbytes < (1 << 20)) else '0'

        def count(t, typ):
            return sum(n for (ty, fn, cnt, g, what), n in t.per_kind.items()
                       if ty == typ and fn == coll and cnt == str(nbytes // 4) and what == 'start' and g in (graph, ''))
        api = 'P2pApi' if coll in ('Send', 'Recv') else 'CollApi'
        task = 'P2p' if coll in ('Send', 'Recv') else 'Coll'
        rows.append((phase, coll, nbytes, ops, count(real, api), count(sim, api), count(real, task), count(sim, task)))
    return rows


MUTATIONS = []


def mutation(fn):
    MUTATIONS.append(fn)
    return fn


def _starts(lines, typ):
    return [i for i, l in enumerate(lines) if l.startswith('S ') and l.split(' ')[5] == str(typ)]


@mutation
def kernel_ch_under_p2p(lines):
    i = _starts(lines, 4)[0]
    f = lines[i].split(' ')
    t, tid, ctx, pid = f[1], f[2], f[3], f[4]
    return lines[:i + 1] + [f'S {t} {tid} {ctx} 999001 64 {pid} 0 ch=0 ptimer=1',
                            f'R {t} {tid} 999001 22 ptimer=2', f'E {t} {tid} 999001'] + lines[i + 1:]


@mutation
def one_eager_group_lost(lines):
    g = _starts(lines, 256)
    return lines[:g[1]] + lines[g[2]:]


@mutation
def p2p_on_another_thread(lines):
    i = _starts(lines, 4)[0]
    f = lines[i].split(' ')
    f[2] = '999999'
    return lines[:i] + [' '.join(f)] + lines[i + 1:]


@mutation
def replay_emits(lines):
    caps = [i for i in _starts(lines, 1024) if 'graph=1' in lines[i]]
    f = lines[caps[0]].split(' ')
    t, ctx, api = f[1], f[3], f[4]
    end = max(i for i in range(len(lines)) if lines[i].startswith('E ') and lines[i].split(' ')[3] == api)
    add = [f'S {t} 777 {ctx} 999101 1 0 0', f'S {t} 777 {ctx} 999102 4 {api} 0 func=Send buff=0x1 dt=ncclFloat32 '
           f'count=65536 peer=0 nch=4 pgroup=999101', f'E {t} 777 999102', f'E {t} 777 999101']
    return lines[:end + 8] + add + lines[end + 8:]


@mutation
def state_24_lost(lines):
    i = next(i for i, l in enumerate(lines) if l.startswith('R ') and l.split(' ')[4] == '24')
    return lines[:i] + lines[i + 1:]


@mutation
def other_channel_count(lines):
    i = _starts(lines, 4)[-1]
    return lines[:i] + [lines[i].replace('nch=64', 'nch=32')] + lines[i + 1:]


def self_test(real_path):
    with open(real_path) as f:
        lines = f.read().splitlines()
    base = Trace(lines, 'real')
    if first_difference(base, Trace(lines, 'copy')) is not None:
        print('FAIL: self-test: the real trace differs from itself')
        sys.exit(1)
    for m in MUTATIONS:
        d = first_difference(base, Trace(m(list(lines)), m.__name__))
        if d is None:
            print(f'FAIL: self-test: mutation {m.__name__} not detected')
            sys.exit(1)
        print(f'self-test: {m.__name__} detected: {d.splitlines()[0]}')


def main():
    p = argparse.ArgumentParser()
    p.add_argument('args', nargs='*')
    p.add_argument('--compare', nargs=2)
    p.add_argument('--issued')
    p.add_argument('--self-test', action='store_true')
    a = p.parse_args()
    if a.compare:
        d = first_difference(load(a.compare[0]), load(a.compare[1]))
        print(d or 'same grammar')
        sys.exit(1 if d else 0)
    sim, plugin, real_path, outdir = a.args
    if a.self_test:
        self_test(real_path)
    os.makedirs(outdir, exist_ok=True)
    out = os.path.join(outdir, 'sim-2.28-cases.trace')
    env = dict(os.environ, REC_PLUGIN_MASK='4095')
    r = subprocess.run([sim, '--plugin', plugin, '--nccl', '2.28', '--workload', 'cases', '--speed', '0',
                        '--trace', out], env=env, capture_output=True, text=True)
    if r.returncode != 0:
        print(f'FAIL: ncclinsp-sim exited {r.returncode}: {r.stderr[-2000:]}')
        sys.exit(1)
    with open(out) as f:
        header = f.readline()
    if not header.startswith('# ncclinsp-trace abi=5 nccl=22809 source=ncclinsp-sim'):
        print(f'FAIL: trace header {header!r}')
        sys.exit(1)
    real, simt = load(real_path, 'real'), load(out, 'sim')
    issued = a.issued or os.path.splitext(real_path)[0] + '.issued.tsv'
    if os.path.exists(issued):
        print('case        collective  bytes      issued  real-api sim-api real-task sim-task')
        bad = None
        for row in per_case(issued, real, simt):
            print('%-11s %-11s %-10d %6d %8d %7d %9d %8d' % row)
            if row[4] != row[5] or row[6] != row[7]:
                bad = bad or row
        if bad:
            print(f'FAIL: case {bad[0]} {bad[1]} {bad[2]}: API/task events differ')
            sys.exit(1)
    d = first_difference(real, simt)
    if d:
        print('FAIL: the simulator disagrees with the real trace at\n' + d)
        sys.exit(1)
    runs = real.runs()
    print(f'trace grammar: OK ({len(real.units)} groups in {len(runs)} runs, '
          f'{sum(real.per_kind.values())} starts and states, init/finalize equal): '
          + '; '.join(f'{n}x {u.name()}' for _, n, u in runs))


if __name__ == '__main__':
    main()
