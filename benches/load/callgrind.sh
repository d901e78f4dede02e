#!/usr/bin/env bash
# Instructions per request in the gateway process, counted by valgrind's callgrind:
# repeatable to a fraction of a percent even while other builds share the cores, so
# it is the before/after measure of a change on the request path. Starts the static
# upstream and Switchyard (every feature on, as run.sh) under callgrind, warms up,
# zeroes the counters, sends `wrk -t1 -c4` for the given seconds, dumps the counters
# and prints instructions per request for each mode, then the top functions by
# exclusive (self) and inclusive instructions per request (cgtop.py).
#
# Usage: benches/load/callgrind.sh [seconds] [top]
# Environment: MODES ("json stream"; also `claude-json`, `claude-stream`, `gemini-json`,
# `gemini-stream`, `nova-json`, `nova-stream` and `mix`: Switchyard translating for
# `switchyard mock` in the Anthropic, Gemini and Bedrock formats, setup.sh's
# start_mocks), SWITCHYARD_BIN (target/release/switchyard),
# KEEP=DIR copies the callgrind dumps there (read them with cgtop.py), CACHE=1 also
# simulates the caches (`--cache-sim=yes`, slower) and prints the first-level
# instruction and data cache misses per request, in all and by function; SY_SED, a
# sed script applied to Switchyard's config (setup.sh).
# Needs: valgrind, wrk, nginx, python3, a release build.
set -euo pipefail
cd "$(dirname "$0")/../.."
secs=${1:-20}; top=${2:-25}; modes=${MODES:-json stream}
. benches/load/setup.sh
start_upstream ""
case " $modes " in *claude*|*gemini*|*nova*|*mix*) start_mocks "" ;; esac
cache_sim=no; [ "${CACHE:-0}" = 1 ] && cache_sim=yes
SWITCHYARD_LOG=warn valgrind --tool=callgrind --dump-instr=no --cache-sim=$cache_sim \
  --callgrind-out-file="$work/cg.out" "$bin" serve --config "$work/sy.yaml" \
  >/dev/null 2>"$work/gateway.log" &
gpid=$!
check_gateway 600
echo "# $(date -u +%FT%TZ) $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); callgrind, wrk -t1 -c4 -d${secs}s; $bin"
for mode in $modes; do
  wrk -t1 -c4 -d3s -s "$work/$mode.lua" "$(url switchyard "$mode")" >/dev/null # warm-up
  callgrind_control -z "$gpid" >/dev/null
  out=$(wrk -t1 -c4 -d"${secs}s" -s "$work/$mode.lua" "$(url switchyard "$mode")")
  callgrind_control -d "$mode" "$gpid" >/dev/null
  if echo "$out" | grep -q 'Non-2xx\|Socket errors'; then echo "$mode: $out" >&2; fi
  reqs=$(echo "$out" | awk '/requests in/ {print $1}')
  dump=$(ls -t "$work"/cg.out.* | head -1)
  mv "$dump" "$work/$mode.cg"
  ir=$(awk '/^(summary|totals):/ {print $2; exit}' "$work/$mode.cg")
  python3 -c "print(f'## $mode: {$ir / $reqs:,.0f} instructions per request ($reqs requests, $ir instructions)')"
  [ "$top" != 0 ] && python3 benches/load/cgtop.py "$work/$mode.cg" "$reqs" "$top"
  [ "$cache_sim" = yes ] && python3 benches/load/cgtop.py "$work/$mode.cg" "$reqs" "${top/#0/10}" --misses
  [ -n "${KEEP:-}" ] && mkdir -p "$KEEP" && cp "$work/$mode.cg" "$KEEP/"
done
