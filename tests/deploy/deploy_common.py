"""Shared helpers of the deployment tests (python3 stdlib): owner lines as the plugin writes them
(include/ncclinsp/detail/owner_stamp.hpp), the programs under test, running as another uid."""
import os
import subprocess
import sys
import tempfile
import time

CLEANER = os.environ["NCCLINSP_CLEANER"]
WRITER = os.environ["NCCLINSP_JOB_WRITER"]
SOURCE = os.environ["NCCLINSP_SOURCE_DIR"]
NODE_EXPORTER = os.environ.get("NCCLINSP_NODE_EXPORTER", "")
PREFIX = "nccl_inspector_metrics_"


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)
    print("ok:", msg)


def need_root():
    if os.geteuid() != 0:
        fail("runs as root (the test command does): it switches between real uids with setpriv")


def boot_id():
    with open("/proc/sys/kernel/random/boot_id") as f:
        return f.read().strip()


def pidns():
    return int(os.readlink("/proc/self/ns/pid").split("[")[1].rstrip("]"))


def proc_start(pid):
    with open(f"/proc/{pid}/stat") as f:
        s = f.read()
    return int(s[s.rindex(")") + 2:].split()[19])


def owner_line(uid, pid, start, ts, job, final=False, boot=None, ns=None, host="h"):
    boot = boot_id() if boot is None else boot
    ns = pidns() if ns is None else ns
    return (f"# ncclinsp-owner v1 uid={uid} pid={pid} start={start} boot={boot} pidns={ns} "
            f"ts={ts:.3f} final={1 if final else 0} host={host} job={job}\n")


def plant(d, name, text, uid=0):
    p = os.path.join(d, name)
    with open(p, "w") as f:
        f.write(text)
    os.chown(p, uid, -1)
    return p


def exited_pid():
    """A pid that was alive and has exited (and its start time)."""
    p = subprocess.Popen(["sleep", "30"])
    start = proc_start(p.pid)
    p.kill()
    p.wait()
    return p.pid, start


def run_cleaner(*args, check_rc=True, prefix=()):
    r = subprocess.run([*prefix, CLEANER, *args], capture_output=True, text=True, timeout=60)
    print("  $ cleaner", " ".join(args), "->", r.returncode, r.stdout.strip().replace("\n", " | "),
          r.stderr.strip())
    if check_rc and r.returncode != 0:
        fail(f"cleaner exited {r.returncode}")
    return r


def as_user(uid, gid=None, groups=()):
    """setpriv prefix: real distinct uid/gid, only the given supplementary groups."""
    gid = uid if gid is None else gid
    cmd = ["setpriv", f"--reuid={uid}", f"--regid={gid}"]
    cmd += [f"--groups={','.join(map(str, groups))}"] if groups else ["--clear-groups"]
    return cmd


def start_writer(uuid, mode, env, prefix=()):
    """The job's process (tests/deploy/job_writer.cpp); returns it once its first file is out."""
    full = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "NCCL", "POD_", "NODE_NAME"))}
    full.update({"NCCL_INSPECTOR_ENABLE": "1", "NCCL_INSPECTOR_PROM_DUMP": "1", "NCCLINSP_INTERVAL": "200ms"})
    full.update(env)
    p = subprocess.Popen([*prefix, WRITER, uuid, mode], env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    line = p.stdout.readline().strip()
    if line != "ready":
        p.kill()
        fail(f"job writer did not start: {line!r} {p.stderr.read()}")
    return p


def finish(p):
    out, err = p.communicate(timeout=30)
    return p.returncode, err


def prom_files(d):
    return sorted(n for n in os.listdir(d) if n.startswith(PREFIX) and n.endswith(".prom"))


def file_job(path):
    """The job key of an ncclinsp file's owner line, None when it has none."""
    with open(path) as f:
        first = f.readline()
    if not first.startswith("# ncclinsp-owner v1 "):
        return None
    return dict(kv.split("=", 1) for kv in first.split()[3:] if "=" in kv).get("job")


def scratch(name):
    d = tempfile.mkdtemp(prefix=f"ncclinsp-{name}-")
    os.chmod(d, 0o755)
    return d
