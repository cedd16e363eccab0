#!/usr/bin/env bash
# The chaos table: every shipped scenario of spark-connect-chaos (and real
# Spark behind the fault proxy, when one is given) read by each Spark Connect
# client, alone and through spark-connect-guard, printed as a Markdown table.
# A cell is exact, the clear error its scenario expects, a known finding of
# a client alone (recorded, not a failure), or a failure: the script exits 1
# on any failure. The rules are in scripts/chaos_table.py.
#
# Clients:
#   pyspark   PySpark 4.3's Spark Connect client (scripts/chaos/client_pyspark.py)
#   jvm       the JVM (Scala) client 4.3, the jar in the pyspark wheel, run by a
#             small Java program on its classpath (scripts/chaos/ChaosJvm.java;
#             javac is installed from openjdk-17-jdk-headless when missing)
#   official  the official Rust client, apache-spark-connect 4.2.0
#             (scripts/side_by_side_official.rs, built by scripts/official-client.sh;
#             it needs protoc, which that script installs when missing)
#   ours      this workspace's own SparkSession with its defaults
#             (examples/chaos_client.rs)
#
# Usage: scripts/chaos-table.sh [SCENARIO.toml ...]
#   (default: crates/spark-connect-testkit/scenarios/*.toml)
# Environment:
#   CHAOS_CLIENTS        clients to run (default: "pyspark jvm official ours")
#   CHAOS_GUARD          1 (default): build spark-connect-guard and add the
#                        through-the-guard columns; a failed build fails the
#                        script (the columns never vanish silently); 0: no guard
#                        columns; or a path to a spark-connect-guard executable
#   CHAOS_SPARK_REMOTE   real Spark's sc:// address for the fault-proxy row
#                        (default: $SPARK_CONNECT_TEST_REMOTE; empty: no such row)
#   CHAOS_SPARK_CUTS     the fault proxy's cut schedule (default 4M,8M,8M)
#   CHAOS_MANY           N > 0: one more row, N clients (cycling over CHAOS_CLIENTS)
#                        reading at once through ONE guard whose upstream, the
#                        fault proxy in front of real Spark (CHAOS_SPARK_REMOTE)
#                        or else of spark-connect-chaos serving CHAOS_MANY_SCENARIO,
#                        is cut on CHAOS_MANY_CUTS; every client must be exact
#                        (default 0: no such row; needs the guard)
#   CHAOS_MANY_CUTS      that proxy's cut schedule (default 8M,16M,16M,16M)
#   CHAOS_MANY_GUARD_ARGS more arguments for that guard (e.g. --idle-timeout-ms 60000)
#   CHAOS_MANY_ONLY      1: only the many-clients row (no scenario, hand-over or
#                        real-Spark cuts row)
#   CHAOS_MANY_SCENARIO  the scenario behind it (default: .../scenarios/graceful-ends.toml:
#                        stream ends the guard must hide, and no reset of its
#                        own, so every break of the connection is a counted cut)
#   CHAOS_OUT            write the table (Markdown) to this file too
#   CHAOS_LOG_DIR        where every server, guard, proxy and client log goes
#   SPARK_CONNECT_VENV   the PySpark venv (default: where scripts/spark-install.sh puts it)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
log() { printf '[chaos-table] %s\n' "$*" >&2; }
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
VENV="${SPARK_CONNECT_VENV:-$HOME/.cache/spark-connect-retry/venv-pyspark-4.3.0}"
PY="$VENV/bin/python"
if [ ! -x "$PY" ]; then
    log "no PySpark venv at $VENV (run scripts/spark-install.sh)"
    exit 2
fi
CLIENTS="${CHAOS_CLIENTS:-pyspark jvm official ours}"

# The server, built as the test kit's own tests build it (same features, so
# CI's test build is reused), the fault proxy and our own session's client.
log "building spark-connect-chaos, the fault proxy and our session's client"
cargo test --quiet -p spark-connect-testkit --test chaos --no-run
cargo build --quiet --example fault_proxy --example chaos_client
CHAOS="$TARGET/debug/spark-connect-chaos"
PROXY="$TARGET/debug/examples/fault_proxy"

args=(--chaos "$CHAOS")
for client in $CLIENTS; do
    case "$client" in
        pyspark)
            args+=(--client "pyspark=$PY $ROOT/scripts/chaos/client_pyspark.py") ;;
        jvm)
            PYSPARK_DIR="$("$PY" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')"
            JAR="$PYSPARK_DIR/jars/connect-repl/spark-connect-client-jvm_2.13-4.3.0.jar"
            [ -f "$JAR" ] || { log "no JVM client jar at $JAR"; exit 2; }
            CP="$JAR:$PYSPARK_DIR/jars/*"
            if ! command -v javac >/dev/null; then
                # scripts/spark-install.sh installs a JRE only.
                log "installing openjdk-17-jdk-headless (javac) for the JVM client's program"
                DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jdk-headless >&2 ||
                    { log "no javac: install a JDK 17"; exit 2; }
            fi
            CLASSES="$TARGET/chaos-jvm"
            mkdir -p "$CLASSES"
            log "compiling the JVM client's program (javac)"
            javac -d "$CLASSES" -cp "$CP" "$ROOT/scripts/chaos/ChaosJvm.java"
            # Arrow (in the client) reads direct buffers: Java 17 needs the opens.
            args+=(--client "jvm=java --add-opens=java.base/java.nio=ALL-UNNAMED --add-opens=java.base/sun.nio.ch=ALL-UNNAMED -cp '$CP:$CLASSES' ChaosJvm") ;;
        official)
            OFFICIAL="$("$ROOT/scripts/official-client.sh" | tail -n1)"
            args+=(--client "official=$OFFICIAL") ;;
        ours)
            args+=(--client "ours=$TARGET/debug/examples/chaos_client") ;;
        *) log "unknown client $client"; exit 2 ;;
    esac
done

GUARD_SETTING="${CHAOS_GUARD:-1}"
case "$GUARD_SETTING" in
    0) log "the guard columns are off (CHAOS_GUARD=0)" ;;
    1)
        log "building spark-connect-guard"
        if ! cargo build --quiet -p spark-connect-guard; then
            log "spark-connect-guard failed to build (CHAOS_GUARD=0 runs the table without it)"
            exit 2
        fi
        args+=(--guard "$TARGET/debug/spark-connect-guard") ;;
    *) args+=(--guard "$GUARD_SETTING") ;;
esac

SPARK_REMOTE_FOR_ROW="${CHAOS_SPARK_REMOTE-${SPARK_CONNECT_TEST_REMOTE:-}}"
if [ -n "$SPARK_REMOTE_FOR_ROW" ]; then
    args+=(--spark "$SPARK_REMOTE_FOR_ROW" --proxy "$PROXY" --spark-cuts "${CHAOS_SPARK_CUTS:-4M,8M,8M}")
fi
# With the guard: the hand-over rows (the guard drained, or killed, mid-stream;
# a new one on its port; the client's own reattach through it).
if [ "$GUARD_SETTING" != 0 ]; then args+=(--handover "$ROOT/scripts/chaos/handover.toml"); fi
MANY="${CHAOS_MANY:-0}"
if [ "$MANY" != 0 ]; then
    [ "$GUARD_SETTING" != 0 ] || { log "CHAOS_MANY needs the guard (CHAOS_GUARD is 0)"; exit 2; }
    args+=(--many "$MANY" --proxy "$PROXY" --many-cuts "${CHAOS_MANY_CUTS:-8M,16M,16M,16M}"
        --many-guard-args "${CHAOS_MANY_GUARD_ARGS:-}"
        --many-scenario "${CHAOS_MANY_SCENARIO:-crates/spark-connect-testkit/scenarios/graceful-ends.toml}")
    if [ "${CHAOS_MANY_ONLY:-0}" = 1 ]; then args+=(--many-only); fi
elif [ "${CHAOS_MANY_ONLY:-0}" = 1 ]; then
    log "CHAOS_MANY_ONLY=1 needs CHAOS_MANY=N"; exit 2
fi
if [ -n "${CHAOS_OUT:-}" ]; then args+=(--out "$CHAOS_OUT"); fi
if [ "$#" -eq 0 ]; then
    set -- crates/spark-connect-testkit/scenarios/*.toml
fi
exec "$PY" "$ROOT/scripts/chaos_table.py" "${args[@]}" "$@"
