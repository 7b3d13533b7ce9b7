#!/bin/sh
# Model-check rworker-queue with loom (see queue/README.md, "Model checking").
# Extra arguments go to the test binary, e.g. `queue/loom.sh pool_stack_aba`.
# LOOM_MAX_PREEMPTIONS overrides the default bound of 3 set in tests/loom.rs.
set -eu
cd "$(dirname "$0")/.."
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
    exec cargo test -p rworker-queue --release --test loom -- --test-threads=1 "$@"
