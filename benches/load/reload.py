#!/usr/bin/env python3
"""Save -> new policy set serving, with the shipped policies and their tests, against
a release binary (the profile-guided one `cargo build --release` makes; the gateway
that `cargo test --release` builds is not profile-matched, see the README).

The same three edits as `tests/it/reload.rs`'s `save_to_serving_latency_shipped_policies`
(a late route, an early route, a built-in strategy), each saved SAVES times (temp file
and rename) alternating two texts; then `save_to_serving_latency_1000_rules`'s
1,000-rule set, saved SAVES times. Per edit: the new set's `loaded_at_unix_ms` (set
when it was built and swapped in) minus the save time, median, min and max; the
phases of those reloads from the gateway's debug log (`policy set built`: parse and
check, compile, tests; medians), and the tests run again in full.

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
BIN = os.path.normpath(os.environ.get("SWITCHYARD_BIN", os.path.join(ROOT, "target/release/switchyard")))
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


class Gateway:
    """`switchyard serve` on a directory of its own: `config` (YAML text) and the
    policy files copied from `policies` (a directory) or written from `files`."""

    def __init__(self, config, policies=None, files=None):
        self.work = tempfile.mkdtemp(prefix="switchyard-reload-")
        self.dir = os.path.join(self.work, "policies")
        if policies:
            shutil.copytree(policies, self.dir, ignore=shutil.ignore_patterns("*.yaml", "*.md"))
        else:
            os.mkdir(self.dir)
        for name, text in (files or {}).items():
            with open(os.path.join(self.dir, name), "w") as f:
                f.write(text)
        path = os.path.join(self.work, "switchyard.yaml")
        with open(path, "w") as f:
            f.write(config)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        self.log = os.path.join(self.work, "gateway.log")
        env = dict(os.environ, SWITCHYARD_LOG="switchyard::routing=debug")
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen([BIN, "serve", "--config", path, "--listen", f"127.0.0.1:{port}"],
                                         stdout=log, stderr=subprocess.STDOUT, env=env)
        for _ in range(400):
            try:
                self.admin()
                return
            except OSError:
                if self.proc.poll() is not None:
                    sys.exit(open(self.log).read())
                time.sleep(0.05)
        sys.exit("the gateway did not start: " + open(self.log).read())

    def admin(self):
        with urllib.request.urlopen(self.url + "/admin/policies", timeout=5) as r:
            return json.load(r)

    def builds(self):
        """The `policy set built` lines of the debug log so far."""
        return [l for l in open(self.log) if "policy set built" in l]

    def saves(self, name, texts, n):
        """Saves `name` n times (temp file and rename), cycling through `texts`;
        each time waits for the new set. The reloads' `loaded_at` minus save time (ms)."""
        path = os.path.join(self.dir, name)
        loaded = []
        for i in range(n):
            before = self.admin()["loaded_at_unix_ms"]
            saved = time.time()
            tmp = os.path.join(os.path.dirname(path), ".edit.policy.swp")
            with open(tmp, "w") as f:
                f.write(texts[i % len(texts)])
            os.rename(tmp, path)
            while (st := self.admin())["loaded_at_unix_ms"] == before:
                assert st.get("last_error") is None, st
                assert time.time() - saved < 10, f"{name}: no new set after 10 s"
                time.sleep(0.002)
            loaded.append(st["loaded_at_unix_ms"] - saved * 1e3)
            time.sleep(0.05)
        return loaded

    def stop(self):
        self.proc.terminate()
        self.proc.wait()
        shutil.rmtree(self.work, ignore_errors=True)


def field(line, key):
    m = re.search(key + r"=([0-9.]+)", line)
    return float(m.group(1)) if m else float("nan")


def report(what, loaded, builds):
    med = lambda k: statistics.median(field(l, k) for l in builds)
    full = statistics.median(field(l, "tests") - field(l, "tests_reused") for l in builds)
    print(f"  {what}: loaded {statistics.median(loaded):.1f} ms after the save "
          f"(median; min {min(loaded):.1f}, max {max(loaded):.1f}); "
          f"parse+check {med('parse_check_ms'):.1f}, compile {med('compile_ms'):.1f}, "
          f"tests {med('tests_ms'):.1f} ms; tests run in full {full:.0f} of {field(builds[0], 'tests'):.0f}")


def big_policy(n, endpoint):
    """`tests/it/reload.rs`'s 1,000-rule set: one route of n header rules."""
    rules = "".join(
        f'  rule r{i} when has(header("x-tenant")) and header("x-tenant") == "t{i}" and request.input_tokens > {i} {{\n'
        f'    use endpoint "a/x"\n  }}\n' for i in range(n))
    return f'route big when request.model == "m" {{\n{rules}  default use endpoint "{endpoint}"\n}}\n'


def main():
    src = os.path.join(ROOT, "examples/policies")
    with open(os.path.join(src, "switchyard.yaml")) as f:
        gw = Gateway(mock_config(f.read()), policies=src)
    print(f"save -> serving ({BIN}), {SAVES} saves per edit:")
    try:
        for name, old, new in EDITS:
            original = open(os.path.join(gw.dir, name)).read()
            assert old in original, f"{name} has no `{old}`"
            seen = len(gw.builds())
            loaded = gw.saves(name, [original.replace(old, new, 1), original], SAVES)
            report(f"shipped policies and their tests, {name} edited", loaded, gw.builds()[seen:])
    finally:
        gw.stop()
    config = ("policies: { dir: policies }\nproviders:\n  a: { kind: mock }\n  b: { kind: mock }\n"
              "models:\n  m:\n    endpoints:\n      - { provider: a, model: x }\n      - { provider: b, model: x }\n")
    gw = Gateway(config, files={"pin.policy": big_policy(1000, "a/x")})
    try:
        seen = len(gw.builds())
        loaded = gw.saves("pin.policy", [big_policy(1000, "b/x"), big_policy(1000, "a/x")], SAVES)
        report("1,000-rule set", loaded, gw.builds()[seen:])
    finally:
        gw.stop()


if __name__ == "__main__":
    main()
