"""ncclinsp-cleaner's rules, each on real files and real processes: what is ours (prefix, owner
line, its uid owning the file, no symlink), when a writer is alive (its lock held; its pid with the
recorded start time, in our boot and PID namespace), and what goes when (final files after the
grace, dead writers' files at once, unverifiable ones after the stale bound, --job). Also from a
PID namespace of its own (a container without hostPID): the lock still tells, the pid does not.
State dumps: ours by name, header and pid; removed past --state-max-age only when written on this
host by a pid that is gone or was reused; never by --job, never through a symlink."""
import os
import socket
import subprocess
import time

from deploy_common import (CLEANER, PREFIX, check, exited_pid, fail, finish, need_root, owner_line, plant, prom_files,
                           proc_start, run_cleaner, scratch, start_writer)

need_root()
now = time.time()
d = scratch("cleaner")
pid_gone, start_gone = exited_pid()
me, my_start = os.getpid(), proc_start(os.getpid())
body = "ncclinsp_export_timestamp_seconds 1\n"

# ---- what is not ours is never touched ----
plant(d, PREFIX + "plain.prom", "node_load1 99\n")  # no owner line
plant(d, PREFIX + "liar.prom", owner_line(1234, pid_gone, start_gone, now - 9999, "j", final=True) + body, uid=4321)
victim = plant(scratch("victim"), "victim.prom", owner_line(0, pid_gone, start_gone, now - 9999, "j") + body)
os.symlink(victim, os.path.join(d, PREFIX + "link.prom"))
os.mkdir(os.path.join(d, PREFIX + "dir.prom"))
plant(d, "other_exporter.prom", owner_line(0, pid_gone, start_gone, now - 9999, "j") + body)
# ---- ours ----
plant(d, PREFIX + "dead.job-1.prom", owner_line(0, pid_gone, start_gone, now, "1") + body)
plant(d, PREFIX + "reused.job-2.prom", owner_line(0, me, my_start + 1, now, "2") + body)  # our pid, another start
plant(d, PREFIX + "alive.job-3.prom", owner_line(0, me, my_start, now - 9999, "3") + body)
plant(d, PREFIX + "final-young.job-4.prom", owner_line(0, pid_gone, start_gone, now - 60, "4", final=True) + body)
plant(d, PREFIX + "final-old.job-5.prom", owner_line(0, me, my_start, now - 130, "5", final=True) + body)
plant(d, PREFIX + "otherns-young.job-6.prom", owner_line(0, pid_gone, start_gone, now - 500, "6", ns=1) + body)
plant(d, PREFIX + "otherns-old.job-7.prom", owner_line(0, pid_gone, start_gone, now - 601, "7", ns=1) + body)
plant(d, PREFIX + "otherboot.job-8.prom", owner_line(0, pid_gone, start_gone, now - 601, "8", boot="x") + body)
plant(d, "." + PREFIX + "gone.prom.lock", "")  # a lock whose file is gone, nobody holds it
tmp_old = plant(d, "." + PREFIX + "t.job-9.prom.tmp.1.abcdef", owner_line(0, pid_gone, start_gone, now, "9") + "x")
os.utime(tmp_old, (now - 200, now - 200))
tmp_empty = plant(d, "." + PREFIX + "t.job-9.prom.tmp.2.abcdef", "")  # no content to prove it ours
os.utime(tmp_empty, (now - 200, now - 200))

run_cleaner("--dry-run", d)
check(len(prom_files(d)) == 12, "--dry-run removes nothing")
r = run_cleaner("--now", str(now), d)
left = set(os.listdir(d))
expect_left = {PREFIX + n for n in ("plain.prom", "liar.prom", "link.prom", "dir.prom", "alive.job-3.prom",
                                    "final-young.job-4.prom", "otherns-young.job-6.prom")}
expect_left |= {"other_exporter.prom", "." + PREFIX + "t.job-9.prom.tmp.2.abcdef"}
check(left == expect_left, f"exactly the dead, reused, final-old, stale and orphaned entries go (left: {sorted(left)})")
check(open(victim).read().startswith("# ncclinsp-owner"), "a symlink's target is never touched")
check("writer gone" in r.stdout and "final file" in r.stdout and "not checkable" in r.stdout, "each removal says why")

# ---- real processes: the lock tells a live writer from a dead one, across PID namespaces ----
d2 = scratch("cleaner-live")
env = {"NCCL_INSPECTOR_DUMP_DIR": d2}
live = start_writer("GPU-live", "hold", dict(env, NCCLINSP_JOB_ID="10"))
killed = start_writer("GPU-killed", "hold", dict(env, NCCLINSP_JOB_ID="11"))
killed.kill()
killed.wait()
ended = start_writer("GPU-ended", "exit", dict(env, NCCLINSP_JOB_ID="12", NCCLINSP_PROM_KEEP_FILES="1"))
rc, err = finish(ended)
check(rc == 0, "a job that ends normally exits 0")
names = prom_files(d2)
check(len(names) == 3, f"three jobs' files: {names}")
# A cleaner in a PID namespace of its own (as in a container without hostPID): no pid check there.
ns = ["unshare", "--pid", "--fork", "--mount-proc"]
run_cleaner("--verbose", d2, prefix=ns)
names = prom_files(d2)
check(not any(".job-11." in n for n in names), "another PID namespace: the killed writer's free lock removes its file")
check(any(".job-10." in n for n in names), "another PID namespace: the live writer's held lock keeps its file")
check(any(".job-12." in n for n in names), "a final file stays for its grace")
os.unlink(os.path.join(d2, "." + [n for n in names if ".job-10." in n][0] + ".lock"))
run_cleaner(d2, prefix=ns)
check(any(".job-10." in n for n in prom_files(d2)), "no lock and no pid check: kept until the stale bound")
run_cleaner(d2)
check(any(".job-10." in n for n in prom_files(d2)), "our own namespace: the pid with its start time proves it alive")
run_cleaner("--job", "12", d2)
check(not any(".job-12." in n for n in prom_files(d2)), "--job removes an ended job's final file at once")
run_cleaner("--job", "10", d2)
check(any(".job-10." in n for n in prom_files(d2)), "--job never removes a file whose writer is alive")
live.kill()
live.wait()
run_cleaner(d2)
check(prom_files(d2) == [], "once killed, its file goes at the next run")
check(not [n for n in os.listdir(d2) if n.endswith(".lock")], "and no lock file is left behind")

# --every (a DaemonSet's loop): a killed job's file goes within one period, the live one stays.
d3 = scratch("cleaner-every")
live = start_writer("GPU-live", "hold", {"NCCL_INSPECTOR_DUMP_DIR": d3, "NCCLINSP_JOB_ID": "20"})
victim3 = start_writer("GPU-victim", "hold", {"NCCL_INSPECTOR_DUMP_DIR": d3, "NCCLINSP_JOB_ID": "21"})
loop = subprocess.Popen([CLEANER, "--every", "0.2", d3], stdout=subprocess.DEVNULL)
victim3.kill()
victim3.wait()
t_kill = time.time()
while any(".job-21." in n for n in prom_files(d3)) and time.time() - t_kill < 10:
    time.sleep(0.05)
gone_after = time.time() - t_kill
check(gone_after < 1.0, f"--every 0.2: the killed job's file is gone {gone_after:.2f} s after the kill")
time.sleep(0.5)
check(any(".job-20." in n for n in prom_files(d3)) and loop.poll() is None, "the live job's file stays, the loop runs on")
loop.terminate()
loop.wait()
live.kill()
live.wait()
r = run_cleaner("--every", "1", "--job", "x", d3, check_rc=False)
check(r.returncode == 1, "--every refuses --job (an epilog runs once)")

# ---- state dumps (<node>-pid<pid>-<gpu>.state.json): evidence, removed only when nobody collected it ----
ds = scratch("cleaner-state")
host = socket.gethostname()


def state_json(pid, hostname=host):
    return ('{"format":"ncclinsp-state","version":1,"ncclinsp":"0.2.0","reason":"heartbeat","time_ns":1,'
            f'"node":"n","hostname":"{hostname}","pid":{pid},"job_id":"1","comms":[]}}')


plant(ds, f"n-pid{pid_gone}-GPU-dead.state.json", state_json(pid_gone))
plant(ds, f"n-pid{me}-GPU-live.state.json", state_json(me))  # written now by this (live) process
reused = plant(ds, f"n-pid{me}-GPU-reused.state.json", state_json(me))
os.utime(reused, (now - 600, now - 600))  # written before this process started: its pid was reused
plant(ds, f"n-pid{pid_gone}-GPU-foreign.state.json", '{"format":"other","pid":%d}' % pid_gone)
plant(ds, f"n-pid{pid_gone}-GPU-mismatch.state.json", state_json(pid_gone + 1))
plant(ds, f"n-pid{pid_gone}-GPU-otherhost.state.json", state_json(pid_gone, "elsewhere"))
svictim = plant(scratch("state-victim"), "v.state.json", state_json(pid_gone))
os.utime(svictim, (now - 90000, now - 90000))
os.symlink(svictim, os.path.join(ds, f"n-pid{pid_gone}-GPU-link.state.json"))
all_states = set(os.listdir(ds))
day = 24 * 3600
run_cleaner("--now", str(now + 3600), ds)
check(set(os.listdir(ds)) == all_states, "a state dump of a gone writer stays within --state-max-age (24 h)")
run_cleaner("--job", "1", "--now", str(now + day + 60), ds)
check(set(os.listdir(ds)) == all_states, "--job never removes a state dump (the killed job's evidence)")
run_cleaner("--dry-run", "--now", str(now + day + 60), ds)
check(set(os.listdir(ds)) == all_states, "--dry-run removes no state dump")
r = run_cleaner("--verbose", "--now", str(now + day + 60), ds)
left = set(os.listdir(ds))
check(left == all_states - {f"n-pid{pid_gone}-GPU-dead.state.json", f"n-pid{me}-GPU-reused.state.json"},
      f"past 24 h exactly the dumps of gone and reused pids go (left: {sorted(left)})")
check("not ours" in r.stdout and "writer alive" in r.stdout and "not checkable here" in r.stdout,
      "each kept state dump says why")
check(open(svictim).read().startswith('{"format":"ncclinsp-state"'), "a state dump symlink's target is never touched")
run_cleaner("--state-max-age", "0.5", "--now", str(now + 3600), ds)
check(f"n-pid{me}-GPU-live.state.json" in os.listdir(ds), "--state-max-age never removes a live writer's dump")
r = run_cleaner("--state-max-age", "1d", ds, check_rc=False)
check(r.returncode == 1 and "number of hours" in r.stderr, "--state-max-age says it expects hours")

r = run_cleaner(os.path.join(d, PREFIX + "link.prom"), check_rc=False)
check(r.returncode == 2, "a directory given as a symlink is refused")
r = run_cleaner("--grace", "soon", d, check_rc=False)
check(r.returncode == 1 and "expected a number" in r.stderr, "a malformed option says what it expects")
print("PASS")
