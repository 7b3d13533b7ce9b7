#!/usr/bin/env bash
# Builds rworker against another httpd 2.4, one already installed into a prefix, and runs
# against that httpd the integration suite's serving, lifecycle, graceful-restart and park
# tests and the differential harness's fast subset (that release's own event and worker
# MPMs as the reference). docs/build.md says how to build and load rworker for another
# httpd; docs/tests.md lists what each suite checks.
#
#   sudo bash scripts/other-httpd.sh /opt/httpd-2.4.58          # the prefix (its bin/apxs)
#   sudo bash scripts/other-httpd.sh /opt/httpd-2.4.58/bin/apxs # or its apxs
#
# It does not build httpd. The httpd must have its MPMs as modules (configure
# --enable-mpms-shared=all: mod_mpm_event.so is the reference) and, as modules or compiled
# in, unixd, authz_core, mime, dir, status, headers, reqtimeout, socache_shmcb, ssl, http2
# (the TLS, h2 and difftest cases), reflector (difftest) and dialup (park_modules).
#
# Environment:
#   APR_CONFIG              the APR the httpd was built with (default: what its apxs says)
#   CARGO_TARGET_DIR        where this build goes (default target/httpd-<release>, apart
#                           from the default build, which stays Debian's)
#   OTHER_HTTPD_TESTS       the tests/ suites to run (default: serve lifecycle graceful park
#                           park_modules)
#   OTHER_HTTPD_DIFFTEST=0  skip the differential harness
#
# Runs as root: httpd switches its children to www-data. Prints one line per suite
# ("serve: 10 passed, 0 failed") and exits 1 if any failed; the whole output is in
# $CARGO_TARGET_DIR/other-httpd.log.
set -euo pipefail

cd "$(dirname "$0")/.."

if [[ $# -ne 1 ]]; then
    echo "usage: $0 PREFIX|APXS   (an installed httpd 2.4: PREFIX/bin/apxs)" >&2
    exit 2
fi
if [[ -d "$1" ]]; then
    APXS="$1/bin/apxs"
else
    APXS="$1"
fi
if [[ ! -x "$APXS" ]]; then
    echo "$0: no apxs at $APXS" >&2
    exit 2
fi
if [[ $(id -u) -ne 0 ]]; then
    echo "$0: run as root (the tests start httpd, which switches its children to www-data)" >&2
    exit 2
fi
if [[ -x "$HOME/.cargo/bin/cargo" ]]; then
    PATH="$HOME/.cargo/bin:$PATH"
fi

# What the httpd is and where its parts are: all from its apxs.
HTTPD="$("$APXS" -q SBINDIR)/$("$APXS" -q TARGET)"
MODULES=$("$APXS" -q LIBEXECDIR)
APR_CONFIG=${APR_CONFIG:-$("$APXS" -q APR_CONFIG)}
RELEASE=$("$HTTPD" -v | sed -n 's|^Server version: [^/]*/\([0-9.]*\).*|\1|p')
if [[ -z "$RELEASE" ]]; then
    echo "$0: $HTTPD -v does not name a release" >&2
    exit 2
fi
if [[ ! -f "$MODULES/mod_mpm_event.so" ]]; then
    echo "$0: no $MODULES/mod_mpm_event.so: the reference MPMs must be modules" \
        "(configure httpd with --enable-mpms-shared=all)" >&2
    exit 2
fi
export APXS APR_CONFIG
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target/httpd-$RELEASE}
export RWORKER_TEST_APACHE2=$HTTPD RWORKER_TEST_MODULES=$MODULES
mkdir -p "$CARGO_TARGET_DIR"
LOG=$CARGO_TARGET_DIR/other-httpd.log
: >"$LOG"

echo "== httpd $RELEASE: $HTTPD, modules in $MODULES, APR $APR_CONFIG"
echo "== cargo build --release (APXS=$APXS, into $CARGO_TARGET_DIR)"
cargo build --release 2>&1 | tee -a "$LOG"
# The module's own check, as an administrator would meet it first.
SO=$CARGO_TARGET_DIR/release/libmod_mpm_rworker.so
"$HTTPD" -f /dev/null -C "LoadModule mpm_rworker_module $SO" -C "ServerName localhost" \
    -C "ErrorLog /dev/stderr" -t 2>&1 |
    tee -a "$LOG" || true

# `suite NAME CMD...`: runs CMD into the log and prints NAME's passed and failed counts,
# summed over its `test result:` lines.
FAILED=()
suite() {
    local name=$1 out rc=0
    shift
    echo "== $name: $*"
    out=$(mktemp)
    "$@" >"$out" 2>&1 || rc=$?
    cat "$out" >>"$LOG"
    awk -v name="$name" -v rc="$rc" '
        /^test result:/ { p += $4; f += $6 }
        END { printf "%s: %d passed, %d failed%s\n", name, p, f, (rc != 0 && f == 0) ? " (did not run: see the log)" : "" }
    ' "$out"
    grep -E '^test .* FAILED$' "$out" || true
    rm -f "$out"
    [[ $rc -eq 0 ]] || FAILED+=("$name")
}

for t in ${OTHER_HTTPD_TESTS:-serve lifecycle graceful park park_modules}; do
    suite "$t" cargo test --release --no-fail-fast --test "$t" -- --test-threads 2
done
if [[ "${OTHER_HTTPD_DIFFTEST:-1}" != 0 ]]; then
    suite difftest cargo test --release -p rworker-diff --test fast -- --nocapture
fi

echo "== httpd $RELEASE: log in $LOG"
if [[ ${#FAILED[@]} -gt 0 ]]; then
    echo "failed: ${FAILED[*]}"
    exit 1
fi
