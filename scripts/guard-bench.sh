#!/usr/bin/env bash
# The cost of spark-connect-guard: PySpark 4.3 reading 10M rows on loopback
# from spark-connect-chaos directly vs through the guard (release builds),
# and the guard's memory while a client reads slowly. See
# scripts/guard_bench.py; figures in crates/spark-connect-guard/README.md.
#
# Usage: scripts/guard-bench.sh [RUNS] [CLIENTS]
#   env SPARK_CONNECT_VENV  the PySpark venv (default: where scripts/spark-install.sh puts it)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${SPARK_CONNECT_VENV:-$HOME/.cache/spark-connect-retry/venv-pyspark-4.3.0}"
PY="$VENV/bin/python"
if [ ! -x "$PY" ]; then
    echo "guard-bench: no PySpark venv at $VENV (run scripts/spark-install.sh)" >&2
    exit 2
fi
cargo build --quiet --release -p spark-connect-testkit --bin spark-connect-chaos \
    -p spark-connect-guard --bin spark-connect-guard
BIN="${CARGO_TARGET_DIR:-target}/release"
exec "$PY" scripts/guard_bench.py "$BIN/spark-connect-chaos" "$BIN/spark-connect-guard" "$@"
