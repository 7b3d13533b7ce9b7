#!/usr/bin/env bash
# Slow readers of a large file beside fresh clients (issue 46): for each MPM and each N, a
# private httpd on Debian's sizing (StartServers 2, ThreadsPerChild 25, MaxRequestWorkers
# 150, Timeout 60) with `EnableSendfile On`; N clients each GET a 16 MiB file through an
# 8 KiB receive buffer and read 4 KiB a second, and meanwhile 40 fresh clients, one every
# 0.5 s, each on a new connection, request a 1-byte file with a 5 s limit
# (slow_readers.py). Prints one line per run: downloads receiving during the fresh phase,
# closed by the server, fresh clients answered, their p50 / p99 / max (ms, connect
# included), and the children's RSS with the readers attached.
#
#   bash bench/slow-readers/run.sh           # as root; build first (cargo build --release)
#   NS="300 1000 3000" MPMS="rworker event worker" bash bench/slow-readers/run.sh
#   SENDFILE=Off NS=300 bash bench/slow-readers/run.sh      # Debian's default
#
# Never run it beside another job: the fresh clients' latency is the figure. Servers stop
# by their own pidfile.
set -euo pipefail
cd "$(dirname "$0")/../.."
NS=${NS:-"1000 3000"}
MPMS=${MPMS:-"rworker event worker"}
FRESH=${FRESH:-40}
SENDFILE=${SENDFILE:-On}
SO=${RWORKER_SO:-$PWD/target/release/libmod_mpm_rworker.so}
[[ -f $SO ]] || { echo "build first: cargo build --release" >&2; exit 1; }
ulimit -Hn "$(cat /proc/sys/fs/nr_open)" 2>/dev/null || true
ulimit -n "$(ulimit -Hn)"
# Autogroup off for the run, as rworker-ab does (bench/README.md, "Autogroup").
AG=/proc/sys/kernel/sched_autogroup_enabled
if [[ ${AUTOGROUP:-off} != keep && -w $AG ]]; then
    AG_WAS=$(cat "$AG")
    trap 'echo "$AG_WAS" > "$AG"' EXIT
    echo 0 > "$AG"
fi

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
rss_kb() {
    local sum=0 c
    for c in $(pgrep -P "$1"); do
        sum=$(( sum + $(awk '/^VmRSS:/ {print $2}' "/proc/$c/status" 2>/dev/null || echo 0) ))
    done
    echo "$sum"
}

echo "# $(date -u +%FT%TZ) $(git rev-parse --short HEAD)$(git diff --quiet || echo +uncommitted) so=$(sha256sum "$SO" | cut -c1-12) EnableSendfile $SENDFILE, $(nproc) cores"
for n in $NS; do
  for mpm in $MPMS; do
    ROOT=$(mktemp -d /tmp/rw-slow.XXXXXX); PORT=$(free_port)
    mkdir -p "$ROOT"/{run,logs,htdocs}; printf x > "$ROOT/htdocs/1b"
    truncate -s 16M "$ROOT/htdocs/16m.bin"; chmod -R a+rX "$ROOT"
    case $mpm in
        rworker) load="LoadModule mpm_rworker_module $SO" ;;
        rworker-thread) load="LoadModule mpm_rworker_module $SO
RWorkerKeepAlive thread" ;;
        rworker-base) load="LoadModule mpm_rworker_module ${BASE_SO:?BASE_SO names the other build}" ;;
        event|worker) load="LoadModule mpm_${mpm}_module /usr/lib/apache2/modules/mod_mpm_${mpm}.so" ;;
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
EnableSendfile $SENDFILE
Timeout 60
KeepAlive On
KeepAliveTimeout 5
StartServers 2
MinSpareThreads 25
MaxSpareThreads 75
ThreadsPerChild 25
ServerLimit 16
MaxRequestWorkers 150
CONF
    apache2 -f "$ROOT/httpd.conf" -k start
    for _ in $(seq 100); do curl -fs -o /dev/null "http://127.0.0.1:$PORT/1b" && break; sleep 0.1; done
    pid=$(cat "$ROOT/run/httpd.pid")
    sleep 2
    python3 bench/slow-readers/slow_readers.py "$PORT" "$n" /16m.bin "$FRESH" > "$ROOT/out" 2> "$ROOT/err" &
    client=$!
    sleep 6; rss=$(rss_kb "$pid")
    wait "$client" || true
    echo "$mpm N=$n $(cat "$ROOT/out") children_rss_mb=$(( rss / 1024 ))"
    grep -c . "$ROOT/err" >/dev/null && head -2 "$ROOT/err" | sed 's/^/    client: /'
    grep -vE 'AH00558' "$ROOT/logs/error.log" | grep -E 'error|warn|emerg|crit' | sort | uniq -c | sort -rn | head -3 | sed 's/^/    log: /' || true
    apache2 -f "$ROOT/httpd.conf" -k stop 2>/dev/null || true
    for _ in $(seq 200); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    rm -rf "$ROOT"
  done
done
