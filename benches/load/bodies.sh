#!/usr/bin/env bash
# Memory under large bodies (issue 17): 16 concurrent 6.8 MB chat requests through a
# release gateway in front of `switchyard mock`, with the gateway's RSS (VmRSS of
# /proc/PID/status) sampled every 100 ms during the burst and for 10 s after it.
# Prints the RSS before, the peak, and the RSS 10 s after, in MB.
# Usage: benches/load/bodies.sh [concurrent] [body MB]; SWITCHYARD_BIN picks the binary,
# SY_EXTRA_YAML is appended to the gateway's config (e.g. a `server:` section).
# Needs: curl, python3, a release build.
set -euo pipefail
cd "$(dirname "$0")/../.."
n=${1:-16}; mb=${2:-6.8}
bin=${SWITCHYARD_BIN:-target/release/switchyard}
[ -x "$bin" ] || cargo build --release
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$work"' EXIT

. benches/load/gateway.sh
# One user message of $mb MB of prose-like text (a long document pasted as context).
python3 - "$mb" > "$work/body.json" <<'PY'
import json, sys
size = int(float(sys.argv[1]) * 1_000_000)
word = "lorem ipsum dolor sit amet consectetur adipiscing elit "
text = (word * (size // len(word) + 1))[:size]
print(json.dumps({"model": "bench", "messages": [{"role": "user", "content": text}]}))
PY
for _ in $(seq 50); do curl -sf "http://127.0.0.1:$gport/health" >/dev/null && break; sleep 0.1; done
rss() { awk '/VmRSS/ {printf "%.1f", $2 / 1024}' "/proc/$gpid/status"; }
sample() { # sample FILE: RSS every 100 ms until killed
  while :; do echo "$(date +%s.%N) $(rss)" >> "$1"; sleep 0.1; done
}
before=$(rss)
sample "$work/rss" & sampler=$!
start=$(date +%s.%N)
curls=()
for _ in $(seq "$n"); do
  curl -s -o /dev/null -w "%{http_code}\n" -H 'content-type: application/json' \
    --data-binary @"$work/body.json" "http://127.0.0.1:$gport/v1/chat/completions" >> "$work/codes" &
  curls+=($!)
done
wait "${curls[@]}"
done_at=$(date +%s.%N)
sleep 10
kill $sampler
after=$(rss)
peak=$(awk '{ if ($2 > m) m = $2 } END { printf "%.1f", m }' "$work/rss")
codes=$(sort "$work/codes" | uniq -c | awk '{printf "%s×%s ", $1, $2}')
echo "# $(date -u +%FT%TZ) $(nproc) cores; $n concurrent ${mb} MB bodies; burst $(echo "$done_at - $start" | bc) s; status: $codes"
printf "%-12s %10s %10s %14s\n" "" before peak "10 s after"
printf "%-12s %10s %10s %14s\n" "RSS (MB)" "$before" "$peak" "$after"
