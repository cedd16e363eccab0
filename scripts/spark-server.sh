#!/usr/bin/env bash
# Start, stop and inspect loopback-only Spark Connect servers for tests.
#
# Usage:
#   scripts/spark-server.sh start  NAME PORT [--conf k=v ...] [--token T]
#   scripts/spark-server.sh stop   NAME
#   scripts/spark-server.sh kill   NAME      (SIGKILL at once: a crashed server, for tests)
#   scripts/spark-server.sh status NAME      (exit 0 when running, 3 when not)
#   scripts/spark-server.sh logs   NAME [N]  (last N lines of the server log, default 80)
#
# Each NAME gets its own run dir ${SPARK_CONNECT_RUN:-~/.cache/spark-connect-retry/run}/NAME
# with server.log, pid, port, local/, warehouse/, tmp/ and the Derby home, so
# several servers can run side by side without sharing state.
#
# Environment:
#   SPARK_HOME                     default: the pyspark package of the cached venv
#                                  (installed by scripts/spark-install.sh when missing)
#   SPARK_CONNECT_MASTER           default local[2]  (2-core machines)
#   SPARK_CONNECT_DRIVER_MEMORY    default 1g        (peak RSS ~1.4 GB; 4 servers fit in 24 GiB)
#   SPARK_CONNECT_START_TIMEOUT    seconds to wait for the port, default 120
#   SPARK_CONNECT_STOP_GRACE       seconds between SIGTERM and SIGKILL, default 20
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
RUN_ROOT="${SPARK_CONNECT_RUN:-$HOME/.cache/spark-connect-retry/run}"
MASTER="${SPARK_CONNECT_MASTER:-local[2]}"
DRIVER_MEMORY="${SPARK_CONNECT_DRIVER_MEMORY:-1g}"
START_TIMEOUT="${SPARK_CONNECT_START_TIMEOUT:-120}"
STOP_GRACE="${SPARK_CONNECT_STOP_GRACE:-20}"
SERVER_CLASS=org.apache.spark.sql.connect.service.SparkConnectServer

log() { printf '[spark-server] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

usage() {
    sed -n '2,10p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

# A name becomes a directory: keep it to a safe alphabet so `stop ../x` can't escape.
check_name() {
    [[ "$1" =~ ^[A-Za-z0-9_.-]+$ && "$1" != "." && "$1" != ".." ]] || die "bad server name '$1'"
}

# True when something accepts TCP on 127.0.0.1:PORT. bash's /dev/tcp avoids
# depending on nc/ss; loopback connects fail or succeed at once.
port_open() {
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# True when PID is alive and is a Spark Connect server: we never signal a pid
# that a recycled pid file points at some unrelated process.
is_our_server() {
    local pid="$1" cmdline
    [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || return 1
    cmdline="$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)" || return 1
    [[ "$cmdline" == *"$SERVER_CLASS"* ]]
}

recorded_pid() {
    local f="$RUN_ROOT/$1/pid"
    if [ -f "$f" ]; then cat "$f"; fi
}

recorded_port() {
    local f="$RUN_ROOT/$1/port"
    if [ -f "$f" ]; then cat "$f"; fi
}

resolve_spark_home() {
    if [ -n "${SPARK_HOME:-}" ] && [ -x "$SPARK_HOME/bin/spark-submit" ]; then
        return
    fi
    local line
    line="$("$SCRIPT_DIR/spark-install.sh" | tail -n1)"
    SPARK_HOME="${line#SPARK_HOME=}"
    [ -x "$SPARK_HOME/bin/spark-submit" ] || die "no spark-submit under '$SPARK_HOME'"
    export SPARK_HOME
}

show_log_tail() {
    local name="$1" lines="${2:-80}" f="$RUN_ROOT/$1/server.log"
    if [ -f "$f" ]; then
        echo "----- last $lines lines of $f -----" >&2
        tail -n "$lines" "$f" >&2
        echo "----- end of $name log -----" >&2
    else
        log "no log at $f"
    fi
}

cmd_start() {
    [ $# -ge 2 ] || usage
    local name="$1" port="$2"
    shift 2
    check_name "$name"
    if ! [[ "$port" =~ ^[0-9]+$ ]] || [ "$port" -eq 0 ] || [ "$port" -gt 65535 ]; then
        die "bad port '$port'"
    fi

    local -a confs=()
    local token=""
    while [ $# -gt 0 ]; do
        case "$1" in
            --conf)
                [ $# -ge 2 ] || die "--conf needs k=v"
                [[ "$2" == *=* ]] || die "--conf '$2' is not k=v"
                confs+=(--conf "$2")
                shift 2
                ;;
            --conf=*)
                confs+=(--conf "${1#--conf=}")
                shift
                ;;
            --token)
                [ $# -ge 2 ] || die "--token needs a value"
                token="$2"
                shift 2
                ;;
            *) die "unknown option '$1'" ;;
        esac
    done

    # A leftover server of the same name (an earlier run that was killed) is
    # restarted rather than reused: its confs or token may differ from this call's.
    local old_pid
    old_pid="$(recorded_pid "$name")"
    if is_our_server "$old_pid"; then
        log "$name is already running (pid $old_pid); restarting it"
        cmd_stop "$name"
    fi
    if port_open "$port"; then
        die "port $port is already in use by another process; not starting $name"
    fi

    resolve_spark_home

    local run="$RUN_ROOT/$name"
    mkdir -p "$run"
    # Fresh state per start: tests assert on log markers and expect an empty warehouse.
    rm -rf "$run/local" "$run/warehouse" "$run/tmp" "$run/metastore_db" "$run/pid" "$run/port"
    [ -f "$run/server.log" ] && mv -f "$run/server.log" "$run/server.log.prev"
    mkdir -p "$run/local" "$run/warehouse" "$run/tmp"

    local -a args=(
        --class "$SERVER_CLASS"
        --master "$MASTER"
        --driver-memory "$DRIVER_MEMORY"
        --conf spark.connect.grpc.binding.address=127.0.0.1
        --conf "spark.connect.grpc.binding.port=$port"
        --conf spark.driver.bindAddress=127.0.0.1
        --conf spark.driver.host=127.0.0.1
        --conf spark.ui.enabled=false
        --conf "spark.local.dir=$run/local"
        --conf "spark.sql.warehouse.dir=$run/warehouse"
        # Derby and java.io.tmpdir default to the cwd and /tmp: keep them per server.
        --conf "spark.driver.extraJavaOptions=-Dderby.system.home=$run -Djava.io.tmpdir=$run/tmp"
        # Caller confs last: spark-submit lets a later --conf override an earlier one.
        "${confs[@]}"
    )

    {
        echo "# $(date -u +%FT%TZ) start $name on 127.0.0.1:$port token=$([ -n "$token" ] && echo yes || echo no)"
        echo "# spark-submit ${args[*]}"
    } >"$run/server.log"

    local t0 pid
    t0=$(date +%s)
    # setsid: own session, so a Ctrl-C or hangup in the caller's terminal does not
    # reach java; without job control the background job is no group leader, so
    # setsid execs in place and $! stays the pid that becomes java (spark-submit
    # and spark-class exec). The token goes to this process's environment only
    # (env -u first, so a token exported by the caller never leaks to other servers).
    (
        cd "$run"
        if [ -n "$token" ]; then
            exec env SPARK_CONNECT_AUTHENTICATE_TOKEN="$token" SPARK_HOME="$SPARK_HOME" \
                SPARK_LOCAL_IP=127.0.0.1 SPARK_LOCAL_HOSTNAME=localhost \
                setsid "$SPARK_HOME/bin/spark-submit" "${args[@]}"
        else
            exec env -u SPARK_CONNECT_AUTHENTICATE_TOKEN SPARK_HOME="$SPARK_HOME" \
                SPARK_LOCAL_IP=127.0.0.1 SPARK_LOCAL_HOSTNAME=localhost \
                setsid "$SPARK_HOME/bin/spark-submit" "${args[@]}"
        fi
    ) </dev/null >>"$run/server.log" 2>&1 &
    pid=$!
    echo "$pid" >"$run/pid"
    echo "$port" >"$run/port"

    while :; do
        if ! kill -0 "$pid" 2>/dev/null; then
            show_log_tail "$name"
            rm -f "$run/pid"
            die "$name (pid $pid) exited before opening port $port"
        fi
        if port_open "$port"; then
            break
        fi
        if [ $(($(date +%s) - t0)) -ge "$START_TIMEOUT" ]; then
            show_log_tail "$name"
            cmd_stop "$name" || true
            die "$name did not open port $port within ${START_TIMEOUT}s"
        fi
        sleep 0.25
    done
    log "$name ready on sc://127.0.0.1:$port (pid $pid) in $(($(date +%s) - t0)) s; log $run/server.log"
}

cmd_stop() {
    [ $# -eq 1 ] || usage
    local name="$1" pid port
    check_name "$name"
    pid="$(recorded_pid "$name")"
    port="$(recorded_port "$name")"
    if ! is_our_server "$pid"; then
        if [ -n "$pid" ]; then
            log "$name: recorded pid $pid is not a running Spark Connect server; nothing to stop"
        else
            log "$name: not running (no pid file under $RUN_ROOT/$name)"
        fi
        rm -f "$RUN_ROOT/$name/pid"
        return 0
    fi

    local t0
    t0=$(date +%s)
    kill -TERM "$pid" 2>/dev/null || true
    # is_our_server rather than kill -0: a zombie still answers kill -0.
    while is_our_server "$pid" && [ $(($(date +%s) - t0)) -lt "$STOP_GRACE" ]; do
        sleep 0.2
    done
    if is_our_server "$pid"; then
        log "$name (pid $pid) ignored SIGTERM for ${STOP_GRACE}s; sending SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
        while is_our_server "$pid"; do sleep 0.1; done
    fi
    rm -f "$RUN_ROOT/$name/pid"

    # After a SIGKILL the listening socket can linger for a moment; a restart on
    # the same port must not race it.
    if [ -n "$port" ]; then
        local t1
        t1=$(date +%s)
        while port_open "$port"; do
            if [ $(($(date +%s) - t1)) -ge 30 ]; then
                log "warning: port $port still accepts connections 30 s after $name stopped"
                break
            fi
            sleep 0.2
        done
    fi
    log "$name stopped (pid $pid) in $(($(date +%s) - t0)) s"
}

cmd_kill() {
    [ $# -eq 1 ] || usage
    local name="$1" pid
    check_name "$name"
    pid="$(recorded_pid "$name")"
    is_our_server "$pid" || die "$name: recorded pid '$pid' is not a running Spark Connect server"
    # The process group: spark-submit's java and anything it forked.
    kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid"
    log "$name: killed pid $pid"
}

cmd_status() {
    [ $# -eq 1 ] || usage
    local name="$1" pid port
    check_name "$name"
    pid="$(recorded_pid "$name")"
    port="$(recorded_port "$name")"
    if is_our_server "$pid"; then
        if port_open "$port"; then
            echo "$name running: pid $pid, sc://127.0.0.1:$port"
        else
            echo "$name starting or stuck: pid $pid, port $port not open"
        fi
        return 0
    fi
    echo "$name not running"
    return 3
}

cmd_logs() {
    [ $# -ge 1 ] || usage
    check_name "$1"
    show_log_tail "$1" "${2:-80}" 2>&1
}

[ $# -ge 1 ] || usage
command="$1"
shift
case "$command" in
    start) cmd_start "$@" ;;
    stop) cmd_stop "$@" ;;
    kill) cmd_kill "$@" ;;
    status) cmd_status "$@" ;;
    logs) cmd_logs "$@" ;;
    -h | --help | help) usage ;;
    *) usage ;;
esac
