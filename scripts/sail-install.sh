#!/usr/bin/env bash
# Install Sail (pysail, a second Spark Connect server, written in Rust) into a
# cached venv outside the clone, so the real-server tests also run against it.
#
# Usage: scripts/sail-install.sh
#   env SAIL_VENV    venv folder (default ~/.cache/spark-connect-retry/venv-sail-0.7.2)
#   env SAIL_PYTHON  python used to create the venv (default python3)
# Prints `SAIL_BIN=<path to the sail executable>` as its last line of stdout
# (progress goes to stderr).
#
# Idempotent: when the venv already has sail 0.7.2 and pyspark-client 4.2.0,
# nothing is downloaded (13 s and 4 s when it is).
#
# Why pyspark-client 4.2.0 (without its dependencies) in Sail's venv: Sail
# imports `pyspark` from its own Python to learn "the Spark version", which sets
# its answer to `spark_version` and its config defaults. Without it Sail falls
# back to Spark 3.5 defaults (ANSI off) and `spark_version` fails; with pyspark
# 4.3 every session fails (Sail 0.7.2 knows Spark 3.5 to 4.2 only).
set -euo pipefail

SAIL_VERSION=0.7.2
PYSPARK_CLIENT_VERSION=4.2.0
VENV="${SAIL_VENV:-$HOME/.cache/spark-connect-retry/venv-sail-${SAIL_VERSION}}"
PYTHON="${SAIL_PYTHON:-python3}"

log() { printf '[sail-install] %s\n' "$*" >&2; }

check_installed() {
    [ -x "$VENV/bin/sail" ] && [ -x "$VENV/bin/python" ] || return 1
    "$VENV/bin/sail" --version 2>/dev/null | grep -qx "sail ${SAIL_VERSION}" || return 1
    "$VENV/bin/python" - "$PYSPARK_CLIENT_VERSION" >/dev/null 2>&1 <<'PY'
import sys
from importlib.metadata import version
assert version("pyspark-client") == sys.argv[1]
PY
}

if check_installed; then
    log "sail ${SAIL_VERSION} already installed in $VENV"
else
    start=$(date +%s)
    log "installing pysail==${SAIL_VERSION} and pyspark-client==${PYSPARK_CLIENT_VERSION} into $VENV"
    mkdir -p "$(dirname "$VENV")"
    rm -rf "$VENV"
    "$PYTHON" -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "pysail==${SAIL_VERSION}" >&2
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps \
        "pyspark-client==${PYSPARK_CLIENT_VERSION}" >&2
    if ! check_installed; then
        log "error: install finished but sail ${SAIL_VERSION} is not usable"
        exit 1
    fi
    log "installed in $(( $(date +%s) - start )) s"
fi
echo "SAIL_BIN=$VENV/bin/sail"
