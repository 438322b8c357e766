#!/bin/sh
# Slurm Epilog (slurm.conf: Epilog=/usr/share/ncclinsp/deploy/slurm/epilog.sh): runs as root on
# each of the job's nodes after its processes ended, with SLURM_JOB_ID set by slurmd (not read
# from the job's environment). It removes this job's .prom files, chosen by their content (the
# owner line's job key), never by a glob, and keeps any file whose writer is still alive (the
# cleaner's timer takes it later). It never fails the node: a non-zero Epilog drains it.
[ -r "${NCCLINSP_DEFAULTS:-/etc/default/ncclinsp}" ] && . "${NCCLINSP_DEFAULTS:-/etc/default/ncclinsp}"
DIR=${NCCLINSP_TEXTFILE_DIR:-/var/lib/prometheus/node-exporter}
CLEANER=${NCCLINSP_CLEANER:-/usr/bin/ncclinsp-cleaner}
[ -n "${SLURM_JOB_ID:-}" ] || exit 0
[ -d "$DIR" ] || exit 0
if [ ! -x "$CLEANER" ]; then
  logger -t ncclinsp-epilog "ncclinsp-cleaner not found at $CLEANER; job $SLURM_JOB_ID's files stay for the timer" 2>/dev/null
  exit 0
fi
"$CLEANER" --job "$SLURM_JOB_ID" --grace "${NCCLINSP_CLEANER_GRACE:-120}" \
  --stale-after "${NCCLINSP_CLEANER_STALE_AFTER:-600}" "$DIR" ||
  logger -t ncclinsp-epilog "ncclinsp-cleaner failed for job $SLURM_JOB_ID in $DIR" 2>/dev/null
exit 0
