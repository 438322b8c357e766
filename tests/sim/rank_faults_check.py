#!/usr/bin/env python3
"""Rank faults through the real plugin: `ncclinsp-sim` on 2 nodes x 2 GPUs with one scenario, its plugin's
.prom files read while the job runs (as node_exporter would), the truth from `--summary` (`scenarios`,
`blocked`, `waited`). The plugin measures an op's in-flight age on the wall clock, so the ages below are
wall seconds while onsets and durations are simulated ones (wall = simulated / --speed).

  stall     --stall-rank 3@2: the ranks of the first blocked communicator instance are in flight with
            their oldest age growing, on sequence number N (their last completed is N - 1); rank 3 has
            nothing in flight anywhere and its last completed on that communicator is below N; its
            process lives on (its file keeps being rewritten).
  pause     --pause-rank 3@2:8: while rank 3 pauses its peers wait in flight on the op of `waited`, rank 3
            has nothing in flight; after it, that op and later ones complete (last completed past N),
            no op stays in flight for long, and every rank ends with the same number of steps.
  kill      --kill-rank 3@3 (one process per GPU): rank 3's file stops being rewritten while the other
            ranks' files go on, the peers of the first blocked instance stay in flight with their age
            growing, each GPU has its own ncclinsp_sim.gpu<k>.prom, and the simulator exits 0.
  net_stall --net-stall 2: every member of the first blocked communicator (a multi-node one) is in flight
            on the same sequence number, none missing.

Usage: rank_faults_check.py SIM PLUGIN OUTDIR SCENARIO
"""
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from graph_soak import check, fail, parse_prom  # noqa: E402

NODES, GPUS, SPEED = 2, 2, 2.0
SCENARIOS = {
    'stall': (['--stall-rank', '3@2'], 16),
    'pause': (['--pause-rank', '3@2:8'], 20),
    'kill': (['--kill-rank', '3@3'], 20),
    'net_stall': (['--net-stall', '2'], 12),
}


def read_files(out):
    """Global rank -> {'t': wall time read, 'series': [(name, labels, value)]} from the plugin's files."""
    got = {}
    for path in glob.glob(os.path.join(out, 'node*', 'nccl_inspector_metrics_*.prom')):
        try:
            with open(path) as f:
                series = parse_prom(f.read())
        except OSError:
            continue
        gpus = {lab.get('gpu') for _, lab, _ in series if 'gpu' in lab}
        nodes = {lab.get('node') for _, lab, _ in series if 'node' in lab}
        if len(gpus) != 1 or len(nodes) != 1:
            continue
        rank = int(re.sub(r'\D', '', nodes.pop())) * GPUS + int(re.sub(r'\D', '', gpus.pop()))
        got[rank] = series
    return got


def value(series, name, comm=None, func=None):
    """The value of `name` (on communicator `comm`, collective `func`), None where absent."""
    for n, lab, v in series:
        if n == name and (comm is None or lab.get('comm_name') == comm) and (
                func is None or lab.get('collective') == func):
            return v
    return None


def inflight_total(series):
    return sum(v for n, _, v in series if n == 'ncclinsp_inflight_ops')


class Job:
    def __init__(self, sim, plugin, outdir, name, extra, duration):
        self.work = os.path.join(outdir, name)
        shutil.rmtree(self.work, ignore_errors=True)
        os.makedirs(self.work)
        self.out = os.path.join(self.work, 'job')
        self.summary_path = os.path.join(self.work, 'summary.json')
        cmd = [sim, '--plugin', plugin, '--nodes', str(NODES), '--gpus', str(GPUS), '--duration', str(duration),
               '--speed', str(SPEED), '--prom', '--out', self.out, '--summary', self.summary_path] + extra
        self.t0 = time.time()
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.duration = duration

    def wall_of(self, sim_t):
        return self.t0 + sim_t / SPEED

    def sample_at(self, sim_t):
        """The plugin's files as they are at simulated second sim_t (read then)."""
        time.sleep(max(0.0, self.wall_of(sim_t) - time.time()))
        check(self.proc.poll() is None, f'ncclinsp-sim ended early ({self.proc.returncode}): {self.output()}')
        return read_files(self.out), time.time()

    def summary(self):
        for _ in range(100):
            if os.path.exists(self.summary_path):
                try:
                    with open(self.summary_path) as f:
                        return json.load(f)
                except ValueError:
                    pass
            time.sleep(0.05)
        fail('no --summary written')

    def output(self):
        return self.proc.stdout.read()[-2000:] if self.proc.poll() is not None else ''

    def finish(self):
        try:
            rc = self.proc.wait(timeout=self.duration / SPEED + 60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            fail('ncclinsp-sim did not end')
        check(rc == 0, f'ncclinsp-sim exited {rc}: {self.output()}')


def first_block(summ, kind):
    sc = summ['scenarios']
    check(len(sc) == 1 and sc[0]['kind'] == kind, f'summary scenarios {sc}')
    check(summ['blocked'], f'summary: nothing blocked: {summ}')
    return sc[0], summ['blocked'][0]


def waiting_in(files, rank, comm, min_age):
    s = files.get(rank)
    check(s is not None, f'no file of rank {rank}')
    n, age = value(s, 'ncclinsp_inflight_ops', comm), value(s, 'ncclinsp_oldest_inflight_age_seconds', comm)
    check(n and n >= 1 and age is not None and age >= min_age,
          f'rank {rank}: {n} in flight on {comm}, oldest {age} s (want >= 1, >= {min_age} s)')
    return age


def stall(job):
    summ = job.summary()
    sc, b = first_block(summ, 'stall')
    culprit = sc['rank']
    check(b['missing'] == [culprit] and b['seq'] is not None, f'first block {b}')
    onset_wall = b['t'] / SPEED
    a, ta = job.sample_at(b['t'] + 3 * SPEED)  # a file is up to 1 s old: its ages lag by as much
    z, tz = job.sample_at(b['t'] + 5 * SPEED)
    for r in b['in_flight']:
        age_a = waiting_in(a, r, b['comm'], 1.0)
        age_z = waiting_in(z, r, b['comm'], 1.0)
        check(age_z - age_a > 0.5 * (tz - ta), f'rank {r}: oldest age {age_a} -> {age_z} s in {tz - ta:.1f} s')
        check(age_z <= (tz - job.t0) - onset_wall + 1.5, f'rank {r}: age {age_z} s, onset {onset_wall:.1f} s ago')
        last = value(z[r], 'ncclinsp_last_completed_seq', b['comm'], b['func'])
        check(last == b['seq'] - 1, f'rank {r}: last completed {b["func"]} {last}, in flight on {b["seq"]}')
    c = z.get(culprit)
    check(c is not None, 'no file of the stalled rank')
    check(inflight_total(c) == 0, f'stalled rank {culprit}: {inflight_total(c)} ops in flight')
    last = value(c, 'ncclinsp_last_completed_seq', b['comm'], b['func'])
    check(last is not None and last < b['seq'], f'stalled rank: last completed {last}, peers in flight on {b["seq"]}')
    ts_a = value(a[culprit], 'ncclinsp_export_timestamp_seconds')
    ts_z = value(c, 'ncclinsp_export_timestamp_seconds')
    check(ts_z - ts_a >= 1, f'stalled rank\'s file not rewritten ({ts_a} -> {ts_z}): its process is alive')
    job.finish()
    print(f'stall: rank {culprit} missing from {b["comm"]} {b["func"]} #{b["seq"]}, {b["in_flight"]} in flight '
          f'(ages {[round(value(z[r], "ncclinsp_oldest_inflight_age_seconds", b["comm"]), 1) for r in b["in_flight"]]} s), '
          f'rank {culprit} last completed {int(last)}, nothing in flight')


def pause(job):
    summ = job.summary()
    sc = summ['scenarios']
    check(len(sc) == 1 and sc[0]['kind'] == 'pause' and sc[0]['duration'] == 8, f'summary scenarios {sc}')
    check(not summ['blocked'] and len(summ['waited']) == 1, f'summary blocked {summ["blocked"]} waited {summ["waited"]}')
    w = summ['waited'][0]
    culprit, end = w['rank'], w['until']
    check(w['waiting'] and w['seq'] is not None and sc[0]['onset'] <= w['t'] < end, f'waited {w}')
    mid, _ = job.sample_at((w['t'] + end) / 2 + 0.5 * SPEED)
    for r in w['waiting']:
        waiting_in(mid, r, w['comm'], 0.5)
    check(inflight_total(mid[culprit]) == 0, f'paused rank {culprit}: {inflight_total(mid[culprit])} in flight')
    last_mid = {r: value(s, 'ncclinsp_last_completed_seq', w['comm'], w['func']) for r, s in mid.items()}
    after, _ = job.sample_at(end + 2 * SPEED)
    for r in w['waiting'] + [culprit]:
        last = value(after[r], 'ncclinsp_last_completed_seq', w['comm'], w['func'])
        check(last is not None and last >= w['seq'], f'rank {r}: last completed {last} after the pause, waited on {w["seq"]}')
        age = value(after[r], 'ncclinsp_oldest_inflight_age_seconds', w['comm']) or 0
        check(age < 1.0, f'rank {r}: an op {age} s in flight after the pause')
    job.finish()
    steps = {}
    for path in glob.glob(os.path.join(job.out, 'node*', 'ncclinsp_sim.prom')):
        with open(path) as f:
            for n, lab, v in parse_prom(f.read()):
                if n == 'ncclinsp_sim_steps_total':
                    steps[int(lab['rank'])] = v
    check(len(steps) == NODES * GPUS and len(set(steps.values())) == 1 and min(steps.values()) > 0,
          f'steps per rank at the end {steps}')
    print(f'pause: {w["waiting"]} waited in {w["comm"]} {w["func"]} #{w["seq"]} from t={w["t"]:.2f} to {end:.2f} s, '
          f'then completed it (last {[last_mid[r] for r in w["waiting"]]} -> >= {w["seq"]}); '
          f'{int(min(steps.values()))} steps on every rank')


def kill(job):
    summ = job.summary()
    sc, b = first_block(summ, 'kill')
    culprit = sc['rank']
    check(b['seq'] is not None, f'first block {b}')
    death = job.wall_of(sc['onset'])
    a, ta = job.sample_at(sc['onset'] + 3 * SPEED)
    z, tz = job.sample_at(sc['onset'] + 6 * SPEED)
    check(culprit in a, 'the killed rank left no file')
    ts_a = value(a[culprit], 'ncclinsp_export_timestamp_seconds')
    ts_z = value(z[culprit], 'ncclinsp_export_timestamp_seconds')
    check(ts_a == ts_z and ts_z <= death + 1.0, f'killed rank\'s file: {ts_a} -> {ts_z}, death at {death:.1f}')
    for r in range(NODES * GPUS):
        if r == culprit:
            continue
        ta_r = value(a[r], 'ncclinsp_export_timestamp_seconds')
        tz_r = value(z[r], 'ncclinsp_export_timestamp_seconds')
        check(tz_r - ta_r >= 2, f'rank {r}: file not rewritten after the kill ({ta_r} -> {tz_r})')
    for r in b['in_flight']:
        if r == culprit:
            continue
        age_a = waiting_in(a, r, b['comm'], 1.0)
        age_z = waiting_in(z, r, b['comm'], 1.0)
        check(age_z - age_a > 0.5 * (tz - ta), f'rank {r}: oldest age {age_a} -> {age_z} s')
    sims = sorted(os.path.basename(p) for p in glob.glob(os.path.join(job.out, 'node1', 'ncclinsp_sim*.prom')))
    check(sims == ['ncclinsp_sim.gpu0.prom', 'ncclinsp_sim.gpu1.prom'], f'node1 simulator files {sims}')
    job.finish()
    print(f'kill: rank {culprit} died at t={sc["onset"]} s (its file last written {ts_z - job.t0:.1f} s into the run), '
          f'the others rewrite theirs; {b["comm"]} {b["func"]} #{b["seq"]} stays in flight on {b["in_flight"]}')


def net_stall(job):
    summ = job.summary()
    sc, b = first_block(summ, 'net_stall')
    check(sc['rank'] is None and b['missing'] == [] and b['seq'] is not None, f'first block {b}')
    check(b['comm'] != 'tp' and len({r // GPUS for r in b['in_flight']}) > 1, f'not a multi-node communicator: {b}')
    z, _ = job.sample_at(b['t'] + 3 * SPEED)
    lasts = set()
    for r in b['in_flight']:
        waiting_in(z, r, b['comm'], 1.0)
        lasts.add(value(z[r], 'ncclinsp_last_completed_seq', b['comm'], b['func']))
    check(lasts == {b['seq'] - 1}, f'last completed {b["func"]} per member {lasts}, in flight on {b["seq"]}')
    job.finish()
    print(f'net_stall: every member {b["in_flight"]} of {b["comm"]} in flight on {b["func"]} #{b["seq"]}')


def main():
    if len(sys.argv) != 5 or sys.argv[4] not in SCENARIOS:
        sys.exit(__doc__)
    sim, plugin, outdir, name = sys.argv[1:]
    extra, duration = SCENARIOS[name]
    job = Job(sim, plugin, outdir, name, extra, duration)
    try:
        globals()[name](job)
    finally:
        if job.proc.poll() is None:
            job.proc.kill()
    print(f'{name}: OK')


if __name__ == '__main__':
    main()
