#!/usr/bin/env bash
# Side-by-side benchmark: this crate's client vs PySpark 4.3.0's own Connect
# client, the official Rust client (apache-spark-connect 4.2.0, built apart
# from this crate, see scripts/side_by_side_official.rs) and a raw tonic
# ExecutePlan drain (no decoding: the floor any client can reach), plain
# (`raw`) and as a client must (`raw_client`: reattachable, payloads kept),
# against the same real Spark Connect server in the same run, runs
# alternating rust, python, raw, raw_client, official, rust, ... per case (so
# load drift hits all alike; the raw arms and official have no cuts10m arm).
# Prints per case each arm's median and the ratios rust/pyspark, raw/rust,
# raw_client/rust, rust/official (and rust/base with SBS_BASE_BENCH),
# plus the machine; writes every JSON line to $SBS_OUT/results.jsonl.
#
# Usage: scripts/side-by-side.sh [CASE ...]      (default: arrow10m first_batch cuts10m)
#
# Cases: arrow10m, first_batch, cuts10m (10M rows of `id, id*2`), and wide2m,
# wide200k: 2M / 200k rows that compress the way real tables do (an id, a
# seeded random int, a date and sha2's 64-character hex: ~170 MB at 2M
# rows). Only this crate's client and PySpark run the wide cases and those
# with a codec. A name is BASE[_CODEC][_nginx][_bwN][_rttN], the parts as below.
#
# A case name may end in `_zstd`, `_lz4` or `_none` (before any `_nginx`,
# `_bwN`, `_rttN`: wide2m_zstd_bw100_rtt20): both clients then ask Spark to
# compress result batches with that codec, ours by `;result_compression=CODEC`
# in the connection string, PySpark by spark.conf.set of
# spark.sql.execution.arrow.compression.codec (both before the timer).
# Without it the server's default (none) stays and nothing is set.
#
# A case name may end in `_bN` (before any codec: arrow10m_b100000_zstd):
# every arm then asks for N rows per Arrow batch, ours by
# `;result_batch_rows=N`, PySpark by spark.conf.set of
# spark.sql.execution.arrow.maxRecordsPerBatch, the raw arms by a Config
# call (all before the timer); the official client sits it out (it has no
# such setting). Without it each arm keeps its own default: ours asks for
# 100,000 rows, PySpark and the raw arms leave Spark's 10,000.
#
# A case name may end in `_bwN` (before any `_rttN`: wide2m_bw100_rtt20):
# every arm of that case then goes through the fault proxy limited to N
# Mbit/s each way (`fault_proxy --bandwidth-mbps N`: a token bucket per
# direction in user space, no `tc`).
#
# A case name may end in `_rttN` (e.g. arrow10m_rtt40): every arm of that case
# then goes through the fault proxy with a one-way delay of N/2 ms (a round
# trip of N ms that does not limit throughput; see docs/wide-area.md).
#
# A case name may end in `_nginx` (before any `_rttN`: arrow10m_nginx,
# cuts10m_nginx, arrow10m_nginx_rtt40): every arm of that case then goes
# through nginx with TLS (scripts/proxies.sh, started once for the run in
# front of the server: port SBS_PROXY_BASE, `grpc_pass`, a throwaway CA made
# at start), and the fault proxy, when the case has one, sits between the
# client and nginx. This crate's client and the raw arms trust the CA by
# the connection string (`;use_ssl=true;tls_ca_file=CA`), PySpark by grpc's
# GRPC_DEFAULT_SSL_ROOTS_FILE_PATH=CA with `;use_ssl=true`. The official client
# sits those cases out: it is built here without its `tls` feature, and has
# no setting for a CA (only the platform's roots). The summary then also
# prints, per arm, the nginx case's median over the direct one's.
#
# Environment:
#   SBS_SERVER       spark (default: Spark Connect 4.3.0) or sail (Sail 0.7.2, through
#                    scripts/sail-server.sh; same cases, same clients)
#   SBS_SERVER_NAME  server name for scripts/spark-server.sh (default sbs; CI uses ci-*)
#   SBS_PORT         server port (default 15010; CI uses 15002-15006)
#   SBS_PAIRS        measured pairs per case, after the warm-up pairs (default 5)
#   SBS_WARMUP       warm-up pairs per case, not counted (default 3: the server's JIT
#                    needs a few 10M-row queries before its times settle)
#   SBS_CUTS         fault proxy schedule for cuts10m (default 20M,30M,30M,30M,30M:
#                    one RST per connection at ~20/50/80/110/140 MiB into the stream)
#   SBS_MAX_LOAD     wait (up to SBS_LOAD_WAIT s, default 300) for the 1-min load
#                    average to drop below this before starting (default 3)
#   SBS_RTT_MS       comma-separated round trips in ms (e.g. 0,10,40): each CASE is
#                    run once per round trip, as CASE (0) and CASE_rttN (default: none)
#   SBS_BW_MBPS      comma-separated bandwidths in Mbit/s (e.g. 0,100,1000): each CASE
#                    is run once per bandwidth, as CASE (0) and CASE_bwN (default: none)
#   SBS_BATCH_ROWS   comma-separated rows per batch (e.g. 0,100000): each CASE is run
#                    once per value, as CASE_b100000, ... (0: no suffix)
#   SBS_CODECS       comma-separated codecs (e.g. none,zstd): each CASE is run once per
#                    codec, as CASE_none, CASE_zstd, ... (default: none given, no suffix)
#                    Expansion order: batch rows, codec, bandwidth, round trip.
#   SBS_PAUSE        seconds between runs, so the server settles (default 1)
#   SBS_INTERLEAVE   1: run pair i of every case before pair i+1 of any (so a case and
#                    its `_nginx` twin see the same drift), round i starting at arm i
#                    (so no arm always follows another case); default 0: case after case
#   SBS_PROXY_BASE   first port of scripts/proxies.sh for `_nginx` cases (default 15040;
#                    nginx with TLS listens on it; 15020-15023 belong to .ci/run)
#   SBS_FIRST_BATCH_API  iterator|arrow: PySpark's first_batch method (default iterator)
#   SPARK_CONNECT_DRIVER_MEMORY  server heap (default here 2g: with the 128 MiB retry
#                    buffer, a cut 10M-row stream made a 1g driver fail with
#                    OutOfMemoryError -> TaskResultLost)
#   SBS_OUT          output dir (default target/side-by-side/<timestamp>)
#   SBS_OFFICIAL     1 (default) to run the official-client arm; 0 to skip it
#   SBS_OFFICIAL_DIR where the official client is built, by
#                    scripts/official-client.sh (default: that script's, a
#                    directory under ~/.cache kept between runs). It needs
#                    `protoc`: installed from Debian's protobuf-compiler if missing
#   SBS_BASE_BENCH   a side_by_side bench executable built from another commit
#                    (copy it aside first): run as one more arm, `base`, for a
#                    before/after in one run (default: none)
#   CARGO_TARGET_DIR honoured by cargo as usual
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
NAME="${SBS_SERVER_NAME:-sbs}"
SERVER_KIND="${SBS_SERVER:-spark}"
case "$SERVER_KIND" in
    spark) SERVER_SCRIPT="$ROOT/scripts/spark-server.sh" ;;
    sail) SERVER_SCRIPT="$ROOT/scripts/sail-server.sh" ;;
    *) printf '[side-by-side] error: SBS_SERVER must be spark or sail\n' >&2; exit 2 ;;
esac
PORT="${SBS_PORT:-15010}"
PAIRS="${SBS_PAIRS:-5}"
WARMUP="${SBS_WARMUP:-3}"
CUTS="${SBS_CUTS:-20M,30M,30M,30M,30M}"
MAX_LOAD="${SBS_MAX_LOAD:-3}"
LOAD_WAIT="${SBS_LOAD_WAIT:-300}"
PAUSE="${SBS_PAUSE:-1}"
INTERLEAVE="${SBS_INTERLEAVE:-0}"
PROXY_BASE="${SBS_PROXY_BASE:-15040}"
FIRST_BATCH_API="${SBS_FIRST_BATCH_API:-iterator}"
OUT="${SBS_OUT:-$ROOT/target/side-by-side/$(date -u +%Y%m%dT%H%M%SZ)}"
if [ $# -gt 0 ]; then CASES=("$@"); else CASES=(arrow10m first_batch cuts10m); fi
# expand SUFFIX VALUES: each case once per value, VALUE 0 meaning no suffix
# (for codecs every value is a suffix).
expand() {
    local suffix="$1" values="$2" c v
    [ -n "$values" ] || return 0
    local -a expanded=()
    for c in "${CASES[@]}"; do
        for v in ${values//,/ }; do
            if [ "$v" = 0 ]; then expanded+=("$c"); else expanded+=("${c}_$suffix$v"); fi
        done
    done
    CASES=("${expanded[@]}")
}
expand b "${SBS_BATCH_ROWS:-}"
expand "" "${SBS_CODECS:-}"
expand bw "${SBS_BW_MBPS:-}"
expand rtt "${SBS_RTT_MS:-}"

N_CUTS=$(awk -F, '{print NF}' <<<"$CUTS")

log() { printf '[side-by-side] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

case "$NAME" in ci-*) die "server names ci-* belong to .ci/run" ;; esac
if [ "$PORT" -ge 15002 ] && [ "$PORT" -le 15006 ]; then die "ports 15002-15006 belong to .ci/run"; fi
NGINX=0
for c in "${CASES[@]}"; do
    [[ "$c" =~ _nginx(_bw[0-9]+)?(_rtt[0-9]+)?$ ]] && NGINX=1
done
if [ "$NGINX" = 1 ]; then
    [[ "$PROXY_BASE" =~ ^[0-9]+$ ]] || die "SBS_PROXY_BASE must be a port"
    if [ "$PROXY_BASE" -ge 15017 ] && [ "$PROXY_BASE" -le 15023 ]; then
        die "ports 15020-15023 belong to .ci/run's proxies"
    fi
fi

mkdir -p "$OUT"
RESULTS="$OUT/results.jsonl"
: >"$RESULTS"

PROXY_PID=""
SERVER_STARTED=0
NGINX_STARTED=0
cleanup() {
    if [ -n "$PROXY_PID" ]; then kill -TERM "$PROXY_PID" 2>/dev/null || true; fi
    if [ "$NGINX_STARTED" = 1 ]; then "$ROOT/scripts/proxies.sh" stop "$PROXY_BASE" || true; fi
    if [ "$SERVER_STARTED" = 1 ]; then "$SERVER_SCRIPT" stop "$NAME" || true; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

load1() { cut -d' ' -f1 /proc/loadavg; }

# --- install + build (before the server starts: the build is the slow, noisy part)
eval "$("$ROOT/scripts/spark-install.sh" | tail -n1)"   # sets SPARK_HOME
export SPARK_HOME
PY="$(dirname "$(dirname "$(dirname "$(dirname "$SPARK_HOME")")")")/bin/python"
[ -x "$PY" ] || PY="${SPARK_CONNECT_VENV:-$HOME/.cache/spark-connect-retry/venv-pyspark-4.3.0}/bin/python"
[ -x "$PY" ] || die "no venv python next to $SPARK_HOME"

log "building the bench and the fault proxy (release)"
build_json="$OUT/build.json"
(cd "$ROOT" && cargo build --release \
    --bench side_by_side --bench raw_drain --example fault_proxy --message-format=json) >"$build_json"
# Bench targets built with --release land under deps/ with a hash: take the
# executables from cargo's own report rather than guessing paths.
exe_of() {
    "$PY" - "$build_json" "$1" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == sys.argv[2] and m.get("executable"):
        print(m["executable"])
PY
}
BENCH="$(exe_of side_by_side | tail -n1)"
PROXY="$(exe_of fault_proxy | tail -n1)"
RAW="$(exe_of raw_drain | tail -n1)"
if ! [ -x "$BENCH" ] || ! [ -x "$PROXY" ] || ! [ -x "$RAW" ]; then
    die "build did not produce the bench and proxy executables"
fi
BASE="${SBS_BASE_BENCH:-}"
if [ -n "$BASE" ] && ! [ -x "$BASE" ]; then die "SBS_BASE_BENCH=$BASE is not an executable"; fi

# The official Rust client, in a project of its own (it needs a system
# protoc): scripts/official-client.sh builds it, as for scripts/chaos-table.sh.
OFFICIAL=""
if [ "${SBS_OFFICIAL:-1}" = 1 ]; then
    OFFICIAL="$("$ROOT/scripts/official-client.sh" ${SBS_OFFICIAL_DIR:+"$SBS_OFFICIAL_DIR"} | tail -n1)" ||
        die "official client build failed; or set SBS_OFFICIAL=0"
fi

# --- server (one for all cases; the 128 MiB retry buffer lets deep cuts reattach)
export SPARK_CONNECT_DRIVER_MEMORY="${SPARK_CONNECT_DRIVER_MEMORY:-2g}"
if [ "$SERVER_KIND" = sail ]; then
    # Sail returns range's partitions in any order; every arm checks the order.
    export SBS_QUERY_SUFFIX=" ORDER BY id"
    "$SERVER_SCRIPT" start "$NAME" "$PORT"
else
    "$SERVER_SCRIPT" start "$NAME" "$PORT" \
        --conf spark.connect.execute.reattachable.observerRetryBufferSize=128m
fi
SERVER_STARTED=1
REMOTE="sc://127.0.0.1:$PORT"

# --- nginx with TLS in front of it, when a case asks (haproxy starts too, unused)
NGINX_ADDR=""
NGINX_CA=""
if [ "$NGINX" = 1 ]; then
    "$ROOT/scripts/proxies.sh" start "$PORT" "$PROXY_BASE"
    NGINX_STARTED=1
    NGINX_ADDR="127.0.0.1:$PROXY_BASE"
    NGINX_CA="$("$ROOT/scripts/proxies.sh" ca "$PROXY_BASE")"
    if [ -n "$OFFICIAL" ]; then
        log "the official client (no tls feature, no CA setting) sits out the _nginx cases"
    fi
fi

# --- wait for a quiet machine
t0=$(date +%s)
while awk -v l="$(load1)" -v m="$MAX_LOAD" 'BEGIN{exit !(l > m)}'; do
    if [ $(($(date +%s) - t0)) -ge "$LOAD_WAIT" ]; then
        log "load $(load1) still above $MAX_LOAD after ${LOAD_WAIT}s; running anyway"
        break
    fi
    log "load $(load1) > $MAX_LOAD; waiting"
    sleep 10
done
LOAD_START="$(cat /proc/loadavg)"

# Start a fresh proxy (its cut schedule counts connections from its start)
# and set PROXY_ADDR; its summary goes to $OUT/proxy-<tag>.txt.
# start_proxy TAG CUTS ONE_WAY_DELAY_MS UPSTREAM BANDWIDTH_MBPS (CUTS may be
# empty, BANDWIDTH_MBPS 0: no limit).
start_proxy() {
    local f="$OUT/proxy-$1.txt"
    "$PROXY" --upstream "$4" --cuts "$2" --one-way-delay-ms "$3" --bandwidth-mbps "$5" >"$f" 2>&1 &
    PROXY_PID=$!
    local i=0
    until [ -s "$f" ]; do
        i=$((i + 1))
        [ "$i" -lt 100 ] || die "fault proxy did not start: $(cat "$f")"
        sleep 0.05
    done
    PROXY_ADDR="$(head -n1 "$f")"
}

# Stop the proxy and set PROXY_JSON to its summary line. Not run in $(...):
# a subshell cannot `wait` for its parent's child, and reading the file
# before the proxy has written its summary races.
stop_proxy() {
    kill -TERM "$PROXY_PID"
    wait "$PROXY_PID" || true
    PROXY_PID=""
    PROXY_JSON="$(tail -n1 "$OUT/proxy-$1.txt")"
}

# run_one CLIENT CASE TAG WARMUP: one process, one JSON line appended to results.
# CASE may end in _rttN: the base case through a proxy delaying N/2 ms each way;
# before that in _bwN: through a proxy limited to N Mbit/s each way; before
# that in _nginx: through nginx with TLS (the fault proxy, if any, in front);
# before that in _CODEC: results compressed with that codec.
run_one() {
    local client="$1" full_case="$2" tag="$3" warmup="$4" remote="$REMOTE" line cuts=0
    local case="$full_case" rtt=0 bw=0 codec="" proxied=0 upstream="127.0.0.1:$PORT" via=direct
    if [[ "$case" =~ ^(.+)_rtt([0-9]+)$ ]]; then
        case="${BASH_REMATCH[1]}"
        rtt="${BASH_REMATCH[2]}"
    fi
    if [[ "$case" =~ ^(.+)_bw([0-9]+)$ ]]; then
        case="${BASH_REMATCH[1]}"
        bw="${BASH_REMATCH[2]}"
    fi
    if [[ "$case" =~ ^(.+)_nginx$ ]]; then
        case="${BASH_REMATCH[1]}"
        via=nginx
        upstream="$NGINX_ADDR"
        remote="sc://$NGINX_ADDR"
    fi
    if [[ "$case" =~ ^(.+)_(none|zstd|lz4)$ ]]; then
        case="${BASH_REMATCH[1]}"
        codec="${BASH_REMATCH[2]}"
    fi
    local batch_rows=""
    if [[ "$case" =~ ^(.+)_b([0-9]+)$ ]]; then
        case="${BASH_REMATCH[1]}"
        batch_rows="${BASH_REMATCH[2]}"
    fi
    PROXY_JSON="null"
    if [ "$case" = cuts10m ]; then
        start_proxy "$tag" "$CUTS" $((rtt / 2)) "$upstream" "$bw"
        cuts="$N_CUTS"
        proxied=1
    elif [ "$rtt" -gt 0 ] || [ "$bw" -gt 0 ]; then
        start_proxy "$tag" "" $((rtt / 2)) "$upstream" "$bw"
        proxied=1
    fi
    if [ "$proxied" = 1 ]; then remote="sc://$PROXY_ADDR"; fi
    # Connection-string parameters, after `/`; PySpark takes the codec as a conf.
    # Over TLS the certificate is for 127.0.0.1 (and localhost), whichever
    # port the client dials; each client trusts the run's CA its own way.
    local -a py_env=() py_codec=()
    local params=""
    if [ "$via" = nginx ]; then
        py_env=(env "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH=$NGINX_CA")
        params=";use_ssl=true"
        if [ "$client" != pyspark ]; then params="$params;tls_ca_file=$NGINX_CA"; fi
    fi
    if [ -n "$codec" ]; then
        py_codec=(--codec "$codec")
        if [ "$client" != pyspark ]; then params="$params;result_compression=$codec"; fi
    fi
    local -a py_batch=() raw_batch=()
    if [ -n "$batch_rows" ]; then
        py_batch=(--batch-rows "$batch_rows")
        raw_batch=(--batch-rows "$batch_rows")
        if [ "$client" = rust ] || [ "$client" = base ]; then params="$params;result_batch_rows=$batch_rows"; fi
    fi
    if [ -n "$params" ]; then remote="$remote/$params"; fi
    if [ "$client" = rust ] || [ "$client" = base ]; then
        local exe="$BENCH"
        [ "$client" = rust ] || exe="$BASE"
        line="$("$exe" --remote "$remote" --case "$case" --proxy-cuts "$cuts")" ||
            die "$client $case failed (run $tag)"
        # The base executable calls itself rust.
        line="${line/\"client\":\"rust\"/\"client\":\"$client\"}"
    elif [ "$client" = raw ]; then
        line="$("$RAW" --remote "$remote" --case "$case" "${raw_batch[@]}")" ||
            die "raw $case failed (run $tag)"
    elif [ "$client" = raw_client ]; then
        line="$("$RAW" --remote "$remote" --case "$case" --reattachable --keep "${raw_batch[@]}")" ||
            die "raw_client $case failed (run $tag)"
    elif [ "$client" = official ]; then
        line="$("$OFFICIAL" --remote "$remote" --case "$case" 2>"$OUT/official-$tag.err")" ||
            die "official $case failed (run $tag): $(tail -n5 "$OUT/official-$tag.err")"
    else
        line="$("${py_env[@]}" "$PY" "$ROOT/scripts/side_by_side_pyspark.py" --remote "$remote" --case "$case" \
            --proxy-cuts "$cuts" --first-batch-api "$FIRST_BATCH_API" "${py_codec[@]}" "${py_batch[@]}" 2>"$OUT/py-$tag.err")" ||
            die "pyspark $case failed (run $tag): $(tail -n5 "$OUT/py-$tag.err")"
    fi
    if [ "$proxied" = 1 ]; then stop_proxy "$tag"; fi
    # Tag the line with run metadata (and the proxy's own cut count).
    "$PY" -c '
import json, sys
d = json.loads(sys.argv[1]); d["warmup"] = sys.argv[2] == "1"; d["run"] = sys.argv[3]
d["proxy"] = json.loads(sys.argv[4]); d["load1"] = float(sys.argv[5])
d["case"] = sys.argv[6]; d["rtt_ms"] = int(sys.argv[7]); d["via"] = sys.argv[8]
d["bw_mbps"] = int(sys.argv[9]); d["codec"] = sys.argv[10] or None
d["batch_rows"] = int(sys.argv[11]) if sys.argv[11] else None
print(json.dumps(d))' "$line" "$warmup" "$tag" "$PROXY_JSON" "$(load1)" "$full_case" "$rtt" "$via" "$bw" "$codec" "$batch_rows" |
        tee -a "$RESULTS" >&2
    sleep "$PAUSE"
}

# run_pair CASE I: one round of every arm of CASE (I <= 0: a warm-up round).
# Interleaved, round I starts at arm I (mod the arms) and goes round: the arm
# that follows another case (a 10M-row query before a first batch) changes.
run_pair() {
    local case="$1" i="$2" warm=0 k
    [ "$i" -le 0 ] && warm=1
    local -a arms=(rust:rust pyspark:py)
    # The raw drains and the official client: the plain 10M-row cases only.
    if [[ "$case" =~ ^(arrow10m|first_batch)(_b[0-9]+)?(_nginx)?(_bw[0-9]+)?(_rtt[0-9]+)?$ ]]; then
        arms+=(raw:raw raw_client:rawc)
        if [ -n "$OFFICIAL" ] && ! [[ "$case" =~ (_b[0-9]+|_nginx)(_bw[0-9]+)?(_rtt[0-9]+)?$ ]]; then
            arms+=(official:official)
        fi
    fi
    if [ -n "$BASE" ]; then arms+=(base:base); fi
    local start=0 n=${#arms[@]}
    if [ "$INTERLEAVE" = 1 ]; then start=$(((i % n + n) % n)); fi
    for ((k = 0; k < n; k++)); do
        local arm="${arms[$(((start + k) % n))]}"
        run_one "${arm%%:*}" "$case" "$case-$i-${arm#*:}" "$warm"
    done
}

if [ "$INTERLEAVE" = 1 ]; then
    log "cases ${CASES[*]}: $WARMUP warm-up rounds + $PAIRS rounds, pair i of every case in turn"
    for i in $(seq $((1 - WARMUP)) "$PAIRS"); do
        for case in "${CASES[@]}"; do run_pair "$case" "$i"; done
    done
else
    for case in "${CASES[@]}"; do
        log "case $case: $WARMUP warm-up pairs + $PAIRS pairs, alternating rust/pyspark"
        for i in $(seq $((1 - WARMUP)) "$PAIRS"); do run_pair "$case" "$i"; done
    done
fi
LOAD_END="$(cat /proc/loadavg)"

# --- summary
{
    echo "machine: $(nproc) cpus, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
    echo "rustc: $(rustc --version)"
    echo "python: $("$PY" --version 2>&1), pyspark $("$PY" -c 'import pyspark; print(pyspark.__version__)'), pyarrow $("$PY" -c 'import pyarrow; print(pyarrow.__version__)')"
    echo "load (1/5/15 min) at start: $LOAD_START; at end: $LOAD_END"
    if [ "$SERVER_KIND" = sail ]; then
        echo "server: Sail 0.7.2 (pysail, pyspark-client 4.2.0 in its venv), defaults"
    else
        echo "server: Spark Connect 4.3.0, local[2], driver memory $SPARK_CONNECT_DRIVER_MEMORY, observerRetryBufferSize=128m"
    fi
    echo "cuts schedule: $CUTS; first_batch PySpark API: $FIRST_BATCH_API; warm-up pairs: $WARMUP; pairs: $PAIRS; interleaved: $INTERLEAVE"
    if [ "$NGINX" = 1 ]; then
        echo "_nginx cases: $(nginx -v 2>&1 | sed 's/^nginx version: //') on $NGINX_ADDR, TLS ($(openssl version | cut -d' ' -f1-2), RSA 2048 throwaway CA), grpc_pass to 127.0.0.1:$PORT; grpcio $("$PY" -c 'import grpc; print(grpc.__version__)')"
    fi
    "$PY" - "$RESULTS" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
cases = []
for r in rows:
    if r["case"] not in cases:
        cases.append(r["case"])
arms = ["rust", "pyspark", "raw", "raw_client", "official", "base"]
ratios = [("rust/pyspark", "rust", "pyspark"), ("raw/rust", "raw", "rust"),
          ("raw_client/rust", "raw_client", "rust"), ("rust/official", "rust", "official"),
          ("rust/base", "rust", "base")]
for c in cases:
    m = [r for r in rows if r["case"] == c and not r["warmup"]]
    def med(client, key):
        v = [r[key] for r in m if r["client"] == client and r.get(key) is not None]
        return statistics.median(v) if v else None
    print(f"{c}:")
    for a in arms:
        w = med(a, "wall_ms")
        if w is None:
            continue
        cpu = med(a, "cpu_ms")
        runs = " ".join(f"{r['wall_ms']:.0f}" for r in m if r["client"] == a)
        cpu_s = f"{cpu:.0f}" if cpu is not None else "-"
        # Our arm also reports CPU per row and its peak RSS (VmHWM).
        per_row, rss = med(a, "cpu_ns_per_row"), med(a, "peak_rss_kib")
        extra = ""
        if per_row is not None:
            extra += f"  cpu_ns_per_row {per_row:.1f}"
        if rss is not None:
            extra += f"  peak_rss {rss / 1024:.0f} MiB"
        print(f"  {a:<13} median {w:>8.1f} ms  cpu {cpu_s:>5} ms{extra}  runs: {runs}")
    for name, x, y in ratios:
        wx, wy = med(x, "wall_ms"), med(y, "wall_ms")
        if wx is not None and wy is not None:
            print(f"  {name:<18} {wx / wy:.3f}")
    if m and (m[0].get("rtt_ms") or m[0].get("bw_mbps")):
        print(f"  (through the proxy: round trip {m[0]['rtt_ms']} ms, "
              f"bandwidth {m[0].get('bw_mbps') or 'unlimited'} Mbit/s each way)")
    loads = [r["load1"] for r in m]
    if loads:
        print(f"  load1 during the runs: {min(loads):.2f}-{max(loads):.2f}")
    sums = {r.get("sum_r") for r in rows if r["case"] == c and r.get("sum_r") is not None}
    if len(sums) > 1:
        print(f"  warning: the clients read different random columns (sum_r {sorted(sums)})")
    bad = [r["run"] for r in m if r.get("proxy") and r["proxy"]["cuts"] != r.get("proxy_cuts", 0)]
    if bad:
        print(f"  warning: proxy made fewer cuts than scheduled in {bad}")
# A case through nginx against the same case direct, arm by arm.
def med_of(c, a):
    v = [r["wall_ms"] for r in rows if r["case"] == c and r["client"] == a and not r["warmup"]]
    return statistics.median(v) if v else None
for c in cases:
    if "_nginx" not in c:
        continue
    direct = c.replace("_nginx", "", 1)
    if direct not in cases:
        continue
    print(f"{c} / {direct} (nginx+TLS over direct):")
    for a in arms:
        x, y = med_of(c, a), med_of(direct, a)
        if x is not None and y is not None:
            print(f"  {a:<13} {x / y:.3f}")
# A compressed case against its `_none` twin: what compression buys.
import re
for c in cases:
    m = re.match(r"^(.+)_(zstd|lz4)(.*)$", c)
    if not m or f"{m[1]}_none{m[3]}" not in cases:
        continue
    plain = f"{m[1]}_none{m[3]}"
    print(f"{c} against {plain}:")
    for name, (cx, ax), (cy, ay) in [
        (f"rust-{m[2]} / pyspark-none", (c, "rust"), (plain, "pyspark")),
        (f"rust-{m[2]} / rust-none", (c, "rust"), (plain, "rust")),
        (f"pyspark-{m[2]} / pyspark-none", (c, "pyspark"), (plain, "pyspark")),
    ]:
        x, y = med_of(cx, ax), med_of(cy, ay)
        if x is not None and y is not None:
            print(f"  {name:<28} {x / y:.3f}")
PY
} | tee "$OUT/summary.txt"
log "results in $OUT"
