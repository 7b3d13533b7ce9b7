# What the bench/ scripts share (sourced, not run): a private httpd on 127.0.0.1 with its
# own ServerRoot under /tmp, started and stopped by its own pidfile, and the run's settings.
#
#   . "$(dirname "$0")/../lib.sh"
#   bench_server name mpm-line "extra lines" [tls]   # sets ROOT PORT PID SCHEME; starts it
#   bench_stop                            # stops it by its pidfile, removes ROOT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# Sum of VmRSS (kB) over a parent's children.
rss_kb() {
    local sum=0 c
    for c in $(pgrep -P "$1"); do
        sum=$(( sum + $(awk '/^VmRSS:/ {print $2}' "/proc/$c/status" 2>/dev/null || echo 0) ))
    done
    echo "$sum"
}

# Autogroup off for the run, as rworker-ab does (bench/README.md, "Autogroup"): with it on,
# the server's session and the client's each get half of the CPUs and a run falls at random
# into a client-bound or a server-bound regime. AUTOGROUP=keep leaves it; restored on exit.
autogroup_off() {
    local ag=/proc/sys/kernel/sched_autogroup_enabled
    if [[ ${AUTOGROUP:-off} != keep && -w $ag ]]; then
        AG_WAS=$(cat "$ag")
        trap 'echo "$AG_WAS" > /proc/sys/kernel/sched_autogroup_enabled' EXIT
        echo 0 > "$ag"
    fi
}

# The LoadModule line(s) for an MPM name: rworker, rworker-park, rworker-thread (the build
# at $SO), rworker-base ($BASE_SO), or a stock MPM (worker, event).
mpm_load() {
    case $1 in
        rworker) echo "LoadModule mpm_rworker_module $SO" ;;
        rworker-park) printf 'LoadModule mpm_rworker_module %s\nRWorkerKeepAlive park\n' "$SO" ;;
        rworker-thread) printf 'LoadModule mpm_rworker_module %s\nRWorkerKeepAlive thread\n' "$SO" ;;
        rworker-base) echo "LoadModule mpm_rworker_module ${BASE_SO:?BASE_SO names the other build}" ;;
        event|worker) echo "LoadModule mpm_${1}_module /usr/lib/apache2/modules/mod_mpm_${1}.so" ;;
        *) echo "unknown MPM $1" >&2; return 1 ;;
    esac
}

# bench_server NAME LOAD EXTRA [tls]: a private server (temp dir named after NAME) with
# Debian's sizing unless EXTRA says otherwise (later lines win), a 1-byte /1b, started; sets
# ROOT PORT PID SCHEME. With `tls` its one listener speaks only TLS (an HTTPS-only site,
# SCHEME https): `Listen ... https`, mod_ssl and mod_socache_shmcb with the settings of
# Debian's ssl.conf (session cache, no session tickets, its ciphers and protocols), and a
# vhost with SSLEngine on and a self-signed ECDSA P-256 certificate for localhost, made
# for this server by the openssl CLI under ROOT/tls.
bench_server() {
    local name=$1 load=$2 extra=$3 tls=${4:-} listen
    ROOT=$(mktemp -d "/tmp/rw-$name.XXXXXX"); PORT=$(free_port); SCHEME=http
    mkdir -p "$ROOT"/{run,logs,htdocs}; printf x > "$ROOT/htdocs/1b"; chmod -R a+rX "$ROOT"
    listen="Listen 127.0.0.1:$PORT"
    if [[ $tls == tls ]]; then
        SCHEME=https
        mkdir -p "$ROOT/tls"
        openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
            -subj /CN=localhost -addext subjectAltName=DNS:localhost,IP:127.0.0.1 \
            -addext basicConstraints=critical,CA:FALSE \
            -keyout "$ROOT/tls/key.pem" -out "$ROOT/tls/cert.pem" 2>/dev/null
        listen="Listen 127.0.0.1:$PORT https
LoadModule socache_shmcb_module /usr/lib/apache2/modules/mod_socache_shmcb.so
LoadModule ssl_module /usr/lib/apache2/modules/mod_ssl.so
SSLSessionCache shmcb:$ROOT/run/ssl_scache(512000)
SSLSessionCacheTimeout 300
SSLCipherSuite HIGH:!aNULL
SSLProtocol all -SSLv3
SSLSessionTickets off
<VirtualHost 127.0.0.1:$PORT>
    SSLEngine on
    SSLCertificateFile $ROOT/tls/cert.pem
    SSLCertificateKeyFile $ROOT/tls/key.pem
</VirtualHost>"
    fi
    cat > "$ROOT/httpd.conf" <<CONF
ServerRoot $ROOT
PidFile $ROOT/run/httpd.pid
ScoreBoardFile $ROOT/run/scoreboard
Mutex file:$ROOT/run default
$load
LoadModule authz_core_module /usr/lib/apache2/modules/mod_authz_core.so
ServerName localhost
$listen
User www-data
Group www-data
DocumentRoot $ROOT/htdocs
<Directory $ROOT/htdocs>
    Require all granted
</Directory>
ErrorLog $ROOT/logs/error.log
LogLevel warn
KeepAlive On
StartServers 2
MinSpareThreads 25
MaxSpareThreads 75
ThreadsPerChild 25
ServerLimit 16
MaxRequestWorkers 150
$extra
CONF
    apache2 -f "$ROOT/httpd.conf" -k start
    for _ in $(seq 100); do curl -kfs -o /dev/null "$SCHEME://127.0.0.1:$PORT/1b" && break; sleep 0.1; done
    PID=$(cat "$ROOT/run/httpd.pid")
}

# Stops the server of bench_server by its pidfile and waits for the parent; if it has not
# ended within 20 s, SIGKILLs exactly that parent and its children (a server stuck in
# its threads must not leave the next cell beside it, nor hold a script forever). Prints the
# error log's warnings and worse (GREP: a pattern of lines to show instead), removes ROOT
# unless KEEP is set.
bench_stop() {
    apache2 -f "$ROOT/httpd.conf" -k stop 2>/dev/null || true
    for _ in $(seq 200); do kill -0 "$PID" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$PID" 2>/dev/null; then
        echo "    stop: pid $PID still running 20 s after -k stop; SIGKILL to it and its children"
        kill -KILL $(pgrep -P "$PID") "$PID" 2>/dev/null || true
        for _ in $(seq 50); do kill -0 "$PID" 2>/dev/null || break; sleep 0.1; done
    fi
    grep -vE 'AH00558' "$ROOT/logs/error.log" | grep -E "${GREP:-error|warn|emerg|crit}" \
        | sort | uniq -c | sort -rn | head -3 | sed 's/^/    log: /' || true
    [[ -n ${KEEP:-} ]] && echo "kept $ROOT" || rm -rf "$ROOT"
}
