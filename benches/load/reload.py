#!/usr/bin/env python3
"""Save -> new policy set serving, with the shipped policies and their tests, against
a release binary (the profile-guided one `cargo build --release` makes; the gateway
that `cargo test --release` builds is not profile-matched, see the README).

The same three edits as `tests/it/reload.rs`'s `save_to_serving_latency_shipped_policies`
(a late route, an early route, a built-in strategy), each saved SAVES times (temp file
and rename) alternating two texts. Per edit: the new set's `loaded_at_unix_ms` (set
when it was built and swapped in) minus the save time, median, min and max. Then the
phases of those reloads from the gateway's debug log (`policy set built`: parse and
check, compile, tests; medians), and the tests run again in full per edit.

Usage: benches/load/reload.py [SAVES] (20). Environment: SWITCHYARD_BIN
(target/release/switchyard). Needs python3 only; every provider is the in-process
mock, so nothing leaves the machine.
"""
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
BIN = os.environ.get("SWITCHYARD_BIN", os.path.join(ROOT, "target/release/switchyard"))
SAVES = int(sys.argv[1]) if len(sys.argv) > 1 else 20
EDITS = [
    ("canary.policy", "endpoint.health < 0.8", "endpoint.health < 0.75"),
    ("reject.policy", "has an unpaid balance.", "has an unpaid balance!"),
    ("builtin/least_latency.policy", "min_health = 0.3 in", "min_health = 0.31 in"),
]


def mock_config(text):
    """The shipped registry with every provider the in-process mock, keeping its
    prices (the tests of cost_optimized depend on them), policies from `policies/`."""
    out = []
    for line in text.splitlines():
        m = re.match(r"^(  [\w-]+): \{ kind: [^,}]+(.*)\}$", line)
        if m:
            pricing = re.search(r"pricing: \{[^}]*\}", m.group(2))
            line = m.group(1) + ": { kind: mock" + (", " + pricing.group(0) if pricing else "") + " }"
        elif line.startswith("  dir: "):
            line = "  dir: policies"
        out.append(line)
    return "\n".join(out) + "\n"


def main():
    src = os.path.join(ROOT, "examples/policies")
    work = tempfile.mkdtemp(prefix="switchyard-reload-")
    shutil.copytree(src, os.path.join(work, "policies"), ignore=shutil.ignore_patterns("*.yaml", "*.md"))
    config = os.path.join(work, "switchyard.yaml")
    with open(os.path.join(src, "switchyard.yaml")) as f, open(config, "w") as out:
        out.write(mock_config(f.read()))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    log_path = os.path.join(work, "gateway.log")
    env = dict(os.environ, SWITCHYARD_LOG="switchyard::routing=debug")
    with open(log_path, "w") as log:
        proc = subprocess.Popen([BIN, "serve", "--config", config, "--listen", f"127.0.0.1:{port}"],
                                stdout=log, stderr=subprocess.STDOUT, env=env)
    body = json.dumps({"model": "mock", "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}]}).encode()

    def version():
        req = urllib.request.Request(url + "/v1/chat/completions", data=body,
                                     headers={"content-type": "application/json"})
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.headers["x-switchyard-policy"]

    def admin():
        with urllib.request.urlopen(url + "/admin/policies", timeout=5) as r:
            return json.load(r)

    try:
        for _ in range(400):
            try:
                version()
                break
            except OSError:
                if proc.poll() is not None:
                    sys.exit(open(log_path).read())
                time.sleep(0.05)
        builds = []
        for name, old, new in EDITS:
            path = os.path.join(work, "policies", name)
            original = open(path).read()
            assert old in original, f"{name} has no `{old}`"
            texts = [original.replace(old, new, 1), original]
            current = version()
            loaded = []
            for i in range(SAVES):
                saved = time.time()
                tmp = os.path.join(os.path.dirname(path), ".edit.policy.swp")
                with open(tmp, "w") as f:
                    f.write(texts[i % 2])
                os.rename(tmp, path)
                while (v := version()) == current:
                    st = admin()
                    assert st.get("last_error") is None, st
                    assert time.time() - saved < 10, f"{name}: no new set after 10 s"
                    time.sleep(0.002)
                current = v
                loaded.append(admin()["loaded_at_unix_ms"] - saved * 1e3)
                time.sleep(0.05)
            builds.append((name, loaded, len([l for l in open(log_path) if "policy set built" in l])))
    finally:
        proc.terminate()
        proc.wait()
    lines = [l for l in open(log_path) if "policy set built" in l]

    def field(line, key):
        m = re.search(key + r"=([0-9.]+)", line)
        return float(m.group(1)) if m else float("nan")

    seen = 1  # the first load, every test in full
    print(f"save -> serving, shipped policies and their tests, {SAVES} saves per edit ({BIN})")
    for name, loaded, upto in builds:
        these = lines[seen:upto]
        seen = upto
        med = lambda k: statistics.median(field(l, k) for l in these)
        full = statistics.median(field(l, "tests") - field(l, "tests_reused") for l in these)
        print(f"  {name}: loaded {statistics.median(loaded):.1f} ms after the save "
              f"(median; min {min(loaded):.1f}, max {max(loaded):.1f}); "
              f"parse+check {med('parse_check_ms'):.1f}, compile {med('compile_ms'):.1f}, "
              f"tests {med('tests_ms'):.1f} ms; tests run in full {full:.0f} of {field(these[0], 'tests'):.0f}")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
