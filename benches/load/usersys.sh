#!/usr/bin/env bash
# User and system CPU time per request of the gateway alone (the setup of run.sh,
# every feature on, in front of the static upstream; no nginx alternating with it),
# and its minor page faults per request, from /proc/PID/stat over one `wrk -t2 -c64`
# run per mode. Splits what run.sh's CPU per request adds together: instructions
# (callgrind.sh) move the user half; system calls, wake-ups and the TCP work they
# carry move the system half.
# Usage: benches/load/usersys.sh [seconds]; MODES ("json stream"), SWITCHYARD_BIN.
# Needs: wrk, nginx, python3, a release build.
set -euo pipefail
cd "$(dirname "$0")/../.."
secs=${1:-5}
. benches/load/setup.sh
start_upstream ""
start_gateway ""
check_gateway 100
tck=$(getconf CLK_TCK)
echo "# $(date -u +%FT%TZ) $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); wrk -t2 -c64 -d${secs}s; $bin"
for mode in ${MODES:-json stream}; do
  wrk -t2 -c64 -d2s -s "$work/$mode.lua" "$(url switchyard "$mode")" >/dev/null # warm-up
  read -r min0 ut0 st0 < <(awk '{print $10, $14, $15}' "/proc/$gpid/stat")
  out=$(wrk -t2 -c64 -d"${secs}s" -s "$work/$mode.lua" "$(url switchyard "$mode")")
  read -r min1 ut1 st1 < <(awk '{print $10, $14, $15}' "/proc/$gpid/stat")
  reqs=$(echo "$out" | awk '/requests in/ {print $1}')
  python3 -c "r=$reqs; us=1e6/$tck; print(f'$mode: {r} requests; per request user {($ut1-$ut0)*us/r:.1f} us, system {($st1-$st0)*us/r:.1f} us, minor page faults {($min1-$min0)/r:.3f}')"
done
