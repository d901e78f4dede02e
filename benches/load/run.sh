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
# and limits (benches/load/admission.sh), SY_EXTRA_YAML (appended to its config),
# SY_SERVER (keys added to its `server:` map, e.g. "threads: 1"), NGINX_WORKERS
# (nginx `proxy_pass`'s worker processes, 1; CPU and RSS are summed over them).
# Needs: wrk, nginx (apt-get install wrk nginx-light), python3, a release build.
#
# The upstream is one nginx worker answering with `return 200 '...'` (see upstream.sh):
# the cheapest static upstream, so it takes the least CPU from the measured proxy.
# nginx `proxy_pass` runs one worker with a keep-alive upstream pool. Switchyard runs
# with every feature on (see setup.sh, which writes all three configs).
set -euo pipefail
cd "$(dirname "$0")/../.."
secs=${1:-6}; conns=${2:-64}; rounds=${ROUNDS:-3}; modes=${MODES:-json stream}
if [ "${PIN:-0}" = 1 ]; then proxy_cpu="taskset -c 0"; side_cpu="taskset -c 1"; else proxy_cpu=""; side_cpu=""; fi
. benches/load/setup.sh
start_upstream "$side_cpu"
start_nginx "$proxy_cpu"
# Warnings go to stderr (gateway.log); the access lines to the access log file.
start_gateway "$proxy_cpu"
check_gateway

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
