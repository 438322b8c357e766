#!/usr/bin/env python3
"""Graph-replay soak: a serving-like job (ncclinsp-sim --workload serving: tensor-parallel AllReduce,
CUDA-graph replays mixed with eager ops) at NCCL 2.28 and 2.30, as fast as it goes (--speed 0), with the
real plugin. Holds when, per profile:

  * no hang: in the plugin's live .prom files, read while the job runs, no op stays in flight for
    30 s (half the hang alerts' first threshold, 60 s), the same series go through the shipped rules
    with promtool (NcclinspCollectiveHung and NcclinspDroppedEvents must never fire), and the final
    files show nothing in flight and nothing abandoned;
  * never a wrong number as GPU-timed: per (rank, communicator, collective, size) the ops the plugin
    publishes are exactly the ones whose KernelCh carried their own timestamps (the simulator's --truth),
    the others are counted by reason, and the published bus bandwidth (bus bytes / busy seconds) is
    within 2% of the simulator's truth; with --per-op, every op's JSON record is checked against the
    simulator's per-op truth (--truth-ops) too.

Usage: graph_soak.py SIM PLUGIN OUTDIR PROMTOOL RULES [--duration S] [--profiles 2.28,2.30] [--gpus G] [--per-op]
Prints one summary line per profile; exits 1 on the first failed check.
"""
import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import threading
import time

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$')
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def parse_prom(text):
    out = []
    for line in text.splitlines():
        if not line or line.startswith('#'):
            continue
        m = SAMPLE.match(line)
        if m:
            out.append((m.group(1), dict(LABEL.findall(m.group(3) or '')), float(m.group(4))))
    return out


def size_label(n):
    lo = 1 << (n.bit_length() - 1)

    def fmt(v):
        for unit, k in (('GiB', 30), ('MiB', 20), ('KiB', 10)):
            if v >= 1 << k:
                return f'{v >> k}{unit}'
        return f'{v}B'
    return f'{fmt(lo)}-{fmt(2 * lo)}'


def fail(msg):
    print('FAIL: ' + msg)
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)


def gpu_timed_records(out):
    """(header, coll_perf) of each GPU-timed record in the plugin's JSON .log files directly under `out`."""
    for n in sorted(os.listdir(out)):
        if n.endswith('.log'):
            for line in open(os.path.join(out, n)):
                rec = json.loads(line)
                c = rec.get('coll_perf')
                if c and c.get('coll_timing_source') == 'kernel_gpu':
                    yield rec['header'], c


class Sampler(threading.Thread):
    """Reads the plugin's .prom files every `period` s while the job runs (a scraper's view)."""

    def __init__(self, folder, period):
        super().__init__(daemon=True)
        self.folder, self.period, self.samples, self.done = folder, period, [], threading.Event()

    def run(self):
        while not self.done.is_set():
            self.take()
            self.done.wait(self.period)
        self.take()

    def take(self):
        snap = []
        try:
            names = sorted(os.listdir(self.folder))
        except FileNotFoundError:
            return
        for n in names:
            if n.startswith('nccl_inspector_metrics_') and n.endswith('.prom'):
                try:
                    with open(os.path.join(self.folder, n)) as f:
                        snap += parse_prom(f.read())
                except OSError:
                    pass
        if snap:
            self.samples.append(snap)


def promtool_no_alerts(promtool, rules, samples, work):
    """The sampled series, one sample per 10 s of rule time, through the shipped rules: no hang or
    dropped-events alert at any minute."""
    series = {}
    keep = ('ncclinsp_oldest_inflight_age_seconds', 'ncclinsp_dropped_events_total')
    for i, snap in enumerate(samples):
        for name, labels, value in snap:
            if name not in keep:
                continue
            key = name + '{' + ','.join(f'{k}="{v}"' for k, v in sorted(labels.items())) + '}'
            series.setdefault(key, [None] * len(samples))[i] = value
    lines = [f'rule_files:\n  - {os.path.abspath(rules)}\nevaluation_interval: 10s\ntests:\n',
             '  - name: graph-replay soak\n    interval: 10s\n    input_series:\n']
    for key, vals in series.items():
        last, text = None, []
        for v in vals:  # a series absent from a sample keeps its last value (the file was mid-rewrite)
            last = v if v is not None else last
            text.append('_' if last is None else repr(last))
        lines.append(f"      - series: '{key}'\n        values: '{' '.join(text)}'\n")
    lines.append('    alert_rule_test:\n')
    minutes = max(1, len(samples) * 10 // 60)
    for m in range(1, minutes + 1):
        for alert in ('NcclinspCollectiveHung', 'NcclinspDroppedEvents'):
            lines.append(f'      - eval_time: {m}m\n        alertname: {alert}\n        exp_alerts: []\n')
    path = os.path.join(work, 'soak_rules_test.yml')
    with open(path, 'w') as f:
        f.write(''.join(lines))
    r = subprocess.run([promtool, 'test', 'rules', path], capture_output=True, text=True)
    if r.returncode != 0:
        fail('promtool: an alert fired on the soak series:\n' + (r.stdout + r.stderr)[-3000:])
    return len(series), minutes


def run_profile(a, profile):
    work = os.path.join(a.outdir, 'nccl-' + profile)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    out = os.path.join(work, 'job')
    env = dict(os.environ)
    env.update({'NCCL_INSPECTOR_ENABLE': '1', 'NCCL_INSPECTOR_PROM_DUMP': '1',
                'NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS': '200000'})
    if a.per_op:
        env['NCCLINSP_SINKS'] = 'prom,json'
    cmd = [a.sim, '--plugin', a.plugin, '--nccl', profile, '--workload', 'serving', '--nodes', '1', '--gpus',
           str(a.gpus), '--duration', str(a.duration), '--speed', '0', '--single-process', '--prom', '--out', out,
           '--truth', os.path.join(work, 'truth.json')]
    if a.per_op:
        cmd += ['--truth-ops', os.path.join(work, 'truth_ops.json')]
    os.makedirs(out, exist_ok=True)
    sampler = Sampler(out, 0.25)
    sampler.start()
    t0 = time.time()
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.time() - t0
    sampler.done.set()
    sampler.join()
    if r.returncode != 0:
        fail(f'ncclinsp-sim --nccl {profile} exited {r.returncode}: {r.stderr[-2000:]}')

    final = []
    for n in os.listdir(out):
        if n.startswith('nccl_inspector_metrics_') and n.endswith('.prom'):
            with open(os.path.join(out, n)) as f:
                final += parse_prom(f.read())
    if not final:
        fail('no .prom file written')

    def total(name, **want):
        return sum(v for n, l, v in final if n == name and all(l.get(k) == w for k, w in want.items()))

    # ---- in flight, hangs, losses ------------------------------------------------------------
    if total('ncclinsp_inflight_ops') != 0:
        fail(f'{total("ncclinsp_inflight_ops")} ops in flight at the end')
    if total('ncclinsp_abandoned_ops_total') != 0:
        fail(f'{total("ncclinsp_abandoned_ops_total")} ops abandoned (stuck in flight until finalize)')
    if total('ncclinsp_dropped_events_total') != 0:
        fail(f'{total("ncclinsp_dropped_events_total")} events dropped')
    max_age = max((v for snap in sampler.samples for n, _, v in snap if n == 'ncclinsp_oldest_inflight_age_seconds'),
                  default=0.0)
    if max_age >= 30.0:
        fail(f'an op stayed in flight {max_age:.1f} s while the job ran (a false hang)')
    n_series, minutes = promtool_no_alerts(a.promtool, a.rules, sampler.samples, work)

    # ---- published = exactly the ops with their own timestamps, bandwidth = truth ------------------
    truth = [json.loads(l) for l in open(os.path.join(work, 'truth.json'))]
    published = own = corrupted = 0
    worst = 0.0
    for t in truth:
        labels = dict(comm_hash=t['comm_hash'][2:], rank=str(t['rank']), collective=t['func'],
                      message_size=size_label(t['bytes']))
        ops = total('ncclinsp_ops_total', **labels)
        expect = t['ops'] - t['corrupted'] - t['untimed']
        if ops != expect:
            fail(f'{labels}: {ops:.0f} ops published, {expect} had their own GPU timestamps '
                 f'({t["corrupted"]} carried another work\'s)')
        published += int(ops)
        own += expect
        corrupted += t['corrupted']
        if expect:
            busy = total('ncclinsp_busy_seconds_total', **labels)
            err = abs(busy / t['busy_s'] - 1.0)
            worst = max(worst, err)
            if err > 0.02:
                fail(f'{labels}: busy {busy:.6f} s vs truth {t["busy_s"]:.6f} s ({100 * err:.2f}% off)')
    filtered = sum(total('ncclinsp_filtered_ops_total', reason=r)
                   for r in ('foreign_timestamps', 'rejected_timestamps', 'no_gpu_timing'))
    if filtered != corrupted:
        fail(f'{filtered:.0f} ops counted as untrusted, {corrupted} carried another work\'s timestamps')

    per_op = ''
    if a.per_op:
        want = {}
        for l in open(os.path.join(work, 'truth_ops.json')):
            t = json.loads(l)
            want[(t['comm_hash'], t['rank'], t['func'], t['seq'])] = t
        checked = 0
        op_worst = 0.0
        for h, c in gpu_timed_records(out):
            t = want.get((h['id'], h['rank'], c['coll'], c['coll_sn']))
            if t is None:
                fail(f'a GPU-timed record without a simulated op: {h} {c}')
            if t['corrupted'] or t['untimed']:
                fail(f'published as GPU-timed with another work\'s timestamps: {h} {c}')
            truth_us = (t['end_ns'] - t['start_ns']) / 1e3
            err = abs(c['coll_exec_time_us'] / truth_us - 1.0)
            op_worst = max(op_worst, err)
            if err > 0.02:
                fail(f'op {h["comm_name"]} rank {h["rank"]} {c["coll"]} #{c["coll_sn"]}: '
                     f'{c["coll_exec_time_us"]} us vs truth {truth_us:.3f} us')
            checked += 1
        if checked != own:
            fail(f'{checked} GPU-timed records checked, {own} ops had their own timestamps')
        per_op = f', per op: {checked} records, worst {100 * op_worst:.3f}%'
    print(f'nccl {profile}: {a.duration:g} s simulated in {wall:.1f} s wall, {published} ops GPU-timed, '
          f'{corrupted} replays with another work\'s timestamps counted (not published), bus bandwidth worst '
          f'{100 * worst:.3f}% off truth{per_op}; in flight at end 0, abandoned 0, max in-flight age '
          f'{max_age:.3f} s; promtool: {n_series} series x {len(sampler.samples)} samples, {minutes} min of '
          f'rule time, no NcclinspCollectiveHung / NcclinspDroppedEvents')


def main():
    p = argparse.ArgumentParser()
    for x in ('sim', 'plugin', 'outdir', 'promtool', 'rules'):
        p.add_argument(x)
    p.add_argument('--duration', type=float, default=600)
    p.add_argument('--profiles', default='2.28,2.30')
    p.add_argument('--gpus', type=int, default=4)
    p.add_argument('--per-op', action='store_true')
    a = p.parse_args()
    if not a.promtool or not shutil.which(a.promtool):
        fail('promtool not found')
    for profile in a.profiles.split(','):
        run_profile(a, profile)
    print('graph-replay soak: OK')


if __name__ == '__main__':
    main()
