"""Mid-stream failover on real parts: the official openai SDK -> switchyard -> a
llama.cpp server behind a proxy that cuts the stream after a few tokens, with the same
llama.cpp server as the fallback.

    openai SDK ──► switchyard ──► cutting proxy ──► llama.cpp   (primary: cut after 4 tokens)
                             └──────────────────► llama.cpp   (fallback)

llama-cpp-python's server closes a final assistant message and starts a new turn (its
chat templates render every message whole), so it cannot take the partial answer as a
prefill; it is declared `prefill: false`, and Switchyard restarts the request there and
passes on only what follows the text already sent. At temperature 0 the restarted
answer repeats the first tokens exactly, so the client must receive exactly the
uninterrupted answer: no duplicate, no gap, one role chunk, `[DONE]`.
"""

from __future__ import annotations

import http.client
import json
import socket
import statistics
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from conftest import LOG_DIR, UPSTREAM_MODEL, Service, http_get, start_switchyard, stop

FAILOVER_REPORT = LOG_DIR.parent / "e2e-failover.txt"
CUT_AFTER_TOKENS = 4
RUNS = 3
PROMPT = "Name three colours of the rainbow."


class CuttingProxy:
    """Relays requests to `upstream` (host, port); a streamed answer is cut (the
    connection reset mid-body, no terminating chunk) after `cut_after` content chunks."""

    def __init__(self, upstream: tuple[str, int], cut_after: int) -> None:
        self.cuts = 0
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:  # keep pytest output clean
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                up = http.client.HTTPConnection(*upstream, timeout=300)
                up.request("POST", self.path, body, {"content-type": "application/json"})
                resp = up.getresponse()
                self.send_response(resp.status)
                self.send_header("content-type", resp.getheader("content-type", ""))
                self.send_header("transfer-encoding", "chunked")
                self.end_headers()
                content = 0
                while True:
                    line = resp.readline()
                    if not line:
                        break
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                    self.wfile.flush()
                    if line.startswith(b"data: {"):
                        delta = json.loads(line[6:])["choices"][0].get("delta", {})
                        if delta.get("content"):
                            content += 1
                    if content >= cut_after:
                        proxy.cuts += 1
                        # A reset, not a clean end: the stream broke mid-answer.
                        self.connection.setsockopt(
                            socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00"
                        )
                        self.close_connection = True
                        up.close()
                        return
                self.wfile.write(b"0\r\n\r\n")
                up.close()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()


@pytest.fixture(scope="module")
def cutting_gateway(llama_server: Service):
    """Switchyard with `smollm` = cut proxy, then llama.cpp; `direct` = llama.cpp only."""
    proxy = CuttingProxy((llama_server.host, llama_server.port), CUT_AFTER_TOKENS)
    timeouts = {"first_byte_ms": 300000, "idle_ms": 300000, "total_ms": 600000}
    config = {
        "server": {"listen": "127.0.0.1:0"},
        "policies": {"dir": "policies"},
        "providers": {
            "cut": {
                "kind": "openai-compatible",
                "base_url": f"http://127.0.0.1:{proxy.port}/v1",
                "timeouts": timeouts,
            },
            "local": {
                "kind": "openai-compatible",
                "base_url": f"{llama_server.base_url}/v1",
                "timeouts": timeouts,
                "prefill": False,
            },
        },
        "models": {
            "smollm": {
                "endpoints": [
                    {"provider": "cut", "model": UPSTREAM_MODEL, "priority": 1},
                    {"provider": "local", "model": UPSTREAM_MODEL, "priority": 2},
                ]
            },
            "direct": {"endpoints": [{"provider": "local", "model": UPSTREAM_MODEL}]},
        },
    }
    policy = (
        'route failover when request.model == "smollm" {\n'
        f'  default use endpoint "cut/{UPSTREAM_MODEL}"\n'
        f'  fallback endpoint "local/{UPSTREAM_MODEL}"\n'
        "}\n"
    )
    with tempfile.TemporaryDirectory(prefix="switchyard-e2e-failover-") as tmp:
        (Path(tmp) / "policies").mkdir()
        (Path(tmp) / "policies" / "failover.policy").write_text(policy)
        config_path = Path(tmp) / "switchyard.yaml"
        config_path.write_text(json.dumps(config, indent=2) + "\n")
        svc = start_switchyard(config_path, LOG_DIR / "switchyard-failover.log")
        try:
            status, _ = http_get(f"{svc.base_url}/health")
            assert status == 200
            yield svc, proxy
        finally:
            stop(svc.proc)
            proxy.close()


def stream_text(client, model: str) -> tuple[str, int, float, list[str]]:
    """Streams PROMPT at temperature 0: (text, role chunks, seconds, chunk ids)."""
    t = time.perf_counter()
    text, roles, ids = [], 0, set()
    stream = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": PROMPT}],
        temperature=0,
        max_tokens=24,
        stream=True,
    )
    for chunk in stream:
        ids.add(chunk.id)
        if chunk.choices:
            delta = chunk.choices[0].delta
            if delta.role:
                roles += 1
            if delta.content:
                text.append(delta.content)
    return "".join(text), roles, time.perf_counter() - t, sorted(ids)


def test_a_stream_cut_mid_answer_continues_on_the_fallback_without_duplicates(
    cutting_gateway,
):
    from openai import OpenAI

    svc, proxy = cutting_gateway
    with OpenAI(
        base_url=f"{svc.base_url}/v1", api_key="unused", max_retries=0, timeout=300
    ) as client:
        # Warm the model (and its prompt cache) so the timings compare alike, then
        # alternate the two kinds of run; the figures are medians.
        stream_text(client, "direct")
        direct, failover = [], []
        for _ in range(RUNS):
            expected, _, s, _ = stream_text(client, "direct")
            direct.append(s)
            cuts_before = proxy.cuts
            got, roles, s, ids = stream_text(client, "smollm")
            failover.append(s)
            assert proxy.cuts == cuts_before + 1, "the primary's stream was cut"
            assert len(expected.split()) > CUT_AFTER_TOKENS, expected
            assert got == expected, f"\nuninterrupted: {expected!r}\nwith failover: {got!r}"
            assert roles == 1
            assert len(ids) == 1, ids
    d, f = statistics.median(direct), statistics.median(failover)
    report = (
        f"median of {RUNS}: uninterrupted stream {d * 1000:.0f} ms; cut after "
        f"{CUT_AFTER_TOKENS} tokens and continued on the fallback (restart, "
        f"repeated text dropped) {f * 1000:.0f} ms: {(f - d) * 1000:+.0f} ms\n"
    )
    FAILOVER_REPORT.parent.mkdir(parents=True, exist_ok=True)
    FAILOVER_REPORT.write_text(report)
    print(report)
