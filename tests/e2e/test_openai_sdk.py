"""End to end with the official `openai` SDK, through Switchyard, to a real llama.cpp server.

See conftest.py for how the processes are started. The model is SmolLM2-135M-Instruct,
small enough for CPU; at temperature 0 its answers are deterministic, which lets the
tests compare a stream with a plain response token for token.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
import urllib.error
import urllib.request
import uuid

import openai
import pytest

from conftest import LOGICAL_MODEL, TTFT_REPORT, UPSTREAM_MODEL, http_get, switchyard_binary

PROMPT = [{"role": "user", "content": "Name three colours of the rainbow."}]
# Fixed length and sampling, so streamed and plain answers must match exactly.
GREEDY = {"temperature": 0, "max_tokens": 32, "seed": 42}


def stream_text(chunks) -> tuple[str, list]:
    """Concatenated content of a chunk iterator, and the chunks themselves."""
    parts, seen = [], []
    for chunk in chunks:
        seen.append(chunk)
        for choice in chunk.choices:
            if choice.delta and choice.delta.content:
                parts.append(choice.delta.content)
    return "".join(parts), seen


def finish_reasons(chunks) -> list[str]:
    return [c.finish_reason for ch in chunks for c in ch.choices if c.finish_reason]


# ----------------------------------------------------------------------------- models


def test_models_lists_the_logical_model(client):
    models = client.models.list()
    ids = [m.id for m in models.data]
    assert LOGICAL_MODEL in ids
    assert all(m.object == "model" for m in models.data)


def test_a_model_is_retrieved_and_an_unknown_one_is_not_found(client):
    m = client.models.retrieve(LOGICAL_MODEL)
    assert (m.id, m.object) == (LOGICAL_MODEL, "model")
    with pytest.raises(openai.NotFoundError) as e:
        client.models.retrieve("no-such-model")
    assert e.value.code == "model_not_found"


# ------------------------------------------------------------------------------- chat


def test_request_id_sent_by_the_client_comes_back_as_request_id(client):
    r = client.chat.completions.create(
        model=LOGICAL_MODEL,
        messages=PROMPT,
        extra_headers={"x-request-id": "sdk-trace-16"},
        **GREEDY,
    )
    assert r._request_id == "sdk-trace-16"


def test_chat_non_streaming(client):
    r = client.chat.completions.create(model=LOGICAL_MODEL, messages=PROMPT, **GREEDY)
    assert r.object == "chat.completion"
    # The response names the logical model the client asked for, not the upstream's.
    assert r.model == LOGICAL_MODEL
    assert len(r.choices) == 1
    # The SDK reads `x-request-id` into `_request_id`: Switchyard generates one, a UUID
    # (which llama.cpp's server, like Envoy, accepts as its own request id).
    assert r._request_id and str(uuid.UUID(r._request_id)) == r._request_id, r._request_id
    choice = r.choices[0]
    assert choice.message.role == "assistant"
    assert choice.message.content and choice.message.content.strip()
    assert choice.finish_reason in ("stop", "length")
    assert r.usage is not None
    assert r.usage.prompt_tokens > 0 and r.usage.completion_tokens > 0
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_streaming_text_equals_non_streaming_text(client):
    plain = client.chat.completions.create(model=LOGICAL_MODEL, messages=PROMPT, **GREEDY)
    expected = plain.choices[0].message.content
    stream = client.chat.completions.create(
        model=LOGICAL_MODEL, messages=PROMPT, stream=True, **GREEDY
    )
    text, chunks = stream_text(stream)
    assert text == expected
    assert len(chunks) > 2, "expected the answer in several chunks, not one"
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert all(c.model == LOGICAL_MODEL for c in chunks)
    assert finish_reasons(chunks) == [plain.choices[0].finish_reason]
    # Without stream_options.include_usage, no chunk carries usage.
    assert all(c.usage is None for c in chunks)


def test_stream_include_usage_ends_with_usage_chunk(client):
    stream = client.chat.completions.create(
        model=LOGICAL_MODEL,
        messages=PROMPT,
        stream=True,
        stream_options={"include_usage": True},
        **GREEDY,
    )
    text, chunks = stream_text(stream)
    assert text.strip()
    last = chunks[-1]
    assert last.choices == []
    assert last.usage is not None
    assert last.usage.prompt_tokens > 0
    assert last.usage.completion_tokens > 0
    assert last.usage.total_tokens == last.usage.prompt_tokens + last.usage.completion_tokens
    # Only the final chunk carries usage, and the answer itself finished.
    assert all(c.usage is None for c in chunks[:-1])
    assert finish_reasons(chunks)


# ----------------------------------------------------------------------------- errors


def test_unknown_model_is_not_found(client):
    with pytest.raises(openai.NotFoundError) as info:
        client.chat.completions.create(model="no-such-model", messages=PROMPT, max_tokens=4)
    assert info.value.status_code == 404
    err = info.value.body
    assert isinstance(err, dict) and "no-such-model" in err["message"]
    assert err["type"] == "invalid_request_error"


def test_invalid_role_is_bad_request(client):
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(
            model=LOGICAL_MODEL,
            messages=[{"role": "wizard", "content": "hi"}],
            max_tokens=4,
        )
    assert info.value.status_code == 400
    err = info.value.body
    assert err["type"] == "invalid_request_error"
    assert err["param"] == "messages[0].role"


def test_wrong_field_type_is_bad_request(client):
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(
            model=LOGICAL_MODEL, messages=PROMPT, extra_body={"temperature": "hot"}
        )
    assert info.value.body["param"] == "temperature"


def test_malformed_json_is_bad_request_with_openai_error_shape(gateway):
    req = urllib.request.Request(
        f"{gateway.base_url}/v1/chat/completions",
        data=b'{"model": "smollm", "messages": [',
        headers={"content-type": "application/json"},
        method="POST",
    )
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(req, timeout=10)
    assert info.value.code == 400
    body = json.loads(info.value.read())
    assert set(body) == {"error"}
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["type"] == "invalid_request_error"


def test_body_over_limit_is_413(client):
    # The suite's config sets server.max_body_bytes to 1 MiB. (A client must read the
    # answer even if its upload is cut short: the SDK does; Python's urllib may not.)
    with pytest.raises(openai.APIStatusError) as info:
        client.chat.completions.create(
            model=LOGICAL_MODEL,
            messages=[{"role": "user", "content": "x" * (2 << 20)}],
            max_tokens=4,
        )
    assert info.value.status_code == 413
    assert info.value.body["type"] == "invalid_request_error"
    assert info.value.body["code"] == "request_too_large"


# ------------------------------------------------------------------------ concurrency

CONCURRENT_STREAMS = 50
CONCURRENT_PROMPTS = [
    "Say hello.",
    "What is two plus two?",
    "Name a fruit.",
    "Name a planet.",
    "What colour is the sky?",
]


def test_concurrent_streams_complete_intact(client, gateway):
    """50 streams at once; each ends normally, with its own prompt's whole answer."""
    params = {"temperature": 0, "max_tokens": 12, "seed": 7}
    # The reference answer of each prompt, one request at a time.
    expected = {}
    for p in CONCURRENT_PROMPTS:
        r = client.chat.completions.create(
            model=LOGICAL_MODEL, messages=[{"role": "user", "content": p}], **params
        )
        expected[p] = r.choices[0].message.content

    async def one(aclient, i: int):
        prompt = CONCURRENT_PROMPTS[i % len(CONCURRENT_PROMPTS)]
        stream = await aclient.chat.completions.create(
            model=LOGICAL_MODEL,
            messages=[{"role": "user", "content": prompt}],
            stream=True,
            stream_options={"include_usage": True},
            **params,
        )
        chunks = [c async for c in stream]
        return prompt, chunks

    async def run_all():
        async with openai.AsyncOpenAI(
            base_url=f"{gateway.base_url}/v1", api_key="unused", max_retries=0, timeout=300
        ) as aclient:
            return await asyncio.gather(
                *(one(aclient, i) for i in range(CONCURRENT_STREAMS)), return_exceptions=True
            )

    results = asyncio.run(run_all())
    errors = [r for r in results if isinstance(r, BaseException)]
    assert not errors, f"{len(errors)} of {CONCURRENT_STREAMS} streams failed: {errors[:3]!r}"
    for prompt, chunks in results:
        text, _ = stream_text(chunks)
        assert text, f"empty answer to {prompt!r}"
        assert len(finish_reasons(chunks)) == 1, f"no single finish_reason for {prompt!r}"
        assert chunks[-1].choices == [] and chunks[-1].usage is not None
        assert len({c.id for c in chunks}) == 1, "chunks of two streams were mixed"
        assert text == expected[prompt], f"stream for {prompt!r} differs from its reference"


# ------------------------------------------------------------------ health and metrics


def test_health_ready_and_metrics(client, gateway):
    client.chat.completions.create(model=LOGICAL_MODEL, messages=PROMPT, max_tokens=4)
    assert http_get(f"{gateway.base_url}/health")[0] == 200
    assert http_get(f"{gateway.base_url}/ready")[0] == 200
    status, body = http_get(f"{gateway.base_url}/metrics")
    assert status == 200
    text = body.decode()
    assert "switchyard_requests_total" in text
    assert f'model="{LOGICAL_MODEL}"' in text
    assert "switchyard_request_duration_seconds" in text


# ----------------------------------------------------------------- time to first token

TTFT_SAMPLES = 20


def time_to_first_token(c, model: str) -> float:
    """Seconds from sending a streaming request to its first content delta."""
    t0 = time.perf_counter()
    stream = c.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "Write one short sentence about trains."}],
        stream=True,
        temperature=0,
        max_tokens=8,
    )
    first = None
    for chunk in stream:
        if first is None and any(ch.delta and ch.delta.content for ch in chunk.choices):
            first = time.perf_counter() - t0
    assert first is not None, "the stream carried no content"
    return first


def test_ttft_through_switchyard_vs_direct(client, direct_client, request):
    """Measures time to first token via Switchyard and straight to llama.cpp.

    Median of 20 each, interleaved in one run so both see the same machine state.
    Reports the figures (target/e2e-ttft.txt and the pytest summary); asserts nothing
    about timing.
    """
    # Warm both paths (connection pools, the model's prompt cache).
    time_to_first_token(direct_client, UPSTREAM_MODEL)
    time_to_first_token(client, LOGICAL_MODEL)
    via, direct = [], []
    for _ in range(TTFT_SAMPLES):
        direct.append(time_to_first_token(direct_client, UPSTREAM_MODEL))
        via.append(time_to_first_token(client, LOGICAL_MODEL))

    def ms(xs):
        return [round(x * 1000, 2) for x in xs]

    med_via, med_direct = statistics.median(via), statistics.median(direct)
    lines = [
        f"time to first token, median of {TTFT_SAMPLES} interleaved streaming requests "
        f"(SmolLM2-135M-Instruct Q4_1, llama-cpp-python server, 2 threads, max_tokens 8)",
        f"  direct to llama.cpp server: {med_direct * 1000:8.2f} ms "
        f"(min {min(direct) * 1000:.2f}, max {max(direct) * 1000:.2f})",
        f"  through switchyard ({switchyard_binary().parent.name} build):"
        f"{' ' * max(1, 8 - len(switchyard_binary().parent.name))}{med_via * 1000:8.2f} ms "
        f"(min {min(via) * 1000:.2f}, max {max(via) * 1000:.2f})",
        f"  difference of medians:      {(med_via - med_direct) * 1000:+8.2f} ms",
        f"  samples direct (ms):  {ms(direct)}",
        f"  samples switchyard (ms): {ms(via)}",
    ]
    report = "\n".join(lines) + "\n"
    TTFT_REPORT.parent.mkdir(parents=True, exist_ok=True)
    TTFT_REPORT.write_text(report)
    request.config._switchyard_ttft_written = True
    print(report)
