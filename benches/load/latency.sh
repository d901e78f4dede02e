#!/usr/bin/env bash
# Added latency at a fixed, moderate rate (issue 17: "added p99 at 500 rps vs direct
# <= nginx's added p99 + 0.2 ms"). Same setup as run.sh (static upstream, nginx
# `proxy_pass`, Switchyard with every feature on); each target gets RATE requests/s
# for the given seconds from `wrk -t1 -c$CONNS --latency`, paced by a Lua `delay()`
# of CONNS/RATE seconds after each answer (closed loop at low load: latency is far
# below the pacing, so the rate holds), alternating direct, nginx and Switchyard for
# ROUNDS rounds. Prints each run's rate, p50 and p99, and per mode the median p99
# of each target and the p99 each proxy adds to direct.
# Usage: benches/load/latency.sh [seconds]; RATE (500), CONNS (10), ROUNDS (3),
# MODES ("json stream"), SWITCHYARD_BIN. Needs: wrk, nginx, python3, a release build.
set -euo pipefail
cd "$(dirname "$0")/../.."
secs=${1:-10}; rate=${RATE:-500}; conns=${CONNS:-10}; rounds=${ROUNDS:-3}; modes=${MODES:-json stream}
. benches/load/setup.sh
start_upstream ""
start_nginx ""
start_gateway ""
check_gateway
delay_ms=$(python3 -c "print($conns * 1000 / $rate)")
for m in $modes; do
  cp "$work/$m.lua" "$work/$m-paced.lua"
  echo "function delay() return $delay_ms end" >> "$work/$m-paced.lua"
done
res="$work/latency"
# wrk prints latencies as 812.00us, 1.20ms or 2.00s: in ms.
to_ms() { python3 -c "import sys; v=sys.argv[1]; print(float(v[:-2])/1000 if v.endswith('us') else float(v[:-2]) if v.endswith('ms') else float(v[:-1])*1000)" "$1"; }
echo "# $(date -u +%FT%TZ) $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), load $(cut -d' ' -f1-3 /proc/loadavg); $rate req/s over $conns connections, ${secs}s per run, $rounds rounds; $bin"
for m in $modes; do for t in direct nginx switchyard; do # warm-up
  wrk -t1 -c"$conns" -d1s -s "$work/$m-paced.lua" "$(url $t "$m")" >/dev/null
done; done
for r in $(seq "$rounds"); do
  for m in $modes; do for t in direct nginx switchyard; do
    out=$(wrk -t1 -c"$conns" -d"${secs}s" --latency -s "$work/$m-paced.lua" "$(url $t "$m")")
    if echo "$out" | grep -q 'Non-2xx\|Socket errors'; then echo "$t $m: $out" >&2; fi
    p50=$(to_ms "$(echo "$out" | awk '$1 == "50%" {print $2}')")
    p99=$(to_ms "$(echo "$out" | awk '$1 == "99%" {print $2}')")
    rps=$(echo "$out" | awk '/Requests\/sec/ {print $2}')
    echo "$m $r $t $rps $p50 $p99" | tee -a "$res"
  done; done
done
python3 - "$res" <<'PY'
import sys, statistics as st
rows = [l.split() for l in open(sys.argv[1])]
for mode in dict.fromkeys(r[0] for r in rows):
    p99 = {}
    for m, r, t, rps, p50, q in rows:
        if m == mode:
            p99.setdefault(t, {})[r] = float(q)
    added = {t: [p99[t][r] - p99["direct"][r] for r in p99["direct"]] for t in ("nginx", "switchyard")}
    med = {t: st.median(v.values()) for t, v in p99.items()}
    an, asy = st.median(added["nginx"]), st.median(added["switchyard"])
    print(f"## {mode}: p99 (median of rounds) direct {med['direct']:.3f} ms, nginx {med['nginx']:.3f} ms, "
          f"switchyard {med['switchyard']:.3f} ms; added p99 nginx {an:+.3f} ms, switchyard {asy:+.3f} ms "
          f"(switchyard - nginx {asy - an:+.3f} ms; target <= +0.200 ms)")
PY
