#!/usr/bin/env bash
# Load run with admission on: API-key authentication and a per-key + global rate limit
# high enough never to refuse (every request is checked and charged), against the
# same run without them, alternated. Usage: benches/load/admission.sh [seconds] [pairs]
# Needs what run.sh needs.
set -euo pipefail
cd "$(dirname "$0")/../.."
secs=${1:-6}; pairs=${2:-3}
key=sy-bench-key
hash=$(printf %s "$key" | sha256sum | cut -d' ' -f1)
extra="auth: { mode: keys, keys: [ { id: key-bench, hash: \"sha256:$hash\", org: bench } ] }
limits: { global: { requests_per_min: 100000000, tokens_per_min: 100000000000 }, per_key: { requests_per_min: 100000000, tokens_per_min: 100000000000 } }"
for i in $(seq "$pairs"); do
  echo "## pair $i: without admission"
  ROUNDS=1 benches/load/run.sh "$secs" 64 | tail -1
  echo "## pair $i: with API keys and limits"
  SY_EXTRA_YAML="$extra" SY_BEARER="$key" ROUNDS=1 benches/load/run.sh "$secs" 64 | tail -1
done
