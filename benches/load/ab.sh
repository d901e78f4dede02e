#!/usr/bin/env bash
# Two Switchyard builds under the same load at the same time: CPU per request of
# build B against build A, for a change too small for run.sh to show (a few percent)
# on a machine whose neighbours move every figure by 10-25% from one run to the next.
# Both gateways (the setup of run.sh, every feature on, each with its own port and
# access log) sit in front of the one static upstream; each round runs one
# `wrk -t1 -c$conns` against each at once, so a noisy moment hits both, and reads
# each gateway's CPU ticks (utime + stime, /proc/PID/stat) and requests. Rounds
# alternate which wrk starts first. Prints per round and mode the CPU per request of
# each and B/A, then the median B/A (below 1: B costs less).
#
# Usage: benches/load/ab.sh A_BINARY B_BINARY [seconds] [rounds] [connections]
# Environment: MODES ("json stream"); B_SED, a sed script applied to B's config only
# (the same binary twice with B_SED='/^telemetry:/d' gives the access log's cost);
# SY_SED, one applied to both configs first (setup.sh; two builds with a feature off).
# Needs: wrk, nginx, python3, two release builds.
set -euo pipefail
cd "$(dirname "$0")/../.."
a_bin=$1; b_bin=$2; secs=${3:-8}; rounds=${4:-5}; conns=${5:-32}
SWITCHYARD_BIN=$a_bin
. benches/load/setup.sh
start_upstream ""
# Gateway B: the same configuration on its own port, its access log beside A's.
bport=$(port)
sed -e "s/127.0.0.1:$gport/127.0.0.1:$bport/" -e "s#logs/access.log#logs/access-b.log#" \
  -e "${B_SED:-}" "$work/sy.yaml" > "$work/sy-b.yaml"
start_gateway ""
apid=$gpid
check_gateway
SWITCHYARD_LOG=warn "$b_bin" serve --config "$work/sy-b.yaml" >/dev/null 2>"$work/gateway-b.log" &
bpid=$!
aport=$gport; gport=$bport; check_gateway; gport=$aport
b_url() { url switchyard "$1" | sed "s/:$aport/:$bport/"; }
echo "# $(date -u +%FT%TZ) $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); wrk -t1 -c$conns -d${secs}s against each at once, $rounds rounds; A $a_bin, B $b_bin${SY_SED:+, both with SY_SED '$SY_SED'}${B_SED:+, B with B_SED '$B_SED'}"
res="$work/ab"
for mode in ${MODES:-json stream}; do
  wrk -t1 -c"$conns" -d2s -s "$work/$mode.lua" "$(url switchyard "$mode")" >/dev/null &
  wrk -t1 -c"$conns" -d2s -s "$work/$mode.lua" "$(b_url "$mode")" >/dev/null
  wait $! # the first wrk (a bare `wait` would wait for the gateways too)
  for r in $(seq "$rounds"); do
    ta0=$(ticks "$apid"); tb0=$(ticks "$bpid")
    if [ $((r % 2)) = 1 ]; then
      wrk -t1 -c"$conns" -d"${secs}s" -s "$work/$mode.lua" "$(url switchyard "$mode")" > "$work/out-a" &
      wrk -t1 -c"$conns" -d"${secs}s" -s "$work/$mode.lua" "$(b_url "$mode")" > "$work/out-b"
    else
      wrk -t1 -c"$conns" -d"${secs}s" -s "$work/$mode.lua" "$(b_url "$mode")" > "$work/out-b" &
      wrk -t1 -c"$conns" -d"${secs}s" -s "$work/$mode.lua" "$(url switchyard "$mode")" > "$work/out-a"
    fi
    wait $!
    ta1=$(ticks "$apid"); tb1=$(ticks "$bpid")
    for s in a b; do
      if grep -q 'Non-2xx\|Socket errors' "$work/out-$s"; then cat "$work/out-$s" >&2; fi
    done
    echo "$mode $r $(awk '/requests in/ {print $1}' "$work/out-a") $((ta1 - ta0)) $(awk '/requests in/ {print $1}' "$work/out-b") $((tb1 - tb0))" >> "$res"
  done
done
python3 - "$res" "$(getconf CLK_TCK)" <<'PY'
import sys, statistics as st
tck = int(sys.argv[2])
rows = [l.split() for l in open(sys.argv[1])]
print(f"{'mode':7} {'round':>5} {'A req':>8} {'A us/req':>9} {'B req':>8} {'B us/req':>9} {'B/A':>6}")
for mode in dict.fromkeys(r[0] for r in rows):
    ratios = []
    for m, r, ra, ta, rb, tb in rows:
        if m != mode:
            continue
        ca = int(ta) / tck * 1e6 / int(ra)
        cb = int(tb) / tck * 1e6 / int(rb)
        ratios.append(cb / ca)
        print(f"{m:7} {r:>5} {ra:>8} {ca:9.1f} {rb:>8} {cb:9.1f} {cb / ca:6.3f}")
    print(f"## {mode}: CPU per request B/A median {st.median(ratios):.3f} (rounds {', '.join(f'{x:.3f}' for x in ratios)})")
PY
