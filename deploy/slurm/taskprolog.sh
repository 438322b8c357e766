#!/bin/sh
# Slurm TaskProlog (slurm.conf: TaskProlog=/usr/share/ncclinsp/deploy/slurm/taskprolog.sh): runs
# as the job's user before each task and prints the environment the task gets ("export K=V"
# lines). It turns ncclinsp on for the task, publishing to node_exporter's textfile directory.
# A job opts out with NCCLINSP_DISABLE=1; a variable the job already set is left as it is.
[ -r "${NCCLINSP_DEFAULTS:-/etc/default/ncclinsp}" ] && . "${NCCLINSP_DEFAULTS:-/etc/default/ncclinsp}"
[ "${NCCLINSP_DISABLE:-0}" = 1 ] && exit 0
DIR=${NCCLINSP_TEXTFILE_DIR:-/var/lib/prometheus/node-exporter}
PLUGIN=${NCCLINSP_PLUGIN:-/usr/lib/ncclinsp/libnccl-profiler-ncclinsp.so}
# A value goes out only if it is one line without quotes or backslashes (Slurm parses these lines).
out() {
  case $2 in *'"'* | *'\'* | *'
'*) echo "print ncclinsp taskprolog: not exporting $1: unusable value" ; return ;; esac
  echo "export $1=$2"
}
# The task's own setting wins (an empty one too: eval "[ -n \${X+set} ]").
unset_in_job() { eval "[ -z \"\${$1+set}\" ]"; }
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
