#!/usr/bin/env bash
# Upload benchmark: this crate's `create_dataframe` vs PySpark 4.3.0's
# `createDataFrame` of the same Arrow table (100 MiB: two int64 columns),
# against the same real Spark Connect server in the same run, alternating
# rust, pyspark, rust, ... Each run is a new process and a new session, so
# every run uploads everything (cached artifacts are kept per session).
# Prints the median times, throughputs and the ratio rust/pyspark; writes
# every JSON line to $UB_OUT/results.jsonl.
#
# Environment:
#   UB_REMOTE     use this server (sc://host:port) instead of starting one
#   UB_SERVER_NAME, UB_PORT  the server started otherwise (default ub, 15032)
#   UB_PAIRS      measured pairs (default 5), after UB_WARMUP warm-up pairs (default 2)
#   UB_ROWS       rows of the table (default 6553600: 100 MiB)
#   UB_OUT        output dir (default target/upload-bench/<timestamp>)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
NAME="${UB_SERVER_NAME:-ub}"
PORT="${UB_PORT:-15032}"
PAIRS="${UB_PAIRS:-5}"
WARMUP="${UB_WARMUP:-2}"
ROWS="${UB_ROWS:-6553600}"
OUT="${UB_OUT:-$ROOT/target/upload-bench/$(date -u +%Y%m%dT%H%M%SZ)}"
mkdir -p "$OUT"
RESULTS="$OUT/results.jsonl"
: >"$RESULTS"
log() { printf '[upload-bench] %s\n' "$*" >&2; }

SERVER_STARTED=0
cleanup() { if [ "$SERVER_STARTED" = 1 ]; then "$ROOT/scripts/spark-server.sh" stop "$NAME" || true; fi; }
trap cleanup EXIT
trap 'exit 130' INT TERM

eval "$("$ROOT/scripts/spark-install.sh" | tail -n1)"   # sets SPARK_HOME
PY="${SPARK_CONNECT_VENV:-$HOME/.cache/spark-connect-retry/venv-pyspark-4.3.0}/bin/python"

log "building the bench (release)"
(cd "$ROOT" && cargo build --release --bench upload --message-format=json) >"$OUT/build.json"
BENCH="$("$PY" - "$OUT/build.json" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "upload" and m.get("executable"):
        print(m["executable"])
PY
)"
[ -x "$BENCH" ] || { log "no bench executable"; exit 1; }

TABLE="$OUT/table.arrow"
"$PY" "$ROOT/scripts/upload_bench_pyspark.py" --make "$TABLE" --rows "$ROWS"

if [ -n "${UB_REMOTE:-}" ]; then
    REMOTE="$UB_REMOTE"
else
    SPARK_CONNECT_DRIVER_MEMORY="${SPARK_CONNECT_DRIVER_MEMORY:-2g}" \
        "$ROOT/scripts/spark-server.sh" start "$NAME" "$PORT"
    SERVER_STARTED=1
    REMOTE="sc://127.0.0.1:$PORT"
fi

run_one() {
    local client="$1" tag="$2" warm="$3" line
    if [ "$client" = rust ]; then
        line="$("$BENCH" --remote "$REMOTE" --file "$TABLE")"
    else
        line="$("$PY" "$ROOT/scripts/upload_bench_pyspark.py" --remote "$REMOTE" --file "$TABLE" 2>"$OUT/py-$tag.err")"
    fi
    "$PY" -c 'import json,sys; d=json.loads(sys.argv[1]); d["warmup"]=sys.argv[2]=="1"; d["run"]=sys.argv[3]; print(json.dumps(d))' \
        "$line" "$warm" "$tag" | tee -a "$RESULTS" >&2
}

for i in $(seq $((1 - WARMUP)) "$PAIRS"); do
    warm=0; [ "$i" -le 0 ] && warm=1
    run_one rust "$i-rust" "$warm"
    run_one pyspark "$i-py" "$warm"
done

{
    echo "machine: $(nproc) cpus, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'); load at end: $(cat /proc/loadavg)"
    echo "table: $ROWS rows x 2 int64; warm-up pairs: $WARMUP; pairs: $PAIRS"
    "$PY" - "$RESULTS" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
m = [r for r in rows if not r["warmup"]]
med = lambda c, k: statistics.median(r[k] for r in m if r["client"] == c)
rw, pw = med("rust", "wall_ms"), med("pyspark", "wall_ms")
print(f"rust     median {rw:8.1f} ms  {med('rust', 'mib_per_s'):6.1f} MiB/s")
print(f"pyspark  median {pw:8.1f} ms  {med('pyspark', 'mib_per_s'):6.1f} MiB/s")
print(f"ratio rust/pyspark (time): {rw / pw:.3f}  (< 1: rust faster)")
print("runs (ms): " + " ".join(f"{r['client'][:2]}{r['wall_ms']:.0f}" for r in m))
PY
} | tee "$OUT/summary.txt"
log "results in $OUT"
