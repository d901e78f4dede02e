#!/usr/bin/env bash
# CPU time per request of the gateway process: utime + stime of `switchyard serve`
# over one wrk run, divided by the requests served. Less sensitive to a noisy machine
# than requests/s. Usage: benches/load/cpu.sh [seconds] [connections]
# Needs: wrk (apt-get install wrk), a release build (or SWITCHYARD_BIN).
set -euo pipefail
cd "$(dirname "$0")/../.."
secs=${1:-6}; conns=${2:-64}
bin=${SWITCHYARD_BIN:-target/release/switchyard}
[ -x "$bin" ] || cargo build --release
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$work"' EXIT
. benches/load/gateway.sh
sleep 1
url="http://127.0.0.1:$gport/v1/chat/completions"
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
wrk -t2 -c"$conns" -d2s -s "$work/chat.lua" "$url" >/dev/null # warm-up
t0=$(ticks $gpid)
out=$(wrk -t2 -c"$conns" -d"${secs}s" -s "$work/chat.lua" "$url")
t1=$(ticks $gpid)
reqs=$(echo "$out" | awk '/requests in/ {print $1}')
python3 -c "print(f'{($t1 - $t0) / $(getconf CLK_TCK) * 1e6 / $reqs:.1f} us CPU per request ($reqs requests, $secs s, $conns connections)')"
