#!/usr/bin/env bash
# Twice C10K on 150 threads: N idle keep-alive connections (default 20,000) held by a
# private httpd with MaxRequestWorkers 150 (6 children x ThreadsPerChild 25, StartServers 2
# as Debian ships it: the parent forks the rest), while `ab -c 100` runs fresh
# `Connection: close` requests beside them; then every idle connection sends its next
# request. Prints, per MPM: the idle clients' figures (first round, next round: 200s and
# failures), ab's requests per second, failed requests and p50 / p99 of the fresh requests
# (ab's percentiles, ms, connect included), and the server's resident memory per idle
# connection (children's VmRSS with the idle connections minus before, divided by N).
#
#   bash bench/c20k/run.sh                      # as root; build first (cargo build --release)
#   N=10000 MPMS="rworker-park event" bash bench/c20k/run.sh
#
# KeepAliveTimeout is 60 s, longer than the run, so no idle connection may close before the
# next round. Servers stop by their own pidfile.
set -euo pipefail
cd "$(dirname "$0")/../.."
N=${N:-20000}
MPMS=${MPMS:-"rworker-park"}
AB_N=${AB_N:-100000}
SOURCES=$(( (N + 19999) / 20000 * 2 + 2 ))
SO=${RWORKER_SO:-$PWD/target/release/libmod_mpm_rworker.so}
[[ -f $SO ]] || { echo "build first: cargo build --release" >&2; exit 1; }
# Both ends need more than N descriptors: as root, raise the hard limit to the kernel's.
ulimit -Hn "$(cat /proc/sys/fs/nr_open)" 2>/dev/null || true
ulimit -n "$(ulimit -Hn)"
KEEP=${KEEP:-}
# Autogroup off for the run, as rworker-ab does (bench/README.md, "Autogroup"): with it on,
# the server's session and ab's each get half of the CPUs and a run falls at random into a
# client-bound or a server-bound regime. AUTOGROUP=keep leaves it; restored on exit.
AG=/proc/sys/kernel/sched_autogroup_enabled
if [[ ${AUTOGROUP:-off} != keep && -w $AG ]]; then
    AG_WAS=$(cat "$AG")
    trap 'echo "$AG_WAS" > "$AG"' EXIT
    echo 0 > "$AG"
fi

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

rss_kb() { # sum of VmRSS over the parent's children
    local sum=0 c
    for c in $(pgrep -P "$1"); do
        sum=$(( sum + $(awk '/^VmRSS:/ {print $2}' "/proc/$c/status" 2>/dev/null || echo 0) ))
    done
    echo "$sum"
}

for mpm in $MPMS; do
    ROOT=$(mktemp -d /tmp/rw-c20k.XXXXXX); PORT=$(free_port)
    mkdir -p "$ROOT"/{run,logs,htdocs}; printf x > "$ROOT/htdocs/1b"; chmod -R a+rX "$ROOT"
    case $mpm in
        rworker-park) load="LoadModule mpm_rworker_module $SO"; extra="RWorkerKeepAlive park" ;;
        rworker) load="LoadModule mpm_rworker_module $SO"; extra="" ;;
        event) load="LoadModule mpm_event_module /usr/lib/apache2/modules/mod_mpm_event.so"; extra="" ;;
        worker) load="LoadModule mpm_worker_module /usr/lib/apache2/modules/mod_mpm_worker.so"; extra="" ;;
        *) echo "unknown MPM $mpm" >&2; exit 1 ;;
    esac
    cat > "$ROOT/httpd.conf" <<CONF
ServerRoot $ROOT
PidFile $ROOT/run/httpd.pid
ScoreBoardFile $ROOT/run/scoreboard
Mutex file:$ROOT/run default
$load
LoadModule authz_core_module /usr/lib/apache2/modules/mod_authz_core.so
ServerName localhost
Listen 127.0.0.1:$PORT
ListenBacklog 4096
User www-data
Group www-data
DocumentRoot $ROOT/htdocs
<Directory $ROOT/htdocs>
    Require all granted
</Directory>
ErrorLog $ROOT/logs/error.log
LogLevel warn
KeepAlive On
KeepAliveTimeout 60
MaxKeepAliveRequests 0
StartServers 2
MinSpareThreads 25
MaxSpareThreads 75
ThreadsPerChild 25
ServerLimit 16
MaxRequestWorkers 150
$extra
CONF
    apache2 -f "$ROOT/httpd.conf" -k start
    for _ in $(seq 100); do curl -fs -o /dev/null "http://127.0.0.1:$PORT/1b" && break; sleep 0.1; done
    pid=$(cat "$ROOT/run/httpd.pid")
    sleep 2
    before=$(rss_kb "$pid")
    # One client process per 9,000 connections (a process's descriptors may be capped at
    # the hard limit, 20,000 on some machines, which an unprivileged container cannot raise).
    PROCS=$(( (N + 8999) / 9000 )); idle=()
    for p in $(seq "$PROCS"); do
        python3 bench/c20k/idle_clients.py "$PORT" $(( N / PROCS )) "$SOURCES" "$ROOT/ready.$p" "$ROOT/go" > "$ROOT/idle.$p.out" &
        idle+=($!)
    done
    for _ in $(seq 600); do
        ready=0; for p in $(seq "$PROCS"); do [[ -f $ROOT/ready.$p ]] && ready=$((ready + 1)); done
        (( ready == PROCS )) && break
        alive=0; for i in "${idle[@]}"; do kill -0 "$i" 2>/dev/null && alive=1; done
        (( alive )) || break
        sleep 0.5
    done
    with=$(rss_kb "$pid")
    ab -q -c 100 -n "$AB_N" "http://127.0.0.1:$PORT/1b" > "$ROOT/ab.out" 2>&1 || true
    touch "$ROOT/go"
    for i in "${idle[@]}"; do wait "$i" || true; done
    # The clients' figures, summed over the processes (seconds: the slowest).
    python3 - "$ROOT"/idle.*.out > "$ROOT/idle.out" <<'PY'
import sys
tot = {}
for f in sys.argv[1:]:
    for kv in open(f).read().split():
        if "=" not in kv:
            continue
        k, v = kv.split("=", 1)
        v = float(v)
        tot[k] = max(tot.get(k, 0), v) if k.endswith("secs") else tot.get(k, 0) + v
print(" ".join(f"{k}={v:g}" for k, v in tot.items()))
PY
    rps=$(awk '/^Requests per second/ {print $4}' "$ROOT/ab.out")
    failed=$(awk '/^Failed requests/ {print $3}' "$ROOT/ab.out")
    p50=$(awk '$1 == "50%" {print $2}' "$ROOT/ab.out")
    p99=$(awk '$1 == "99%" {print $2}' "$ROOT/ab.out")
    kb=$(python3 -c "print(f'{($with - $before) / $N:.1f}')")
    echo "$(date -u +%FT%TZ) $mpm N=$N $(tr '\n' ' ' < "$ROOT/idle.out") ab: ${rps} req/s failed=${failed} p50=${p50} ms p99=${p99} ms; rss per idle connection ${kb} kB"
    grep -vE 'AH00558' "$ROOT/logs/error.log" | grep -E 'error|warn|emerg|crit' | head -3 | sed 's/^/    log: /' || true
    apache2 -f "$ROOT/httpd.conf" -k stop 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    [[ -n $KEEP ]] && echo "kept $ROOT" || rm -rf "$ROOT"
done
