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
. bench/lib.sh
ulimit -Hn "$(cat /proc/sys/fs/nr_open)" 2>/dev/null || true
ulimit -n "$(ulimit -Hn)"
autogroup_off

echo "# $(date -u +%FT%TZ) $(git rev-parse --short HEAD)$(git diff --quiet || echo +uncommitted) so=$(sha256sum "$SO" | cut -c1-12) EnableSendfile $SENDFILE, $(nproc) cores"
for n in $NS; do
  for mpm in $MPMS; do
    bench_server slow "$(mpm_load "$mpm")" "ListenBacklog 4096
EnableSendfile $SENDFILE
Timeout 60
KeepAliveTimeout 5"
    truncate -s 16M "$ROOT/htdocs/16m.bin"; chmod a+r "$ROOT/htdocs/16m.bin"
    sleep 2
    python3 bench/slow-readers/slow_readers.py "$PORT" "$n" /16m.bin "$FRESH" > "$ROOT/out" 2> "$ROOT/err" &
    client=$!
    sleep 6; rss=$(rss_kb "$PID")
    wait "$client" || true
    echo "$mpm N=$n $(cat "$ROOT/out") children_rss_mb=$(( rss / 1024 ))"
    grep -c . "$ROOT/err" >/dev/null && head -2 "$ROOT/err" | sed 's/^/    client: /'
    bench_stop
  done
done
