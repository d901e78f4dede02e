#!/usr/bin/env bash
# A profile-guided (PGO) release build of Switchyard: builds the gateway instrumented
# (`-Cprofile-generate`), runs it on a training mix, merges the counts with LLVM's
# `llvm-profdata` and builds it again optimized with them (`-Cprofile-use`), so the
# compiler lays out and inlines the request path by what it actually executes. The
# result is target/pgo/release/switchyard; the plain `cargo build --release` is
# unchanged (README "Performance" compares the two).
#
# The training mix is a gateway's traffic, not only the load benchmark's: the setup of
# run.sh (every feature on: policy set, access log, API key, limits) in front of the
# static upstream, JSON answers and 24-event streams, then the same gateway in front
# of `switchyard mock` in the Anthropic, Gemini and Bedrock formats (answers and
# streams, with and without tool calls), then refused requests (a wrong key, a
# malformed body, an unknown model). The mocks (setup.sh's start_mocks) run from the
# instrumented binary too, their counts written elsewhere and not merged
# (LLVM_PROFILE_FILE).
#
# Usage: benches/load/pgo.sh [seconds per workload, 4]
# Needs: `rustup component add llvm-tools` (llvm-profdata of rustc's own LLVM), wrk,
# nginx, python3, curl. Two release builds from scratch: about 25 minutes on 2 cores.
# RUSTFLAGS, if set, is kept and the profile flags added to it.
set -euo pipefail
cd "$(dirname "$0")/../.."
secs=${1:-4}
root=$PWD/target/pgo
profdata=$(rustc --print sysroot)/lib/rustlib/$(rustc -vV | sed -n 's/^host: //p')/bin/llvm-profdata
[ -x "$profdata" ] || { echo "no llvm-profdata: rustup component add llvm-tools" >&2; exit 1; }
rm -rf "$root/profiles" && mkdir -p "$root/profiles"
flags=${RUSTFLAGS:-}
RUSTFLAGS="$flags -Cprofile-generate=$root/profiles" CARGO_TARGET_DIR="$root/gen" \
  cargo build --release --bin switchyard
# Build scripts ran instrumented too: only the gateway's counts are kept.
rm -f "$root"/profiles/*.profraw

SWITCHYARD_BIN=$root/gen/release/switchyard
. benches/load/setup.sh
start_upstream ""
# The mocks' counts go to the scratch directory, not merged.
start_mocks "env LLVM_PROFILE_FILE=$work/mock-%p.profraw"
# The gateway's counts go to the profile directory (one file, merged as it exits).
export LLVM_PROFILE_FILE="$root/profiles/switchyard-%m.profraw"
start_gateway ""
check_gateway
unset LLVM_PROFILE_FILE

# Runs wrk with script $1 for $2 seconds and prints its requests and how many were
# not answered 2xx; with $3 = served, fails when any was not (a broken mock or
# signer would train the profile on error paths).
run() {
  wrk -t1 -c8 -d"$2s" -s "$1" "$(url switchyard json)" |
    awk -v want="$3" '/requests in/ {n = $1} /Non-2xx/ {bad = $NF}
      END {print "  " n " requests, " (bad + 0) " not 2xx"; exit (want == "served" && bad > 0)}' ||
    { echo "requests of $1 were not served; the gateway's log:" >&2; cat "$work/gateway.log" >&2; exit 1; }
}
echo "# training: the load benchmark's JSON answers and streams"
run "$work/json.lua" "$secs" served
run "$work/stream.lua" "$secs" served
echo "# training: Anthropic, Gemini and Bedrock through the mocks"
run "$work/mix.lua" "$secs" served
# Refused requests: a wrong key, a malformed body, an unknown model.
{
  echo 'wrk.method = "POST"'
  echo 'local function h(key) return {["Content-Type"] = "application/json", ["Authorization"] = "Bearer " .. key} end'
  echo 'local n = 0'
  echo 'request = function()'
  echo '  n = n % 3 + 1'
  echo "  if n == 1 then return wrk.format(nil, nil, h(\"wrong\"), '{\"model\":\"bench\",\"messages\":[]}') end"
  echo "  if n == 2 then return wrk.format(nil, nil, h(\"$key\"), '{\"model\":\"bench\",\"messages\":[{\"role\":\"user\"') end"
  echo "  return wrk.format(nil, nil, h(\"$key\"), '{\"model\":\"nope\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}')"
  echo 'end'
} > "$work/refused.lua"
# One second of them: about a quarter of the training's requests, each far cheaper
# than a served one (refused before any upstream call).
echo "# training: refused requests"
run "$work/refused.lua" 1 refused
# The counts are written when the gateway exits: a graceful stop, waited for.
kill -TERM "$gpid" 2>/dev/null || { echo "the gateway stopped during the training:" >&2; cat "$work/gateway.log" >&2; exit 1; }
wait "$gpid" || { echo "the gateway exited with status $? after SIGTERM:" >&2; cat "$work/gateway.log" >&2; exit 1; }
ls "$root"/profiles/*.profraw >/dev/null || { echo "the gateway wrote no profile" >&2; exit 1; }
"$profdata" merge -o "$root/switchyard.profdata" "$root"/profiles/*.profraw
echo "# merged: $root/switchyard.profdata"
# The upstream and the mocks are not needed for the second build.
cleanup
trap - EXIT
RUSTFLAGS="$flags -Cprofile-use=$root/switchyard.profdata" CARGO_TARGET_DIR="$root" \
  cargo build --release --bin switchyard
echo "# built: $root/release/switchyard"
