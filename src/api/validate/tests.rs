//! The table of malformed requests: each with its status, `param` and message.

use serde_json::{json, Value};

use super::schema;
use crate::api::ChatRequest;

fn req(mut extra: Value) -> Value {
    let base = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
    let obj = extra.as_object_mut().expect("an object");
    let mut b = base.as_object().unwrap().clone();
    for (k, v) in obj.iter() {
        b.insert(k.clone(), v.clone());
    }
    Value::Object(b)
}

fn check(body: &Value) -> Result<(), crate::error::GatewayError> {
    let chat = ChatRequest::parse(&serde_json::to_vec(body).unwrap())?;
    super::check(&chat)
}

fn tool(name: &str) -> Value {
    json!({"type": "function", "function": {"name": name, "parameters": {"type": "object"}}})
}

fn call(id: &str) -> Value {
    json!({"id": id, "type": "function", "function": {"name": "f", "arguments": "{}"}})
}

#[test]
fn malformed_requests_name_their_field() {
    // (body, param, words the message must contain)
    let table: Vec<(Value, &str, &str)> = vec![
        (req(json!({"top_p": 1.5})), "top_p", "from 0 to 1"),
        (req(json!({"top_p": "x"})), "top_p", "must be a number"),
        (req(json!({"n": 0})), "n", "from 1 to 128"),
        (req(json!({"n": 1.5})), "n", "must be an integer"),
        (
            req(json!({"presence_penalty": -2.5})),
            "presence_penalty",
            "from -2 to 2",
        ),
        (
            req(json!({"frequency_penalty": 3})),
            "frequency_penalty",
            "from -2 to 2",
        ),
        (req(json!({"max_tokens": 0})), "max_tokens", "at least 1"),
        (
            req(json!({"max_completion_tokens": 0})),
            "max_completion_tokens",
            "at least 1",
        ),
        (
            req(json!({"temperature": 2.5})),
            "temperature",
            "from 0 to 2",
        ),
        (req(json!({"logprobs": 1})), "logprobs", "boolean"),
        (
            req(json!({"logprobs": true, "top_logprobs": 21})),
            "top_logprobs",
            "from 0 to 20",
        ),
        (
            req(json!({"top_logprobs": 3})),
            "top_logprobs",
            "`logprobs` set to true",
        ),
        (
            req(json!({"stop": ["a", "b", "c", "d", "e"]})),
            "stop",
            "at most 4",
        ),
        (
            req(json!({"stop": ["a", 5]})),
            "stop[1]",
            "must be a string",
        ),
        (req(json!({"stop": 5})), "stop", "a string or an array"),
        (req(json!({"seed": 1.5})), "seed", "integer"),
        (req(json!({"seed": "7"})), "seed", "integer"),
        (
            req(json!({"parallel_tool_calls": "yes"})),
            "parallel_tool_calls",
            "boolean",
        ),
        // Content parts per role.
        (
            req(
                json!({"messages": [{"role": "system", "content": [{"type": "image_url", "image_url": {"url": "http://x"}}]}]}),
            ),
            "messages[0].content[0].type",
            "system message's content parts may be text",
        ),
        (
            req(
                json!({"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "video"}]}]}),
            ),
            "messages[0].content[1].type",
            "user message's content parts may be text, image_url, input_audio, file",
        ),
        (
            req(json!({"messages": [{"role": "user", "content": [{"type": "text"}]}]})),
            "messages[0].content[0].text",
            "is required",
        ),
        (
            req(json!({"messages": [{"role": "user", "content": [{"text": "a"}]}]})),
            "messages[0].content[0].type",
            "is required",
        ),
        (
            req(json!({"messages": [{"role": "user", "content": ["a"]}]})),
            "messages[0].content[0]",
            "must be an object",
        ),
        (
            req(json!({"messages": [{"role": "user", "content": []}]})),
            "messages[0].content",
            "empty array",
        ),
        (
            req(
                json!({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "u", "detail": "max"}}]}]}),
            ),
            "messages[0].content[0].image_url.detail",
            "\"auto\", \"low\" or \"high\"",
        ),
        (
            req(
                json!({"messages": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "AA==", "format": "ogg"}}]}]}),
            ),
            "messages[0].content[0].input_audio.format",
            "\"wav\" or \"mp3\"",
        ),
        (
            req(
                json!({"messages": [{"role": "user", "content": [{"type": "file", "file": {"filename": "a.pdf"}}]}]}),
            ),
            "messages[0].content[0].file",
            "`file_id` or `file_data`",
        ),
        (
            req(
                json!({"messages": [{"role": "tool", "tool_call_id": "c1", "content": [{"type": "refusal", "refusal": "no"}]}]}),
            ),
            "messages[0].content[0].type",
            "tool message's content parts may be text",
        ),
        (
            req(json!({"messages": [{"role": "user", "content": "hi", "name": 5}]})),
            "messages[0].name",
            "must be a string",
        ),
        // Assistant tool calls and tool results.
        (
            req(
                json!({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": null}]}),
            ),
            "messages[1].content",
            "required unless",
        ),
        (
            req(
                json!({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": null, "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{}"}}]}]}),
            ),
            "messages[1].tool_calls[0].id",
            "is required",
        ),
        (
            req(
                json!({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "tool_calls": [{"id": "c", "type": "retrieval"}]}]}),
            ),
            "messages[1].tool_calls[0].type",
            "expected \"function\" or \"custom\"",
        ),
        (
            req(
                json!({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": {"a": 1}}}]}]}),
            ),
            "messages[1].tool_calls[0].function.arguments",
            "must be a string",
        ),
        (
            req(
                json!({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "tool_calls": {"id": "c"}}]}),
            ),
            "messages[1].tool_calls",
            "must be an array",
        ),
        (
            req(
                json!({"messages": [{"role": "user", "content": "q"}, {"role": "tool", "content": "r"}]}),
            ),
            "messages[1].tool_call_id",
            "is required",
        ),
        (
            req(json!({"messages": [
                {"role": "user", "content": "q"},
                {"role": "assistant", "content": null, "tool_calls": [call("call_1")]},
                {"role": "tool", "tool_call_id": "call_1", "content": "r"},
                {"role": "tool", "tool_call_id": "call_9", "content": "r"},
            ]})),
            "messages[3].tool_call_id",
            "\"call_9\", which is not the id of a tool call in an earlier assistant message",
        ),
        (
            // A tool result before the call it answers.
            req(json!({"messages": [
                {"role": "tool", "tool_call_id": "call_1", "content": "r"},
                {"role": "assistant", "content": null, "tool_calls": [call("call_1")]},
            ]})),
            "messages[0].tool_call_id",
            "earlier assistant message",
        ),
        (
            req(json!({"messages": [{"role": "function", "content": "r"}]})),
            "messages[0].name",
            "is required",
        ),
        // Tools.
        (
            req(json!({"tools": [tool("ok"), tool("has space")]})),
            "tools[1].function.name",
            "1 to 64 letters",
        ),
        (
            req(json!({"tools": [tool(&"x".repeat(65))]})),
            "tools[0].function.name",
            "1 to 64 letters",
        ),
        (
            req(json!({"tools": [tool("")]})),
            "tools[0].function.name",
            "1 to 64 letters",
        ),
        (
            req(json!({"tools": [tool("a"), tool("b"), tool("a")]})),
            "tools[2].function.name",
            "already the name of `tools[0]`",
        ),
        (
            req(json!({"tools": [{"type": "function"}]})),
            "tools[0].function",
            "is required",
        ),
        (
            req(json!({"tools": [{"type": "retrieval"}]})),
            "tools[0].type",
            "expected \"function\" or \"custom\"",
        ),
        (
            req(json!({"tools": [{"function": {"name": "a"}}]})),
            "tools[0].type",
            "is required",
        ),
        (
            req(
                json!({"tools": [{"type": "function", "function": {"name": "a", "description": 3}}]}),
            ),
            "tools[0].function.description",
            "must be a string",
        ),
        (
            req(
                json!({"tools": [{"type": "function", "function": {"name": "a", "parameters": "object"}}]}),
            ),
            "tools[0].function.parameters",
            "must be a JSON Schema object",
        ),
        (
            req(
                json!({"tools": [{"type": "function", "function": {"name": "a", "parameters": {"type": "object", "properties": {"x": {"type": "strin"}}}}}]}),
            ),
            "tools[0].function.parameters",
            "at `/properties/x/type`",
        ),
        (
            req(
                json!({"tools": [{"type": "function", "function": {"name": "a", "parameters": {"$ref": "#/$defs/missing"}}}]}),
            ),
            "tools[0].function.parameters",
            "does not compile",
        ),
        // tool_choice.
        (
            req(json!({"tool_choice": "always", "tools": [tool("a")]})),
            "tool_choice",
            "expected \"none\", \"auto\", \"required\"",
        ),
        (
            req(json!({"tool_choice": "required"})),
            "tool_choice",
            "declares no `tools`",
        ),
        (
            req(
                json!({"tools": [tool("a")], "tool_choice": {"type": "function", "function": {"name": "b"}}}),
            ),
            "tool_choice.function.name",
            "\"b\", which is not a function tool declared in `tools`",
        ),
        (
            req(json!({"tools": [tool("a")], "tool_choice": {"type": "function"}})),
            "tool_choice.function",
            "is required",
        ),
        (
            req(json!({"tools": [tool("a")], "tool_choice": {"type": "tool"}})),
            "tool_choice.type",
            "expected \"function\"",
        ),
        (
            req(
                json!({"tools": [tool("a")], "tool_choice": {"type": "allowed_tools", "allowed_tools": {"mode": "auto", "tools": [{"type": "function", "function": {"name": "z"}}]}}}),
            ),
            "tool_choice.allowed_tools.tools[0].function.name",
            "not a function tool declared",
        ),
        (
            req(json!({"tools": [tool("a")], "tool_choice": 3})),
            "tool_choice",
            "a string or an object",
        ),
    ];
    for (body, param, words) in &table {
        let e = check(body).expect_err(&format!("accepted {body}"));
        assert_eq!(e.status(), 400, "{body}");
        assert_eq!(e.param.as_deref(), Some(*param), "{body}: {}", e.message);
        assert!(e.message.contains(words), "{body}: {}", e.message);
        assert!(
            e.message.contains(&format!("`{param}`"))
                || param.starts_with("messages")
                || *param == "max_tokens"
                || *param == "max_completion_tokens"
                || *param == "temperature"
                || *param == "top_logprobs",
            "the message names the field: {}",
            e.message
        );
    }
}

#[test]
fn well_formed_requests_pass() {
    let ok = [
        req(
            json!({"top_p": 1, "n": 2, "seed": -5, "stop": ["a", "b"], "logprobs": true, "top_logprobs": 20, "presence_penalty": -2, "frequency_penalty": 2, "temperature": null, "parallel_tool_calls": false, "tools": [tool("f")]}),
        ),
        req(json!({"stop": "END", "top_p": null, "tool_choice": "none"})),
        req(json!({"messages": [
            {"role": "developer", "content": [{"type": "text", "text": "be brief"}]},
            {"role": "user", "content": [
                {"type": "text", "text": "what is this?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA==", "detail": "low"}},
                {"type": "input_audio", "input_audio": {"data": "AA==", "format": "wav"}},
                {"type": "file", "file": {"file_id": "file-1"}},
            ]},
            {"role": "assistant", "content": null, "tool_calls": [call("call_1"), call("call_2")]},
            {"role": "tool", "tool_call_id": "call_2", "content": "r2"},
            {"role": "tool", "tool_call_id": "call_1", "content": [{"type": "text", "text": "r1"}]},
            {"role": "assistant", "content": [{"type": "refusal", "refusal": "no"}]},
            {"role": "user", "content": "thanks", "name": "ann"},
        ], "tools": [tool("f"), tool("get-weather_2")], "tool_choice": {"type": "function", "function": {"name": "f"}}})),
        req(
            json!({"tools": [tool("f"), {"type": "custom", "custom": {"name": "sql"}}], "tool_choice": {"type": "allowed_tools", "allowed_tools": {"mode": "required", "tools": [{"type": "custom", "custom": {"name": "sql"}}]}}}),
        ),
    ];
    for body in &ok {
        if let Err(e) = check(body) {
            panic!("{body} refused: {} ({:?})", e.message, e.param);
        }
    }
}

#[test]
fn tool_schemas_are_checked_as_draft_2020_12() {
    let valid = [
        json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
        // Recursive $ref through $defs.
        json!({
            "$defs": {"node": {"type": "object", "properties": {
                "value": {"type": "number"},
                "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}
            }}},
            "$ref": "#/$defs/node"
        }),
        // Self-recursion through the root.
        json!({"type": "object", "properties": {"next": {"$ref": "#"}}}),
        // Unknown keywords are allowed in 2020-12.
        json!({"type": "object", "x-display": "compact", "propertyOrdering": ["a"], "properties": {"a": {"type": "integer", "examples": [1], "myAnnotation": {"deep": true}}}}),
        json!({"type": "object", "properties": {"mode": {"enum": ["a", "b"]}, "tags": {"type": "array", "prefixItems": [{"type": "string"}], "items": false}}}),
        json!({}),
    ];
    for s in &valid {
        assert_eq!(schema::check_uncached(s), None, "{s}");
        assert_eq!(schema::check(s), None, "{s} (cached)");
    }
    let invalid = [
        (json!({"type": "strin"}), "at `/type`"),
        (
            json!({"type": "object", "properties": {"a": {"minLength": -1}}}),
            "at `/properties/a/minLength`",
        ),
        (
            json!({"type": "object", "required": "city"}),
            "at `/required`",
        ),
        (json!({"$defs": {"a": {"type": 5}}}), "at `/$defs/a/type`"),
        (json!({"$ref": "#/$defs/missing"}), "does not compile"),
        (
            json!({"$ref": "https://example.com/schema.json"}),
            "does not compile",
        ),
    ];
    for (s, words) in &invalid {
        let why = schema::check(s).unwrap_or_else(|| panic!("{s} accepted"));
        assert!(why.contains(words), "{s}: {why}");
        // The cached answer is the same.
        assert_eq!(schema::check(s).as_deref(), Some(&*why));
    }
}

#[test]
fn schema_hash_ignores_key_order_and_tells_values_apart() {
    let a: Value =
        serde_json::from_str(r#"{"type":"object","properties":{"a":{"type":"string"}}}"#).unwrap();
    let b: Value =
        serde_json::from_str(r#"{ "properties": {"a": {"type": "string"}}, "type": "object" }"#)
            .unwrap();
    assert_eq!(schema::hash(&a), schema::hash(&b));
    let c: Value =
        serde_json::from_str(r#"{"type":"object","properties":{"a":{"type":"number"}}}"#).unwrap();
    assert_ne!(schema::hash(&a), schema::hash(&c));
    assert_ne!(schema::hash(&json!([1])), schema::hash(&json!(["1"])));
    assert_ne!(
        schema::hash(&json!({"ab": "c"})),
        schema::hash(&json!({"a": "bc"}))
    );
}

/// Found by the conformance review: every validation 400 had `"code": null`, where
/// OpenAI's own 400s name the class of error (`missing_required_parameter`,
/// `invalid_type`, `invalid_value`, ...), and clients match on it.
#[test]
fn validation_errors_had_a_null_code_where_openai_gives_one() {
    let code = |body: &[u8]| -> Option<String> {
        let err = match ChatRequest::parse(body) {
            Err(e) => e,
            Ok(chat) => super::check(&chat).expect_err("a refusal"),
        };
        assert_eq!(err.status(), 400, "{}", err.message);
        err.code.as_ref().map(|c| c.as_str().to_string())
    };
    let base = |extra: &str| {
        format!(r#"{{"model":"m","messages":[{{"role":"user","content":"hi"}}]{extra}}}"#)
    };
    // (body, OpenAI's code for that class; None where OpenAI sends null)
    let table: Vec<(String, Option<&str>)> = vec![
        (
            r#"{"model":"m"}"#.into(),
            Some("missing_required_parameter"),
        ),
        (
            r#"{"model":"m","messages":[{"content":"x"}]}"#.into(),
            Some("missing_required_parameter"),
        ),
        (
            r#"{"model":"m","messages":[{"role":5,"content":"x"}]}"#.into(),
            Some("invalid_type"),
        ),
        (
            r#"{"model":"m","messages":[{"role":"robot","content":"x"}]}"#.into(),
            Some("invalid_value"),
        ),
        (
            r#"{"model":"m","messages":[{"role":"user","content":5}]}"#.into(),
            Some("invalid_type"),
        ),
        (r#"{"model":"m","messages":[]}"#.into(), Some("empty_array")),
        (base(r#","top_p":"x""#), Some("invalid_type")),
        (base(r#","top_p":1.5"#), Some("decimal_above_max_value")),
        (
            base(r#","temperature":-1"#),
            Some("decimal_below_min_value"),
        ),
        (base(r#","n":0"#), Some("integer_below_min_value")),
        (base(r#","n":129"#), Some("integer_above_max_value")),
        (base(r#","max_tokens":0"#), Some("integer_below_min_value")),
        (
            base(r#","stop":["a","b","c","d","e"]"#),
            Some("array_above_max_length"),
        ),
        (
            base(r#","tools":[{"type":"function","function":{"name":"bad name"}}]"#),
            Some("invalid_value"),
        ),
        (
            base(
                r#","tools":[{"type":"function","function":{"name":"f","parameters":{"type":"integr"}}}]"#,
            ),
            Some("invalid_function_parameters"),
        ),
        (base(r#","tool_choice":"sometimes""#), Some("invalid_value")),
        (base(r#","logprobs":1"#), Some("invalid_type")),
        // OpenAI's own null codes: not JSON, and one field only with another.
        ("{not json".into(), None),
        (base(r#","stream_options":{"include_usage":true}"#), None),
        (base(r#","tool_choice":"auto""#), None),
        (base(r#","top_logprobs":2"#), None),
    ];
    for (body, want) in table {
        assert_eq!(code(body.as_bytes()).as_deref(), want, "{body}");
    }
}

/// Found by the conformance review: `parallel_tool_calls` without `tools` was
/// forwarded, where OpenAI refuses it with a 400 on that field (code null).
#[test]
fn parallel_tool_calls_without_tools_was_forwarded() {
    for body in [
        req(json!({"parallel_tool_calls": false})),
        req(json!({"parallel_tool_calls": true, "tools": null})),
    ] {
        let e = check(&body).expect_err("refused");
        assert_eq!(e.status(), 400);
        assert_eq!(e.param.as_deref(), Some("parallel_tool_calls"));
        assert!(e.code.is_none(), "{:?}", e.code);
        assert!(
            e.message.contains("only allowed when `tools`"),
            "{}",
            e.message
        );
    }
    check(&req(json!({"parallel_tool_calls": null}))).expect("null is absent");
    check(&req(
        json!({"parallel_tool_calls": false, "tools": [tool("f")]}),
    ))
    .expect("with tools");
}

/// Found by the conformance attack of 2026-12-07: `tools: []`, an assistant
/// message's `tool_calls: []`, a `response_format` of an unknown type, of the wrong
/// JSON type or `json_schema` without its `json_schema`, and a `user` that is not a
/// string were all forwarded (a Gemini upstream then answered in plain text), where
/// OpenAI answers 400 naming the field.
#[test]
fn empty_arrays_and_bad_response_formats_were_forwarded() {
    let refused = |extra: Value| check(&req(extra.clone())).expect_err(&extra.to_string());
    let e = refused(json!({"tools": []}));
    assert_eq!(
        (e.param.as_deref(), e.code.as_ref().map(|c| c.as_str())),
        (Some("tools"), Some("empty_array"))
    );
    let e = check(&json!({"model": "m", "messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "x", "tool_calls": []},
        {"role": "user", "content": "and?"}
    ]}))
    .expect_err("empty tool_calls");
    assert_eq!(e.param.as_deref(), Some("messages[1].tool_calls"));
    assert_eq!(e.code.as_ref().map(|c| c.as_str()), Some("empty_array"));
    for (extra, param, code) in [
        (
            json!({"response_format": "json"}),
            "response_format",
            "invalid_type",
        ),
        (
            json!({"response_format": {"type": "xml"}}),
            "response_format.type",
            "invalid_value",
        ),
        (
            json!({"response_format": {}}),
            "response_format.type",
            "missing_required_parameter",
        ),
        (
            json!({"response_format": {"type": "json_schema"}}),
            "response_format.json_schema",
            "missing_required_parameter",
        ),
        (
            json!({"response_format": {"type": "json_schema", "json_schema": {"schema": {}}}}),
            "response_format.json_schema.name",
            "missing_required_parameter",
        ),
        (
            json!({"response_format": {"type": "json_schema", "json_schema": {"name": "a b"}}}),
            "response_format.json_schema.name",
            "invalid_value",
        ),
        (
            json!({"response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": []}}}),
            "response_format.json_schema.schema",
            "invalid_type",
        ),
        (
            json!({"response_format": {"type": "json_schema", "json_schema": {"name": "a", "strict": "yes"}}}),
            "response_format.json_schema.strict",
            "invalid_type",
        ),
        (json!({"user": 5}), "user", "invalid_type"),
    ] {
        let e = refused(extra.clone());
        assert_eq!(e.status(), 400, "{extra}");
        assert_eq!(e.param.as_deref(), Some(param), "{extra}");
        assert_eq!(e.code.as_ref().map(|c| c.as_str()), Some(code), "{extra}");
    }
    for extra in [
        json!({"response_format": null, "user": null}),
        json!({"response_format": {"type": "text"}, "user": "u-1"}),
        json!({"response_format": {"type": "json_object"}}),
        json!({"response_format": {"type": "json_schema", "json_schema": {"name": "answer", "strict": true, "schema": {"type": "object"}}}}),
        json!({"tools": null}),
    ] {
        check(&req(extra.clone())).unwrap_or_else(|e| panic!("{extra}: {}", e.message));
    }
}
