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
# With BOLT=1 (or BOLT=/path/to/llvm-bolt) a second stage follows: LLVM's post-link
# optimizer BOLT instruments that binary, the same training mix runs on it again, and
# BOLT rewrites it with the counts (hot code of all functions together, each
# function's blocks in the order they run, cold blocks split off): the result is
# target/pgo/bolt/switchyard. The compiler's PGO lays out each function; BOLT lays out
# the whole binary, whose request path is larger than the first-level instruction
# cache (README "Performance"). The PGO build then links with `--emit-relocs`, which
# BOLT needs to move functions.
#
# With --save it stops after the training and records the profile as the one the
# plain `cargo build --release` uses (scripts/rustc-pgo): pgo/switchyard.profdata,
# merged sparse (functions the training never ran are left out: 2.3 MB instead of
# 16), pgo/llvm-major, the LLVM that wrote it, and pgo/recorded-with, the toolchain
# and dependency set it was recorded with. Run it after changes to the request path,
# to the dependencies or their features, or to the toolchain, and commit pgo/.
#
# Usage: [BOLT=1|/path/to/llvm-bolt] [BOLT_FLAGS=...] benches/load/pgo.sh [--save]
# [seconds per workload, 4]
# Needs: `rustup component add llvm-tools` (llvm-profdata of rustc's own LLVM), wrk,
# nginx, python3, curl; for BOLT=1, llvm-bolt (Debian 12: `apt-get install bolt-16`,
# found in /usr/lib/llvm-*/bin; BOLT_FLAGS replaces the layout options below, for
# other versions; the line tables are rewritten whatever it says). Two release builds
# from scratch: about 25 minutes on 2 cores; the BOLT stage adds about 2 minutes.
# RUSTFLAGS, if set, is kept and the profile flags added to it.
set -euo pipefail
cd "$(dirname "$0")/../.."
save=no
[ "${1:-}" = --save ] && { save=yes; shift; }
secs=${1:-4}
root=$PWD/target/pgo
profdata=$(rustc --print sysroot)/lib/rustlib/$(rustc -vV | sed -n 's/^host: //p')/bin/llvm-profdata
[ -x "$profdata" ] || { echo "no llvm-profdata: rustup component add llvm-tools" >&2; exit 1; }
bolt=""
case ${BOLT:-0} in
  0) ;;
  1) bolt=$(command -v llvm-bolt || ls -v /usr/lib/llvm-*/bin/llvm-bolt 2>/dev/null | tail -1 || true) ;;
  *) bolt=$BOLT ;;
esac
# Layout options (BOLT 16's names), and the ones every run needs: line tables
# rewritten (without it BOLT drops the debug information, and backtraces their
# file:line), the new segment marked as `strip` and `objcopy` expect, the report of
# taken branches before and after.
bolt_layout=${BOLT_FLAGS--reorder-blocks=ext-tsp -reorder-functions=hfsort+ -split-functions -split-all-cold -icf=1}
bolt_fixed="-update-debug-sections -use-gnu-stack -dyno-stats"
if [ "${BOLT:-0}" != 0 ]; then
  [ -f "$bolt" ] && [ -x "$bolt" ] ||
    { echo "BOLT=$BOLT: no llvm-bolt at '$bolt' (Debian 12: apt-get install bolt-16, then BOLT=1)" >&2; exit 1; }
  # Options are checked now, not after the two builds: llvm-bolt reports an unknown
  # option or value on stderr (and still exits 0).
  # shellcheck disable=SC2086 # lists of options
  err=$("$bolt" $bolt_layout $bolt_fixed --version 2>&1 >/dev/null) || true
  [ -z "$err" ] || { echo "$bolt rejects the options: $err" >&2; exit 1; }
fi
rm -rf "$root/profiles" && mkdir -p "$root/profiles"
flags=${RUSTFLAGS:-}
RUSTFLAGS="$flags -Cprofile-generate=$root/profiles" CARGO_TARGET_DIR="$root/gen" \
  cargo build --release --bin switchyard
# Build scripts ran instrumented too: only the gateway's counts are kept.
rm -f "$root"/profiles/*.profraw

# Runs wrk with script $1 for $2 seconds and prints its requests and how many were
# not answered 2xx; with $3 = served, fails when any was not (a broken mock or
# signer would train the profile on error paths).
run() {
  wrk -t1 -c8 -d"$2s" -s "$1" "$(url switchyard json)" |
    awk -v want="$3" '/requests in/ {n = $1} /Non-2xx/ {bad = $NF}
      END {print "  " n " requests, " (bad + 0) " not 2xx"; exit (want == "served" && bad > 0)}' ||
    { echo "requests of $1 were not served; the gateway's log:" >&2; cat "$work/gateway.log" >&2; exit 1; }
}

# train GATEWAY MOCKS GATEWAY_PREFIX: the training mix, served by the binary GATEWAY
# (started with GATEWAY_PREFIX, e.g. `env NAME=VALUE`) in front of the static
# upstream and of mocks run from the binary MOCKS. A mock from an instrumented build
# writes its counts to the scratch directory, removed with it: they are not merged.
# The gateway is stopped with SIGTERM and waited for (profiles are written as it
# exits), its pid left in gpid, and everything the training started is stopped.
train() {
  SWITCHYARD_BIN=$1
  . benches/load/setup.sh
  start_upstream ""
  bin=$2
  start_mocks "env LLVM_PROFILE_FILE=$work/mock-%p.profraw"
  bin=$1
  start_gateway "$3"
  check_gateway 300
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
  # The upstream and the mocks are not needed for the next build.
  cleanup
  trap - EXIT
}

# The gateway's counts go to the profile directory (one file, merged as it exits).
train "$root/gen/release/switchyard" "$root/gen/release/switchyard" \
  "env LLVM_PROFILE_FILE=$root/profiles/switchyard-%m.profraw"
ls "$root"/profiles/*.profraw >/dev/null || { echo "the gateway wrote no profile" >&2; exit 1; }
"$profdata" merge -o "$root/switchyard.profdata" "$root"/profiles/*.profraw
echo "# merged: $root/switchyard.profdata"
if [ "$save" = yes ]; then
  mkdir -p pgo
  "$profdata" merge -sparse -o pgo/switchyard.profdata "$root"/profiles/*.profraw
  rustc -vV | sed -n 's/^LLVM version: \([0-9]*\).*/\1/p' > pgo/llvm-major
  # What the profile's function names depend on besides the code: the toolchain and
  # the dependency set (cargo hashes both into every crate's symbols, so a profile
  # recorded before a dependency or a feature changed matches none of the functions
  # of the crates that depend on it). tests/it/packaging.rs checks the two files
  # against these sums.
  {
    echo "rustc $(rustc -V | cut -d' ' -f2)"
    echo "Cargo.lock $(sha256sum Cargo.lock | cut -d' ' -f1)"
    echo "Cargo.toml $(grep -v -e '^[[:space:]]*#' -e '^[[:space:]]*$' Cargo.toml | sha256sum | cut -d' ' -f1)"
  } > pgo/recorded-with
  echo "# saved: pgo/switchyard.profdata (LLVM $(cat pgo/llvm-major)); commit pgo/"
  exit 0
fi
relocs=""; [ -n "$bolt" ] && relocs="-Clink-arg=-Wl,--emit-relocs"
RUSTFLAGS="$flags -Cprofile-use=$root/switchyard.profdata $relocs" CARGO_TARGET_DIR="$root" \
  cargo build --release --bin switchyard
echo "# built: $root/release/switchyard"
# A BOLT binary of an older build would be left beside this one.
[ -n "$bolt" ] || { rm -rf "$root/bolt"; exit 0; }

# BOLT: instrument the PGO binary, train it (mocks from the PGO binary), optimize it.
out=$root/bolt
rm -rf "$out" && mkdir -p "$out"
"$bolt" "$root/release/switchyard" -o "$out/switchyard-instrumented" -instrument \
  --instrumentation-file="$out/profile" --instrumentation-file-append-pid >"$out/instrument.log" 2>&1 ||
  { tail -20 "$out/instrument.log" >&2; exit 1; }
train "$out/switchyard-instrumented" "$root/release/switchyard" ""
fdata=$out/profile.fdata
mv "$out/profile.$gpid.fdata" "$fdata" 2>/dev/null ||
  { echo "the instrumented gateway wrote no profile ($out/profile.$gpid.fdata)" >&2; exit 1; }
# Blocks laid out by the ext-TSP model, functions clustered by calls (hfsort+),
# cold blocks moved out of every function, identical functions folded. Landing pads
# stay in place (no -split-eh): unwinding is as the compiler left it.
# shellcheck disable=SC2086 # lists of options
"$bolt" "$root/release/switchyard" -o "$out/switchyard.new" -data="$fdata" $bolt_layout $bolt_fixed \
  >"$out/optimize.log" 2>&1 || { tail -20 "$out/optimize.log" >&2; exit 1; }
rm -f "$out/switchyard-instrumented"
# llvm-bolt writes its output world-writable, whatever the umask.
chmod go-w "$out/switchyard.new"
# The optimized binary must answer as the others did before it takes the name the
# README points at.
SWITCHYARD_BIN=$out/switchyard.new
. benches/load/setup.sh
start_upstream ""
start_gateway ""
check_gateway
mv "$out/switchyard.new" "$out/switchyard"
echo "# built: $out/switchyard (BOLT log: $out/optimize.log)"
