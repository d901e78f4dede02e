#!/usr/bin/env bash
# Where CPU per request goes, nginx `proxy_pass` against Switchyard (the setup of
# run.sh, every feature on): for each proxy and mode, one `wrk -t2 -c64` run and,
# from /proc, the proxy's user and system CPU per request and its voluntary and
# involuntary context switches per request (all threads). User time follows the
# instructions (callgrind.sh); system time follows system calls (syscalls.sh) and
# wake-ups; an involuntary switch is the proxy preempted by another runnable task
# (on a shared 2-core machine: wrk, the upstream, its own other thread).
# Usage: benches/load/cpusplit.sh [seconds]; MODES ("json stream"), SWITCHYARD_BIN.
# Needs: wrk, nginx, python3, a release build.
set -euo pipefail
cd "$(dirname "$0")/../.."
secs=${1:-5}
. benches/load/setup.sh
start_upstream ""
start_nginx ""
start_gateway ""
check_gateway 100
tck=$(getconf CLK_TCK)
switches() {
  local v=0 n=0 a b
  for t in /proc/"$1"/task/*; do
    read -r a b < <(awk '/^voluntary_ctxt/ {v=$2} /^nonvoluntary_ctxt/ {n=$2} END {print v, n}' "$t/status")
    v=$((v + a)); n=$((n + b))
  done
  echo "$v $n"
}
echo "# $(date -u +%FT%TZ) $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); wrk -t2 -c64 -d${secs}s; $bin"
for mode in ${MODES:-json stream}; do for t in nginx switchyard; do
  pid=$(pid_of $t)
  wrk -t2 -c64 -d1s -s "$work/$mode.lua" "$(url $t "$mode")" >/dev/null # warm-up
  read -r v0 n0 < <(switches "$pid"); read -r u0 s0 < <(awk '{print $14, $15}' "/proc/$pid/stat")
  out=$(wrk -t2 -c64 -d"${secs}s" -s "$work/$mode.lua" "$(url $t "$mode")")
  read -r v1 n1 < <(switches "$pid"); read -r u1 s1 < <(awk '{print $14, $15}' "/proc/$pid/stat")
  r=$(echo "$out" | awk '/requests in/ {print $1}')
  python3 -c "r=$r; us=1e6/$tck; print(f'$mode, $t: {r} requests; per request user {($u1-$u0)*us/r:.1f} us, system {($s1-$s0)*us/r:.1f} us, context switches voluntary {($v1-$v0)/r:.3f}, involuntary {($n1-$n0)/r:.3f}')"
done; done
