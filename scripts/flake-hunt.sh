#!/usr/bin/env bash
# Hunt for flaky tests: run the whole suite RUNS times while every core is kept
# busy by a spinning process (as in CI, where five JVMs share two cores).
#
# Usage: scripts/flake-hunt.sh [RUNS] [LOAD]
#   RUNS  how many runs of the suite (default 20)
#   LOAD  spinning processes (default: one per core, `nproc`; 0 for none)
#   env FLAKE_HUNT_TEST_CMD   the command run each time (default: the README's
#         test command, `cargo test --workspace --all-features`); export the
#         SPARK_CONNECT_TEST_REMOTE* variables of .ci/run to include the
#         real-server tests, which are reported ignored without them.
#   env FLAKE_HUNT_RUN_TIMEOUT  seconds one run may take before it counts as
#         hung and is killed (default 1200)
# Logs go to target/flake-hunt/run-N.log; the summary names every failed test.
# Exit status: 0 when every run passed.
set -euo pipefail

RUNS="${1:-20}"
LOAD="${2:-$(nproc)}"
TEST_CMD="${FLAKE_HUNT_TEST_CMD:-cargo test --workspace --all-features}"
RUN_TIMEOUT="${FLAKE_HUNT_RUN_TIMEOUT:-1200}"

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
OUT="$ROOT/target/flake-hunt"
rm -rf "$OUT"
mkdir -p "$OUT"

# Build first, without load, so every run measures the tests and not the compiler.
$TEST_CMD --no-run >"$OUT/build.log" 2>&1 || { echo "build failed: $OUT/build.log" >&2; exit 1; }

spinners=()
stop_spinners() {
    for pid in "${spinners[@]}"; do kill "$pid" 2>/dev/null || true; done
}
trap stop_spinners EXIT
for _ in $(seq 1 "$LOAD"); do
    # A bounded spinner: it ends on its own after a day even if this script is killed hard.
    timeout 86400 sh -c 'while :; do :; done' &
    spinners+=("$!")
done

failed_runs=0
for run in $(seq 1 "$RUNS"); do
    log="$OUT/run-$run.log"
    start=$SECONDS
    if timeout --kill-after=30 "$RUN_TIMEOUT" $TEST_CMD >"$log" 2>&1; then
        status=ok
    else
        status="FAILED (exit $?)"
        failed_runs=$((failed_runs + 1))
    fi
    printf 'run %2d/%d: %s in %d s\n' "$run" "$RUNS" "$status" $((SECONDS - start))
    grep -E '^test .* FAILED$|^    [a-z_:]+$' "$log" | sed 's/^/    /' | sort -u || true
done

echo "$((RUNS - failed_runs))/$RUNS runs green (load: $LOAD spinning processes); logs in $OUT"
[ "$failed_runs" -eq 0 ]
