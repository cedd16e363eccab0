#!/usr/bin/env bash
# Builds spark-connect-chaos (the test kit's fault-injecting Spark Connect
# server as a program) and runs every shipped scenario against it with
# PySpark 4.3's own client, checking the exact result each scenario's
# [expect] says a correct client returns. One line per scenario; exits
# non-zero on any mismatch.
#
# Usage: scripts/chaos-pyspark.sh [SCENARIO.toml ...]
#   (default: crates/spark-connect-testkit/scenarios/*.toml)
#   env SPARK_CONNECT_VENV  the PySpark venv (default: where scripts/spark-install.sh puts it)
#   env CHAOS_LOG_DIR       where to keep each scenario's server log
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${SPARK_CONNECT_VENV:-$HOME/.cache/spark-connect-retry/venv-pyspark-4.3.0}"
PY="$VENV/bin/python"
if [ ! -x "$PY" ]; then
    echo "chaos-pyspark: no PySpark venv at $VENV (run scripts/spark-install.sh)" >&2
    exit 2
fi
# Built as the test kit's own tests build it (same features, so the CI's
# test build is reused): target/debug/spark-connect-chaos.
cargo test --quiet -p spark-connect-testkit --test chaos --no-run
BIN="${CARGO_TARGET_DIR:-target}/debug/spark-connect-chaos"
if [ "$#" -eq 0 ]; then
    set -- crates/spark-connect-testkit/scenarios/*.toml
fi
exec "$PY" scripts/chaos_pyspark.py "$BIN" "$@"
