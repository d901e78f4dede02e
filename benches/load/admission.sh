#!/usr/bin/env bash
# Load run with admission on (API-key authentication and a per-key + global rate limit
# high enough never to refuse: every request is checked and charged) against the same
# run without them, alternated; JSON requests. Prints run.sh's summary line per run.
# Usage: benches/load/admission.sh [seconds] [pairs]. Needs what run.sh needs.
set -euo pipefail
cd "$(dirname "$0")/../.."
secs=${1:-6}; pairs=${2:-3}
for i in $(seq "$pairs"); do
  echo "## pair $i: without admission"
  ADMISSION=0 MODES=json ROUNDS=1 benches/load/run.sh "$secs" 64 | tail -1
  echo "## pair $i: with API keys and limits"
  MODES=json ROUNDS=1 benches/load/run.sh "$secs" 64 | tail -1
done
