#!/usr/bin/env bash
# Builds rworker and runs every test: unit tests, the integration tests in tests/ (each
# starts a private httpd on 127.0.0.1 with the MPM under test) and the loom model checks.
#
#   bash scripts/test.sh                               # as root (else: sudo bash scripts/test.sh)
#   RWORKER_TEST_MPM=worker bash scripts/test.sh       # same tests on the stock worker MPM
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

# Two test threads: the load tests run ab/wrk against their own servers, and more of them
# at once on a 2-core machine only measure the scheduler.
echo "== cargo test --release --workspace (MPM under test: ${RWORKER_TEST_MPM:-rworker})"
cargo test --release --workspace --no-fail-fast -- --test-threads 2

# The tests that serve and restart again, with parked connections (RWorkerKeepAlive park).
if [[ "${RWORKER_TEST_MPM:-rworker}" == rworker ]]; then
    echo "== the same serving and lifecycle tests with RWorkerKeepAlive park"
    RWORKER_TEST_KEEPALIVE=park cargo test --release --no-fail-fast \
        --test serve --test lifecycle --test load --test status -- --test-threads 2
fi

# And with the listener thread's hand-off (RWorkerAccept listener; the default lets idle
# workers accept where the child has one listening socket, as in these tests).
if [[ "${RWORKER_TEST_MPM:-rworker}" == rworker ]]; then
    echo "== the same serving and lifecycle tests with RWorkerAccept listener"
    RWORKER_TEST_ACCEPT=listener cargo test --release --no-fail-fast \
        --test serve --test lifecycle --test load --test status -- --test-threads 2
fi

if [[ -f queue/loom.sh ]]; then
    echo "== loom model checks (queue/loom.sh)"
    bash queue/loom.sh
fi
