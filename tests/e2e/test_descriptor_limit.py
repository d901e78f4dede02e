"""The gateway at its file-descriptor limit (`ulimit -n`), driven from outside.

Regression (an outside attack on the descriptor reclaim, `last_fd.py`): with every
descriptor but one held by streams in flight, a client took the last one, and the
accept loop's next `accept` failed with `EMFILE` although no other client waited
(Linux reserves the descriptor before it reads the backlog). The loop then closed,
as idle, the one connection that had sent nothing yet: the client's own, whose
request came a moment after its connect. The client read end-of-file instead of an
answer. Idle connections are now closed only for a client that waits, which the
accept loop's spare descriptor tells.

And the HTTP/2 side of the reclaim: a connection it closes gets a GOAWAY, and an
answer still waiting for its client's flow-control window is delivered first.
"""

from __future__ import annotations

import contextlib
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



@contextlib.contextmanager
def gateway(config: str, limit: int, log_name: str):
    """A gateway serving `config` under `ulimit -n limit`, its warnings in
    LOG_DIR/`log_name`; yields (process, port) and stops it on exit."""
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="fd-limit-") as tmp:
        cfg = Path(tmp) / "switchyard.yaml"
        cfg.write_text(config)
        log = open(LOG_DIR / log_name, "wb")
        proc = subprocess.Popen(
            [str(switchyard_binary()), "serve", "--config", str(cfg), "--listen", "127.0.0.1:0"],
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            env={**os.environ, "SWITCHYARD_LOG": "warn"},
            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit)),
        )
        log.close()
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
            yield proc, port
        finally:
            stop(proc)


def open_fds(proc: subprocess.Popen) -> int:
    """The descriptors `proc` holds open."""
    return len(os.listdir(f"/proc/{proc.pid}/fd"))


def test_the_connection_that_takes_the_last_descriptor_is_served_not_closed_as_idle():
    busy: list[socket.socket] = []
    with gateway(CONFIG, LIMIT, "descriptor-limit.log") as (proc, port):
        try:
            # Streams that stall after their first chunk, until one descriptor is left.
            stream = request(
                {"model": "m", "messages": [{"role": "user", "content": "hi"}],
                 "max_tokens": 100000, "stream": True}
            )
            # One at a time, each accepted before the next, so that a slow machine
            # cannot overshoot the count.
            while (before := open_fds(proc)) < LIMIT - 1 and len(busy) < 2 * LIMIT:
                s = socket.create_connection(("127.0.0.1", port), timeout=5)
                s.sendall(stream)
                busy.append(s)
                deadline = time.monotonic() + 5
                while open_fds(proc) <= before and time.monotonic() < deadline:
                    time.sleep(0.002)
            assert open_fds(proc) == LIMIT - 1, f"{len(busy)} streams, {open_fds(proc)} descriptors"
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


H2_CONFIG = """server: { first_byte_timeout_ms: 60000 }
providers:
  a: { kind: mock }
models:
  m: { endpoints: [ { provider: a, model: x } ] }
"""


def h2_frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    """One HTTP/2 frame (RFC 9113 §4.1)."""
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big") + payload


def hpack_literal(name: str, value: str) -> bytes:
    """A header field as an HPACK literal without indexing, new name, no Huffman
    coding (RFC 7541 §6.2.2); names and values here are under 127 bytes."""
    n, v = name.encode(), value.encode()
    return b"\x00" + bytes([len(n)]) + n + bytes([len(v)]) + v


def test_an_http2_answer_waiting_for_window_is_delivered_after_the_reclaim_goaway():
    """Regression check of the HTTP/2 reclaim (`h2_queued.py` of the outside attack):
    an answer whose end hyper has handed to h2, most of it waiting for the client's
    16-byte stream window, counts as idle. Reclaimed at the descriptor limit, its
    connection gets a GOAWAY, and the rest of the answer still arrives once the
    client grants window (a read error closing the connection lost it)."""
    limit = 64
    held: list[socket.socket] = []
    with gateway(H2_CONFIG, limit, "descriptor-limit-h2.log") as (proc, port):
        try:
            h2 = socket.create_connection(("127.0.0.1", port), timeout=10)
            body = json.dumps(
                {"model": "m", "messages": [{"role": "user", "content": "hello " * 40}]}
            ).encode()
            head = b"".join(
                [b"\x83", b"\x86"]  # :method POST, :scheme http (static table)
                + [hpack_literal(k, v) for k, v in [
                    (":path", "/v1/chat/completions"),
                    (":authority", "x"),
                    ("content-type", "application/json"),
                    ("content-length", str(len(body))),
                ]]
            )
            initial_window_16 = (4).to_bytes(2, "big") + (16).to_bytes(4, "big")
            h2.sendall(
                b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
                + h2_frame(4, 0, 0, initial_window_16)
                + h2_frame(1, 4, 1, head)  # HEADERS, END_HEADERS
                + h2_frame(0, 1, 1, body)  # DATA, END_STREAM
            )
            buf = b""

            def next_frame() -> tuple[int, int, int, bytes] | None:
                nonlocal buf
                while True:
                    if len(buf) >= 9:
                        n = int.from_bytes(buf[:3], "big")
                        if len(buf) >= 9 + n:
                            kind, flags = buf[3], buf[4]
                            stream = int.from_bytes(buf[5:9], "big") & 0x7FFFFFFF
                            payload, buf = buf[9 : 9 + n], buf[9 + n :]
                            return kind, flags, stream, payload
                    chunk = h2.recv(65536)
                    if not chunk:
                        return None
                    buf += chunk

            got, ended, goaway, filled = b"", False, False, False
            while not ended:
                f = next_frame()
                assert f is not None, f"end-of-file after {len(got)} bytes (GOAWAY: {goaway})"
                kind, flags, stream, payload = f
                if kind == 4 and not flags & 1:
                    h2.sendall(h2_frame(4, 1, 0))  # SETTINGS ack
                elif kind == 6 and not flags & 1:
                    h2.sendall(h2_frame(6, 1, 0, payload))  # PING ack
                elif kind == 7:
                    goaway = True
                    # Window for the rest of the answer, on the stream and the connection.
                    more = (1 << 20).to_bytes(4, "big")
                    h2.sendall(h2_frame(8, 0, 1, more) + h2_frame(8, 0, 0, more))
                elif kind == 0 and stream == 1:
                    got += payload
                    ended = bool(flags & 1)
                if len(got) >= 16 and not goaway and not filled:
                    filled = True
                    assert not ended, "the answer fit in 16 bytes"
                    # Keep-alive connections until the descriptors run out, then
                    # clients until the reclaim has closed this one with a GOAWAY.
                    health = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
                    while open_fds(proc) < limit and len(held) < 2 * limit:
                        s = socket.create_connection(("127.0.0.1", port), timeout=10)
                        s.sendall(health)
                        assert status_line(s).startswith("HTTP/1.1 200")
                        held.append(s)
                    h2.settimeout(0.2)
                    for _ in range(50):
                        c = socket.create_connection(("127.0.0.1", port), timeout=10)
                        c.sendall(health)
                        status_line(c)
                        c.close()
                        try:
                            buf += h2.recv(65536)
                        except socket.timeout:
                            continue
                        break
                    h2.settimeout(10)
            assert goaway, "the connection was not reclaimed"
            answer = json.loads(got)
            assert answer["object"] == "chat.completion", got[:200]
        finally:
            for s in held:
                s.close()
