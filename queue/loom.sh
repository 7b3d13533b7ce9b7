#!/bin/sh
# Model-check rworker-queue with loom (see queue/README.md, "Model checking").
# Extra arguments go to the test binary, e.g. `queue/loom.sh pool_stack_aba`.
# LOOM_MAX_PREEMPTIONS overrides the default bounds set in tests/loom.rs and tests/loom_inbox.rs.
#
# Runs twice: every model in the spinning regime (pushes rely on the wake token alone), then the
# FdQueue models again in the "waiters sleep long" regime: no spinning, and a push that relied on a wake
# in flight may wake one more sleeper (RWORKER_LOOM_SLEEP_LONG=1, see adaptive_spin.rs).
# The parking models (tests/loom_park.rs: claim word, timeout FIFOs, a park against its expiry,
# the park/stop handshake and a weaker fence that loses it, wake-all on stop, a listening
# socket's close, serial changes, the connection budget) read no regime; they run once.
set -eu
cd "$(dirname "$0")/.."
run() {
    test=$1
    shift
    RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
        cargo test -p rworker-queue --release --test "$test" -- --test-threads=1 "$@"
}
echo "== loom: spinning regime (wake token only)"
RWORKER_LOOM_SLEEP_LONG=0 run loom "$@"
echo "== loom: parking models (claim word, timeout FIFOs, park against expiry, park/stop handshake, wake-all on stop, socket close, serial changes, connection budget)"
run loom_park "$@"
echo "== loom: waiters sleep long (no spinning, extra wakes on), FdQueue models"
if [ "$#" -eq 0 ]; then
    set -- push_ two_p relied_on capacity_one interrupt_all term_racing_push term_with
fi
RWORKER_LOOM_SLEEP_LONG=1 run loom "$@"
