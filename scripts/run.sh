#!/usr/bin/env bash
# Builds rworker, builds and installs its Debian package libapache2-mpm-rworker (the module
# in $(apxs -q LIBEXECDIR), mpm_rworker.load/.conf in /etc/apache2/mods-available; the
# system apache2 keeps its MPM), then starts a private demo httpd with the rworker MPM on
# 127.0.0.1. As root:
#
#   bash scripts/run.sh [DEMO_DIR]          # default DEMO_DIR=/tmp/rworker-demo
#   PORT=8081 bash scripts/run.sh           # another port (default 8080)
#
# Stop the demo with: apache2 -f DEMO_DIR/httpd.conf -k stop
set -euo pipefail

cd "$(dirname "$0")/.."
REPO=$(pwd)
DEMO=${1:-/tmp/rworker-demo}
PORT=${PORT:-8080}
APACHE2=/usr/sbin/apache2

if [[ $(id -u) -ne 0 ]]; then
    echo "run.sh: run as root (it installs Debian packages); as another user: sudo bash scripts/run.sh" >&2
    exit 1
fi
bash scripts/setup-deps.sh
if [[ -x "$HOME/.cargo/bin/cargo" ]]; then
    PATH="$HOME/.cargo/bin:$PATH"
fi

cargo build --release

# Install through the package, so that apt can upgrade and remove it cleanly later. An
# upgrade keeps an edited mpm_rworker.conf (confold: never ask, keep the admin's version).
DEB=$(bash scripts/build-deb.sh | tail -n 1)
DEBIAN_FRONTEND=noninteractive apt-get install -y -o DPkg::Lock::Timeout=120 \
    -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold "$DEB"
MODULE="$(apxs -q LIBEXECDIR)/mod_mpm_rworker.so"
[[ -f $MODULE ]] || { echo "run.sh: $MODULE is missing after installing $DEB" >&2; exit 1; }

CONF="$DEMO/httpd.conf"
PIDFILE="$DEMO/run/httpd.pid"

# Stop a previous demo, by its own pidfile and config (never by process name).
if [[ -f "$PIDFILE" ]]; then
    old=$(cat "$PIDFILE" 2>/dev/null || true)
    if [[ -n "$old" && -r "/proc/$old/cmdline" ]] && tr '\0' ' ' <"/proc/$old/cmdline" | grep -qF "$CONF"; then
        echo "stopping the previous demo (pid $old)"
        "$APACHE2" -f "$CONF" -k stop || true
        for _ in $(seq 100); do
            [[ -e "/proc/$old" ]] || break
            sleep 0.1
        done
        if [[ -e "/proc/$old" ]]; then
            echo "run.sh: previous demo (pid $old) did not stop within 10 s" >&2
            exit 1
        fi
    fi
    rm -f "$PIDFILE"
fi

if (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then
    echo "run.sh: something already listens on 127.0.0.1:$PORT; choose another with PORT=..." >&2
    exit 1
fi

mkdir -p "$DEMO/run" "$DEMO/logs" "$DEMO/htdocs"
cat >"$DEMO/htdocs/index.html" <<HTML
<!DOCTYPE html>
<html><head><title>rworker</title></head>
<body><h1>It works, with the rworker MPM.</h1>
<p>See <a href="/server-status">/server-status</a>.</p></body></html>
HTML
head -c $((1024 * 1024)) /dev/zero >"$DEMO/htdocs/1m.bin"
chmod 0755 "$DEMO" "$DEMO/htdocs"
chmod 0644 "$DEMO/htdocs/"*
sed -e "s#@ROOT@#$DEMO#g" -e "s#@PORT@#$PORT#g" -e "s#@MODULE@#$MODULE#g" \
    "$REPO/apache-conf/sample/httpd.conf.in" >"$CONF"

"$APACHE2" -f "$CONF" -t
if ! "$APACHE2" -f "$CONF" -k start; then
    echo "run.sh: apache2 did not start; $DEMO/logs/error.log:" >&2
    tail -n 30 "$DEMO/logs/error.log" >&2 || true
    exit 1
fi

URL="http://127.0.0.1:$PORT/"
for _ in $(seq 100); do
    curl -fsS -o /dev/null "$URL" 2>/dev/null && break
    sleep 0.1
done
if ! curl -fsS -o /dev/null "$URL"; then
    echo "run.sh: the demo server does not answer on $URL; $DEMO/logs/error.log:" >&2
    tail -n 30 "$DEMO/logs/error.log" >&2 || true
    "$APACHE2" -f "$CONF" -k stop || true
    exit 1
fi

cat <<MSG

rworker demo is running (parent pid $(cat "$PIDFILE")):
    $URL
    ${URL}server-status?auto
logs:   $DEMO/logs/error.log, $DEMO/logs/access.log
stop:   $APACHE2 -f $CONF -k stop
MSG
