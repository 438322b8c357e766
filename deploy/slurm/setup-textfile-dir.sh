#!/bin/sh
# Sets up node_exporter's textfile directory for several users' jobs (run once per node, as root;
# idempotent): owned by root and the group $NCCLINSP_GROUP, mode 3775:
#   group rwx      the group's members (the users who run GPU jobs) publish their files;
#   others r-x     node_exporter (any user) reads them; nobody else can write: not world-writable;
#   setgid (2000)  new files get the directory's group;
#   sticky (1000)  a member can replace or delete only their own files, never another job's.
# Usage: setup-textfile-dir.sh [DIR [GROUP]]   (defaults from /etc/default/ncclinsp)
set -eu
[ -r "${NCCLINSP_DEFAULTS:-/etc/default/ncclinsp}" ] && . "${NCCLINSP_DEFAULTS:-/etc/default/ncclinsp}"
DIR=${1:-${NCCLINSP_TEXTFILE_DIR:-/var/lib/prometheus/node-exporter}}
GROUP=${2:-${NCCLINSP_GROUP:-ncclinsp}}
case $GROUP in
  *[!0-9]*) getent group "$GROUP" >/dev/null 2>&1 || groupadd --system "$GROUP" ;;  # a name: create it if missing
esac
if [ -L "$DIR" ]; then
  echo "setup-textfile-dir: $DIR is a symbolic link; give the real directory" >&2
  exit 1
fi
mkdir -p "$DIR"
chown "root:$GROUP" "$DIR"
chmod 3775 "$DIR"
echo "setup-textfile-dir: $DIR is root:$GROUP mode 3775 (members of $GROUP publish, node_exporter reads)"
