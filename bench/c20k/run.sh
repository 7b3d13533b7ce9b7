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
. bench/lib.sh
# Both ends need more than N descriptors: as root, raise the hard limit to the kernel's.
ulimit -Hn "$(cat /proc/sys/fs/nr_open)" 2>/dev/null || true
ulimit -n "$(ulimit -Hn)"
KEEP=${KEEP:-}
autogroup_off

for mpm in $MPMS; do
    bench_server c20k "$(mpm_load "$mpm")" "ListenBacklog 4096
KeepAliveTimeout 60
MaxKeepAliveRequests 0"
    pid=$PID
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
    bench_stop
done
