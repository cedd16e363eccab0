#!/usr/bin/env bash
# Builds the official Rust client's program, scripts/side_by_side_official.rs
# (`apache-spark-connect` 4.2.0 from crates.io), in a project of its own, and
# prints the executable's path on its last line. The one place that builds
# it: scripts/side-by-side.sh (its `official` arm) and scripts/chaos-table.sh
# (its `official` column) both call it.
#
# The official client needs a system `protoc` (its build script compiles
# Spark's protos); this workspace's crates never do. When `protoc` is
# missing it is installed from Debian's protobuf-compiler (apt-get, as root).
#
# Usage: scripts/official-client.sh [DIR]
#   DIR  where to build (default: $OFFICIAL_CLIENT_DIR, else
#        ~/.cache/spark-connect-retry/official-client-4.2.0: outside the
#        clone, like the Spark install, so a CI machine builds it once; later
#        builds are incremental). Build output goes to DIR/build.log.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export HOME="${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}"
DIR="${1:-${OFFICIAL_CLIENT_DIR:-$HOME/.cache/spark-connect-retry/official-client-4.2.0}}"
log() { printf '[official-client] %s\n' "$*" >&2; }

mkdir -p "$DIR/src"
if ! command -v protoc >/dev/null; then
    log "installing protobuf-compiler (protoc) for the official client"
    if ! { apt-get install -y protobuf-compiler || { apt-get update && apt-get install -y protobuf-compiler; }; } \
        >"$DIR/apt.log" 2>&1; then
        log "could not install protobuf-compiler (see $DIR/apt.log)"
        exit 1
    fi
fi
cat >"$DIR/Cargo.toml" <<'TOML'
[package]
name = "sbs-official"
version = "0.1.0"
edition = "2021"

[dependencies]
apache-spark-connect = "=4.2.0"
# The client's own arrow (58), to read its batches' columns.
arrow = { version = "58", default-features = false }

[workspace]
TOML
# Rewritten only when changed, so cargo's fingerprint stays put.
if ! cmp -s "$ROOT/scripts/side_by_side_official.rs" "$DIR/src/main.rs"; then
    cp "$ROOT/scripts/side_by_side_official.rs" "$DIR/src/main.rs"
fi
log "building the official client (apache-spark-connect 4.2.0, release) in $DIR"
if ! (cd "$DIR" && env -u CARGO_TARGET_DIR cargo build --release --quiet) >"$DIR/build.log" 2>&1; then
    log "build failed (see $DIR/build.log)"
    tail -n 20 "$DIR/build.log" >&2
    exit 1
fi
echo "$DIR/target/release/sbs-official"
