#!/usr/bin/env bash
# An HTTP CONNECT egress proxy on loopback (tinyproxy from Debian's packages,
# installed when missing), with basic auth, for the egress-proxy tests
# (tests/real_spark/egress.rs). Its state (config, pid, log) lives under
# ${TMPDIR:-/tmp}/spark-connect-egress-PORT.
#
# Usage: scripts/egress-proxy.sh start PORT USER PASSWORD
#        scripts/egress-proxy.sh restart PORT   (kill, then start again: every tunnel is cut)
#        scripts/egress-proxy.sh stop PORT
#        scripts/egress-proxy.sh logs PORT [LINES]
set -euo pipefail

cmd="${1:?usage: $0 start|restart|stop|logs PORT ...}"
port="${2:?port}"
dir="${TMPDIR:-/tmp}/spark-connect-egress-$port"

log() { printf '[egress-proxy] %s\n' "$*" >&2; }

install() {
    command -v tinyproxy >/dev/null && return
    log "tinyproxy not found; installing it from the distribution"
    if [ "$(id -u)" -ne 0 ]; then log "error: not root; install tinyproxy yourself"; exit 1; fi
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq tinyproxy >/dev/null
}

running() { [ -f "$dir/pid" ] && kill -0 "$(cat "$dir/pid")" 2>/dev/null; }

launch() {
    # Foreground mode (-d) under nohup: the pid is ours, not a daemon's.
    nohup tinyproxy -d -c "$dir/tinyproxy.conf" >>"$dir/log" 2>&1 &
    echo $! >"$dir/pid"
    for _ in $(seq 50); do
        if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then return; fi
        sleep 0.1
    done
    log "tinyproxy did not listen on $port"; tail -n 20 "$dir/log" >&2; exit 1
}

halt() {
    if running; then
        kill "$(cat "$dir/pid")" 2>/dev/null || true
        for _ in $(seq 50); do running || break; sleep 0.1; done
        kill -9 "$(cat "$dir/pid")" 2>/dev/null || true
    fi
    rm -f "$dir/pid"
}

case "$cmd" in
    start)
        user="${3:?user}"; password="${4:?password}"
        install
        mkdir -p "$dir"
        halt
        # No ConnectPort line: CONNECT to any port (Spark Connect is not 443).
        cat >"$dir/tinyproxy.conf" <<CONF
Port $port
Listen 127.0.0.1
Allow 127.0.0.1
Timeout 600
MaxClients 200
LogLevel Notice
BasicAuth $user $password
CONF
        launch
        log "tinyproxy on 127.0.0.1:$port (pid $(cat "$dir/pid"))"
        ;;
    restart)
        halt
        launch
        ;;
    stop) halt ;;
    logs) tail -n "${3:-40}" "$dir/log" 2>/dev/null || true ;;
    *) echo "usage: $0 start|restart|stop|logs PORT ..." >&2; exit 2 ;;
esac
