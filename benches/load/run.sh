#!/usr/bin/env bash
# Load run: requests/s of `switchyard mock` direct, through nginx proxy_pass, and through
# Switchyard, side by side in one run. Usage: benches/load/run.sh [seconds] [connections]
# Needs: wrk, nginx (apt-get install wrk nginx-light), a release build.
set -euo pipefail
cd "$(dirname "$0")/../.."
secs=${1:-10}; conns=${2:-64}; rounds=${ROUNDS:-3}
bin=${SWITCHYARD_BIN:-target/release/switchyard}
[ -x "$bin" ] || cargo build --release
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; [ -f "$work/nginx.pid" ] && kill "$(cat "$work/nginx.pid")" 2>/dev/null; rm -rf "$work"' EXIT

. benches/load/gateway.sh
nport=$(port)
cat > "$work/nginx.conf" <<NGINX
worker_processes 1;
pid $work/nginx.pid;
error_log $work/nginx-error.log;
events { worker_connections 4096; }
http {
  access_log off;
  upstream mock { server 127.0.0.1:$mport; keepalive 128; }
  server {
    listen 127.0.0.1:$nport;
    location / {
      proxy_pass http://mock;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
    }
  }
}
NGINX
nginx -c "$work/nginx.conf"
sleep 1
run() { wrk -t2 -c"$conns" -d"${secs}s" -s "$work/chat.lua" "$1" | awk '/Requests\/sec/ {print $2}'; }
echo "# $(date -u +%FT%TZ) $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); wrk -t2 -c$conns -d${secs}s, $rounds rounds"
printf "%-10s %12s %12s %12s\n" round direct nginx switchyard
for r in $(seq "$rounds"); do
  d=$(run "http://127.0.0.1:$mport/v1/chat/completions")
  n=$(run "http://127.0.0.1:$nport/v1/chat/completions")
  s=$(run "http://127.0.0.1:$gport/v1/chat/completions")
  printf "%-10s %12s %12s %12s\n" "$r" "$d" "$n" "$s"
done
