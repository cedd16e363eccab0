#!/usr/bin/env bash
# PySpark 4.3 through spark-connect-guard: every shipped chaos scenario with
# the guard in front of spark-connect-chaos, and a cut between PySpark and
# the guard (PySpark's own reattach through it). See scripts/guard_pyspark.py.
#
# Usage: scripts/guard-pyspark.sh [SCENARIO.toml ...]
#   env SPARK_CONNECT_VENV  the PySpark venv (default: where scripts/spark-install.sh puts it)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${SPARK_CONNECT_VENV:-$HOME/.cache/spark-connect-retry/venv-pyspark-4.3.0}"
PY="$VENV/bin/python"
if [ ! -x "$PY" ]; then
    echo "guard-pyspark: no PySpark venv at $VENV (run scripts/spark-install.sh)" >&2
    exit 2
fi
cargo build --quiet -p spark-connect-testkit --bin spark-connect-chaos \
    -p spark-connect-guard --bin spark-connect-guard
cargo build --quiet --example fault_proxy
BIN="${CARGO_TARGET_DIR:-target}/debug"
if [ "$#" -eq 0 ]; then
    set -- crates/spark-connect-testkit/scenarios/*.toml
fi
exec "$PY" scripts/guard_pyspark.py "$BIN/spark-connect-chaos" "$BIN/spark-connect-guard" \
    "$BIN/examples/fault_proxy" "$@"
