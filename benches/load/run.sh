#!/usr/bin/env bash
# Side-by-side load run: the static upstream direct, nginx `proxy_pass` in front of it,
# and Switchyard in front of it, for non-streaming chat completions (`json`) and for
# streams of 24 SSE events (`stream`), in alternating rounds of one run. Prints per
# round and target: requests/s, CPU per request (utime + stime of the server process
# from /proc/PID/stat over the round, divided by the requests served) and RSS (VmRSS
# halfway through the round); then per mode the medians and Switchyard's ratios to
# nginx (throughput ratio per round, median; CPU per request).
#
# Usage: benches/load/run.sh [seconds] [connections]
# Environment: ROUNDS (3), MODES ("json stream"), SWITCHYARD_BIN
# (target/release/switchyard), PIN=1 to pin the measured proxy to CPU 0 and wrk and
# the upstream to CPU 1 (taskset), ADMISSION=0 to run Switchyard without its API key
# and limits (benches/load/admission.sh), SY_EXTRA_YAML (appended to its config).
# Needs: wrk, nginx (apt-get install wrk nginx-light), python3, a release build.
#
# The upstream is one nginx worker answering with `return 200 '...'` (see upstream.sh):
# the cheapest static upstream, so it takes the least CPU from the measured proxy.
# nginx `proxy_pass` runs one worker with a keep-alive upstream pool. Switchyard runs
# with its features on: the policy set benches/load/bench.policy (three rules that
# every request evaluates, then weighted round-robin, a stateful strategy), metrics
# (always on), the access line (`switchyard::access=info`, written to /dev/null),
# API-key authentication with one key, and global and per-key request and token
# limits high enough never to refuse (every request is checked and charged).
set -euo pipefail
cd "$(dirname "$0")/../.."
secs=${1:-6}; conns=${2:-64}; rounds=${ROUNDS:-3}; modes=${MODES:-json stream}
bin=${SWITCHYARD_BIN:-target/release/switchyard}
[ -x "$bin" ] || cargo build --release
work=$(mktemp -d)
cleanup() {
  kill $(jobs -p) 2>/dev/null || true
  for p in "$work"/*.pid; do [ -f "$p" ] && kill "$(cat "$p")" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT
port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
uport=$(port); nport=$(port); gport=$(port)
if [ "${PIN:-0}" = 1 ]; then proxy_cpu="taskset -c 0"; side_cpu="taskset -c 1"; else proxy_cpu=""; side_cpu=""; fi

. benches/load/upstream.sh
$side_cpu nginx -c "$work/upstream.conf"

cat > "$work/nginx.conf" <<NGINX
worker_processes 1;
pid $work/nginx.pid;
error_log $work/nginx-error.log;
events { worker_connections 4096; }
http {
  access_log off;
  keepalive_requests 1000000;
  upstream up { server 127.0.0.1:$uport; keepalive 128; keepalive_requests 1000000; }
  server {
    listen 127.0.0.1:$nport;
    location / {
      proxy_pass http://up;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
    }
  }
}
NGINX
$proxy_cpu nginx -c "$work/nginx.conf"

key=sy-bench-key
hash=$(printf %s "$key" | sha256sum | cut -d' ' -f1)
admission="auth: { mode: keys, keys: [ { id: key-bench, hash: \"sha256:$hash\", org: bench } ] }
limits: { global: { requests_per_min: 100000000, tokens_per_min: 100000000000 }, per_key: { requests_per_min: 100000000, tokens_per_min: 100000000000 } }"
[ "${ADMISSION:-1}" = 0 ] && admission=""
mkdir "$work/policies"
cp benches/load/bench.policy "$work/policies/"
cat > "$work/sy.yaml" <<YAML
server: { listen: 127.0.0.1:$gport }
policies: { dir: $work/policies }
$admission
providers:
  up: { kind: openai-compatible, base_url: http://127.0.0.1:$uport/v1 }
  sse: { kind: openai-compatible, base_url: http://127.0.0.1:$uport/sse/v1 }
models:
  bench: { endpoints: [ { provider: up, model: mock-1 } ] }
  bench-stream: { endpoints: [ { provider: sse, model: mock-1 } ] }
${SY_EXTRA_YAML:-}
YAML
# The access lines go to stdout (/dev/null); warnings and errors to gateway.log.
SWITCHYARD_LOG=warn,switchyard::access=info $proxy_cpu "$bin" serve --config "$work/sy.yaml" >/dev/null 2>"$work/gateway.log" &
gpid=$!

for mode in json stream; do
  model=bench; [ $mode = stream ] && model=bench-stream
  sed "s/MODEL/$model/" benches/load/chat.lua > "$work/$mode.lua"
  [ $mode = stream ] && sed -i 's/"max_tokens":16}/"max_tokens":16,"stream":true,"stream_options":{"include_usage":true}}/' "$work/$mode.lua"
  echo "wrk.headers[\"Authorization\"] = \"Bearer $key\"" >> "$work/$mode.lua"
done
path() { [ "$1" = stream ] && echo /sse/v1/chat/completions || echo /v1/chat/completions; }
url() { # target mode
  case $1 in
    direct) echo "http://127.0.0.1:$uport$(path "$2")" ;;
    nginx) echo "http://127.0.0.1:$nport$(path "$2")" ;;
    switchyard) echo "http://127.0.0.1:$gport/v1/chat/completions" ;;
  esac
}
pid_of() {
  case $1 in
    direct) pgrep -P "$(cat "$work/upstream.pid")" ;;
    nginx) pgrep -P "$(cat "$work/nginx.pid")" ;;
    switchyard) echo "$gpid" ;;
  esac
}
for _ in $(seq 50); do curl -sf "http://127.0.0.1:$gport/health" >/dev/null && break; sleep 0.1; done
curl -sf "http://127.0.0.1:$gport/health" >/dev/null || { cat "$work/gateway.log" >&2; exit 1; }

# One request per mode through Switchyard, checked, so a broken setup fails loudly.
body() { sed -n "s/^wrk.body = '\(.*\)'$/\1/p" "$work/$1.lua"; }
out=$(curl -sf -H "Authorization: Bearer $key" -H 'content-type: application/json' -d "$(body json)" "$(url switchyard json)")
echo "$out" | grep -q '"model":"bench"' || { echo "bad JSON answer: $out" >&2; exit 1; }
out=$(curl -sfN -H "Authorization: Bearer $key" -H 'content-type: application/json' -d "$(body stream)" "$(url switchyard stream)")
[ "$(echo "$out" | grep -c '^data: ')" = 24 ] && echo "$out" | grep -q '^data: \[DONE\]' \
  && ! echo "$out" | grep -q mock-1 || { echo "bad stream: $out" >&2; exit 1; }

ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
rss() { awk '/VmRSS/ {print $2}' "/proc/$1/status"; }
res="$work/results"
measure() { # target mode round
  local pid t0 t1 out
  pid=$(pid_of "$1")
  t0=$(ticks "$pid")
  (sleep "$(python3 -c "print($secs / 2)")"; rss "$pid" > "$work/rss") &
  out=$($side_cpu wrk -t2 -c"$conns" -d"${secs}s" -s "$work/$2.lua" "$(url "$1" "$2")")
  t1=$(ticks "$pid")
  wait $!
  if echo "$out" | grep -q 'Non-2xx\|Socket errors'; then echo "$1 $2: $out" >&2; fi
  echo "$2 $3 $1 $(echo "$out" | awk '/requests in/ {print $1}') $(echo "$out" | awk '/Requests\/sec/ {print $2}') $((t1 - t0)) $(cat "$work/rss")" >> "$res"
}
for mode in $modes; do for t in direct nginx switchyard; do # warm-up
  $side_cpu wrk -t2 -c"$conns" -d1s -s "$work/$mode.lua" "$(url $t $mode)" >/dev/null
done; done
echo "# $(date -u +%FT%TZ) $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), load $(cut -d' ' -f1-3 /proc/loadavg); wrk -t2 -c$conns -d${secs}s, $rounds rounds, pinned: ${PIN:-0}, admission: ${ADMISSION:-1}; $bin"
for r in $(seq "$rounds"); do
  for mode in $modes; do for t in direct nginx switchyard; do measure $t "$mode" "$r"; done; done
done
python3 - "$res" "$(getconf CLK_TCK)" <<'PY'
import sys, statistics as st
rows = [l.split() for l in open(sys.argv[1])]
tck = int(sys.argv[2])
med = st.median
print(f"{'mode':7} {'round':>5} {'target':11} {'req/s':>10} {'CPU us/req':>10} {'RSS MiB':>8}")
for mode, r, t, reqs, rps, ticks, rss in rows:
    print(f"{mode:7} {r:>5} {t:11} {float(rps):10.0f} {int(ticks) / tck * 1e6 / int(reqs):10.1f} {int(rss) / 1024:8.1f}")
for mode in dict.fromkeys(r[0] for r in rows):
    by = {}
    for m, r, t, reqs, rps, ticks, rss in rows:
        if m == mode:
            by.setdefault(t, []).append((int(r), float(rps), int(ticks) / tck * 1e6 / int(reqs), int(rss) / 1024))
    rps = {t: {r: v for r, v, _, _ in xs} for t, xs in by.items()}
    ratio = [rps["switchyard"][r] / rps["nginx"][r] for r in rps["nginx"]]
    cpu = {t: med(c for _, _, c, _ in xs) for t, xs in by.items()}
    print(f"## {mode}: median req/s direct {med(rps['direct'].values()):.0f}, nginx {med(rps['nginx'].values()):.0f}, "
          f"switchyard {med(rps['switchyard'].values()):.0f}; switchyard/nginx throughput {med(ratio):.2f}x "
          f"(rounds {', '.join(f'{x:.2f}' for x in ratio)}); CPU per request (median) nginx {cpu['nginx']:.1f} us, "
          f"switchyard {cpu['switchyard']:.1f} us ({cpu['switchyard'] / cpu['nginx']:.2f}x), upstream direct {cpu['direct']:.1f} us; "
          f"RSS max nginx {max(x[3] for x in by['nginx']):.1f} MiB, switchyard {max(x[3] for x in by['switchyard']):.1f} MiB")
PY
