#!/usr/bin/env bash
# Graceful restart at peak: wrk -t2 -c100 for 8 s against a private httpd on 127.0.0.1,
# once without and once with `-k graceful` 3 s in, for the stock worker and rworker
# (thread and park), keep-alive and `Connection: close`, with ServerLimit 16 (room for a
# second generation) and ServerLimit = MaxRequestWorkers / ThreadsPerChild (no room).
# Each run first warms the server up with 2 s of the same load (so the figures are not
# those of the children forked for the first 100 clients), then measures 8 s.
# Prints one line per run: the slowest request (wrk's Max latency), the p99, the requests
# served and wrk's socket errors.
#
#   bash bench/graceful/run.sh [REPS]          # as root; build first (cargo build --release)
#   MPMS="rworker-park" LIMITS=16 MODES=keepalive bash bench/graceful/run.sh 1
#
# Debian's default sizing: StartServers 2, MinSpareThreads 25, MaxSpareThreads 75,
# ThreadsPerChild 25, MaxRequestWorkers 150. Servers stop by their own pidfile.
set -euo pipefail
cd "$(dirname "$0")/../.."
REPS=${1:-2}
MPMS=${MPMS:-"worker rworker-thread rworker-park"}
LIMITS=${LIMITS:-"16 6"}
MODES=${MODES:-"keepalive close"}
SO=${RWORKER_SO:-$PWD/target/release/libmod_mpm_rworker.so}
[[ -f $SO ]] || { echo "build first: cargo build --release" >&2; exit 1; }
command -v wrk >/dev/null || { echo "wrk missing: bash scripts/setup-deps.sh" >&2; exit 1; }

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

start() { # mpm serverlimit -> sets ROOT PORT
    local mpm=$1 limit=$2
    ROOT=$(mktemp -d /tmp/rw-graceful.XXXXXX); PORT=$(free_port)
    mkdir -p "$ROOT"/{run,logs,htdocs}; printf x > "$ROOT/htdocs/1b"; chmod -R a+rX "$ROOT"
    local load extra=""
    case $mpm in
        worker) load="LoadModule mpm_worker_module /usr/lib/apache2/modules/mod_mpm_worker.so" ;;
        rworker-thread) load="LoadModule mpm_rworker_module $SO" ;;
        rworker-park) load="LoadModule mpm_rworker_module $SO"; extra="RWorkerKeepAlive park" ;;
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
User www-data
Group www-data
DocumentRoot $ROOT/htdocs
<Directory $ROOT/htdocs>
    Require all granted
</Directory>
ErrorLog $ROOT/logs/error.log
LogLevel warn
KeepAlive On
KeepAliveTimeout 5
MaxKeepAliveRequests 0
StartServers 2
MinSpareThreads 25
MaxSpareThreads 75
ThreadsPerChild 25
ThreadLimit 64
ServerLimit $limit
MaxRequestWorkers 150
MaxConnectionsPerChild 0
$extra
CONF
    apache2 -f "$ROOT/httpd.conf" -k start
    for _ in $(seq 100); do curl -fs -o /dev/null "http://127.0.0.1:$PORT/1b" && break; sleep 0.1; done
}

stop() {
    local pid; pid=$(cat "$ROOT/run/httpd.pid" 2>/dev/null || true)
    apache2 -f "$ROOT/httpd.conf" -k stop 2>/dev/null || true
    for _ in $(seq 100); do [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    grep -E 'AH00286|AH00288|AH03490|scoreboard is full' "$ROOT/logs/error.log" | sed 's/^/    log: /' | head -3 || true
    rm -rf "$ROOT"
}

one() { # mpm limit mode restart
    local mpm=$1 limit=$2 mode=$3 restart=$4 hdr=() out
    [[ $mode == close ]] && hdr=(-H "Connection: close")
    start "$mpm" "$limit"
    wrk -t2 -c100 -d2 "${hdr[@]}" "http://127.0.0.1:$PORT/1b" >/dev/null 2>&1
    if [[ $restart == yes ]]; then
        ( sleep 3; apache2 -f "$ROOT/httpd.conf" -k graceful ) &
    fi
    out=$(wrk -t2 -c100 -d8 --timeout 10s --latency "${hdr[@]}" "http://127.0.0.1:$PORT/1b" 2>&1)
    wait
    local max p99 errs reqs
    max=$(awk '/^    Latency/ {print $4}' <<<"$out")
    p99=$(awk '$1 == "99%" {print $2}' <<<"$out")
    errs=$(grep -o 'Socket errors:.*' <<<"$out" || echo "Socket errors: none")
    reqs=$(awk '/requests in/ {print $1}' <<<"$out")
    printf '%-15s ServerLimit %-2s %-9s graceful %-3s  max %-9s p99 %-9s requests %-8s %s\n' \
        "$mpm" "$limit" "$mode" "$restart" "$max" "$p99" "$reqs" "$errs"
    stop
}

echo "# bench/graceful/run.sh $(date -u '+%F %H:%M UTC'), $(git rev-parse --short HEAD), $(nproc) CPUs"
for rep in $(seq "$REPS"); do
    for limit in $LIMITS; do
        for mode in $MODES; do
            for mpm in $MPMS; do
                for restart in no yes; do
                    one "$mpm" "$limit" "$mode" "$restart"
                done
            done
        done
    done
done
