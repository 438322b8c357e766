#!/usr/bin/env bash
# Runs a command and passes only if it exits with the expected status AND its output (stdout and
# stderr) matches an extended regex. ctest's PASS_REGULAR_EXPRESSION ignores the exit status and
# WILL_FAIL accepts any failure (a crash too); this checks both.
# Usage: expect_exit.sh <status> <regex> <command> [args...]
set -u
want=$1 regex=$2
shift 2
out=$("$@" 2>&1)
rc=$?
printf '%s\n' "$out"
if [[ $rc -ne $want ]]; then
  echo "expect_exit: exit status $rc, expected $want" >&2
  exit 1
fi
if ! grep -Eq -- "$regex" <<<"$out"; then
  echo "expect_exit: output does not match: $regex" >&2
  exit 1
fi
