#!/usr/bin/env bash
# CPU per request of the gateway as the model's endpoint count grows (issue 17: "cost
# does not grow with the number of endpoints a model has"). One `switchyard mock`
# upstream; model `bench` has E endpoints on it (`up/mock-1` .. `up/mock-E`, all
# served by the same mock); E alternates over ENDPOINTS for ROUNDS rounds.
#
# Usage: benches/load/endpoints.sh [seconds] [connections]
#   ENDPOINTS="1 16 128"  endpoint counts, alternated in each round
#   ROUNDS=3              rounds
#   POLICY=builtin|bench|least_latency
#                         builtin: no policy file (the built-in `priority` order);
#                         bench: benches/load/bench.policy (weighted round-robin,
#                         which keeps per-endpoint state); least_latency: the same
#                         rules, then `least_latency` (reads each endpoint's live
#                         health and latency EWMA)
#   CALLGRIND=1           instead of CPU time, instructions per request under
#                         `valgrind --tool=callgrind` (repeatable on a loaded
#                         machine): instrumentation is switched on after a warm-up,
#                         counters zeroed after a second, instrumented warm-up, and
#                         the instructions of one `wrk -t1` run divided by its
#                         requests (use fewer connections, e.g. 4: valgrind runs
#                         the gateway on one thread).
#   KEEP=DIR              with CALLGRIND=1, keeps each dump as DIR/cg.POLICY.E
#                         with its request count in DIR/cg.POLICY.E.requests (read
#                         them with benches/load/cgtop.py DUMP REQUESTS)
# Prints one line per run (compare the counts within a round).
# Needs: wrk, a release build (or SWITCHYARD_BIN); valgrind for CALLGRIND=1.
set -euo pipefail
cd "$(dirname "$0")/../.."
secs=${1:-6}; conns=${2:-64}
bin=${SWITCHYARD_BIN:-target/release/switchyard}
[ -x "$bin" ] || cargo build --release
counts=${ENDPOINTS:-1 16 128}; rounds=${ROUNDS:-3}; policy=${POLICY:-builtin}
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$work"' EXIT
port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
mport=$(port)
SWITCHYARD_LOG=warn $bin mock --listen 127.0.0.1:$mport >/dev/null &
sed "s/MODEL/bench/" benches/load/chat.lua > "$work/chat.lua"
sleep 0.5
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
run() { # endpoints -> prints "E us" or "E instructions"
  local e=$1 gport eps i
  gport=$(port)
  eps=""
  for i in $(seq 1 "$e"); do eps="$eps{ provider: up, model: mock-$i }, "; done
  mkdir -p "$work/p$e"
  case $policy in
    bench) cp benches/load/bench.policy "$work/p$e/" ;;
    least_latency) sed 's/via weighted_round_robin/via least_latency/' benches/load/bench.policy > "$work/p$e/bench.policy" ;;
  esac
  cat > "$work/sy$e.yaml" <<YAML
server: { listen: 127.0.0.1:$gport }
policies: { dir: $work/p$e }
providers:
  up: { kind: openai-compatible, base_url: http://127.0.0.1:$mport/v1 }
models:
  bench: { endpoints: [ ${eps%, } ] }
YAML
  if [ -n "${CALLGRIND:-}" ]; then
    SWITCHYARD_LOG=warn valgrind --tool=callgrind --instr-atstart=no \
      --callgrind-out-file="$work/cg.$e.%p" $bin serve --config "$work/sy$e.yaml" >/dev/null 2>"$work/vg.$e" &
  else
    SWITCHYARD_LOG=warn $bin serve --config "$work/sy$e.yaml" >/dev/null &
  fi
  local gpid=$!
  for _ in $(seq 1 600); do
    curl -s -o /dev/null "http://127.0.0.1:$gport/health" && break
    sleep 0.1
  done
  local url="http://127.0.0.1:$gport/v1/chat/completions"
  wrk -t2 -c"$conns" -d2s -s "$work/chat.lua" "$url" >/dev/null # warm-up
  if [ -n "${CALLGRIND:-}" ]; then
    callgrind_control -i on $gpid >/dev/null 2>&1
    wrk -t1 -c"$conns" -d5s -s "$work/chat.lua" "$url" >/dev/null # instrumented warm-up
    callgrind_control -z $gpid >/dev/null 2>&1
    out=$(wrk -t1 -c"$conns" -d"${secs}s" -s "$work/chat.lua" "$url")
    callgrind_control -d $gpid >/dev/null 2>&1
    for _ in $(seq 1 300); do # the dump is written when the process next runs
      ls "$work"/cg.$e.*.1 >/dev/null 2>&1 && break
      sleep 0.1
    done
    sleep 1
    reqs=$(echo "$out" | awk '/requests in/ {print $1}')
    kill $gpid; wait $gpid 2>/dev/null || true
    ir=$(cat "$work"/cg.$e.*.1 | awk '/^summary:/ {s += $2} END {print s}')
    if [ -n "${KEEP:-}" ]; then
      mkdir -p "$KEEP"
      cat "$work"/cg.$e.*.1 > "$KEEP/cg.$policy.$e"
      echo "$reqs" > "$KEEP/cg.$policy.$e.requests"
    fi
    rm -f "$work"/cg.$e.*
    python3 -c "print(f'$e endpoints: {$ir / $reqs:.0f} instructions per request ($reqs requests)')"
  else
    t0=$(ticks $gpid)
    out=$(wrk -t2 -c"$conns" -d"${secs}s" -s "$work/chat.lua" "$url")
    t1=$(ticks $gpid)
    kill $gpid; wait $gpid 2>/dev/null || true
    reqs=$(echo "$out" | awk '/requests in/ {print $1}')
    python3 -c "print(f'$e endpoints: {($t1 - $t0) / $(getconf CLK_TCK) * 1e6 / $reqs:.1f} us CPU per request ($reqs requests)')"
  fi
}
for r in $(seq 1 "$rounds"); do
  echo "round $r (policy: $policy)"
  for e in $counts; do run "$e"; done
done
