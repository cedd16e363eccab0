#!/usr/bin/env bash
# Start, stop and inspect loopback-only Sail Spark Connect servers for tests.
#
# Usage:
#   scripts/sail-server.sh start  NAME PORT
#   scripts/sail-server.sh stop   NAME
#   scripts/sail-server.sh status NAME      (exit 0 when running, 3 when not)
#   scripts/sail-server.sh logs   NAME [N]  (last N lines of the server log, default 80)
#
# Each NAME gets its own run dir ${SPARK_CONNECT_RUN:-~/.cache/spark-connect-retry/run}/NAME
# with server.log, pid and port. Sail is configured through SAIL_* environment
# variables (e.g. SAIL_SPARK__EXECUTION_HEARTBEAT_INTERVAL_SECS=2), inherited.
# The port is open about 0.2 s after the start; no warm-up is needed.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
RUN_ROOT="${SPARK_CONNECT_RUN:-$HOME/.cache/spark-connect-retry/run}"
START_TIMEOUT="${SAIL_START_TIMEOUT:-30}"

log() { printf '[sail-server] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }
usage() { sed -n '2,8p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2; }

check_name() {
    [[ "$1" =~ ^[A-Za-z0-9_.-]+$ && "$1" != "." && "$1" != ".." ]] || die "bad server name '$1'"
}
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# Only signal a pid that is still a Sail server (never a recycled pid).
is_our_server() {
    local pid="$1" cmdline
    [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || return 1
    cmdline="$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)" || return 1
    [[ "$cmdline" == *sail*" spark server "* ]]
}
recorded_pid() { local f="$RUN_ROOT/$1/pid"; if [ -f "$f" ]; then cat "$f"; fi; }

cmd_start() {
    [ $# -eq 2 ] || usage
    local name="$1" port="$2" dir pid line sail
    check_name "$name"
    [[ "$port" =~ ^[0-9]+$ ]] || die "bad port '$port'"
    dir="$RUN_ROOT/$name"
    pid="$(recorded_pid "$name")"
    if is_our_server "$pid"; then die "$name is already running (pid $pid)"; fi
    if port_open "$port"; then die "port $port is already in use"; fi
    line="$("$SCRIPT_DIR/sail-install.sh" | tail -n1)"
    sail="${line#SAIL_BIN=}"
    mkdir -p "$dir"
    echo "$port" >"$dir/port"
    local started=$SECONDS
    nohup "$sail" spark server --ip 127.0.0.1 --port "$port" -C "$dir" \
        >"$dir/server.log" 2>&1 </dev/null &
    pid=$!
    echo "$pid" >"$dir/pid"
    local deadline=$((SECONDS + START_TIMEOUT))
    until port_open "$port"; do
        if ! kill -0 "$pid" 2>/dev/null; then
            tail -n 40 "$dir/server.log" >&2 || true
            die "$name exited before opening port $port"
        fi
        if [ "$SECONDS" -ge "$deadline" ]; then
            tail -n 40 "$dir/server.log" >&2 || true
            die "$name did not open port $port within ${START_TIMEOUT} s"
        fi
        sleep 0.05
    done
    log "$name ready on sc://127.0.0.1:$port (pid $pid) in $((SECONDS - started)) s; log $dir/server.log"
}

cmd_stop() {
    [ $# -eq 1 ] || usage
    local name="$1" pid
    check_name "$name"
    pid="$(recorded_pid "$name")"
    if ! is_our_server "$pid"; then log "$name is not running"; return 0; fi
    kill -TERM "$pid"
    # Sail exits within 1-2 s of SIGTERM.
    for _ in $(seq 1 100); do
        kill -0 "$pid" 2>/dev/null || { log "$name stopped"; rm -f "$RUN_ROOT/$name/pid"; return 0; }
        sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
    rm -f "$RUN_ROOT/$name/pid"
    log "$name killed after 10 s"
}

cmd_status() {
    [ $# -eq 1 ] || usage
    local name="$1" pid port
    check_name "$name"
    pid="$(recorded_pid "$name")"
    port="$(cat "$RUN_ROOT/$name/port" 2>/dev/null || true)"
    if is_our_server "$pid"; then
        log "$name running (pid $pid, port $port)"
        return 0
    fi
    log "$name not running"
    return 3
}

cmd_logs() {
    [ $# -ge 1 ] || usage
    check_name "$1"
    local f="$RUN_ROOT/$1/server.log"
    [ -f "$f" ] || { log "no log for $1"; return 0; }
    echo "--- $1: last ${2:-80} lines of $f ---"
    tail -n "${2:-80}" "$f"
}

[ $# -ge 1 ] || usage
command="$1"; shift
case "$command" in
    start) cmd_start "$@" ;;
    stop) cmd_stop "$@" ;;
    status) cmd_status "$@" ;;
    logs) cmd_logs "$@" ;;
    *) usage ;;
esac
