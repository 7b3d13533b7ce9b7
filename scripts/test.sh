#!/usr/bin/env bash
# Builds rworker and runs every test: unit tests, the integration tests in tests/ (each
# starts a private httpd on 127.0.0.1 with the MPM under test) and the loom model checks.
#
#   bash scripts/test.sh                               # as root (else: sudo bash scripts/test.sh)
#   RWORKER_TEST_MPM=worker bash scripts/test.sh       # same tests on the stock worker MPM
#
# rworker's default keep-alive mode, park, runs every integration test; the thread pass
# runs the serving and lifecycle tests again with RWorkerKeepAlive thread, the listener
# pass with its listener thread.
#
# Runs as root: the tests start httpd, which switches its children to www-data, and
# tests/package.rs installs and removes the Debian package.
set -euo pipefail

cd "$(dirname "$0")/.."

bash scripts/setup-deps.sh
if [[ -x "$HOME/.cargo/bin/cargo" ]]; then
    PATH="$HOME/.cargo/bin:$PATH"
fi

echo "== cargo build --release"
cargo build --release

# Every cargo run below is tee'd into one log; at the end its `test result:` lines are
# summed per suite into one line saying what ran. A failing suite does not stop the others
# (--no-fail-fast, as inside each cargo run); the script fails at the end if any did.
LOG=$(mktemp -t rworker-test.XXXXXX.log)
FAILED_RUNS=()
# `suite NAME CMD...`: runs CMD, its output tee'd into $LOG between two marker lines.
suite() {
    local name=$1
    shift
    echo "@@suite $name" >>"$LOG"
    if ! "$@" 2>&1 | tee -a "$LOG"; then
        FAILED_RUNS+=("$name")
    fi
    echo "@@end" >>"$LOG"
}

# Two test threads: the load tests run ab/wrk against their own servers, and more of them
# at once on a 2-core machine only measure the scheduler.
echo "== cargo test --release --workspace (MPM under test: ${RWORKER_TEST_MPM:-rworker}; rworker parks, its default)"
suite default cargo test --release --workspace --no-fail-fast -- --test-threads 2

# The tests that serve and restart again with the stock worker's keep-alive
# (RWorkerKeepAlive thread; the default pass above parks, the default mode).
if [[ "${RWORKER_TEST_MPM:-rworker}" == rworker ]]; then
    echo "== the same serving, lifecycle, graceful-restart, process-management and panic tests with RWorkerKeepAlive thread"
    suite thread env RWORKER_TEST_KEEPALIVE=thread cargo test --release --no-fail-fast \
        --test serve --test lifecycle --test load --test status --test graceful \
        --test process_management --test panic -- --test-threads 2
fi

# And with the listener thread's hand-off (RWorkerAccept listener, which applies with
# RWorkerKeepAlive thread; otherwise idle workers accept where the child has one
# listening socket, as in these tests).
if [[ "${RWORKER_TEST_MPM:-rworker}" == rworker ]]; then
    echo "== the same serving, lifecycle and graceful-restart tests with RWorkerKeepAlive thread and RWorkerAccept listener"
    suite listener env RWORKER_TEST_KEEPALIVE=thread RWORKER_TEST_ACCEPT=listener cargo test --release --no-fail-fast \
        --test serve --test lifecycle --test load --test status --test graceful -- --test-threads 2
fi

if [[ -f queue/loom.sh ]]; then
    echo "== loom model checks (queue/loom.sh)"
    suite loom bash queue/loom.sh
fi

# What ran, in one line, then the total as a plain 'N passed, M failed' line. cargo names each test binary before running it (`Running unittests
# ...`, `Running tests/serve.rs ...`, `Doc-tests ...`) and ends it with `test result: ok.
# N passed; M failed; ...`: unit tests and doc-tests count as unit, tests/package.rs as
# package, every other tests/ binary (of any workspace member) as integration; the
# integration total adds the thread and listener runs, shown apart in the brackets.
SUMMARY=$(awk '
    /^@@suite / { suite = $2; kind = ""; next }
    /^@@end/ { suite = ""; next }
    /^ *Running unittests / || /^ *Doc-tests / { kind = "unit"; next }
    /^ *Running tests\/package\.rs / { kind = "package"; next }
    /^ *Running / { kind = "integration"; next }
    /^test result: / {
        p = 0; f = 0
        for (i = 1; i <= NF; i++) {
            if ($(i) ~ /^passed;?$/) p = $(i - 1)
            if ($(i) ~ /^failed;?$/) f = $(i - 1)
        }
        k = (suite == "default") ? kind : suite
        if (k == "") k = "integration"
        pass[k] += p; fail += f
    }
    END {
        printf "test.sh: unit %d passed; integration %d passed (default park %d, thread %d, listener %d); ", \
            pass["unit"], pass["integration"] + pass["thread"] + pass["listener"], \
            pass["integration"], pass["thread"], pass["listener"]
        printf "package %d passed; loom %d models passed; %d failed\n", \
            pass["package"], pass["loom"], fail
        total = pass["unit"] + pass["integration"] + pass["thread"] + pass["listener"] + pass["package"] + pass["loom"]
        printf "test.sh: %d passed, %d failed\n", total, fail
    }' "$LOG")
rm -f "$LOG"
if ((${#FAILED_RUNS[@]})); then
    echo "test.sh: failing runs: ${FAILED_RUNS[*]}"
    echo "$SUMMARY"
    exit 1
fi
echo "$SUMMARY"
