//! Happy paths through `switchyard serve` in front of `switchyard mock`.

use crate::common::*;

fn one_model(m: &Proc) -> Proc {
    serve(&config(
        &[("up", m)],
        "",
        "  smollm:\n    endpoints:\n      - { provider: up, model: upstream-model }\n",
    ))
}

#[tokio::test]
async fn json_answer_reports_the_logical_model() {
    let m = mock(&[]);
    let gw = one_model(&m);
    let r = post(
        &gw.url("/v1/chat/completions"),
        &chat("smollm", false, r#","max_tokens":5"#),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["model"], "smollm");
    assert_eq!(v["usage"]["completion_tokens"], 5);
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    assert_eq!(r.headers["x-switchyard-endpoint"], "up/upstream-model");
}

#[tokio::test]
async fn stream_is_relayed_chunk_by_chunk_and_ends_with_done() {
    let m = mock(&["--tokens-per-s", "200"]);
    let gw = one_model(&m);
    let r = post(
        &gw.url("/v1/chat/completions"),
        &chat(
            "smollm",
            true,
            r#","max_tokens":8,"stream_options":{"include_usage":true}"#,
        ),
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.headers["content-type"], "text/event-stream");
    let events = r.events();
    assert_eq!(events.last().unwrap(), "[DONE]");
    let usage: serde_json::Value = serde_json::from_str(&events[events.len() - 2]).unwrap();
    assert_eq!(usage["choices"], serde_json::json!([]));
    assert_eq!(usage["usage"]["completion_tokens"], 8);
    let mut text = String::new();
    for e in &events[..events.len() - 2] {
        let v: serde_json::Value = serde_json::from_str(e).unwrap();
        assert_eq!(v["model"], "smollm");
        text.push_str(v["choices"][0]["delta"]["content"].as_str().unwrap_or(""));
    }
    // The same request without streaming gives the same text (the mock is deterministic).
    let r = post(
        &gw.url("/v1/chat/completions"),
        &chat("smollm", false, r#","max_tokens":8"#),
    )
    .await;
    assert_eq!(r.json()["choices"][0]["message"]["content"], text);
}

#[tokio::test]
async fn usage_chunk_is_dropped_when_not_asked() {
    let m = mock(&[]);
    let gw = one_model(&m);
    let r = post(&gw.url("/v1/chat/completions"), &chat("smollm", true, "")).await;
    assert!(!r.text().contains("prompt_tokens"), "{}", r.text());
    assert_eq!(r.events().last().unwrap(), "[DONE]");
}

#[tokio::test]
async fn models_health_ready_and_metrics() {
    let m = mock(&[]);
    let gw = one_model(&m);
    let models = get(&gw.url("/v1/models")).await.json();
    assert_eq!(models["object"], "list");
    assert_eq!(models["data"][0]["id"], "smollm");
    assert_eq!(get(&gw.url("/health")).await.status, 200);
    assert_eq!(get(&gw.url("/ready")).await.status, 200);
    post(&gw.url("/v1/chat/completions"), &chat("smollm", true, "")).await;
    post(&gw.url("/v1/chat/completions"), &chat("smollm", false, "")).await;
    let metrics = get(&gw.url("/metrics")).await.text();
    assert!(
        metrics.contains(r#"switchyard_requests_total{model="smollm",endpoint="up/upstream-model",status="200"} 2"#),
        "{metrics}"
    );
    assert!(
        metrics.contains("switchyard_ttft_seconds_bucket"),
        "{metrics}"
    );
    assert!(metrics.contains("switchyard_request_duration_seconds_bucket"));
}

#[tokio::test]
async fn weights_split_traffic_between_endpoints() {
    let a = mock(&[]);
    let b = mock(&[]);
    let gw = serve(&config(
        &[("a", &a), ("b", &b)],
        "",
        "  m:\n    endpoints:\n      - { provider: a, model: x, weight: 1 }\n      - { provider: b, model: x, weight: 1 }\n",
    ));
    let mut seen_a = 0;
    for _ in 0..60 {
        let r = post(
            &gw.url("/v1/chat/completions"),
            &chat("m", false, r#","max_tokens":1"#),
        )
        .await;
        assert_eq!(r.status, 200);
        if r.headers["x-switchyard-endpoint"] == "a/x" {
            seen_a += 1;
        }
    }
    // Binomial(60, 0.5): 10..=50 holds with probability 1 - 1e-7.
    assert!((10..=50).contains(&seen_a), "{seen_a}");
}

/// Found by the conformance attack of 2026-12-07: an endpoint of `weight: 0`
/// ("0 disables the endpoint", README `models.<name>`) still took every request
/// when it was alone at the best priority (the built-in order drew by weight only
/// among two or more), and a model whose endpoints all had weight 0 answered from
/// one of them instead of 503 `no_endpoint`. A policy's strategy (`least_latency`
/// here) must not be offered it either.
#[tokio::test]
async fn a_weight_zero_endpoint_still_served_traffic() {
    let config = "providers: { a: { kind: mock }, b: { kind: mock } }\nmodels:\n  m: { endpoints: [ { provider: a, model: off, priority: 1, weight: 0 }, { provider: b, model: on, priority: 2 } ] }\n  z: { endpoints: [ { provider: a, model: off, weight: 0 }, { provider: b, model: off, weight: 0 } ] }\n  l: { endpoints: [ { provider: a, model: l0, weight: 0 }, { provider: b, model: l1 } ] }\n";
    let policy =
        "route fast when request.model == \"l\" {\n  default use \"l\" via least_latency\n}\n";
    let gw = start_app(config, &[("l.policy", policy)]).await;
    let url = gw.url("/v1/chat/completions");
    for stream in [false, true] {
        for _ in 0..5 {
            let r = post(&url, &chat("m", stream, r#","max_tokens":1"#)).await;
            assert_eq!(r.status, 200, "{}", r.text());
            assert_eq!(r.headers["x-switchyard-endpoint"], "b/on");
            let r = post(&url, &chat("l", stream, r#","max_tokens":1"#)).await;
            assert_eq!(r.status, 200, "{}", r.text());
            assert_eq!(r.headers["x-switchyard-endpoint"], "b/l1");
        }
        let r = post(&url, &chat("z", stream, r#","max_tokens":1"#)).await;
        assert_eq!(r.status, 503, "{}", r.text());
        let e = &r.json()["error"];
        assert_eq!(e["code"], "no_endpoint", "{e}");
        let message = e["message"].as_str().unwrap();
        assert!(message.contains("`weight: 0`"), "{message}");
    }
}

/// Found by the OpenAI-ingress review (2026-12-05): the emulator behind `kind: mock`
/// (and `switchyard mock`) answered `n: 3` with one choice, silently dropping the
/// parameter; OpenAI answers `n` choices (indexes 0 to n-1, each with its own
/// finish reason, a stream's chunks naming their choice) and counts the output
/// tokens of all of them.
#[tokio::test]
async fn n_choices_were_answered_with_one() {
    let gw = start_app(
        "providers: { p: { kind: mock } }\nmodels: { m: { endpoints: [ { provider: p, model: x } ] } }\n",
        &[],
    )
    .await;
    let url = gw.url("/v1/chat/completions");
    let r = post(&url, &chat("m", false, r#","max_tokens":4,"n":3"#)).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    let choices = v["choices"].as_array().unwrap();
    assert_eq!(choices.len(), 3, "{}", r.text());
    for (i, c) in choices.iter().enumerate() {
        assert_eq!(c["index"], i, "{}", r.text());
        assert_eq!(c["finish_reason"], "length");
        assert!(c["message"]["content"]
            .as_str()
            .is_some_and(|t| !t.is_empty()));
    }
    assert_eq!(v["usage"]["completion_tokens"], 12, "{}", r.text());
    let r = post(
        &url,
        &chat(
            "m",
            true,
            r#","max_tokens":4,"n":2,"stream_options":{"include_usage":true}"#,
        ),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let events = r.events();
    assert_eq!(events.last().unwrap(), "[DONE]");
    let mut text = [String::new(), String::new()];
    let mut finishes = [0, 0];
    let mut usage = serde_json::Value::Null;
    for e in &events[..events.len() - 1] {
        let v: serde_json::Value = serde_json::from_str(e).unwrap();
        if !v["usage"].is_null() {
            usage = v["usage"].clone();
        }
        for c in v["choices"].as_array().unwrap() {
            let i = c["index"].as_u64().unwrap() as usize;
            text[i].push_str(c["delta"]["content"].as_str().unwrap_or(""));
            finishes[i] += usize::from(!c["finish_reason"].is_null());
        }
    }
    assert_eq!(finishes, [1, 1], "{}", r.text());
    assert!(!text[0].is_empty() && !text[1].is_empty(), "{}", r.text());
    assert_eq!(usage["completion_tokens"], 8, "{}", r.text());
}

/// Found by the OpenAI-ingress review (2026-12-05): the emulator behind `kind: mock`
/// answered `logprobs: true, top_logprobs: 2` with `"logprobs": null`, silently
/// dropping both; OpenAI answers `choices[].logprobs.content`, one entry a token
/// (`token`, `logprob`, `bytes`, `top_logprobs` of the asked length), in a stream on
/// each content chunk.
#[tokio::test]
async fn logprobs_were_answered_with_null() {
    let gw = start_app(
        "providers: { p: { kind: mock } }\nmodels: { m: { endpoints: [ { provider: p, model: x } ] } }\n",
        &[],
    )
    .await;
    let url = gw.url("/v1/chat/completions");
    let asked = r#","max_tokens":4,"logprobs":true,"top_logprobs":2"#;
    let r = post(&url, &chat("m", false, asked)).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    let choice = &v["choices"][0];
    let content = choice["logprobs"]["content"]
        .as_array()
        .expect("logprobs.content");
    assert_eq!(content.len(), 4, "{}", r.text());
    let tokens: String = content
        .iter()
        .map(|e| e["token"].as_str().unwrap())
        .collect();
    assert_eq!(tokens, choice["message"]["content"].as_str().unwrap());
    for e in content {
        let token = e["token"].as_str().unwrap();
        assert_eq!(e["bytes"], serde_json::json!(token.as_bytes()), "{e}");
        assert!(e["logprob"].as_f64().unwrap() <= 0.0, "{e}");
        let top = e["top_logprobs"].as_array().unwrap();
        assert_eq!(top.len(), 2, "{e}");
        assert_eq!(top[0]["token"], token, "{e}");
        assert_ne!(top[1]["token"], token, "{e}");
    }
    // Without `logprobs` the member stays null.
    let r = post(&url, &chat("m", false, r#","max_tokens":4"#)).await;
    assert!(r.json()["choices"][0]["logprobs"].is_null(), "{}", r.text());
    let r = post(&url, &chat("m", true, asked)).await;
    let mut streamed = String::new();
    for e in &r.events()[..r.events().len() - 1] {
        let v: serde_json::Value = serde_json::from_str(e).unwrap();
        let c = &v["choices"][0];
        if let Some(text) = c["delta"]["content"].as_str().filter(|t| !t.is_empty()) {
            assert_eq!(c["logprobs"]["content"][0]["token"], text, "{e}");
            streamed.push_str(text);
        }
    }
    assert_eq!(streamed, tokens);
}

/// Found by the OpenAI-ingress review (2026-12-05): the emulator behind `kind: mock`
/// called the first declared tool even when `tool_choice` named another
/// (`{"type": "function", "function": {"name": "second"}}`); OpenAI's reference
/// ("tool_choice": "forces the model to call that tool") calls the named one.
#[tokio::test]
async fn a_tool_choice_naming_a_function_called_the_first_tool_instead() {
    let gw = start_app(
        "providers: { p: { kind: mock } }\nmodels: { m: { endpoints: [ { provider: p, model: x } ] } }\n",
        &[],
    )
    .await;
    let url = gw.url("/v1/chat/completions");
    let tools = r#","tools":[{"type":"function","function":{"name":"first"}},{"type":"function","function":{"name":"second","parameters":{"type":"object","properties":{"q":{"type":"string"}},"required":["q"]}}}]"#;
    for (choice, called) in [
        (r#""auto""#, "first"),
        (
            r#"{"type":"function","function":{"name":"second"}}"#,
            "second",
        ),
        (
            r#"{"type":"allowed_tools","allowed_tools":{"mode":"required","tools":[{"type":"function","function":{"name":"second"}}]}}"#,
            "second",
        ),
    ] {
        let extra = format!(r#"{tools},"tool_choice":{choice}"#);
        let r = post(&url, &chat("m", false, &extra)).await;
        assert_eq!(r.status, 200, "{}", r.text());
        let call = &r.json()["choices"][0]["message"]["tool_calls"][0]["function"];
        assert_eq!(call["name"], called, "{choice}: {}", r.text());
        if called == "second" {
            assert_eq!(call["arguments"], r#"{"q":"x"}"#, "{}", r.text());
        }
    }
}

/// Found by the OpenAI-ingress review (2026-12-05): the emulator behind `kind: mock`
/// answered `response_format` `json_object` and `json_schema` with plain words,
/// silently ignoring the format; OpenAI's reference ("response_format": JSON mode
/// "ensures the message the model generates is valid JSON", Structured Outputs
/// "matches your supplied JSON schema") answers JSON, streamed or not.
#[tokio::test]
async fn response_format_json_was_answered_with_plain_words() {
    let gw = start_app(
        "providers: { p: { kind: mock } }\nmodels: { m: { endpoints: [ { provider: p, model: x } ] } }\n",
        &[],
    )
    .await;
    let url = gw.url("/v1/chat/completions");
    let schema = r#","response_format":{"type":"json_schema","json_schema":{"name":"city","strict":true,"schema":{"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer"},"tags":{"type":"array","items":{"type":"string"}}},"required":["city","days","tags"],"additionalProperties":false}}}"#;
    for stream in [false, true] {
        let r = post(&url, &chat("m", stream, schema)).await;
        assert_eq!(r.status, 200, "{}", r.text());
        let text = if stream {
            r.events()[..r.events().len() - 1]
                .iter()
                .map(|e| {
                    let v: serde_json::Value = serde_json::from_str(e).unwrap();
                    v["choices"][0]["delta"]["content"]
                        .as_str()
                        .unwrap_or("")
                        .to_string()
                })
                .collect::<String>()
        } else {
            r.json()["choices"][0]["message"]["content"]
                .as_str()
                .unwrap()
                .to_string()
        };
        let v: serde_json::Value =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"));
        assert!(
            v["city"].is_string() && v["days"].is_i64() && v["tags"].is_array(),
            "{v}"
        );
    }
    let r = post(
        &url,
        &chat("m", false, r#","response_format":{"type":"json_object"}"#),
    )
    .await;
    let text = r.json()["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_string();
    let v: serde_json::Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"));
    assert!(v.is_object(), "{text}");
    // `text` stays words.
    let r = post(
        &url,
        &chat("m", false, r#","response_format":{"type":"text"}"#),
    )
    .await;
    let text = r.json()["choices"][0]["message"]["content"].clone();
    assert!(serde_json::from_str::<serde_json::Value>(text.as_str().unwrap()).is_err());
}

/// Found by the OpenAI-ingress review (2026-12-05): the emulator behind `kind: mock`
/// ignored `stop`: its answer ran on through a stop sequence (every answer ends in
/// `.`). OpenAI's reference ("stop": "sequences where the API will stop generating
/// further tokens. The returned text will not contain the stop sequence") stops
/// before it, finishing with `stop`.
#[tokio::test]
async fn stop_sequences_were_ignored() {
    let gw = start_app(
        "providers: { p: { kind: mock } }\nmodels: { m: { endpoints: [ { provider: p, model: x } ] } }\n",
        &[],
    )
    .await;
    let url = gw.url("/v1/chat/completions");
    let r = post(&url, &chat("m", false, "")).await;
    let full = r.json()["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(full.ends_with('.'), "{full}");
    for (stop, stream) in [(r#"".""#, false), (r#"["x-none", "."]"#, true)] {
        let r = post(&url, &chat("m", stream, &format!(r#","stop":{stop}"#))).await;
        assert_eq!(r.status, 200, "{}", r.text());
        let (text, finish) = if stream {
            let mut text = String::new();
            let mut finish = serde_json::Value::Null;
            for e in &r.events()[..r.events().len() - 1] {
                let v: serde_json::Value = serde_json::from_str(e).unwrap();
                let c = &v["choices"][0];
                text.push_str(c["delta"]["content"].as_str().unwrap_or(""));
                if !c["finish_reason"].is_null() {
                    finish = c["finish_reason"].clone();
                }
            }
            (text, finish)
        } else {
            let c = &r.json()["choices"][0];
            (
                c["message"]["content"].as_str().unwrap().to_string(),
                c["finish_reason"].clone(),
            )
        };
        assert_eq!(text, full.trim_end_matches('.'), "{stop}");
        assert_eq!(finish, "stop");
    }
}

/// Found by the OpenAI-ingress review (2026-12-05): the emulator behind `kind: mock`
/// answered a request offering a custom tool (`{"type": "custom", "custom":
/// {"name": ...}}`) with a *function* call named `tool`; OpenAI's reference
/// ("Custom tool call": `type: "custom"`, `custom.name`, `custom.input`) calls the
/// custom tool by its name, streamed or not.
#[tokio::test]
async fn a_custom_tool_was_called_as_a_function_named_tool() {
    let gw = start_app(
        "providers: { p: { kind: mock } }\nmodels: { m: { endpoints: [ { provider: p, model: x } ] } }\n",
        &[],
    )
    .await;
    let url = gw.url("/v1/chat/completions");
    let only = r#","tools":[{"type":"custom","custom":{"name":"grep","format":{"type":"text"}}}]"#;
    let named = r#","tools":[{"type":"function","function":{"name":"f"}},{"type":"custom","custom":{"name":"grep"}}],"tool_choice":{"type":"custom","custom":{"name":"grep"}}"#;
    for extra in [only, named] {
        let r = post(&url, &chat("m", false, extra)).await;
        assert_eq!(r.status, 200, "{}", r.text());
        let v = r.json();
        let call = &v["choices"][0]["message"]["tool_calls"][0];
        assert_eq!(call["type"], "custom", "{}", r.text());
        assert_eq!(call["custom"]["name"], "grep", "{}", r.text());
        assert!(call["custom"]["input"].is_string(), "{}", r.text());
        assert!(call.get("function").is_none(), "{}", r.text());
        assert_eq!(v["choices"][0]["finish_reason"], "tool_calls");
        let input = call["custom"]["input"].as_str().unwrap().to_string();
        let r = post(&url, &chat("m", true, extra)).await;
        let mut streamed = String::new();
        for e in &r.events()[..r.events().len() - 1] {
            let v: serde_json::Value = serde_json::from_str(e).unwrap();
            let c = &v["choices"][0]["delta"]["tool_calls"][0];
            if !c.is_null() {
                assert!(c.get("function").is_none(), "{e}");
                streamed.push_str(c["custom"]["input"].as_str().unwrap_or(""));
            }
        }
        assert_eq!(streamed, input, "{}", r.text());
    }
}

/// Found by the OpenAI-ingress review (2026-12-05): the emulator behind `kind: mock`
/// answered a request for audio output (`modalities: ["text", "audio"]` with
/// `audio`) with text only, silently dropping both; it cannot speak, so it now
/// refuses them as OpenAI refuses an unsupported value (400 naming the parameter),
/// and the gateway passes that refusal through with its `param`.
#[tokio::test]
async fn audio_output_was_answered_with_text_only() {
    let gw = start_app(
        "providers: { p: { kind: mock } }\nmodels: { m: { endpoints: [ { provider: p, model: x } ] } }\n",
        &[],
    )
    .await;
    let url = gw.url("/v1/chat/completions");
    for (extra, param) in [
        (
            r#","modalities":["text","audio"],"audio":{"voice":"alloy","format":"wav"}"#,
            "modalities",
        ),
        (r#","audio":{"voice":"alloy","format":"wav"}"#, "audio"),
    ] {
        let r = post(&url, &chat("m", false, extra)).await;
        assert_eq!(r.status, 400, "{}", r.text());
        let e = &r.json()["error"];
        assert_eq!(e["type"], "invalid_request_error", "{}", r.text());
        assert_eq!(e["param"], param, "{}", r.text());
    }
    let r = post(&url, &chat("m", false, r#","modalities":["text"]"#)).await;
    assert_eq!(r.status, 200, "{}", r.text());
}

/// Found by the conformance review: `GET /v1/models` and `/v1/models/{model}` said
/// `"created": 0` (1970), where OpenAI's model object has the Unix time the model was
/// created. The gateway's logical models come into being when it builds its registry.
#[tokio::test]
async fn models_reported_created_0_instead_of_a_unix_time() {
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let (addr, _hits) = crate::common::scripted_upstream(200, crate::common::COMPLETION);
    let gw = crate::common::start_app(
        &format!(
            "providers:\n  a: {{ kind: openai-compatible, base_url: http://{addr}/v1 }}\nmodels:\n  m: {{ endpoints: [ {{ provider: a, model: x }} ] }}\n  n: {{ endpoints: [ {{ provider: a, model: y }} ] }}\n"
        ),
        &[],
    )
    .await;
    let list = get(&gw.url("/v1/models")).await.json();
    let created = list["data"][0]["created"].as_u64().expect("a number");
    assert!(created >= before && created <= before + 60, "{list}");
    assert_eq!(list["data"][1]["created"], created, "{list}");
    let one = get(&gw.url("/v1/models/n")).await.json();
    assert_eq!(one["created"], created, "{one}");
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let again = get(&gw.url("/v1/models")).await.json();
    assert_eq!(again["data"][0]["created"], created, "stable while it runs");
}
