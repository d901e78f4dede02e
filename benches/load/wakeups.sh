#!/usr/bin/env bash
# Wake-ups per request of the gateway alone (the setup of run.sh, every feature on),
# from `perf stat` over one `wrk -t2 -c64` run: on the gateway's threads (-p) its
# task clock, context switches, the wake-ups it causes (`sched:sched_waking`: its
# writes waking wrk and the upstream), futex and epoll_wait calls; system-wide the
# rescheduling and function-call interrupts between cores (IPIs), which a wake-up
# of a task on the other, busy core sends. Compare two builds by running it for
# each in turn (SWITCHYARD_BIN), alternated.
# Usage: benches/load/wakeups.sh [seconds]; MODES ("json"), SWITCHYARD_BIN.
# Needs: perf (with tracepoints), wrk, nginx, python3, a release build.
set -euo pipefail
cd "$(dirname "$0")/../.."
secs=${1:-5}
. benches/load/setup.sh
start_upstream ""
start_gateway ""
check_gateway 100
echo "# $(date -u +%FT%TZ) $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); wrk -t2 -c64 -d${secs}s; $bin"
for mode in ${MODES:-json}; do
  wrk -t2 -c64 -d2s -s "$work/$mode.lua" "$(url switchyard "$mode")" >/dev/null # warm-up
  perf stat -x, -o "$work/gw.txt" -e task-clock,context-switches,sched:sched_waking,syscalls:sys_enter_futex,syscalls:sys_enter_epoll_wait -p "$gpid" & pg=$!
  perf stat -x, -o "$work/all.txt" -a -e irq_vectors:reschedule_entry,irq_vectors:call_function_single_entry & pa=$!
  sleep 0.3
  out=$(wrk -t2 -c64 -d"${secs}s" -s "$work/$mode.lua" "$(url switchyard "$mode")")
  kill -INT $pg $pa; wait $pg $pa || true
  r=$(echo "$out" | awk '/requests in/ {print $1}')
  echo "## $mode: $r requests; per request"
  awk -F, -v r="$r" '$1 ~ /^[0-9.]+$/ {printf "  gateway     %-36s %8.4f\n", $3, $1 / r}' "$work/gw.txt"
  awk -F, -v r="$r" '$1 ~ /^[0-9.]+$/ {printf "  all cores   %-36s %8.4f\n", $3, $1 / r}' "$work/all.txt"
done
