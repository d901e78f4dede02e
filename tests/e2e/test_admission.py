"""Admission through the official openai SDK: API keys (401, 403) and rate limits (429
with `Retry-After`, which the SDK's own retry reads), against the in-process emulator
(`kind: mock`), so no model server is needed.

    openai SDK ──► switchyard serve (auth: keys, limits) ──► kind: mock
"""

from __future__ import annotations

import hashlib
import json
import tempfile
import time
from pathlib import Path

import pytest

from conftest import LOG_DIR, http_get, start_switchyard, stop

SECRET = "sy-e2e-secret-a"
SCOPED = "sy-e2e-secret-b"


def sha256(s: str) -> str:
    return "sha256:" + hashlib.sha256(s.encode()).hexdigest()


@pytest.fixture(scope="module")
def admitting_gateway():
    config = {
        "server": {"listen": "127.0.0.1:0"},
        "auth": {
            "mode": "keys",
            "keys": [
                {"id": "key-e2e", "hash": sha256(SECRET), "org": "acme"},
                {"id": "key-scoped", "hash": sha256(SCOPED), "models": ["other"]},
            ],
        },
        # One request per 2 s for key-e2e after a burst of 2.
        "limits": {"keys": {"key-e2e": {"requests_per_min": 30, "burst_requests": 2}}},
        "providers": {"local": {"kind": "mock"}},
        "models": {
            "m": {"endpoints": [{"provider": "local", "model": "mock-1"}]},
            "other": {"endpoints": [{"provider": "local", "model": "mock-1"}]},
        },
    }
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="switchyard-e2e-auth-") as tmp:
        path = Path(tmp) / "switchyard.yaml"
        path.write_text(json.dumps(config, indent=2) + "\n")
        svc = start_switchyard(path, LOG_DIR / "switchyard-admission.log")
        try:
            assert http_get(f"{svc.base_url}/health")[0] == 200
            yield svc
        finally:
            stop(svc.proc)


def client(svc, key: str, retries: int = 0):
    from openai import OpenAI

    return OpenAI(base_url=f"{svc.base_url}/v1", api_key=key, max_retries=retries, timeout=30)


def ask(c, model: str = "m"):
    return c.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}])


def test_a_wrong_key_is_an_authentication_error(admitting_gateway):
    import openai

    with client(admitting_gateway, "sy-not-a-key") as c:
        with pytest.raises(openai.AuthenticationError) as e:
            ask(c)
    assert e.value.status_code == 401
    assert e.value.code == "invalid_api_key"


def test_a_model_outside_the_keys_scope_is_permission_denied(admitting_gateway):
    import openai

    with client(admitting_gateway, SCOPED) as c:
        with pytest.raises(openai.PermissionDeniedError) as e:
            ask(c, "m")
        assert ask(c, "other").choices[0].message.content


def test_a_rate_limited_key_gets_rate_limit_error_and_the_sdk_retry_waits_it_out(
    admitting_gateway,
):
    import openai

    with client(admitting_gateway, SECRET) as c:
        ask(c)
        ask(c)
        with pytest.raises(openai.RateLimitError) as e:
            ask(c)
        retry_after = e.value.response.headers.get("retry-after")
        assert retry_after is not None and int(retry_after) >= 1
        assert e.value.response.headers.get("x-ratelimit-limit-requests") == "2"
    # The SDK's own retry reads Retry-After (it honours waits up to 60 s) and succeeds.
    with client(admitting_gateway, SECRET, retries=2) as c:
        t = time.monotonic()
        assert ask(c).choices[0].message.content
        assert time.monotonic() - t >= 0.5, "the SDK waited before retrying"


THRIFTY = "sy-e2e-secret-thrifty"

# Near its budget, a caller of `big` is moved to `small` (issue 12: a policy decision
# instead of a 429 at the end).
THRIFTY_POLICY = """route thrifty when request.model == "big" {
  rule near_budget when request.budget_remaining < 0.05 {
    use "small"
  }
  default use model
}
"""


def test_a_policy_moves_a_caller_near_its_budget_to_the_cheaper_model():
    """Real spend through `switchyard serve`: the key entry's own budget (0.1 USD a
    day at 1000 USD per 1M tokens, some 0.02 USD a request) runs low, then
    `request.budget_remaining` sends it to `small`, then the budget is used up (429)."""
    import openai

    priced = {"input_per_mtok": 1000, "output_per_mtok": 1000}
    config = {
        "server": {"listen": "127.0.0.1:0"},
        "policies": {"dir": "policies"},
        "auth": {
            "mode": "keys",
            "keys": [{"id": "key-thrifty", "hash": sha256(THRIFTY), "budget": {"usd_per_day": 0.1}}],
        },
        "providers": {
            "p": {"kind": "mock", "pricing": priced},
            "q": {"kind": "mock", "pricing": priced},
        },
        "models": {
            "big": {"endpoints": [{"provider": "p", "model": "x"}]},
            "small": {"endpoints": [{"provider": "q", "model": "y"}]},
        },
    }
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="switchyard-e2e-budget-") as tmp:
        (Path(tmp) / "policies").mkdir()
        (Path(tmp) / "policies" / "thrifty.policy").write_text(THRIFTY_POLICY)
        path = Path(tmp) / "switchyard.yaml"
        path.write_text(json.dumps(config, indent=2) + "\n")
        svc = start_switchyard(path, LOG_DIR / "switchyard-budget.log")
        try:
            served = []
            with client(svc, THRIFTY) as c:
                for _ in range(40):
                    try:
                        raw = c.chat.completions.with_raw_response.create(
                            model="big", messages=[{"role": "user", "content": "hi"}], max_tokens=8
                        )
                    except openai.RateLimitError as e:
                        assert e.code == "budget_exceeded", e
                        break
                    served.append(raw.headers["x-switchyard-endpoint"])
        finally:
            stop(svc.proc)
    assert served[0] == "p/x", served
    assert "q/y" in served, served
    first = served.index("q/y")
    assert first >= 2 and all(s == "q/y" for s in served[first:]), served
    assert len(served) < 40, "the budget was never used up"
