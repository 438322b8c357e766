#!/usr/bin/env python3
"""Runs a command and checks its exit status and output (the gpu_check tests).

  expect.py --rc N [--out REGEX]... [--not-out REGEX]... [--absent PATH]... [--path-first DIR] -- CMD...

--out / --not-out: a regular expression (multi-line) that the combined stdout and stderr must / must
not match; --absent: a path that must not exist afterwards; --path-first: a directory put first on
PATH for the command. Prints the command's output, then what failed; exit 0 when all held, else 1.
"""
import argparse
import os
import re
import subprocess
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rc", type=int, required=True)
    ap.add_argument("--out", action="append", default=[])
    ap.add_argument("--not-out", action="append", default=[])
    ap.add_argument("--absent", action="append", default=[])
    ap.add_argument("--path-first")
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.cmd[1:] if a.cmd[:1] == ["--"] else a.cmd
    if not cmd:
        ap.error("no command")
    env = dict(os.environ)
    if a.path_first:
        env["PATH"] = a.path_first + os.pathsep + env.get("PATH", "")
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    sys.stdout.write(p.stdout)
    bad = []
    if p.returncode != a.rc:
        bad.append("exit status %d, expected %d" % (p.returncode, a.rc))
    bad += ["output does not match /%s/" % r for r in a.out if not re.search(r, p.stdout, re.M)]
    bad += ["output matches /%s/" % r for r in a.not_out if re.search(r, p.stdout, re.M)]
    bad += ["%s exists" % x for x in a.absent if os.path.exists(x)]
    for b in bad:
        print("expect.py: " + b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
