#!/usr/bin/env bash
# Connection scaling, nginx `proxy_pass` and Switchyard side by side (issue 17): for
# each connection count, `wrk --latency` against each proxy in turn (JSON requests,
# every Switchyard feature on, as run.sh), printing requests/s, p50 and p99 latency and
# the proxy's RSS (the largest VmRSS sampled every 200 ms during the run); then per
# proxy the memory per connection under load (RSS slope from the fewest to the most
# connections). First the idle case, on the fresh processes: N keep-alive
# connections that each made one request and stay open, RSS before and with them
# held, per connection.
#
# Usage: benches/load/conns.sh [seconds] [connection counts...] (default 8 64 512 2048)
# Environment: SWITCHYARD_BIN, ROUNDS (1: rounds of the loaded part, alternating),
# IDLE (2048: connections held in the idle part; 0 skips it), SY_EXTRA_YAML.
# Needs: wrk, nginx, python3, a release build, `ulimit -n` above 3 × the most connections.
set -euo pipefail
cd "$(dirname "$0")/../.."
secs=${1:-8}; shift || true
counts=${*:-64 512 2048}; rounds=${ROUNDS:-1}; idle=${IDLE:-2048}
NGINX_CONNS=16384 . benches/load/setup.sh
start_upstream ""
start_nginx ""
SWITCHYARD_LOG=warn "$bin" serve --config "$work/sy.yaml" >/dev/null 2>"$work/gateway.log" &
gpid=$!
check_gateway

# Idle keep-alive connections first, on fresh processes (memory a load run leaves
# behind would hide them): each makes one request (one at a time, so the proxies
# need a single upstream connection), then stays open.
if [ "$idle" != 0 ]; then
cat > "$work/hold.py" <<'PY'
import socket, sys, time
host, port, n, path, auth, body, ready = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6].encode(), sys.argv[7]
req = (f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
       f"Authorization: Bearer {auth}\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body
socks = []
for i in range(n): # one request at a time: the proxy needs one upstream connection
    s = socket.create_connection((host, port))
    s.settimeout(30)
    s.sendall(req)
    if not s.recv(65536).startswith(b"HTTP/1.1 200"): # small: one recv holds it
        sys.exit("a request failed")
    socks.append(s)
open(ready, "w").close()
time.sleep(3600)
PY
echo "# idle: $idle keep-alive connections, one request each, then held open"
for t in nginx switchyard; do
  pid=$(pid_of $t)
  path=/v1/chat/completions
  before=$(rss "$pid")
  rm -f "$work/ready"
  python3 "$work/hold.py" 127.0.0.1 "$(echo "$(url $t json)" | sed 's|.*:\([0-9]*\)/.*|\1|')" "$idle" "$path" "$key" "$(body json)" "$work/ready" & holder=$!
  for _ in $(seq 600); do [ -f "$work/ready" ] && break; sleep 0.1; done
  [ -f "$work/ready" ] || { echo "$t: the idle connections did not all get an answer" >&2; exit 1; }
  sleep 2
  held=$(rss "$pid")
  kill $holder; wait $holder 2>/dev/null || true
  sleep 2
  python3 -c "print(f'## idle $t: RSS {$before / 1024:.1f} MiB before, {$held / 1024:.1f} MiB with $idle connections held, {($held - $before) / $idle:.1f} KiB per connection')"
done
fi

# wrk's latency in ms ("1.23ms", "450.00us", "1.02s").
ms() { python3 -c "import re,sys; v,u=re.match(r'([\d.]+)(\w+)','$1').groups(); print(f'{float(v)*{\"us\":1e-3,\"ms\":1,\"s\":1e3,\"m\":6e4}[u]:.2f}')"; }
peak_rss() { # PID FILE: the largest VmRSS (KiB) every 200 ms until killed
  while :; do rss "$1" >> "$2"; sleep 0.2; done
}
res="$work/results"
echo "# $(date -u +%FT%TZ) $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), load $(cut -d' ' -f1-3 /proc/loadavg); wrk -t2 --latency -d${secs}s, $rounds rounds; $bin"
for t in nginx switchyard; do wrk -t2 -c64 -d1s -s "$work/json.lua" "$(url $t json)" >/dev/null; done
for r in $(seq "$rounds"); do for c in $counts; do for t in nginx switchyard; do
  pid=$(pid_of $t)
  : > "$work/rss"
  peak_rss "$pid" "$work/rss" & sampler=$!
  out=$(wrk -t2 -c"$c" -d"${secs}s" --latency -s "$work/json.lua" "$(url $t json)")
  kill $sampler; wait $sampler 2>/dev/null || true
  if echo "$out" | grep -q 'Non-2xx\|Socket errors'; then echo "$t $c: $(echo "$out" | grep 'Non-2xx\|Socket errors')" >&2; fi
  p50=$(ms "$(echo "$out" | awk '$1 == "50%" {print $2}')")
  p99=$(ms "$(echo "$out" | awk '$1 == "99%" {print $2}')")
  rps=$(echo "$out" | awk '/Requests\/sec/ {print $2}')
  peak=$(sort -n "$work/rss" | tail -1)
  echo "$r $c $t $rps $p50 $p99 $peak" >> "$res"
  sleep 1 # let closed connections go
done; done; done
python3 - "$res" <<'PY'
import sys, statistics as st
rows = [l.split() for l in open(sys.argv[1])]
print(f"{'round':>5} {'conns':>6} {'target':11} {'req/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'RSS MiB':>8}")
for r, c, t, rps, p50, p99, rss in rows:
    print(f"{r:>5} {c:>6} {t:11} {float(rps):9.0f} {float(p50):8.2f} {float(p99):8.2f} {int(rss) / 1024:8.1f}")
by = {}
for r, c, t, rps, p50, p99, rss in rows:
    by.setdefault((int(c), t), []).append((float(rps), float(p99), int(rss)))
conns = sorted({c for c, _ in by})
for c in conns:
    n, s = by[(c, "nginx")], by[(c, "switchyard")]
    med = lambda xs, i: st.median(x[i] for x in xs)
    print(f"## {c} connections: req/s nginx {med(n, 0):.0f}, switchyard {med(s, 0):.0f} ({med(s, 0) / med(n, 0):.2f}x); "
          f"p99 nginx {med(n, 1):.2f} ms, switchyard {med(s, 1):.2f} ms ({med(s, 1) / med(n, 1):.2f}x); "
          f"RSS nginx {med(n, 2) / 1024:.1f} MiB, switchyard {med(s, 2) / 1024:.1f} MiB")
if len(conns) > 1:
    lo, hi = conns[0], conns[-1]
    for t in ("nginx", "switchyard"):
        per = (st.median(x[2] for x in by[(hi, t)]) - st.median(x[2] for x in by[(lo, t)])) / (hi - lo)
        print(f"## {t}: {per:.1f} KiB per connection under load ({lo} -> {hi} connections)")
PY

