"""The gateway at its file-descriptor limit (`ulimit -n`), driven from outside.

Regression (an outside attack on the descriptor reclaim, `last_fd.py`): with every
descriptor but one held by streams in flight, a client took the last one, and the
accept loop's next `accept` failed with `EMFILE` although no other client waited
(Linux reserves the descriptor before it reads the backlog). The loop then closed,
as idle, the one connection that had sent nothing yet: the client's own, whose
request came a moment after its connect. The client read end-of-file instead of an
answer. Idle connections are now closed only for a client that waits, which the
accept loop's spare descriptor tells.
"""

from __future__ import annotations

import json
import os
import re
import resource
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from conftest import LOG_DIR, stop, switchyard_binary

LIMIT = 160
CONFIG = """server: { first_byte_timeout_ms: 60000 }
providers:
  a: { kind: mock, mock: { stall_after_chunks: 1, stall_ms: 600000 } }
models:
  m: { endpoints: [ { provider: a, model: x } ] }
"""


def request(body: dict, close: bool = False) -> bytes:
    data = json.dumps(body).encode()
    head = (
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(data)}\r\n"
        + ("Connection: close\r\n" if close else "")
        + "\r\n"
    )
    return head.encode() + data


def status_line(sock: socket.socket) -> str:
    """The first line of the answer, or '' at end-of-file."""
    sock.settimeout(10)
    buf = b""
    while b"\r\n" not in buf:
        chunk = sock.recv(4096)
        if not chunk:
            break
        buf += chunk
    return buf.split(b"\r\n", 1)[0].decode(errors="replace")


def test_the_connection_that_takes_the_last_descriptor_is_served_not_closed_as_idle():
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="fd-limit-") as tmp:
        cfg = Path(tmp) / "switchyard.yaml"
        cfg.write_text(CONFIG)
        log = open(LOG_DIR / "descriptor-limit.log", "wb")
        proc = subprocess.Popen(
            [str(switchyard_binary()), "serve", "--config", str(cfg), "--listen", "127.0.0.1:0"],
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            env={**os.environ, "SWITCHYARD_LOG": "warn"},
            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (LIMIT, LIMIT)),
        )
        log.close()
        busy: list[socket.socket] = []
        try:
            assert proc.stdout is not None
            port = None
            for line in proc.stdout:
                m = re.search(r"switchyard listening on \S+:(\d+)", line)
                if m:
                    port = int(m.group(1))
                    break
            assert port, "the gateway did not start"
            threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()

            def fds() -> int:
                return len(os.listdir(f"/proc/{proc.pid}/fd"))

            # Streams that stall after their first chunk, until one descriptor is left.
            stream = request(
                {"model": "m", "messages": [{"role": "user", "content": "hi"}],
                 "max_tokens": 100000, "stream": True}
            )
            # One at a time, each accepted before the next, so that a slow machine
            # cannot overshoot the count.
            while (before := fds()) < LIMIT - 1 and len(busy) < 2 * LIMIT:
                s = socket.create_connection(("127.0.0.1", port), timeout=5)
                s.sendall(stream)
                busy.append(s)
                deadline = time.monotonic() + 5
                while fds() <= before and time.monotonic() < deadline:
                    time.sleep(0.002)
            assert fds() == LIMIT - 1, f"{len(busy)} streams, {fds()} descriptors"
            time.sleep(0.5)
            ask = request(
                {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
                close=True,
            )
            for trial in range(5):
                c = socket.create_connection(("127.0.0.1", port), timeout=10)
                # A client slower than the accept loop: its request comes 50 ms after
                # its connect.
                time.sleep(0.05)
                try:
                    c.sendall(ask)
                    line = status_line(c)
                except OSError as e:
                    line = f"{type(e).__name__}: {e}"
                finally:
                    c.close()
                assert line.startswith("HTTP/1.1 200"), (
                    f"trial {trial}: the request on the last descriptor got {line!r}"
                )
                time.sleep(0.2)
        finally:
            for s in busy:
                s.close()
            stop(proc)
