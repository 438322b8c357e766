#!/usr/bin/env python3
"""KernelCh that NCCL drops (2.31.2+: its profiler thread cannot allocate the op, profiler.cc
profilerEnqueueOp) through the real plugin: `ncclinsp-sim --nccl 2.31.2 --drop-kernel-ch N` (the profiler
thread fails every Nth KernelCh op: that channel's start and stop never come) against the same job without
drops. Holds when:

  * the option is refused, with a message, where the release does not drop (no --nccl, --nccl 2.30);
  * no op stays in flight: in the live .prom files, read while the job runs, the oldest in-flight age stays
    under 1 s (a dropped op left in flight would age to the end of the run); the final files show nothing
    in flight, and only a communicator's last plans can be left to finalize (no later plan overtakes them);
  * the dropped ops are counted: `ncclinsp_filtered_ops_total{reason="no_kernel_events"}` grows, and per
    GPU the ops published + filtered + abandoned equal the run without drops (none lost, none twice);
  * the others are timed as before: every GPU-timed JSON record is its op's true span (the simulator's
    --truth-ops) within 2%.

Usage: dropped_kernel_ch_check.py SIM PLUGIN OUTDIR
"""
import glob
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from graph_soak import Sampler, check, fail, gpu_timed_records, parse_prom  # noqa: E402

STEPS = 1000  # about 3 s at --speed 1: a dropped op left in flight would age well past 1 s


def refused(sim, plugin, extra):
    r = subprocess.run([sim, '--plugin', plugin, '--steps', '1', '--drop-kernel-ch', '5'] + extra,
                       capture_output=True, text=True)
    check(r.returncode == 2 and '--drop-kernel-ch' in r.stderr and '2.31.2' in r.stderr,
          f'--drop-kernel-ch with {extra or "no --nccl"}: exit {r.returncode}, stderr {r.stderr!r}')


def run(sim, plugin, work, extra, speed):
    shutil.rmtree(work, ignore_errors=True)
    out = os.path.join(work, 'job')
    os.makedirs(out)
    env = dict(os.environ)
    env.update({'NCCL_INSPECTOR_ENABLE': '1', 'NCCL_INSPECTOR_PROM_DUMP': '1', 'NCCLINSP_SINKS': 'prom,json',
                'NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS': '100000'})
    cmd = [sim, '--plugin', plugin, '--nccl', '2.31.2', '--nodes', '1', '--gpus', '2', '--steps', str(STEPS),
           '--speed', str(speed), '--single-process', '--prom', '--out', out, '--truth-ops',
           os.path.join(work, 'truth_ops.json')] + extra
    sampler = Sampler(out, 0.1)
    sampler.start()
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    sampler.done.set()
    sampler.join()
    check(r.returncode == 0, f'{" ".join(cmd)} exited {r.returncode}: {r.stderr[-2000:]}')
    final = []
    for path in glob.glob(os.path.join(out, 'nccl_inspector_metrics_*.prom')):
        with open(path) as f:
            final += parse_prom(f.read())
    check(final, f'{work}: no .prom file written')
    return final, sampler.samples, out, os.path.join(work, 'truth_ops.json')


def per_gpu(final, name, **want):
    got = {}
    for n, lab, v in final:
        if n == name and all(lab.get(k) == w for k, w in want.items()):
            got[lab['gpu']] = got.get(lab['gpu'], 0.0) + v
    return got


def accounted(final):
    """Per GPU: ops published + filtered (every reason) + abandoned at finalize."""
    acc = {}
    for name in ('ncclinsp_ops_total', 'ncclinsp_filtered_ops_total', 'ncclinsp_abandoned_ops_total'):
        for gpu, v in per_gpu(final, name).items():
            acc[gpu] = acc.get(gpu, 0.0) + v
    return acc


def gpu_records_match_truth(out, truth_path):
    want = {}
    for line in open(truth_path):
        t = json.loads(line)
        want[(t['comm_hash'], t['rank'], t['func'], t['seq'])] = t
    checked, worst = 0, 0.0
    for h, c in gpu_timed_records(out):
        t = want.get((h['id'], h['rank'], c['coll'], c['coll_sn']))
        check(t is not None, f'a GPU-timed record without a simulated op: {h} {c}')
        truth_us = (t['end_ns'] - t['start_ns']) / 1e3
        err = abs(c['coll_exec_time_us'] / truth_us - 1.0)
        worst = max(worst, err)
        check(err <= 0.02, f'{h["comm_name"]} rank {h["rank"]} {c["coll"]} #{c["coll_sn"]}: '
              f'{c["coll_exec_time_us"]} us, truth {truth_us:.3f} us')
        checked += 1
    return checked, worst


def main():
    if len(sys.argv) != 4:
        fail('usage: dropped_kernel_ch_check.py SIM PLUGIN OUTDIR')
    sim, plugin, outdir = sys.argv[1:]
    refused(sim, plugin, [])
    refused(sim, plugin, ['--nccl', '2.30'])

    base, _, _, _ = run(sim, plugin, os.path.join(outdir, 'base'), [], 0)
    base_acc = accounted(base)
    base_nke = sum(per_gpu(base, 'ncclinsp_filtered_ops_total', reason='no_kernel_events').values())
    for every, speed in ((97, 1), (7, 0)):
        final, samples, out, truth = run(sim, plugin, os.path.join(outdir, f'drop{every}'),
                                         ['--drop-kernel-ch', str(every)], speed)
        tag = f'--drop-kernel-ch {every}'
        nke = sum(per_gpu(final, 'ncclinsp_filtered_ops_total', reason='no_kernel_events').values())
        check(nke > base_nke, f'{tag}: no op counted no_kernel_events ({nke:.0f}, {base_nke:.0f} without drops)')
        acc = accounted(final)
        check(acc == base_acc, f'{tag}: per GPU published + filtered + abandoned {acc}, without drops {base_acc}')
        inflight = sum(v for n, _, v in final if n == 'ncclinsp_inflight_ops')
        check(inflight == 0, f'{tag}: {inflight:.0f} ops in flight at the end')
        pairs = {(lab.get('gpu'), lab.get('comm_name')) for n, lab, _ in final if n == 'ncclinsp_inflight_ops'}
        abandoned = sum(v for n, _, v in final if n == 'ncclinsp_abandoned_ops_total')
        check(abandoned <= 2 * len(pairs),
              f'{tag}: {abandoned:.0f} ops left to finalize, more than the last plans of {len(pairs)} communicators')
        max_age = max((v for snap in samples for n, _, v in snap if n == 'ncclinsp_oldest_inflight_age_seconds'),
                      default=0.0)
        if speed:
            check(len(samples) >= 10, f'{tag}: {len(samples)} live samples, the run was too short to watch')
            check(max_age < 1.0, f'{tag}: an op stayed in flight {max_age:.2f} s while the job ran (a false hang)')
        published = sum(per_gpu(final, 'ncclinsp_ops_total').values())
        checked, worst = gpu_records_match_truth(out, truth)
        check(checked == published, f'{tag}: {checked} GPU-timed records, {published:.0f} ops published')
        print(f'{tag}: {nke - base_nke:.0f} ops settled no_kernel_events, {abandoned:.0f} left to finalize, '
              f'{published:.0f} published (worst {100 * worst:.3f}% off truth), in flight at end 0, max live '
              f'in-flight age {max_age:.3f} s over {len(samples)} samples')
    print('dropped KernelCh: OK')


if __name__ == '__main__':
    main()
