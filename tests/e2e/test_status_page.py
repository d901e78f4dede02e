"""The status page `/ui` in headless Chromium (Debian's `chromium`, driven by its own
command line: `--dump-dom` for the rendered DOM, `--screenshot` for the artifact).

A gateway in front of two `switchyard mock` providers gets some traffic, then the page
is loaded: it must show both endpoints and a traffic chart with at least one bar of
nonzero height. The screenshot is kept as target/e2e/status-page.png. A second gateway
with an admin key checks that the page shows the key form and none of the data when it
has no key (the data views answer 401), and a third, driven over the DevTools protocol
(`cdp.py`), types a wrong key and then the right one into the form.

Chromium runs with the flags this closed network needs (no QUIC, no background
networking, no component updates), a throwaway profile, and a virtual time budget so
that the page's fetches and first refresh finish before the DOM is dumped.
"""

from __future__ import annotations

import hashlib
import html.parser
import json
import shutil
import subprocess
import tempfile
import urllib.request
from pathlib import Path

import pytest

from cdp import FLAGS as CHROMIUM_FLAGS

from conftest import REPO, Service, running_gateway, running_mock

ARTIFACT = REPO / "target" / "e2e" / "status-page.png"
CHROMIUM_TIMEOUT_S = 90


def chromium() -> str:
    path = shutil.which("chromium")
    if path is None:
        pytest.fail("chromium not found: scripts/test.sh installs Debian's chromium package")
    return path


def run_chromium(url: str, *mode: str) -> str:
    """Loads `url` in headless Chromium with `mode` (`--dump-dom`, `--screenshot=...`);
    returns its stdout."""
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
        cmd = [
            chromium(),
            *CHROMIUM_FLAGS,
            f"--user-data-dir={profile}",
            "--virtual-time-budget=8000",
            *mode,
            url,
        ]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=CHROMIUM_TIMEOUT_S)
    assert r.returncode == 0, f"chromium exited with {r.returncode}:\n{r.stderr[-3000:]}"
    return r.stdout


class Dom(html.parser.HTMLParser):
    """The elements of a dumped DOM as (tag, attributes), and the text inside `#id`s."""

    def __init__(self, text: str):
        super().__init__()
        self.elements: list[tuple[str, dict[str, str]]] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.elements.append((tag, {k: v or "" for k, v in attrs}))

    def find(self, tag: str, **attrs: str) -> list[dict[str, str]]:
        return [
            a
            for t, a in self.elements
            if t == tag and all(a.get(k.replace("_", "-")) == v for k, v in attrs.items())
        ]


def chat(gw: Service, model: str) -> int:
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "hello"}]})
    req = urllib.request.Request(
        f"{gw.base_url}/v1/chat/completions",
        data=body.encode(),
        headers={"content-type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        r.read()
        return r.status


def two_mock_config(fast: Service, slow: Service, admin: str = "", policies: bool = False) -> str:
    """Model `chat` on the mocks `fast` and `slow`; with `admin`, that admin key; with
    `policies`, the `.policy` files beside the config (running_gateway writes them
    there)."""
    config: dict = {
        "server": {"listen": "127.0.0.1:0"},
        "providers": {
            "fast": {"kind": "openai-compatible", "base_url": f"{fast.base_url}/v1"},
            "slow": {"kind": "openai-compatible", "base_url": f"{slow.base_url}/v1"},
        },
        "models": {
            "chat": {
                "endpoints": [
                    {"provider": "fast", "model": "mock-model"},
                    {"provider": "slow", "model": "mock-model"},
                ]
            }
        },
    }
    if admin:
        digest = hashlib.sha256(admin.encode()).hexdigest()
        config["admin"] = {"keys": [f"sha256:{digest}"]}
    if policies:
        config["policies"] = {"dir": "."}
    return json.dumps(config, indent=2) + "\n"


# exp3 spreads the traffic over both endpoints, so both show in the chart.
SPREAD = 'route chat when request.model == "chat" {\n  default use "chat" via exp3\n}\n'


def test_status_page_shows_endpoints_and_a_traffic_chart():
    with (
        running_mock("openai", "--latency-ms", "5") as fast,
        running_mock("openai", "--latency-ms", "40", "--ratelimit-requests", "100") as slow,
    ):
        config = two_mock_config(fast, slow, policies=True)
        with running_gateway(config, "switchyard-status-page", {"spread.policy": SPREAD}) as gw:
            for _ in range(30):
                assert chat(gw, "chat") == 200
            url = f"{gw.base_url}/ui"
            dom = run_chromium(url, "--dump-dom")
            parsed = Dom(dom)

            rows = {a["data-endpoint"] for a in parsed.find("tr") if "data-endpoint" in a}
            assert rows == {"fast/mock-model", "slow/mock-model"}, dom[:3000]
            bars = [a for a in parsed.find("rect") if a.get("class") == "bar"]
            assert bars, f"no bars in the traffic chart:\n{dom[:3000]}"
            heights = [float(b["height"]) for b in bars]
            assert max(heights) > 0, heights
            counted = sum(int(b["data-count"]) for b in bars)
            assert counted == 30, f"the bars count {counted} requests, 30 were sent"
            # The seed 004 view: one row per strategy with its probabilities.
            exp3 = parsed.find("div", data_strategy="exp3")
            assert exp3, "no exp3 row in the strategy probabilities"
            assert "Probs: [(&#39;fast/mock-model&#39;" in dom or "Probs: [('fast/mock-model'" in dom
            # The last decisions name the route and the strategy.
            assert len([a for a in parsed.find("tr") if "data-request-id" in a]) >= 20
            # Admin is open (no keys): the key form stays hidden.
            assert parsed.find("div", id="login", style="display: none;"), dom[:3000]

            ARTIFACT.parent.mkdir(parents=True, exist_ok=True)
            ARTIFACT.unlink(missing_ok=True)
            run_chromium(url, f"--screenshot={ARTIFACT}")
            assert ARTIFACT.is_file() and ARTIFACT.stat().st_size > 10_000, ARTIFACT


def test_status_page_asks_for_the_admin_key_and_shows_nothing_without_it():
    with running_mock("openai") as fast, running_mock("openai") as slow:
        config = two_mock_config(fast, slow, admin="status-page-secret")
        with running_gateway(config, "switchyard-status-page-auth") as gw:
            assert chat(gw, "chat") == 200
            dom = run_chromium(f"{gw.base_url}/ui", "--dump-dom")
            parsed = Dom(dom)
            assert parsed.find("div", id="login", style="display: block;"), dom[:3000]
            assert parsed.find("main", id="main", style="display: none;"), dom[:3000]
            assert not [a for a in parsed.find("tr") if "data-endpoint" in a]
            assert "fast/mock-model" not in dom


def test_typing_the_admin_key_into_the_status_page_shows_the_data():
    """A person at the page: a wrong key is refused with a message, the right one
    (typed, then Enter) shows the endpoints, is cleared from the field and kept in
    the tab, so a reload does not ask again. Driven over the DevTools protocol
    (`cdp.Browser`), since `--dump-dom` cannot type."""
    from cdp import Browser

    secret = "status-page-typed-secret"
    with running_mock("openai") as fast, running_mock("openai") as slow:
        config = two_mock_config(fast, slow, admin=secret)
        with running_gateway(config, "switchyard-status-page-typed") as gw, Browser(chromium()) as b:
            for _ in range(4):
                assert chat(gw, "chat") == 200
            b.navigate(f"{gw.base_url}/ui")
            b.wait_for("document.getElementById('login').style.display === 'block'", "the key form")
            assert b.eval("document.getElementById('main').style.display") == "none"

            b.type_text("#key", "not-the-key")
            b.press_enter()
            refused = b.wait_for(
                "document.getElementById('login-error').textContent", "the refusal message"
            )
            assert refused == "that key was refused", refused
            assert b.eval("document.querySelectorAll('tr[data-endpoint]').length") == 0

            b.type_text("#key", secret)
            b.press_enter()
            b.wait_for("document.querySelectorAll('tr[data-endpoint]').length === 2", "the endpoint rows")
            assert b.eval("document.getElementById('login').style.display") == "none"
            assert b.eval("document.getElementById('key').value") == "", "the field is cleared"
            assert b.eval("sessionStorage.getItem('switchyard.admin_key')") == secret
            rows = b.eval("[...document.querySelectorAll('tr[data-endpoint]')].map(r => r.dataset.endpoint).sort()")
            assert rows == ["fast/mock-model", "slow/mock-model"], rows
            b.screenshot(ARTIFACT.with_name("status-page-after-key.png"))

            # The key stays with the tab: a reload shows the data without asking.
            b.send("Page.reload")
            b.wait_for("document.querySelectorAll('tr[data-endpoint]').length === 2", "the rows after a reload")
            assert b.eval("document.getElementById('login').style.display") == "none"
