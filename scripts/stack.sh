#!/usr/bin/env bash
# Start/stop a local monitoring stack on loopback: one node_exporter per simulated node, a
# Prometheus or a VictoriaMetrics backend (or both side by side), and Alertmanager.
#
#   stack.sh start --nodes node0,node1 --root DIR [--scrape 1s] [--backend prometheus|victoriametrics|both]
#                  [--webhook URL] [--am-config FILE] [--no-alertmanager] [--rules FILE]...
#                  [--prom-port P] [--base-port B] [--timeout S]
#   stack.sh stop  --root DIR
#   stack.sh status --root DIR
#
# start: for each node N, prometheus-node-exporter on 127.0.0.1:<port> with only the textfile
# collector reading DIR/N (created if missing). Then, per backend:
#   prometheus       one prometheus scraping them every --scrape (also the rule evaluation
#                    interval), prometheus/rules/*.yml loaded (or the --rules files), TSDB in
#                    DIR/prometheus-data; URL in DIR/prom_url.
#   victoriametrics  vmagent scrapes the same targets with the same labels and remote-writes to a
#                    single-node victoria-metrics (DIR/vm-data); vmalert evaluates the same rule
#                    files against it every --scrape and writes recording rules and ALERTS back
#                    through remote write. victoria-metrics proxies /api/v1/rules and /api/v1/alerts
#                    to vmalert, so its URL (DIR/vm_url) answers the Prometheus API the tests and
#                    Grafana use; vmagent's URL (DIR/vmagent_url) has /api/v1/targets.
#   both             both of the above on the same node_exporters (the e2e test compares them).
# Each backend sends its alerts to its own Alertmanager (DIR/am_url_<backend>), configured from
# prometheus/alertmanager.example.yml (or --am-config) with `http://127.0.0.1:9095` in webhook URLs
# replaced by `URL/<backend>` when --webhook URL is given. --no-alertmanager (Prometheus only)
# starts none (vmalert cannot run without one).
# Waits until everything is ready and every target is up, then prints the query URL on stdout
# (last line; Prometheus's when both run) and writes it to DIR/query_url.
# Ports: --prom-port / --base-port (node i gets B+i) or, by default, free ports from the kernel,
# so runs with different roots never clash. Pids go to DIR/pids/*.pid, logs to DIR/logs/.
#
# Labels: each target gets `node_instance="<node>"`; the scraper adds job="ncclinsp" and
# instance="127.0.0.1:<port>". No target label is called `node`: the .prom files carry their own
# `node` label, and with honor_labels=false a clashing target label would rename it to
# `exported_node`. honor_labels stays false so a file can never overwrite job/instance.
#
# Exit codes: 0 ok, 1 failure (stack stopped again), 2 usage, 77 binaries missing.
set -euo pipefail

PROMETHEUS_BIN=${PROMETHEUS_BIN:-/usr/bin/prometheus}
NODE_EXPORTER_BIN=${NODE_EXPORTER_BIN:-/usr/bin/prometheus-node-exporter}
ALERTMANAGER_BIN=${ALERTMANAGER_BIN:-/usr/bin/prometheus-alertmanager}
VM_BIN=${VM_BIN:-/usr/bin/victoria-metrics}
VMAGENT_BIN=${VMAGENT_BIN:-/usr/bin/vmagent}
VMALERT_BIN=${VMALERT_BIN:-/usr/bin/vmalert}
SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_DIR=$(cd "$SCRIPT_DIR/.." && pwd)

die() { echo "stack.sh: $*" >&2; exit 1; }
usage() { sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

# Free loopback ports from the kernel, one per line (one python start for all of them).
free_ports() { # n
  python3 -c '
import socket, sys
ss = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in ss:
    s.bind(("127.0.0.1", 0))
print("\n".join(str(s.getsockname()[1]) for s in ss))' "$1"
}
PORTS=()
free_port() { # -> next port of the pool into $PORT (no subshell, so the pool shrinks)
  ((${#PORTS[@]})) || mapfile -t PORTS < <(free_ports 16)
  PORT=${PORTS[0]}
  PORTS=("${PORTS[@]:1}")
}

alive() { # pid: running and not a zombie
  kill -0 "$1" 2>/dev/null || return 1
  local st
  st=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null || echo X)
  [[ $st != Z && $st != X ]]
}

cmd_stop() {
  [[ -d $ROOT/pids ]] || return 0
  local f pid pids=() files=()
  # TERM to the scrapers and rule evaluators first, then to the rest; then one shared grace
  # period of 5 s, after which survivors get KILL.
  for f in "$ROOT/pids/prometheus.pid" "$ROOT/pids/vmagent.pid" "$ROOT/pids/vmalert.pid" "$ROOT"/pids/*.pid; do
    [[ -f $f ]] || continue
    [[ " ${files[*]} " == *" $f "* ]] && continue
    files+=("$f")
    pid=$(cat "$f" 2>/dev/null || true)
    if [[ -n $pid ]] && alive "$pid"; then
      kill -TERM "$pid" 2>/dev/null || true
      pids+=("$pid")
    fi
  done
  local deadline=$((SECONDS + 5)) any
  while ((${#pids[@]} > 0 && SECONDS < deadline)); do
    any=0
    for pid in "${pids[@]}"; do alive "$pid" && any=1; done
    ((any == 0)) && break
    sleep 0.1
  done
  for pid in "${pids[@]}"; do
    if alive "$pid"; then
      echo "stack.sh: pid $pid ignored TERM for 5s, sending KILL" >&2
      kill -KILL "$pid" 2>/dev/null || true
    fi
  done
  ((${#files[@]} == 0)) || rm -f "${files[@]}"
  return 0
}

cmd_status() {
  local f pid st=0
  for f in "$ROOT"/pids/*.pid; do
    [[ -e $f ]] || continue
    pid=$(cat "$f")
    if alive "$pid"; then echo "$(basename "$f" .pid) $pid running"; else echo "$(basename "$f" .pid) $pid dead"; st=1; fi
  done
  [[ -f $ROOT/query_url ]] && cat "$ROOT/query_url"
  return $st
}

# One scrape job for Prometheus and vmagent alike: same job name, targets and labels.
write_scrape_configs() { # file
  {
    echo "scrape_configs:"
    echo "  - job_name: ncclinsp"
    echo "    honor_labels: false"
    echo "    static_configs:"
    local k
    for k in "${!NODES[@]}"; do
      echo "      - targets: [\"127.0.0.1:${NODE_PORTS[$k]}\"]"
      echo "        labels: {node_instance: \"${NODES[$k]}\"}"
    done
  } >>"$1"
}

start_bg() { # name cmd... : start in the background, pid to DIR/pids/name.pid, log to DIR/logs/name.log
  local name=$1; shift
  "$@" >"$ROOT/logs/$name.log" 2>&1 &
  echo $! >"$ROOT/pids/$name.pid"
}

start_alertmanager() { # backend -> its URL in $AM_URL
  local b=$1 port cfg=$ROOT/alertmanager-$1.yml
  free_port; port=$PORT
  if [[ -n $WEBHOOK ]]; then
    sed "s#http://127.0.0.1:9095#${WEBHOOK%/}/$b#g" "$AM_CONFIG" >"$cfg"
  else
    cp "$AM_CONFIG" "$cfg"
  fi
  mkdir -p "$ROOT/alertmanager-$b-data"
  # --cluster.listen-address= : no HA gossip port (it would be 9094 for every stack).
  start_bg "alertmanager-$b" "$ALERTMANAGER_BIN" --config.file="$cfg" \
    --storage.path="$ROOT/alertmanager-$b-data" --web.listen-address="127.0.0.1:$port" \
    --cluster.listen-address=
  AM_URL=http://127.0.0.1:$port
  echo "$AM_URL" >"$ROOT/am_url_$b"
}

start_prometheus() {
  mkdir -p "$ROOT/prometheus-data"
  local prom_port=$PROM_PORT cfg=$ROOT/prometheus.yml am=""
  [[ -n $prom_port ]] || { free_port; prom_port=$PORT; }
  if ((AM)); then start_alertmanager prometheus; am=$AM_URL; fi
  {
    echo "# generated by scripts/stack.sh"
    echo "global:"
    echo "  scrape_interval: $SCRAPE"
    echo "  evaluation_interval: $SCRAPE"
    echo "  scrape_timeout: $SCRAPE"
    echo "rule_files:"
    for r in "${RULES[@]}"; do echo "  - \"$r\""; done
    if [[ -n $am ]]; then
      echo "alerting:"
      echo "  alertmanagers:"
      echo "    - static_configs:"
      echo "        - targets: [\"${am#http://}\"]"
    fi
  } >"$cfg"
  write_scrape_configs "$cfg"
  start_bg prometheus "$PROMETHEUS_BIN" \
    --config.file="$cfg" \
    --storage.tsdb.path="$ROOT/prometheus-data" \
    --storage.tsdb.retention.time=1d \
    --web.listen-address="127.0.0.1:$prom_port" \
    --web.enable-lifecycle \
    --web.console.templates=/etc/prometheus/consoles \
    --web.console.libraries=/etc/prometheus/console_libraries
  echo "http://127.0.0.1:$prom_port" >"$ROOT/prom_url"
  READY+=("http://127.0.0.1:$prom_port/-/ready")
  TARGETS+=("http://127.0.0.1:$prom_port")
}

start_victoriametrics() {
  mkdir -p "$ROOT/vm-data" "$ROOT/vmagent-data"
  local vm_port vmagent_port vmalert_port am r
  free_port; vm_port=$PORT
  free_port; vmagent_port=$PORT
  free_port; vmalert_port=$PORT
  start_alertmanager victoriametrics; am=$AM_URL
  local vm=http://127.0.0.1:$vm_port
  # -search.latencyOffset: VictoriaMetrics hides samples younger than this from queries (30 s by
  # default, for late remote writes); vmalert evaluates rules on the newest data, like Prometheus.
  start_bg victoria-metrics "$VM_BIN" -httpListenAddr="127.0.0.1:$vm_port" \
    -storageDataPath="$ROOT/vm-data" -retentionPeriod=1d -search.latencyOffset="$SCRAPE" \
    -vmalert.proxyURL="http://127.0.0.1:$vmalert_port" -loggerLevel=WARN
  local cfg=$ROOT/vmagent.yml
  {
    echo "# generated by scripts/stack.sh"
    echo "global:"
    echo "  scrape_interval: $SCRAPE"
    echo "  scrape_timeout: $SCRAPE"
  } >"$cfg"
  write_scrape_configs "$cfg"
  start_bg vmagent "$VMAGENT_BIN" -httpListenAddr="127.0.0.1:$vmagent_port" \
    -promscrape.config="$cfg" -remoteWrite.url="$vm/api/v1/write" \
    -remoteWrite.tmpDataPath="$ROOT/vmagent-data" -remoteWrite.flushInterval=1s -loggerLevel=WARN
  local args=()
  for r in "${RULES[@]}"; do args+=(-rule="$r"); done
  start_bg vmalert "$VMALERT_BIN" -httpListenAddr="127.0.0.1:$vmalert_port" "${args[@]}" \
    -datasource.url="$vm" -remoteWrite.url="$vm" -remoteRead.url="$vm" -notifier.url="$am" \
    -evaluationInterval="$SCRAPE" -remoteWrite.flushInterval=1s -loggerLevel=WARN
  echo "$vm" >"$ROOT/vm_url"
  echo "http://127.0.0.1:$vmagent_port" >"$ROOT/vmagent_url"
  echo "http://127.0.0.1:$vmalert_port" >"$ROOT/vmalert_url"
  READY+=("$vm/health" "http://127.0.0.1:$vmalert_port/health")
  TARGETS+=("http://127.0.0.1:$vmagent_port")
}

start_once() {
  local i node port
  mkdir -p "$ROOT/pids" "$ROOT/logs"
  rm -f "$ROOT"/prom_url "$ROOT"/vm_url "$ROOT"/vmagent_url "$ROOT"/vmalert_url "$ROOT"/am_url_* "$ROOT"/query_url
  NODE_PORTS=() READY=() TARGETS=()
  i=0
  for node in "${NODES[@]}"; do
    if [[ -n ${BASE_PORT:-} ]]; then port=$((BASE_PORT + i)); else free_port; port=$PORT; fi
    mkdir -p "$ROOT/$node"
    start_bg "node_exporter-$node" "$NODE_EXPORTER_BIN" \
      --web.listen-address="127.0.0.1:$port" \
      --web.disable-exporter-metrics \
      --collector.disable-defaults \
      --collector.textfile \
      --collector.textfile.directory="$ROOT/$node"
    NODE_PORTS+=("$port")
    i=$((i + 1))
  done
  [[ $BACKEND == victoriametrics ]] || start_prometheus
  [[ $BACKEND == prometheus ]] || start_victoriametrics
  local url
  url=$(cat "$ROOT/prom_url" 2>/dev/null || cat "$ROOT/vm_url")
  local f
  for f in "$ROOT"/am_url_*; do [[ -e $f ]] && READY+=("$(cat "$f")/-/ready"); done

  # One poller for everything: pids alive, READY URLs answer 200, TARGETS report every node up.
  local rc=0
  python3 - "$ROOT" "$TIMEOUT" "${#NODES[@]}" "${READY[*]}" "${TARGETS[*]}" <<'PY' || rc=$?
import glob, json, os, sys, time, urllib.request
root, timeout, n = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
ready, targets = sys.argv[4].split(), sys.argv[5].split()

def get(u):
    try:
        with urllib.request.urlopen(u, timeout=10) as r:
            return r.read().decode() if r.status == 200 else None
    except Exception:
        return None

def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False

def up(u):
    d = get(u + "/api/v1/targets?state=active")
    if d is None:
        return False
    t = json.loads(d)["data"]["activeTargets"]
    return len(t) == n and all(x["health"] == "up" for x in t)

deadline = time.monotonic() + timeout
while time.monotonic() < deadline:
    for f in glob.glob(os.path.join(root, "pids", "*.pid")):
        if not alive(open(f).read().strip()):
            name = os.path.basename(f)[:-4]
            print(f"stack.sh: {name} exited during startup:", file=sys.stderr)
            try:
                print("".join(open(os.path.join(root, "logs", name + ".log")).readlines()[-5:]), file=sys.stderr)
            except OSError:
                pass
            sys.exit(3)
    if all(get(u) is not None for u in ready) and all(up(u) for u in targets):
        sys.exit(0)
    time.sleep(0.2)
print(f"stack.sh: not ready after {timeout:.0f}s (see {root}/logs)", file=sys.stderr)
sys.exit(1)
PY
  ((rc == 0)) || return $rc
  echo "$url" >"$ROOT/query_url"
  echo "$url"
}

need() { [[ -x $1 ]] || { echo "stack.sh: $1 missing" >&2; exit 77; }; }

cmd_start() {
  need "$NODE_EXPORTER_BIN"
  [[ $BACKEND == victoriametrics ]] || need "$PROMETHEUS_BIN"
  [[ $BACKEND == prometheus ]] || { need "$VM_BIN"; need "$VMAGENT_BIN"; need "$VMALERT_BIN"; AM=1; }
  ((AM == 0)) || need "$ALERTMANAGER_BIN"
  [[ -f $AM_CONFIG ]] || die "Alertmanager config $AM_CONFIG missing"
  ((${#NODES[@]} > 0)) || die "--nodes is required"
  local f
  for f in "$ROOT"/pids/*.pid; do
    if [[ -f $f ]] && alive "$(cat "$f")"; then
      die "a stack is already running under $ROOT (stack.sh stop --root $ROOT)"
    fi
  done
  if ((${#RULES[@]} == 0)); then
    for r in "$REPO_DIR"/prometheus/rules/*.yml; do [[ -e $r ]] && RULES+=("$r"); done
  fi
  local attempt rc
  for attempt in 1 2 3; do
    rc=0
    start_once || rc=$?
    ((rc == 0)) && return 0
    cmd_stop
    # rc 3: a process died at startup (most likely a port taken between pick and bind): retry
    # with fresh ports, unless the user fixed them.
    if ((rc != 3)) || [[ -n ${PROM_PORT:-}${BASE_PORT:-} ]]; then break; fi
    echo "stack.sh: retrying with new ports (attempt $((attempt + 1)))" >&2
  done
  exit 1
}

[[ $# -ge 1 ]] || usage
CMD=$1; shift
ROOT="" SCRAPE=1s PROM_PORT="" BASE_PORT="" TIMEOUT=30 BACKEND=prometheus AM=1 WEBHOOK=""
AM_CONFIG=$REPO_DIR/prometheus/alertmanager.example.yml
NODES=() RULES=() NODE_PORTS=() READY=() TARGETS=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --nodes) IFS=, read -r -a NODES <<<"$2"; shift 2 ;;
    --root) ROOT=$2; shift 2 ;;
    --scrape) SCRAPE=$2; shift 2 ;;
    --prom-port) PROM_PORT=$2; shift 2 ;;
    --base-port) BASE_PORT=$2; shift 2 ;;
    --rules) RULES+=("$(cd "$(dirname "$2")" && pwd)/$(basename "$2")"); shift 2 ;;
    --timeout) TIMEOUT=$2; shift 2 ;;
    --backend) BACKEND=$2; shift 2 ;;
    --webhook) WEBHOOK=$2; shift 2 ;;
    --am-config) AM_CONFIG=$(cd "$(dirname "$2")" && pwd)/$(basename "$2"); shift 2 ;;
    --no-alertmanager) AM=0; shift ;;
    -h | --help) usage ;;
    *) echo "stack.sh: unknown argument $1" >&2; usage ;;
  esac
done
[[ -n $ROOT ]] || { echo "stack.sh: --root is required" >&2; usage; }
case $BACKEND in prometheus | victoriametrics | both) ;; *) echo "stack.sh: --backend $BACKEND?" >&2; usage ;; esac
mkdir -p "$ROOT"
ROOT=$(cd "$ROOT" && pwd)

case $CMD in
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  *) usage ;;
esac
