#!/usr/bin/env bash
# Plays N seeds of the deterministic simulation (crates/spark-connect-sim) in
# the `sim` cargo profile (optimised, built faster than `release`), split into
# shards run at once (one per core by default), and fails on any failing seed,
# printing its violations and its replay command.
#
#   scripts/sim-search.sh [N] [FIRST]     # seeds FIRST..FIRST+N (default 100000, 0)
#   SIM_SHARDS=4 scripts/sim-search.sh 1000000
#
# Prints the build time, the run time and the seeds per second achieved.
set -euo pipefail

N="${1:-100000}"
FIRST="${2:-0}"
SHARDS="${SIM_SHARDS:-$(nproc)}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
TARGET="${CARGO_TARGET_DIR:-target}"
OUT="$TARGET/sim-search"
mkdir -p "$OUT"

now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }

t0="$(now)"
cargo test --profile sim -p spark-connect-sim --test sim --no-run 2>&1 | tee "$OUT/build.log"
bin="$(sed -n 's/.*Executable tests\/sim.rs (\(.*\))$/\1/p' "$OUT/build.log" | tail -n1)"
[ -n "$bin" ] || { echo "sim-search: no test binary in the build output" >&2; exit 1; }
t1="$(now)"
echo "sim-search: built in $(secs "$t0" "$t1") s: $bin"

per=$(( (N + SHARDS - 1) / SHARDS ))
pids=()
for ((i = 0; i < SHARDS; i++)); do
    a=$(( FIRST + i * per ))
    b=$(( a + per ))
    (( b > FIRST + N )) && b=$(( FIRST + N ))
    (( a >= b )) && continue
    SIM_SEEDS="$a..$b" "$bin" sample >"$OUT/shard-$i.log" 2>&1 &
    pids+=($!)
    echo "sim-search: shard $i: seeds $a..$b (pid $!)"
done
failed=0
for pid in "${pids[@]}"; do
    wait "$pid" || failed=1
done
t2="$(now)"

for ((i = 0; i < ${#pids[@]}; i++)); do
    # The failures (schedule, violations, shrunk schedule, replay), then the summary.
    sed -n '/^FAILED/,/replay:/p' "$OUT/shard-$i.log"
    grep -E 'schedules in|panicked' "$OUT/shard-$i.log" | sed "s/^/sim-search: shard $i: /" || true
done
run="$(secs "$t1" "$t2")"
rate="$(awk -v n="$N" -v a="$t1" -v b="$t2" 'BEGIN { printf "%.0f", n / (b - a) }')"
echo "sim-search: $N seeds in $run s on $SHARDS shards ($rate seeds/s); build $(secs "$t0" "$t1") s"
if [ "$failed" -ne 0 ]; then
    echo "sim-search: FAILED; replay each failing seed with the command printed after it" >&2
    echo "sim-search: (or in this profile: SIM_SEED=N cargo test --profile sim -p spark-connect-sim --test sim)" >&2
    exit 1
fi
