#!/usr/bin/env bash
# Install a real Spark Connect server (PySpark 4.3.0 from PyPI) into a cached venv
# outside the clone, so tests and CI can run against the real thing.
#
# Usage: scripts/spark-install.sh
#   env SPARK_CONNECT_VENV  venv folder (default ~/.cache/spark-connect-retry/venv-pyspark-4.3.0)
#   env SPARK_CONNECT_PYTHON  python used to create the venv (default python3)
# Prints `SPARK_HOME=<dir>` as its last line of stdout (progress goes to stderr),
# so callers can do: eval "$(scripts/spark-install.sh | tail -n1)"
#
# Idempotent: when the venv already imports pyspark 4.3.0 (and its Connect client
# dependencies) nothing is downloaded. CI runs on reused machines, but a fresh
# machine must still work, hence install-when-missing rather than install-always.
set -euo pipefail

PYSPARK_VERSION=4.3.0
VENV="${SPARK_CONNECT_VENV:-$HOME/.cache/spark-connect-retry/venv-pyspark-${PYSPARK_VERSION}}"
PYTHON="${SPARK_CONNECT_PYTHON:-python3}"

log() { printf '[spark-install] %s\n' "$*" >&2; }

# Spark 4.x needs Java 17 or 21. The machines ship Java 17, but guard anyway so
# a fresh machine of another flavour still works (we run as root in CI).
if ! command -v java >/dev/null 2>&1; then
    log "java not found; installing openjdk-17-jre-headless"
    if [ "$(id -u)" -ne 0 ]; then
        log "error: java missing and not root; install Java 17 yourself"
        exit 1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless >&2
fi

# The check imports the Connect client deps too (grpc, pandas, pyarrow): a venv
# with bare pyspark would start the server fine but break the PySpark benchmark.
check_installed() {
    [ -x "$VENV/bin/python" ] || return 1
    "$VENV/bin/python" - "$PYSPARK_VERSION" >/dev/null 2>&1 <<'PY'
import sys
import pyspark, grpc, pandas, pyarrow  # noqa: F401
assert pyspark.__version__ == sys.argv[1], pyspark.__version__
assert int(pandas.__version__.split(".")[0]) < 3, pandas.__version__
PY
}

if check_installed; then
    log "pyspark ${PYSPARK_VERSION} already installed in $VENV"
else
    start=$(date +%s)
    log "installing pyspark[connect]==${PYSPARK_VERSION} into $VENV (sdist ~456 MB, builds locally)"
    mkdir -p "$(dirname "$VENV")"
    # Recreate from scratch: a half-finished earlier install is not worth repairing.
    rm -rf "$VENV"
    "$PYTHON" -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip >&2
    # pandas<3: pyspark 4.3 prints a FutureWarning on every import with pandas 3.
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
        "pyspark[connect]==${PYSPARK_VERSION}" 'pandas<3' >&2
    if ! check_installed; then
        log "error: install finished but pyspark ${PYSPARK_VERSION} does not import"
        exit 1
    fi
    log "installed in $(($(date +%s) - start)) s"
fi

SPARK_HOME="$("$VENV/bin/python" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')"
if [ ! -x "$SPARK_HOME/bin/spark-submit" ]; then
    log "error: $SPARK_HOME/bin/spark-submit missing"
    exit 1
fi
echo "SPARK_HOME=$SPARK_HOME"
