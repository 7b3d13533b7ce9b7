#!/usr/bin/env bash
# Slow senders of request heads beside fresh clients (issues 47 and 48): for each MPM, a
# private httpd on Debian's defaults (StartServers 2, Min/MaxSpareThreads 25/75,
# ThreadsPerChild 25, MaxRequestWorkers 150, Timeout 300, KeepAliveTimeout 5, AcceptFilter
# left as is, mod_reqtimeout with `RequestReadTimeout handshake=0 header=20-40,MinRate=500
# body=20,MinRate=500` (Debian's reqtimeout.conf: no handshake limit), mod_status), and four
# loads, each on a fresh server:
#
#   head       N clients each connect, send `GET /i.html HTTP/1.1\r\nHost: x\r\n` and then
#              one more header byte every 2 s (`X-a: b\r\n` over and over), never ending
#              the head;
#   byte       N clients each connect, send `G`, and then nothing;
#   tls-hello  on an HTTPS-only server (below), N clients each connect and send the first 5
#              bytes of a ClientHello, the record header `16 03 01 02 00`, then nothing:
#              stalled handshakes, which no reqtimeout stage times (handshake=0), only
#              Timeout (300 s) per read;
#   tls-head   on an HTTPS-only server, N clients each finish a TLS handshake (done
#              concurrently in the client's event loop), then send head's bytes over TLS:
#              the GET line and Host, then one header byte every 2 s.
#
# The TLS loads' server has its one listener speak only TLS (bench/lib.sh's bench_server
# with `tls`: `Listen 127.0.0.1:PORT https`, mod_ssl and mod_socache_shmcb with the
# settings of Debian's ssl.conf: SSLSessionCache shmcb, SSLSessionTickets off, SSLCipherSuite
# HIGH:!aNULL, SSLProtocol all -SSLv3; a vhost with SSLEngine on and a self-signed ECDSA
# P-256 certificate made per server with the openssl CLI under its ServerRoot); all else
# is as above. The plain loads' server has no mod_ssl.
#
# Once all N have connected (tls-head: and finished their handshakes, or none has finished
# for 2 s: a server that runs handshakes on its threads stops at its 150), and 2 s
# later, 40 fresh clients (FRESH), one every 0.5 s (open loop: on time whether or not the
# ones before have been answered), each on a new connection, GET the same small file with
# a 5 s limit (slow_senders.py); for the TLS loads each is a fresh HTTPS client (new TCP
# connection, full TLS handshake, GET), the handshake inside the limit and the latency.
# The fresh phase ends when the last one's limit is up, 24.5 s after the first (FRESH=40),
# on every server.
#
# Per run it prints one line: the fresh clients answered / failed and their p50 / p99 /
# max (ms, connect included); the slow clients still open when the fresh phase ends, and
# closed by the server by then (seen by the client; `cut` counts the server's AH01382
# "Request header read timeout" lines, LogLevel reqtimeout:info); for tls-head the
# handshakes finished when the fresh phase began (`handshaken`) and by its end; the
# children's VmRSS summed before the slow clients connect and 2 s after they all have, and
# from those the kB per slow client; then server-status?auto's ConnsAsync*, RWorker* and Busy/IdleWorkers
# lines, asked for at the moment of the second RSS with a 5 s limit, beside the fresh
# clients (rworker's parked connections, stock event's ConnsAsync*; a server whose
# threads are all held by slow clients does not answer it; over HTTPS for the TLS loads).
# At the end, a markdown table with the median of each figure over the REPS repetitions.
#
# Reading it: mod_reqtimeout cuts a head after 20 s without 500 B/s, so the first slow
# clients a server reads are cut about 20 s after they connect, inside the fresh phase
# (which ends about 26.5 s after they all have connected); a connection still in the
# listen queue (ListenBacklog 4096, as bench/slow-readers, so N=3000 connects without SYN
# retries) is open, and neither read nor timed, nor in the children's RSS. The RSS with
# the slow clients includes the children the parent forked for them. N=3000 fits one
# source address's ephemeral ports (ip_local_port_range 32768-60999); from 20,000 the
# client spreads over 127.0.0.x. A stalled handshake is neither cut nor closed within the
# fresh phase on any server (Timeout 300); a server whose threads are all in handshakes
# answers no fresh client. The slow clients close their connections before the server is
# stopped, which frees such threads; bench_stop SIGKILLs a server still up 20 s after its
# stop, so no cell waits out the 300 s.
#
#   bash bench/slow-senders/run.sh | tee bench/slow-senders/results-$(date -u +%F).txt
#                                   # as root; build first (cargo build --release)
#   N=3000 REPS=3 MPMS="rworker-park event worker" bash bench/slow-senders/run.sh
#   LOADS="tls-hello tls-head" REPS=2 bash bench/slow-senders/run.sh   # issue 48's two
#   N=200 FRESH=10 LOADS=head MPMS=rworker-park bash bench/slow-senders/run.sh   # smoke
#
# N (default 3000) slow clients per load; REPS (1) repetitions, each running every load on
# every MPM, the MPM order rotated each repetition; MPMS ("rworker-park event worker": the
# names of bench/lib.sh's mpm_load); LOADS ("head byte tls-hello tls-head"); FRESH (40);
# BACKLOG (4096); RWORKER_SO (target/release/libmod_mpm_rworker.so). One cell takes about
# 35 s (a TLS cell up to 25 s more: the handshakes, and a stop that may wait for its
# threads), so the default set about 8 minutes a repetition.
#
# Never run it beside another job: the fresh clients' latency is the figure. Servers stop
# by their own pidfile, each under its own temp ServerRoot and port.
set -euo pipefail
cd "$(dirname "$0")/../.."
N=${N:-3000}
REPS=${REPS:-1}
MPMS=${MPMS:-"rworker-park event worker"}
LOADS=${LOADS:-"head byte tls-hello tls-head"}
FRESH=${FRESH:-40}
BACKLOG=${BACKLOG:-4096}
RTO="RequestReadTimeout handshake=0 header=20-40,MinRate=500 body=20,MinRate=500"
SO=${RWORKER_SO:-$PWD/target/release/libmod_mpm_rworker.so}
[[ -f $SO ]] || { echo "build first: cargo build --release" >&2; exit 1; }
. bench/lib.sh
# Both ends need more than N descriptors: as root, raise the hard limit to the kernel's.
ulimit -Hn "$(cat /proc/sys/fs/nr_open)" 2>/dev/null || true
ulimit -n "$(ulimit -Hn)"
autogroup_off
RAW=$(mktemp /tmp/rw-senders-raw.XXXXXX)
CLIENT=bench/slow-senders/slow_senders.py

echo "# $(date -u +%FT%TZ) $(git rev-parse --short HEAD)$(git diff --quiet || echo +uncommitted) so=$(sha256sum "$SO" | cut -c1-12) N=$N REPS=$REPS FRESH=$FRESH, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), ulimit -n $(ulimit -n)"
echo "# $RTO; ListenBacklog $BACKLOG; Timeout 300; KeepAliveTimeout 5; TLS loads: HTTPS-only, mod_ssl with Debian's ssl.conf settings, ECDSA P-256 self-signed, $(openssl version | cut -d' ' -f1-2)"
mpms=($MPMS)
for rep in $(seq "$REPS"); do
  # Rotate the MPM order each repetition.
  k=$(( (rep - 1) % ${#mpms[@]} ))
  order=("${mpms[@]:k}" "${mpms[@]:0:k}")
  for load in $LOADS; do
    case $load in
      head|byte) tls= ;;
      tls-hello|tls-head) tls=tls ;;
      *) echo "unknown load $load (head byte tls-hello tls-head)" >&2; exit 1 ;;
    esac
    for mpm in "${order[@]}"; do
      bench_server senders "$(mpm_load "$mpm")" "ListenBacklog $BACKLOG
Timeout 300
KeepAliveTimeout 5
LoadModule reqtimeout_module /usr/lib/apache2/modules/mod_reqtimeout.so
$RTO
LoadModule status_module /usr/lib/apache2/modules/mod_status.so
<Location /server-status>
    SetHandler server-status
</Location>
LogLevel warn reqtimeout:info" $tls
      printf '<html><body>It works.</body></html>\n' > "$ROOT/htdocs/i.html"
      chmod a+r "$ROOT/htdocs/i.html"
      sleep 2
      before=$(rss_kb "$PID")
      python3 "$CLIENT" slow "$PORT" "$N" "$load" "$ROOT/ready" "$ROOT/stop" > "$ROOT/slow.out" 2> "$ROOT/slow.err" &
      slow=$!
      for _ in $(seq 900); do
        [[ -f $ROOT/ready ]] && break
        kill -0 "$slow" 2>/dev/null || break
        sleep 0.1
      done
      sleep 2
      with=$(rss_kb "$PID")
      curl -ks -m 5 "$SCHEME://127.0.0.1:$PORT/server-status?auto" > "$ROOT/status" 2>/dev/null &
      st=$!
      python3 "$CLIENT" fresh "$PORT" "$FRESH" /i.html $tls > "$ROOT/fresh.out" 2> "$ROOT/fresh.err"
      wait "$st" || true
      cut=$(grep -c AH01382 "$ROOT/logs/error.log" || true)
      touch "$ROOT/stop"
      wait "$slow" || true
      conn=$(grep -o 'connected=[0-9]*' "$ROOT/slow.out" | cut -d= -f2 || true)
      per=$(python3 -c "print(f'{($with - $before) / $conn:.1f}' if ${conn:-0} else '-')")
      line="rep=$rep load=$load mpm=$mpm $(cat "$ROOT/fresh.out") $(cat "$ROOT/slow.out") cut=$cut rss_before_kb=$before rss_with_kb=$with kb_per_slow=$per"
      echo "$line"
      status=$(grep -E '^(ConnsAsync|RWorker|BusyWorkers|IdleWorkers)' "$ROOT/status" | tr -d ' ' | tr '\n' ' ' || true)
      echo "    status: ${status:-(no answer within 5 s)}"
      echo "$line status: $status" >> "$RAW"
      for f in slow fresh; do
        [[ -s $ROOT/$f.err ]] && head -2 "$ROOT/$f.err" | sed "s/^/    $f client: /"
      done
      bench_stop
    done
  done
done

# The table: the median of each figure over the repetitions, per load and MPM.
python3 - "$RAW" "$N" "$FRESH" "$REPS" <<'PY'
import statistics
import sys
import textwrap

raw, n, fresh, reps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
cells = {}
for line in open(raw):
    head, _, status = line.partition(" status: ")
    kv = dict(x.split("=", 1) for x in head.split() if "=" in x)
    for x in status.split():
        k, _, v = x.partition(":")
        kv["st:" + k] = v
    cells.setdefault((kv["load"], kv["mpm"]), []).append(kv)


def med(rows, key, fmt="{:,.0f}"):
    vals = []
    for r in rows:
        try:
            vals.append(float(r[key]))
        except (KeyError, ValueError):
            pass
    return fmt.format(statistics.median(vals)) if vals else "-"


def shaken(rows):
    if not any("handshaken" in r for r in rows):
        return ""
    return f" ({med(rows, 'handshaken')} handshaken)"


names = {"rworker-park": "rworker (park)", "rworker": "rworker", "event": "stock event",
         "worker": "stock worker"}
loads = {"head": f"{n:,} head dribblers", "byte": f"{n:,} one-byte clients",
         "tls-hello": f"{n:,} stalled TLS handshakes", "tls-head": f"{n:,} TLS head dribblers"}
what = "medians of " + str(reps) + " runs" if reps > 1 else "one run per cell"
print("\n" + textwrap.fill(
    f"{what}; fresh clients: {fresh}, one every 0.5 s, 5 s limit each; p50 · p99 of the "
    "answered ones (ms, connect included, and for the TLS loads the handshake); slow clients "
    "still open and cut when the fresh phase ends (TLS head dribblers: and how many had "
    "finished their handshake when it began); RSS: the children's, before the slow clients "
    "and with them all connected.",
    92) + "\n")
print("| slow clients | MPM | fresh answered | p50 · p99 ms | slow still open | cut (AH01382) "
      "| children RSS before → with | per slow client |")
print("|---|---|---|---|---|---|---|---|")
for (load, mpm), rows in cells.items():
    print(
        f"| {loads.get(load, load)} | {names.get(mpm, mpm)} "
        f"| {med(rows, 'fresh_answered')} of {fresh} "
        f"| {med(rows, 'p50_ms', '{:,.1f}')} · {med(rows, 'p99_ms', '{:,.1f}')} "
        f"| {med(rows, 'open')} of {med(rows, 'connected')}{shaken(rows)} | {med(rows, 'cut')} "
        f"| {med(rows, 'rss_before_kb', '{:.0f}')} → {med(rows, 'rss_with_kb', '{:.0f}')} kB "
        f"| {med(rows, 'kb_per_slow', '{:.1f}')} kB |"
    )
print("\nserver-status?auto with all slow clients connected (medians; totals, not per child):\n")
for (load, mpm), rows in cells.items():
    keys = []
    for r in rows:
        keys += [k for k in r if k.startswith("st:") and "Child[" not in k and k not in keys]
    got = ", ".join(f"{k[3:]} {med(rows, k, '{:g}')}" for k in keys)
    print(f"- {loads.get(load, load)}, {names.get(mpm, mpm)}: {got or 'no answer within 5 s'}")
PY
rm -f "$RAW"
