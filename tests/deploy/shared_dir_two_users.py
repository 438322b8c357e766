"""Two users' jobs on one shared textfile directory, set up as deploy/slurm/setup-textfile-dir.sh
documents (root:<group> 3775), with real distinct uids (setpriv), the real sink (job_writer) and
the real node_exporter serving the directory:
  - no blocked publish: user B's job on the GPU where user A's kept final file lies publishes its own;
  - no spoofing path: a stranger (not in the group) cannot write there at all, and its job says so;
    B can neither replace, delete nor write through A's files; a file B planted at the name A's
    next job would use is not overwritten through (A writes a name of its own, with a warning),
    and the cleaner does not take it for A's;
  - no stale series beyond the bound: a killed job's series go at the next cleaner run, a final
    file's after the grace, while the live job's stay.
A world-writable directory gets the plugin's warning."""
import os
import socket
import subprocess
import time
import urllib.request

from deploy_common import (NODE_EXPORTER, PREFIX, SOURCE, as_user, check, fail, file_job, finish, need_root,
                           prom_files, run_cleaner, scratch, start_writer)

need_root()
GID, A, B, STRANGER = 61000, 61001, 61002, 61003
d = scratch("shared")
subprocess.run(["sh", os.path.join(SOURCE, "deploy/slurm/setup-textfile-dir.sh"), d, str(GID)], check=True)
st = os.stat(d)
check(st.st_gid == GID and (st.st_mode & 0o7777) == 0o3775, "setup: root:group, setgid + sticky, not world-writable")
ua, ub, us = as_user(A, groups=[GID]), as_user(B, groups=[GID]), as_user(STRANGER)
env = {"NCCL_INSPECTOR_DUMP_DIR": d}
GPU = "GPU-5a5a5a5a-0000-1111-2222-333333333333"

# A's job 1001 ends normally and keeps its final file; B's job 1002 then runs on the same GPU.
rc, err_a = finish(start_writer(GPU, "exit", dict(env, SLURM_JOB_ID="1001", NCCLINSP_PROM_KEEP_FILES="1"), prefix=ua))
check(rc == 0 and "WARN" not in err_a, f"A's job publishes without a warning ({err_a.strip()})")
b = start_writer(GPU, "hold", dict(env, SLURM_JOB_ID="1002"), prefix=ub)
files = prom_files(d)
by_job = {file_job(os.path.join(d, n)): n for n in files}
check(set(by_job) == {"1001", "1002"}, f"both jobs' files, one each, named by GPU and job: {files}")
check(os.stat(os.path.join(d, by_job["1001"])).st_uid == A and os.stat(os.path.join(d, by_job["1002"])).st_uid == B,
      "each file belongs to its job's user")

# A stranger cannot write there; its job warns instead of failing silently.
r = subprocess.run([*us, "sh", "-c", f"echo 'node_load1 99' > {d}/{PREFIX}evil.prom"], capture_output=True)
check(r.returncode != 0 and not os.path.exists(f"{d}/{PREFIX}evil.prom"), "a stranger cannot create a file there")
rc, err_s = finish(start_writer(GPU, "exit", dict(env, SLURM_JOB_ID="1009"), prefix=us))
check("cannot write" in err_s and "Permission denied" in err_s, "the stranger's job says it cannot write there")
check(not any(file_job(os.path.join(d, n)) == "1009" for n in prom_files(d)), "and nothing of it is published")

# B cannot replace, delete or write through A's file (sticky bit; 0644).
fa = os.path.join(d, by_job["1001"])
before = open(fa).read()
for cmd in ([f"echo x > {d}/t && mv -f {d}/t {fa}"], [f"rm -f {fa}"], [f"echo 'node_load1 99' >> {fa}"]):
    subprocess.run([*ub, "sh", "-c", *cmd], capture_output=True)
check(open(fa).read() == before, "B can neither replace, delete nor write through A's file")
subprocess.run([*ub, "rm", "-f", f"{d}/t"], capture_output=True)

# B plants a file at the name A's next job (1003) writes, even claiming to be A's in its owner line.
planted = os.path.join(d, f"{PREFIX}{GPU}.job-1003.prom")
fake = (f"# ncclinsp-owner v1 uid={A} pid=1 start=1 boot=x pidns=1 ts={time.time():.3f} final=0 host=h job=1003\n"
        "node_load1 99\n")
subprocess.run([*ub, "sh", "-c", f"cat > {planted}"], input=fake.encode(), check=True)
a3 = start_writer(GPU, "hold", dict(env, SLURM_JOB_ID="1003"), prefix=ua)
time.sleep(0.5)
check(open(planted).read() == fake, "A's job does not overwrite the planted file")
mine = [n for n in prom_files(d) if ".job-1003.pid" in n]
check(len(mine) == 1 and os.stat(os.path.join(d, mine[0])).st_uid == A, f"A's job writes a name of its own: {mine}")

# What node_exporter serves.
def scrape():
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        return r.read().decode()

def jobs_served(text):
    return {l.split('job_id="')[1].split('"')[0] for l in text.splitlines()
            if l.startswith("ncclinsp_export_timestamp_seconds{")}

if not NODE_EXPORTER:
    fail("node_exporter not found (the test command installs prometheus-node-exporter)")
s = socket.socket()
s.bind(("127.0.0.1", 0))
port = s.getsockname()[1]
s.close()
ne = subprocess.Popen([NODE_EXPORTER, f"--web.listen-address=127.0.0.1:{port}", "--collector.disable-defaults",
                       "--collector.textfile", f"--collector.textfile.directory={d}"],
                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
try:
    for _ in range(100):
        try:
            text = scrape()
            break
        except OSError:
            time.sleep(0.1)
    else:
        fail("node_exporter did not answer")
    check(jobs_served(text) == {"1001", "1002", "1003"}, f"node_exporter serves the three jobs: {jobs_served(text)}")
    check('node_textfile_scrape_error 0' in text, "node_exporter reads every file without error")

    # A's job 1003 is killed; the cleaner (root, as its timer runs it) removes what is dead.
    a3.kill()
    a3.wait()
    r = run_cleaner(d)
    check(jobs_served(scrape()) == {"1001", "1002"}, "the killed job's series are gone after one cleaner run")
    check(open(planted).read() == fake, "the planted file is not taken for A's (its owner line lies about its uid)")
    run_cleaner("--now", str(time.time() + 121), d)
    check(jobs_served(scrape()) == {"1002"}, "A's final file goes after the grace; B's live job stays")
finally:
    ne.kill()
    ne.wait()
b.kill()
b.wait()
run_cleaner(d)
check(not any(n.endswith(".lock") for n in os.listdir(d)), "no lock file is left behind")

# A world-writable directory: the plugin warns, once.
w = scratch("worldwritable")
os.chmod(w, 0o1777)
rc, err_w = finish(start_writer(GPU, "exit", {"NCCL_INSPECTOR_DUMP_DIR": w, "SLURM_JOB_ID": "2001"}, prefix=ua))
check(err_w.count("is writable by every user") == 1, f"the job warns once about a world-writable directory")
print("PASS")
