"""A small Chrome DevTools Protocol client over `--remote-debugging-pipe`, standard
library only: headless Chromium reads commands on its fd 3 and writes answers and
events on its fd 4, each message one JSON object followed by a NUL byte
(https://chromedevtools.github.io/devtools-protocol/). Enough to load a page, type
into it, press keys, read the DOM through `Runtime.evaluate` and take a screenshot:
what a person at the page does, which `--dump-dom` cannot.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import subprocess
import tempfile
import time
from pathlib import Path

# The flags this closed network needs, for this browser and for
# test_status_page.run_chromium's one-shot runs.
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--window-size=1200,1000",
]


class CdpError(Exception):
    """An error answer to a command, or no answer within the deadline."""


class Browser:
    """Headless Chromium with one page attached; use as a context manager."""

    def __init__(self, chromium: str, timeout_s: float = 30.0):
        self.timeout_s = timeout_s
        self._profile = tempfile.TemporaryDirectory(prefix="chromium-cdp-")
        # Our ends: we write commands to `to_chrome`, read from `from_chrome`.
        chrome_in, to_chrome = os.pipe()
        from_chrome, chrome_out = os.pipe()

        def child_fds():
            # Move the child's ends to 3 and 4 (through numbers above both, so an
            # end that already is 3 or 4 is not clobbered); dup2 leaves them
            # inheritable, and nothing else of ours is.
            a = fcntl.fcntl(chrome_in, fcntl.F_DUPFD, 10)
            b = fcntl.fcntl(chrome_out, fcntl.F_DUPFD, 10)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.proc = subprocess.Popen(
            [chromium, *FLAGS, "--remote-debugging-pipe", f"--user-data-dir={self._profile.name}", "about:blank"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            close_fds=False,
            preexec_fn=child_fds,
        )
        os.close(chrome_in)
        os.close(chrome_out)
        self._w = to_chrome
        self._r = from_chrome
        self._buf = b""
        self._next_id = 0
        self.session = None
        targets = self.send("Target.getTargets")["targetInfos"]
        page = next(t for t in targets if t["type"] == "page")
        self.session = self.send(
            "Target.attachToTarget", {"targetId": page["targetId"], "flatten": True}, browser=True
        )["sessionId"]
        self.send("Page.enable")

    def __enter__(self) -> "Browser":
        return self

    def __exit__(self, *exc) -> None:
        try:
            self.send("Browser.close", browser=True)
        except (CdpError, OSError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self._w, self._r):
            try:
                os.close(fd)
            except OSError:
                pass
        self._profile.cleanup()

    def send(self, method: str, params: dict | None = None, browser: bool = False) -> dict:
        """Sends one command (to the page's session unless `browser`) and returns its
        result; events that arrive meanwhile are skipped."""
        self._next_id += 1
        msg: dict = {"id": self._next_id, "method": method, "params": params or {}}
        if self.session and not browser:
            msg["sessionId"] = self.session
        os.write(self._w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + self.timeout_s
        while True:
            for reply in self._messages(deadline):
                if reply.get("id") == self._next_id:
                    if "error" in reply:
                        raise CdpError(f"{method}: {reply['error']}")
                    return reply.get("result", {})

    def _messages(self, deadline: float):
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise CdpError(f"no answer from Chromium within {self.timeout_s} s")
            ready, _, _ = select.select([self._r], [], [], left)
            if ready:
                chunk = os.read(self._r, 1 << 20)
                if not chunk:
                    err = self.proc.stderr.read().decode(errors="replace") if self.proc.stderr else ""
                    raise CdpError(f"Chromium closed the pipe:\n{err[-2000:]}")
                self._buf += chunk
        while b"\0" in self._buf:
            one, self._buf = self._buf.split(b"\0", 1)
            yield json.loads(one)

    def navigate(self, url: str) -> None:
        self.send("Page.navigate", {"url": url})
        self.wait_for("document.readyState === 'complete'", "the page to load")

    def eval(self, expression: str):
        """The value of a JavaScript expression in the page (promises awaited)."""
        r = self.send(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
        )
        if "exceptionDetails" in r:
            raise CdpError(f"{expression}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def wait_for(self, expression: str, what: str, timeout_s: float | None = None):
        """Polls `expression` until it is truthy; returns its value."""
        deadline = time.monotonic() + (timeout_s or self.timeout_s)
        while True:
            value = self.eval(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise CdpError(f"waited {timeout_s or self.timeout_s} s for {what}")
            time.sleep(0.1)

    def type_text(self, selector: str, text: str) -> None:
        """Focuses the element and types `text` into it, as a keyboard would."""
        self.eval(f"document.querySelector({json.dumps(selector)}).focus()")
        self.send("Input.insertText", {"text": text})

    def press_enter(self) -> None:
        for kind in ("keyDown", "keyUp"):
            params = {
                "type": kind,
                "key": "Enter",
                "code": "Enter",
                "windowsVirtualKeyCode": 13,
                "nativeVirtualKeyCode": 13,
            }
            if kind == "keyDown":
                params["text"] = "\r"
            self.send("Input.dispatchKeyEvent", params)

    def screenshot(self, path: Path) -> None:
        data = self.send("Page.captureScreenshot", {"format": "png"})["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
