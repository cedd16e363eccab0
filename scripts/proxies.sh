#!/usr/bin/env bash
# Real load balancers (nginx, HAProxy) on loopback, TLS with a throwaway CA,
# in front of one Spark Connect server, set to make the cuts they make in
# production (GOAWAY after N requests, idle and read timeouts, reloads, a
# backend marked down, errors answered by the proxy itself).
#
# Usage:
#   scripts/proxies.sh start  BACKEND_PORT BASE  install if missing, make certs, start all
#   scripts/proxies.sh stop   BASE               stop nginx and haproxy of BASE
#   scripts/proxies.sh reload nginx|haproxy BASE graceful reload (old workers cut after 2 s)
#   scripts/proxies.sh refuse CODE BASE          nginx (BASE+0) answers CODE (429/502/503/504) itself
#   scripts/proxies.sh pass   BASE               nginx (BASE+0) forwards again
#   scripts/proxies.sh backend down|up BASE      haproxy marks its server down (cutting its streams) / up
#   scripts/proxies.sh ca     BASE               print the CA file's path
#   scripts/proxies.sh status BASE               exit 0 when both run
#
# Ports (all 127.0.0.1; the certificate is for `localhost` and 127.0.0.1):
#   BASE+0  nginx: TLS, grpc_pass; `refuse` makes it answer an HTTP error
#   BASE+1  nginx: keepalive_requests 1 (GOAWAY after every request)
#   BASE+2  nginx: grpc_read_timeout 1s and keepalive_timeout 2s (cuts a silent stream, an idle connection)
#   BASE+3  haproxy: TLS, HTTP/2 end to end, timeout server/client 1s
#
# State: ${SPARK_CONNECT_RUN:-~/.cache/spark-connect-retry/run}/proxies-BASE
# (configs, certs, pids, logs). The CA and keys are made at run time, never committed.
set -euo pipefail

RUN_ROOT="${SPARK_CONNECT_RUN:-$HOME/.cache/spark-connect-retry/run}"

log() { printf '[proxies] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }
usage() { sed -n '2,25p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2; }

check_port() { [[ "$1" =~ ^[0-9]+$ ]] && [ "$1" -ge 1024 ] && [ "$1" -le 65530 ] || die "bad port '$1'"; }
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
dir_of() { echo "$RUN_ROOT/proxies-$1"; }

install_if_missing() {
    if command -v nginx >/dev/null && command -v haproxy >/dev/null && command -v openssl >/dev/null; then
        return
    fi
    log "installing nginx, haproxy and openssl from the distribution"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq nginx haproxy openssl >/dev/null
}

make_certs() {
    local d="$1"
    [ -s "$d/server.pem" ] && return
    # A throwaway CA, and a server certificate for localhost/127.0.0.1 signed by it.
    openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=spark-connect-retry test CA" \
        -keyout "$d/ca.key" -out "$d/ca.pem" 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -subj "/CN=localhost" \
        -keyout "$d/server.key" -out "$d/server.csr" 2>/dev/null
    printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' >"$d/ext.cnf"
    openssl x509 -req -in "$d/server.csr" -CA "$d/ca.pem" -CAkey "$d/ca.key" -CAcreateserial \
        -days 2 -extfile "$d/ext.cnf" -out "$d/server.crt" 2>/dev/null
    cat "$d/server.crt" "$d/server.key" >"$d/server.pem" # haproxy wants both in one file
    chmod 600 "$d"/*.key "$d/server.pem"
}

nginx_server() { # port extra-directives
    cat <<EOF
    server {
        listen 127.0.0.1:$1 ssl http2;
        ssl_certificate     $D/server.crt;
        ssl_certificate_key $D/server.key;
        $2
        location / {
            grpc_pass grpc://spark;
        }
    }
EOF
}

write_nginx_conf() {
    local backend="$1" base="$2"
    # `refuse CODE` creates $D/refuse-CODE; nginx checks for it on every request.
    local refuse=""
    for code in 429 502 503 504; do
        refuse+="if (-f $D/refuse-$code) { return $code; } "
    done
    # Workers must see the refuse-* files in the run dir (under $HOME): they
    # run as the user who started nginx.
    local user=""
    [ "$(id -u)" -eq 0 ] && user="user root;"
    cat >"$D/nginx.conf" <<EOF
$user
worker_processes 1;
pid $D/nginx.pid;
error_log $D/nginx-error.log warn;
daemon on;
# A reload drains old workers; after this long they close what is left (a cut).
worker_shutdown_timeout 2s;
events { worker_connections 256; }
http {
    access_log $D/nginx-access.log;
    client_body_temp_path $D/nginx-tmp;
    proxy_temp_path $D/nginx-tmp;
    fastcgi_temp_path $D/nginx-tmp;
    uwsgi_temp_path $D/nginx-tmp;
    scgi_temp_path $D/nginx-tmp;
    client_max_body_size 0;
    upstream spark { server 127.0.0.1:$backend; keepalive 8; }
$(nginx_server $((base + 0)) "$refuse")
$(nginx_server $((base + 1)) "keepalive_requests 1;")
$(nginx_server $((base + 2)) "grpc_read_timeout 1s; keepalive_timeout 2s;")
}
EOF
}

write_haproxy_conf() {
    local backend="$1" base="$2"
    cat >"$D/haproxy.cfg" <<EOF
global
    log stderr format short local0 warning
    stats socket $D/haproxy.sock mode 600 level admin
    # A reload hands over; after this long the old process closes what is left (a cut).
    hard-stop-after 2s
defaults
    mode http
    timeout connect 2s
    timeout client 1s
    timeout server 1s
frontend fe
    bind 127.0.0.1:$((base + 3)) ssl crt $D/server.pem alpn h2
    default_backend spark
backend spark
    server s1 127.0.0.1:$backend proto h2
EOF
}

wait_ports() {
    local base="$1" p i
    for p in $((base)) $((base + 1)) $((base + 2)) $((base + 3)); do
        for i in $(seq 1 100); do
            port_open "$p" && break
            sleep 0.1
        done
        port_open "$p" || die "nothing listens on $p (see $D/*.log)"
    done
}

start_haproxy() {
    haproxy -f "$D/haproxy.cfg" -p "$D/haproxy.pid" -D "$@" 2>>"$D/haproxy.log"
}

cmd_start() {
    local backend="$1" base="$2"
    check_port "$backend"; check_port "$base"
    install_if_missing
    D="$(dir_of "$base")"
    mkdir -p "$D/nginx-tmp"
    rm -f "$D"/refuse-*
    make_certs "$D"
    write_nginx_conf "$backend" "$base"
    write_haproxy_conf "$backend" "$base"
    cmd_stop "$base" 2>/dev/null || true
    nginx -t -q -p "$D" -c "$D/nginx.conf" 2>>"$D/nginx-error.log" || die "nginx config rejected (see $D/nginx-error.log)"
    nginx -p "$D" -c "$D/nginx.conf"
    start_haproxy
    wait_ports "$base"
    log "nginx on $base..$((base + 2)), haproxy on $((base + 3)), TLS with CA $D/ca.pem, in front of 127.0.0.1:$backend"
}

pid_alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

cmd_stop() {
    D="$(dir_of "$1")"
    [ -d "$D" ] || return 0
    if pid_alive "$D/nginx.pid"; then
        nginx -p "$D" -c "$D/nginx.conf" -s stop 2>/dev/null || kill "$(cat "$D/nginx.pid")"
    fi
    if pid_alive "$D/haproxy.pid"; then
        # The pid file lists the process of each generation; a reload may leave two.
        while read -r pid; do kill "$pid" 2>/dev/null || true; done <"$D/haproxy.pid"
    fi
    rm -f "$D"/refuse-*
}

cmd_reload() {
    D="$(dir_of "$2")"
    case "$1" in
        nginx) nginx -p "$D" -c "$D/nginx.conf" -s reload ;;
        haproxy) start_haproxy -sf $(cat "$D/haproxy.pid") ;;
        *) usage ;;
    esac
}

haproxy_cmd() {
    python3 - "$D/haproxy.sock" "$1" <<'EOF'
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.sendall((sys.argv[2] + "\n").encode())
print(s.recv(4096).decode().strip())
EOF
}

case "${1:-}" in
    start) [ $# -eq 3 ] || usage; cmd_start "$2" "$3" ;;
    stop) [ $# -eq 2 ] || usage; cmd_stop "$2" ;;
    reload) [ $# -eq 3 ] || usage; cmd_reload "$2" "$3" ;;
    refuse)
        [ $# -eq 3 ] || usage
        [[ "$2" =~ ^(429|502|503|504)$ ]] || die "refuse takes 429, 502, 503 or 504"
        D="$(dir_of "$3")"; rm -f "$D"/refuse-*; touch "$D/refuse-$2" ;;
    pass) [ $# -eq 2 ] || usage; D="$(dir_of "$2")"; rm -f "$D"/refuse-* ;;
    backend)
        [ $# -eq 3 ] || usage; D="$(dir_of "$3")"
        case "$2" in
            # Down: no new requests, and the streams in flight are cut.
            down) haproxy_cmd "disable server spark/s1"; haproxy_cmd "shutdown sessions server spark/s1" ;;
            up) haproxy_cmd "enable server spark/s1" ;;
            *) usage ;;
        esac ;;
    ca) [ $# -eq 2 ] || usage; echo "$(dir_of "$2")/ca.pem" ;;
    status)
        [ $# -eq 2 ] || usage; D="$(dir_of "$2")"
        pid_alive "$D/nginx.pid" && pid_alive "$D/haproxy.pid" ;;
    *) usage ;;
esac
