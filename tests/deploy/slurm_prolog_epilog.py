"""deploy/slurm against a textfile directory holding two jobs' files, with a fake Slurm
environment and real processes: the TaskProlog's exports turn a job's processes into publishers
under the job's key; the Epilog of job 501 removes exactly job 501's files (chosen by content,
with no sleep), leaves job 502's (still running) and a file that is not ours; the cleaner as the
systemd service runs it (its ExecStart line) then removes the killed job's file and keeps the
live one."""
import os
import re
import shlex
import subprocess

from deploy_common import (PREFIX, SOURCE, CLEANER, check, fail, file_job, finish, need_root, prom_files, scratch,
                           start_writer)

need_root()
d = scratch("slurm")
subprocess.run(["sh", os.path.join(SOURCE, "deploy/slurm/setup-textfile-dir.sh"), d, "61000"], check=True,
               capture_output=True)
defaults = os.path.join(scratch("etc"), "ncclinsp")
with open(defaults, "w") as f:
    f.write(f"NCCLINSP_TEXTFILE_DIR={d}\nNCCLINSP_PLUGIN=/opt/ncclinsp/libnccl-profiler-ncclinsp.so\n"
            f"NCCLINSP_CLEANER={CLEANER}\nNCCLINSP_INTERVAL=200ms\n")
base = {"PATH": os.environ["PATH"], "NCCLINSP_DEFAULTS": defaults}


def prolog(job, extra=None):
    env = dict(base, SLURM_JOB_ID=job, SLURMD_NODENAME="gpu-n1", **(extra or {}))
    r = subprocess.run(["sh", os.path.join(SOURCE, "deploy/slurm/taskprolog.sh")], env=env, capture_output=True,
                       text=True, check=True)
    out = {}
    for line in r.stdout.splitlines():
        m = re.fullmatch(r"export ([A-Z_][A-Z0-9_]*)=(.*)", line)
        if not m:
            fail(f"TaskProlog printed a line Slurm does not take: {line!r}")
        out[m.group(1)] = m.group(2)
    return out


e501 = prolog("501")
check(e501 == {"NCCL_PROFILER_PLUGIN": "/opt/ncclinsp/libnccl-profiler-ncclinsp.so", "NCCL_INSPECTOR_ENABLE": "1",
               "NCCL_INSPECTOR_PROM_DUMP": "1", "NCCL_INSPECTOR_DUMP_DIR": d, "NCCLINSP_INTERVAL": "200ms",
               "NCCLINSP_JOB_ID": "501", "NCCLINSP_NODE_NAME": "gpu-n1"}, f"TaskProlog exports: {e501}")
check("NCCL_INSPECTOR_DUMP_DIR" not in prolog("9", {"NCCL_INSPECTOR_DUMP_DIR": "/mine"}), "a job's own setting wins")
check(prolog("9", {"NCCLINSP_DISABLE": "1"}) == {}, "NCCLINSP_DISABLE=1 opts a job out")

# Job 501: two ranks on two GPUs, one ended (final file kept), one killed; job 502 keeps running.
e502 = prolog("502")
r1 = start_writer("GPU-aaaa", "exit", dict(e501, SLURM_JOB_ID="501", NCCLINSP_PROM_KEEP_FILES="1"))
check(finish(r1)[0] == 0, "job 501 rank 0 ends")
r2 = start_writer("GPU-bbbb", "hold", dict(e501, SLURM_JOB_ID="501"))
r2.kill()
r2.wait()
j2 = start_writer("GPU-aaaa", "hold", dict(e502, SLURM_JOB_ID="502"))
killed = start_writer("GPU-cccc", "hold", dict(prolog("503"), SLURM_JOB_ID="503"))
killed.kill()
killed.wait()
with open(os.path.join(d, PREFIX + "GPU-dddd.job-501.prom"), "w") as f:
    f.write("# not ours, though named like job 501's\nnode_load1 1\n")
jobs = sorted(file_job(os.path.join(d, n)) or "-" for n in prom_files(d))
check(jobs == ["-", "501", "501", "502", "503"], f"the directory holds every job's files: {jobs}")
for n in prom_files(d):
    if file_job(os.path.join(d, n)):
        with open(os.path.join(d, n)) as f:
            check('node="gpu-n1"' in f.read(), f"{n}: node label from SLURMD_NODENAME")

# The Epilog, as slurmd runs it: root, SLURM_JOB_ID set, nothing of the job's environment.
r = subprocess.run(["sh", os.path.join(SOURCE, "deploy/slurm/epilog.sh")], env=dict(base, SLURM_JOB_ID="501"),
                   capture_output=True, text=True, timeout=30)
check(r.returncode == 0, f"the Epilog succeeds ({r.stdout.strip()} {r.stderr.strip()})")
jobs = sorted(file_job(os.path.join(d, n)) or "-" for n in prom_files(d))
check(jobs == ["-", "502", "503"], f"the Epilog removed exactly job 501's files: left {jobs}")
r = subprocess.run(["sh", os.path.join(SOURCE, "deploy/slurm/epilog.sh")],
                   env=dict(base, SLURM_JOB_ID="502", NCCLINSP_CLEANER="/nonexistent"), capture_output=True)
check(r.returncode == 0, "an Epilog without the cleaner still exits 0 (a failing Epilog drains the node)")

# The systemd service's command line, with its Environment= defaults and the defaults file.
unit = open(os.path.join(SOURCE, "deploy/systemd/ncclinsp-cleaner.service")).read()
env = dict(re.findall(r"^Environment=(\w+)=(.*)$", unit, re.M))
env["NCCLINSP_TEXTFILE_DIR"] = d
cmd = re.search(r"^ExecStart=(.*)$", unit, re.M).group(1)
argv = [re.sub(r"\$\{(\w+)\}", lambda m: env[m.group(1)], a) for a in shlex.split(cmd)]
check(argv[0] == "/usr/bin/ncclinsp-cleaner", "the service runs the installed cleaner")
timer = open(os.path.join(SOURCE, "deploy/systemd/ncclinsp-cleaner.timer")).read()
check("OnUnitActiveSec=60s" in timer, "the timer runs it every minute (the documented bound)")
subprocess.run([CLEANER, *argv[1:]], check=True, capture_output=True)
jobs = sorted(file_job(os.path.join(d, n)) or "-" for n in prom_files(d))
check(jobs == ["-", "502"], f"the timer's run removes the killed job 503 and keeps the live job and the foreign file: {jobs}")
j2.kill()
j2.wait()
print("PASS")
