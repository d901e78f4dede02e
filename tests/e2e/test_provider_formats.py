"""End to end: the official `openai` SDK, through Switchyard, to `switchyard mock`
speaking Anthropic Messages, Gemini generateContent and Bedrock Converse (with its
binary event stream and SigV4-signed requests; see conftest.py).

Each test drives a tool-calling round trip: the model asks for a tool, the client sends
the result, the model answers with text quoting it. The mock answers a request that
offers tools (and holds no tool result yet) with a call of the first tool, its required
string properties filled with "x"; after a tool result, with "The tool returned: <result>".
Usage is checked against what the mock itself reported (`GET /mock/requests`).
"""

from __future__ import annotations

import json

import pytest

from conftest import (
    ANTHROPIC_MODEL,
    BEDROCK_CLAUDE_MODEL,
    BEDROCK_CLAUDE_UPSTREAM,
    BEDROCK_MODEL,
    GEMINI_MODEL,
    MOCK_UPSTREAM_MODEL,
    mock_report,
)

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather of a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                "required": ["city"],
            },
        },
    }
]
QUESTION = {"role": "user", "content": "What is the weather in Paris?"}
RESULT = "sunny and 21 degrees"

FORMATS = [
    pytest.param(ANTHROPIC_MODEL, "anthropic_mock", "anthropic", id="anthropic"),
    pytest.param(GEMINI_MODEL, "gemini_mock", "gemini", id="gemini"),
    pytest.param(BEDROCK_MODEL, "bedrock_mock", "bedrock", id="bedrock"),
]


def ask(client, model: str, messages: list, stream: bool) -> dict:
    """One request; what the client read: content, tool calls, finish reasons, usage
    and the assistant message to send back."""
    if not stream:
        r = client.chat.completions.create(model=model, messages=messages, tools=TOOLS)
        assert r.object == "chat.completion"
        assert r.model == model
        choice = r.choices[0]
        calls = [
            (c.id, c.function.name, c.function.arguments) for c in choice.message.tool_calls or []
        ]
        return {
            "content": choice.message.content or "",
            "calls": calls,
            "finish": [choice.finish_reason],
            "usage": r.usage,
            "message": choice.message.model_dump(exclude_none=True),
        }
    content, calls, finish, usage = [], {}, [], None
    for chunk in client.chat.completions.create(
        model=model,
        messages=messages,
        tools=TOOLS,
        stream=True,
        stream_options={"include_usage": True},
    ):
        assert chunk.object == "chat.completion.chunk"
        if chunk.usage is not None:
            usage = chunk.usage
        for c in chunk.choices:
            if c.delta.content:
                content.append(c.delta.content)
            for t in c.delta.tool_calls or []:
                call = calls.setdefault(t.index, {"id": "", "name": "", "arguments": ""})
                if t.id:
                    call["id"] = t.id
                if t.function and t.function.name:
                    call["name"] = t.function.name
                if t.function and t.function.arguments:
                    call["arguments"] += t.function.arguments
            if c.finish_reason:
                finish.append(c.finish_reason)
    listed = [(c["id"], c["name"], c["arguments"]) for _, c in sorted(calls.items())]
    message = {"role": "assistant", "content": "".join(content) or None}
    if listed:
        message["tool_calls"] = [
            {"id": i, "type": "function", "function": {"name": n, "arguments": a}}
            for i, n, a in listed
        ]
    return {
        "content": "".join(content),
        "calls": listed,
        "finish": finish,
        "usage": usage,
        "message": message,
    }


def assert_usage_is_the_mocks(usage, report: dict) -> None:
    assert usage is not None, "no usage reached the client"
    want = report["usage"]
    assert want["prompt_tokens"] > 0
    got = {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
    }
    assert got == want, f"client saw {got}, the mock reported {want}"


def round_trip(client, model: str, mock, fmt: str, stream: bool) -> list[dict]:
    """Runs the round trip, checking each step; returns the mock's two reports."""
    first = ask(client, model, [QUESTION], stream)
    report = mock_report(mock)[-1]
    assert report["format"] == fmt
    assert report["model"] == MOCK_UPSTREAM_MODEL
    assert report["reply"] == "tool_call", report
    assert first["finish"] == ["tool_calls"]
    assert len(first["calls"]) == 1
    call_id, name, arguments = first["calls"][0]
    assert call_id
    assert name == "get_weather"
    assert json.loads(arguments) == {"city": "x"}
    assert_usage_is_the_mocks(first["usage"], report)

    history = [
        QUESTION,
        first["message"],
        {"role": "tool", "tool_call_id": call_id, "content": RESULT},
    ]
    second = ask(client, model, history, stream)
    answer = mock_report(mock)[-1]
    assert answer["reply"] == "tool_result_answer", answer
    assert second["finish"] == ["stop"]
    assert second["calls"] == []
    assert second["content"] == f"The tool returned: {RESULT}"
    assert_usage_is_the_mocks(second["usage"], answer)
    return [report, answer]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("model,mock_fixture,fmt", FORMATS)
def test_tool_round_trip(format_client, request, model, mock_fixture, fmt, stream):
    mock = request.getfixturevalue(mock_fixture)
    round_trip(format_client, model, mock, fmt, stream)


def test_gemini_thought_signature_survives_the_round_trip(format_client, gemini_mock):
    reports = round_trip(format_client, GEMINI_MODEL, gemini_mock, "gemini", stream=False)
    assert reports[1]["thought_signature"] == "echoed", reports[1]


def test_a_provider_error_reaches_the_sdk_as_an_openai_error(format_client):
    import openai

    # Anthropic refuses an empty-content user message; the mock does too, and the
    # client must get a 4xx in OpenAI's shape (from the gateway or the provider).
    with pytest.raises(openai.BadRequestError) as e:
        format_client.chat.completions.create(
            model=ANTHROPIC_MODEL, messages=[{"role": "user", "content": [{"type": "text", "text": "   "}]}]
        )
    assert e.value.status_code == 400


def reasoning_of(message: dict) -> str | None:
    """The `reasoning_content` an OpenAI-compatible client reads (DeepSeek/vLLM style)."""
    return message.get("reasoning_content")


def test_anthropic_thinking_reaches_the_client_and_survives_the_round_trip(
    format_client, anthropic_mock
):
    think = {"thinking": {"type": "enabled", "budget_tokens": 1024}}
    first = format_client.chat.completions.create(
        model=ANTHROPIC_MODEL, messages=[QUESTION], tools=TOOLS, max_tokens=2048, extra_body=think
    )
    message = first.choices[0].message.model_dump(exclude_none=True)
    report = mock_report(anthropic_mock)[-1]
    assert report["reasoning_tokens"] > 0, report
    assert reasoning_of(message), message
    assert first.choices[0].finish_reason == "tool_calls"
    assert_usage_is_the_mocks(first.usage, report)
    call_id = first.choices[0].message.tool_calls[0].id
    history = [QUESTION, message, {"role": "tool", "tool_call_id": call_id, "content": RESULT}]
    second = format_client.chat.completions.create(
        model=ANTHROPIC_MODEL, messages=history, tools=TOOLS, max_tokens=2048, extra_body=think
    )
    answer = mock_report(anthropic_mock)[-1]
    assert answer["thought_signature"] == "echoed", answer
    assert second.choices[0].message.content.startswith(f"The tool returned: {RESULT}")


def test_gemini_thoughts_reach_the_client_as_reasoning_content(format_client, gemini_mock):
    r = format_client.chat.completions.create(
        model=GEMINI_MODEL, messages=[{"role": "user", "content": "hello"}], reasoning_effort="low"
    )
    report = mock_report(gemini_mock)[-1]
    assert report["reasoning_tokens"] > 0, report
    assert reasoning_of(r.choices[0].message.model_dump(exclude_none=True))
    assert_usage_is_the_mocks(r.usage, report)


def thinking_turn(client, messages: list, stream: bool, **kwargs) -> dict:
    """One tool-offering request to BEDROCK_CLAUDE_MODEL; the reasoning the client read
    (text and signed blocks), the tool call, finish reasons, usage and the assistant
    message to send back (with its `thinking_blocks`)."""
    if not stream:
        r = client.chat.completions.create(
            model=BEDROCK_CLAUDE_MODEL, messages=messages, tools=TOOLS, **kwargs
        )
        message = r.choices[0].message.model_dump(exclude_none=True)
        return {
            "reasoning": message.get("reasoning_content") or "",
            "blocks": message.get("thinking_blocks") or [],
            "calls": [(c["id"], c["function"]["name"]) for c in message.get("tool_calls", [])],
            "content": message.get("content") or "",
            "finish": [r.choices[0].finish_reason],
            "usage": r.usage,
            "message": message,
        }
    reasoning, blocks, calls, content, finish, usage = [], [], {}, [], [], None
    for chunk in client.chat.completions.create(
        model=BEDROCK_CLAUDE_MODEL,
        messages=messages,
        tools=TOOLS,
        stream=True,
        stream_options={"include_usage": True},
        **kwargs,
    ):
        if chunk.usage is not None:
            usage = chunk.usage
        for c in chunk.choices:
            delta = c.delta.model_dump(exclude_none=True)
            reasoning.append(delta.get("reasoning_content") or "")
            blocks.extend(delta.get("thinking_blocks") or [])
            content.append(delta.get("content") or "")
            for t in c.delta.tool_calls or []:
                call = calls.setdefault(t.index, {"id": "", "name": "", "arguments": ""})
                call["id"] = t.id or call["id"]
                if t.function:
                    call["name"] = t.function.name or call["name"]
                    call["arguments"] += t.function.arguments or ""
            if c.finish_reason:
                finish.append(c.finish_reason)
    listed = [c for _, c in sorted(calls.items())]
    message = {
        "role": "assistant",
        "content": "".join(content) or None,
        "reasoning_content": "".join(reasoning),
        "thinking_blocks": blocks,
    }
    if listed:
        message["tool_calls"] = [
            {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
            for c in listed
        ]
    return {
        "reasoning": "".join(reasoning),
        "blocks": blocks,
        "calls": [(c["id"], c["name"]) for c in listed],
        "content": "".join(content),
        "finish": finish,
        "usage": usage,
        "message": message,
    }


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize(
    "ask_for",
    [
        pytest.param({"reasoning_effort": "low"}, id="reasoning_effort"),
        pytest.param(
            {"max_tokens": 4096, "extra_body": {"thinking": {"type": "enabled", "budget_tokens": 1024}}},
            id="thinking",
        ),
    ],
)
def test_bedrock_claude_thinking_round_trip(format_client, bedrock_mock, ask_for, stream):
    first = thinking_turn(format_client, [QUESTION], stream, **ask_for)
    report = mock_report(bedrock_mock)[-1]
    assert report["format"] == "bedrock"
    assert report["model"] == BEDROCK_CLAUDE_UPSTREAM
    assert report["reply"] == "tool_call", report
    assert report["reasoning_tokens"] > 0, report
    assert first["reasoning"], first
    assert len(first["blocks"]) == 1, first["blocks"]
    block = first["blocks"][0]
    assert block["type"] == "thinking"
    assert block["thinking"] == first["reasoning"]
    assert block["signature"]
    assert first["finish"] == ["tool_calls"]
    assert [name for _, name in first["calls"]] == ["get_weather"]
    assert_usage_is_the_mocks(first["usage"], report)

    call_id = first["calls"][0][0]
    history = [QUESTION, first["message"], {"role": "tool", "tool_call_id": call_id, "content": RESULT}]
    second = thinking_turn(format_client, history, stream, **ask_for)
    answer = mock_report(bedrock_mock)[-1]
    assert answer["reply"] == "tool_result_answer", answer
    # The signed block came back to Bedrock as it was issued.
    assert answer["thought_signature"] == "echoed", answer
    assert second["finish"] == ["stop"]
    assert second["content"] == f"The tool returned: {RESULT}"
    assert_usage_is_the_mocks(second["usage"], answer)


def test_bedrock_refuses_an_unsigned_request(bedrock_mock):
    """The mock, like Bedrock, answers a request with no Authorization with a 403; the
    gateway's requests above got through, so they were signed."""
    import urllib.error
    import urllib.request

    req = urllib.request.Request(
        f"{bedrock_mock.base_url}/model/{MOCK_UPSTREAM_MODEL}/converse",
        data=json.dumps({"messages": [{"role": "user", "content": [{"text": "hi"}]}]}).encode(),
        headers={"content-type": "application/json"},
        method="POST",
    )
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=10)
    assert e.value.code == 403
    assert e.value.headers["x-amzn-ErrorType"].startswith("AccessDeniedException")
