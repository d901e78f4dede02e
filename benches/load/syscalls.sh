#!/usr/bin/env bash
# Kernel-side cost per request (issue 17: "flame graphs of user and kernel time";
# instruction counts from callgrind.sh see only user space): for nginx `proxy_pass`
# and Switchyard (same setup as run.sh, every feature on), the system calls per
# request (`strace -c -f` attached during a `wrk -t1 -c16` run), then Switchyard's
# voluntary and involuntary context switches per request, thread by thread (from
# /proc/PID/task/*/status over a `wrk -t2 -c64` run: a voluntary switch is a thread
# going to sleep, so a high count means a wake-up per request).
# Usage: benches/load/syscalls.sh [seconds]; MODES ("json stream"), SWITCHYARD_BIN.
# Needs: strace, wrk, nginx, python3, a release build.
set -euo pipefail
cd "$(dirname "$0")/../.."
secs=${1:-4}; modes=${MODES:-json stream}
. benches/load/setup.sh
start_upstream ""
start_nginx ""
start_gateway ""
check_gateway
echo "# $(date -u +%FT%TZ) $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); $bin"
for mode in $modes; do for t in nginx switchyard; do
  pid=$(pid_of $t)
  wrk -t1 -c16 -d1s -s "$work/$mode.lua" "$(url $t "$mode")" >/dev/null
  strace -c -f -p "$pid" -o "$work/strace-$t" 2>/dev/null & sp=$!
  sleep 0.5 # attached to every thread before the run starts
  out=$(wrk -t1 -c16 -d"${secs}s" -s "$work/$mode.lua" "$(url $t "$mode")")
  kill -INT $sp; wait $sp || true
  reqs=$(echo "$out" | awk '/requests in/ {print $1}')
  echo "## $mode, $t: system calls per request ($reqs requests, traced)"
  awk -v r="$reqs" '$4 ~ /^[0-9]+$/ && $4 / r >= 0.01 {printf "  %-16s %6.2f\n", $NF, $4 / r}' "$work/strace-$t" | sort -k2 -nr
done; done
threads() { for t in /proc/$gpid/task/*; do
  echo "$(basename "$t") $(tr ' ' _ < "$t/comm") $(awk '/^voluntary_ctxt/ {v=$2} /^nonvoluntary_ctxt/ {n=$2} END {print v, n}' "$t/status")"
done; }
for mode in $modes; do
  threads > "$work/cs0"
  out=$(wrk -t2 -c64 -d"${secs}s" -s "$work/$mode.lua" "$(url switchyard "$mode")")
  threads > "$work/cs1"
  reqs=$(echo "$out" | awk '/requests in/ {print $1}')
  echo "## $mode, switchyard: context switches per request by thread, voluntary / involuntary ($reqs requests)"
  join "$work/cs0" "$work/cs1" | awk -v r="$reqs" '{printf "  %-24s %6.3f / %6.3f\n", $2, ($6 - $3) / r, ($7 - $4) / r}'
done
