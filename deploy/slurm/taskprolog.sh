#!/bin/sh
# Slurm TaskProlog (slurm.conf: TaskProlog=/usr/share/ncclinsp/deploy/slurm/taskprolog.sh): runs
# as the job's user before each task and prints the environment the task gets ("export K=V"
# lines). It turns ncclinsp on for the task, publishing to node_exporter's textfile directory.
# A job opts out with NCCLINSP_DISABLE=1; a variable the job already set is left as it is.
[ "${NCCLINSP_DISABLE:-0}" = 1 ] && exit 0
# What the task set itself (even to ""), noted before the defaults file is read: that wins.
JOB_SET=
for v in NCCL_PROFILER_PLUGIN NCCL_INSPECTOR_ENABLE NCCL_INSPECTOR_PROM_DUMP NCCL_INSPECTOR_DUMP_DIR \
  NCCLINSP_INTERVAL NCCLINSP_JOB_ID NCCLINSP_NODE_NAME; do
  eval "[ -n \"\${$v+set}\" ]" && JOB_SET="$JOB_SET $v "
done
[ -r "${NCCLINSP_DEFAULTS:-/etc/default/ncclinsp}" ] && . "${NCCLINSP_DEFAULTS:-/etc/default/ncclinsp}"
DIR=${NCCLINSP_TEXTFILE_DIR:-/var/lib/prometheus/node-exporter}
PLUGIN=${NCCLINSP_PLUGIN:-/usr/lib/ncclinsp/libnccl-profiler-ncclinsp.so}
# A value goes out only if it is one line without quotes or backslashes (Slurm parses these lines).
out() {
  case $2 in *'"'* | *'\'* | *'
'*) echo "print ncclinsp taskprolog: not exporting $1: unusable value" ; return ;; esac
  echo "export $1=$2"
}
unset_in_job() { case $JOB_SET in *" $1 "*) return 1 ;; esac; }
unset_in_job NCCL_PROFILER_PLUGIN && out NCCL_PROFILER_PLUGIN "$PLUGIN"
unset_in_job NCCL_INSPECTOR_ENABLE && out NCCL_INSPECTOR_ENABLE 1
unset_in_job NCCL_INSPECTOR_PROM_DUMP && out NCCL_INSPECTOR_PROM_DUMP 1
unset_in_job NCCL_INSPECTOR_DUMP_DIR && out NCCL_INSPECTOR_DUMP_DIR "$DIR"
unset_in_job NCCLINSP_INTERVAL && out NCCLINSP_INTERVAL "${NCCLINSP_INTERVAL:-15s}"
# The job key is SLURM_JOB_ID (the Epilog removes the files by it); the node label is Slurm's name
# for the node, which the other Slurm tools show.
[ -n "${SLURM_JOB_ID:-}" ] && unset_in_job NCCLINSP_JOB_ID && out NCCLINSP_JOB_ID "$SLURM_JOB_ID"
[ -n "${SLURMD_NODENAME:-}" ] && unset_in_job NCCLINSP_NODE_NAME && out NCCLINSP_NODE_NAME "$SLURMD_NODENAME"
exit 0
