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

. bench/lib.sh

start() { # mpm serverlimit -> sets ROOT PORT
    local mpm=$1 limit=$2
    bench_server graceful "$(mpm_load "$mpm")" "KeepAliveTimeout 5
MaxKeepAliveRequests 0
ThreadLimit 64
ServerLimit $limit
MaxConnectionsPerChild 0"
}

stop() {
    GREP='AH00286|AH00288|AH03490|scoreboard is full' bench_stop
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
