//! Field-precise validation of a parsed [`ChatRequest`] (issue 15, seed 001
//! "validate messages and tool schemas"), run by the normalize phase before any
//! policy or upstream sees the request.
//!
//! [`ChatRequest::parse`] keeps the cheap structural checks (JSON shape, types of
//! the typed fields, known roles, `temperature`, non-zero output caps); this module
//! checks what OpenAI's Chat Completions API reference ("Create chat completion")
//! documents beyond that:
//! - content parts per role: `system`, `developer` and `tool` take only `text`;
//!   `user` takes `text`, `image_url`, `input_audio` and `file`; `assistant` takes
//!   `text` and `refusal`; each part with its required fields;
//! - an assistant message's `content` may be null only with `tool_calls`,
//!   `function_call` or `audio`; its `tool_calls` each have an `id`, a `type`
//!   (`function` or `custom`), and `function.name` plus `function.arguments` strings;
//! - a `tool` message's `tool_call_id` names a tool call of an earlier assistant
//!   message;
//! - tool names match `^[a-zA-Z0-9_-]{1,64}$` and are unique; `tool_choice` is
//!   `none`, `auto`, `required` or names a declared tool;
//! - `top_p` 0 to 1, `n` 1 to 128, `presence_penalty` and `frequency_penalty` −2 to
//!   2, `logprobs` a boolean, `top_logprobs` 0 to 20 (with `logprobs: true`), `stop`
//!   a string or at most 4 strings, `seed` an integer, `parallel_tool_calls` a
//!   boolean and only with `tools`, `user` a string, `response_format` an object of
//!   a known `type` (`json_schema` with a named `json_schema`) (null means absent
//!   for each);
//! - `tools` and an assistant message's `tool_calls`, when given, are not empty;
//! - each function tool's `parameters` is a valid JSON Schema draft 2020-12 document
//!   ([`schema`]): checked against the 2020-12 meta-schema, then compiled so every
//!   `$ref` must resolve (locally: nothing is ever fetched). Unknown keywords are
//!   allowed, as 2020-12 allows them.
//!
//! The first failure is returned as a 400 `invalid_request_error` whose `param`
//! names the field (`messages[3].tool_call_id`, `tools[1].function.name`) and whose
//! `code` is the one OpenAI's own 400s give the same class of error:
//! `missing_required_parameter`, `invalid_type`, `invalid_value`, `empty_array`,
//! `array_above_max_length`, `integer_below_min_value` (`_above_max_`, and
//! `decimal_...` for numbers), `invalid_function_parameters`; and `null` where OpenAI
//! answers without one: a field allowed only with another (`top_logprobs` without
//! `logprobs`, `tool_choice` without `tools`) and a `tool_call_id` that answers no
//! earlier tool call.

pub mod schema;

use serde_json::{Map, Value};

use super::ChatRequest;
use crate::error::{Code, GatewayError};

/// Most stop sequences (OpenAI: "Up to 4 sequences").
pub const MAX_STOP: usize = 4;
/// Largest `top_logprobs` (OpenAI: "an integer between 0 and 20").
pub const MAX_TOP_LOGPROBS: i64 = 20;
/// Largest `n` OpenAI accepts.
pub const MAX_N: i64 = 128;
/// Longest tool name (OpenAI: "a-z, A-Z, 0-9, underscores and dashes, with a
/// maximum length of 64").
pub const MAX_TOOL_NAME: usize = 64;

type Checked = Result<(), GatewayError>;

/// A rule OpenAI answers with `code: null`: one field allowed only with another.
fn bad(param: impl Into<String>, message: impl Into<String>) -> GatewayError {
    GatewayError::invalid_field(param, message)
}

/// A required field absent or null.
fn missing(param: impl Into<String>, message: impl Into<String>) -> GatewayError {
    GatewayError::invalid_param(Code::MissingRequiredParameter, param, message)
}

/// A field of the wrong JSON type.
fn wrong_type(param: impl Into<String>, message: impl Into<String>) -> GatewayError {
    GatewayError::invalid_param(Code::InvalidType, param, message)
}

/// A field whose value is not one it may take.
fn bad_value(param: impl Into<String>, message: impl Into<String>) -> GatewayError {
    GatewayError::invalid_param(Code::InvalidValue, param, message)
}

/// An array with more elements than allowed.
fn too_long(param: impl Into<String>, message: impl Into<String>) -> GatewayError {
    GatewayError::invalid_param(Code::ArrayAboveMaxLength, param, message)
}

/// An array that must not be empty.
fn empty(param: impl Into<String>, message: impl Into<String>) -> GatewayError {
    GatewayError::invalid_param(Code::EmptyArray, param, message)
}

/// A function tool's `parameters` that is not a JSON Schema.
fn bad_schema(param: impl Into<String>, message: impl Into<String>) -> GatewayError {
    GatewayError::invalid_param(Code::InvalidFunctionParameters, param, message)
}

/// Validates `req` (see the module doc).
///
/// # Errors
/// 400 `invalid_request_error` with `param` naming the first field at fault.
pub fn check(req: &ChatRequest) -> Checked {
    parameters(&req.extra)?;
    if req.tools.as_ref().is_some_and(Vec::is_empty) {
        // OpenAI: "Invalid 'tools': empty array. Expected an array with minimum
        // length 1, but got an empty array instead." Leave the field out instead.
        return Err(empty(
            "tools",
            "`tools` is an empty array; it needs at least one tool, or leave it out",
        ));
    }
    let names = tools(req.tools.as_deref().unwrap_or_default())?;
    if names.is_empty() && boolean(&req.extra, "parallel_tool_calls")?.is_some() {
        // OpenAI answers the same 400 (code null) rather than ignore the field.
        return Err(bad(
            "parallel_tool_calls",
            "Invalid value for `parallel_tool_calls`: `parallel_tool_calls` is only allowed when `tools` are specified",
        ));
    }
    tool_choice(req.extra.get("tool_choice"), &names)?;
    messages(req)
}

/// A tool's kind and name, as declared in `tools`.
type Declared<'a> = Vec<(&'a str, &'a str)>;

fn number(extra: &Map<String, Value>, key: &str, lo: f64, hi: f64) -> Checked {
    match extra.get(key) {
        None | Some(Value::Null) => Ok(()),
        Some(Value::Number(n)) => {
            let v = n.as_f64().unwrap_or(f64::NAN);
            if (lo..=hi).contains(&v) {
                Ok(())
            } else {
                let code = if v < lo {
                    Code::DecimalBelowMinValue
                } else {
                    Code::DecimalAboveMaxValue
                };
                Err(GatewayError::invalid_param(
                    code,
                    key,
                    format!("`{key}` is {n}; expected a number from {lo} to {hi}"),
                ))
            }
        }
        Some(_) => Err(wrong_type(key, format!("`{key}` must be a number"))),
    }
}

fn integer(extra: &Map<String, Value>, key: &str, lo: i64, hi: i64) -> Result<bool, GatewayError> {
    match extra.get(key) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Number(n)) if n.is_i64() || n.is_u64() => {
            let v = n.as_i64().unwrap_or(i64::MAX);
            let code = if v < lo {
                Code::IntegerBelowMinValue
            } else {
                Code::IntegerAboveMaxValue
            };
            if (lo..=hi).contains(&v) && !(n.is_u64() && n.as_i64().is_none()) {
                Ok(true)
            } else if hi == i64::MAX {
                Err(GatewayError::invalid_param(
                    code,
                    key,
                    format!("`{key}` is {n}; expected a 64-bit integer"),
                ))
            } else {
                Err(GatewayError::invalid_param(
                    code,
                    key,
                    format!("`{key}` is {n}; expected an integer from {lo} to {hi}"),
                ))
            }
        }
        Some(_) => Err(wrong_type(key, format!("`{key}` must be an integer"))),
    }
}

fn boolean(extra: &Map<String, Value>, key: &str) -> Result<Option<bool>, GatewayError> {
    match extra.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => Err(wrong_type(key, format!("`{key}` must be a boolean"))),
    }
}

/// The sampling and output parameters kept in `extra`.
fn parameters(extra: &Map<String, Value>) -> Checked {
    number(extra, "top_p", 0.0, 1.0)?;
    number(extra, "presence_penalty", -2.0, 2.0)?;
    number(extra, "frequency_penalty", -2.0, 2.0)?;
    integer(extra, "n", 1, MAX_N)?;
    integer(extra, "seed", i64::MIN, i64::MAX)?;
    boolean(extra, "parallel_tool_calls")?;
    match extra.get("user") {
        None | Some(Value::Null) | Some(Value::String(_)) => {}
        Some(_) => return Err(wrong_type("user", "`user` must be a string")),
    }
    response_format(extra)?;
    let logprobs = boolean(extra, "logprobs")?;
    if integer(extra, "top_logprobs", 0, MAX_TOP_LOGPROBS)? && logprobs != Some(true) {
        return Err(bad(
            "top_logprobs",
            "`top_logprobs` needs `logprobs` set to true",
        ));
    }
    match extra.get("stop") {
        None | Some(Value::Null) | Some(Value::String(_)) => Ok(()),
        Some(Value::Array(a)) if a.len() > MAX_STOP => Err(too_long(
            "stop",
            format!(
                "`stop` has {} sequences; at most {MAX_STOP} are allowed",
                a.len()
            ),
        )),
        Some(Value::Array(a)) => match a.iter().position(|s| !s.is_string()) {
            Some(i) => Err(wrong_type(
                format!("stop[{i}]"),
                format!("`stop[{i}]` must be a string"),
            )),
            None => Ok(()),
        },
        Some(_) => Err(wrong_type(
            "stop",
            "`stop` must be a string or an array of up to 4 strings",
        )),
    }
}

/// Whether `name` matches `^[a-zA-Z0-9_-]{1,64}$`.
pub fn valid_tool_name(name: &str) -> bool {
    (1..=MAX_TOOL_NAME).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// A required string field `key` of `obj`, at `path`.
fn string_at<'a>(
    obj: &'a Map<String, Value>,
    key: &str,
    path: &str,
) -> Result<&'a str, GatewayError> {
    match obj.get(key) {
        Some(Value::String(s)) => Ok(s),
        None | Some(Value::Null) => Err(missing(
            format!("{path}.{key}"),
            format!("`{path}.{key}` is required"),
        )),
        Some(_) => Err(wrong_type(
            format!("{path}.{key}"),
            format!("`{path}.{key}` must be a string"),
        )),
    }
}

/// `response_format`: an object whose `type` is `text`, `json_object` or
/// `json_schema`; the last with a `json_schema` object whose `name` is 1 to 64
/// letters, digits, '_' or '-', whose `schema`, if given, is an object and whose
/// `strict`, if given, is a boolean (OpenAI's Chat Completions reference,
/// `response_format`). Providers translate what is valid; what is not never
/// reaches one (a Gemini upstream would otherwise answer in plain text).
fn response_format(extra: &Map<String, Value>) -> Checked {
    let rf = match extra.get("response_format") {
        None | Some(Value::Null) => return Ok(()),
        Some(Value::Object(m)) => m,
        Some(_) => {
            return Err(wrong_type(
                "response_format",
                "`response_format` must be an object such as {\"type\": \"json_object\"}",
            ))
        }
    };
    match string_at(rf, "type", "response_format")? {
        "text" | "json_object" => Ok(()),
        "json_schema" => {
            let path = "response_format.json_schema";
            let js = object_at(rf, "json_schema", "response_format")?;
            name_at(js, path, "schema")?;
            match js.get("schema") {
                None | Some(Value::Null) | Some(Value::Object(_)) => {}
                Some(_) => {
                    return Err(wrong_type(
                        format!("{path}.schema"),
                        format!("`{path}.schema` must be an object (a JSON Schema)"),
                    ))
                }
            }
            match js.get("strict") {
                None | Some(Value::Null) | Some(Value::Bool(_)) => Ok(()),
                Some(_) => Err(wrong_type(
                    format!("{path}.strict"),
                    format!("`{path}.strict` must be a boolean"),
                )),
            }
        }
        other => Err(bad_value(
            "response_format.type",
            format!(
                "`response_format.type` is \"{}\"; expected \"text\", \"json_object\" or \"json_schema\"",
                crate::error::bounded(other, 80)
            ),
        )),
    }
}

/// A required object field `key` of `obj`, at `path`.
fn object_at<'a>(
    obj: &'a Map<String, Value>,
    key: &str,
    path: &str,
) -> Result<&'a Map<String, Value>, GatewayError> {
    match obj.get(key) {
        Some(Value::Object(m)) => Ok(m),
        None | Some(Value::Null) => Err(missing(
            format!("{path}.{key}"),
            format!("`{path}.{key}` is required"),
        )),
        Some(_) => Err(wrong_type(
            format!("{path}.{key}"),
            format!("`{path}.{key}` must be an object"),
        )),
    }
}

fn tool_name<'a>(obj: &'a Map<String, Value>, path: &str) -> Result<&'a str, GatewayError> {
    name_at(obj, path, "tool")
}

/// The required `name` of `obj` at `path`, 1 to 64 letters, digits, '_' or '-' (a
/// tool's, or a `json_schema`'s: OpenAI gives both the same rule); `what` names it
/// in the message.
fn name_at<'a>(
    obj: &'a Map<String, Value>,
    path: &str,
    what: &str,
) -> Result<&'a str, GatewayError> {
    let name = string_at(obj, "name", path)?;
    if !valid_tool_name(name) {
        return Err(bad_value(
            format!("{path}.name"),
            format!(
                "`{path}.name` is \"{}\"; a {what} name is 1 to 64 letters, digits, '_' or '-'",
                crate::error::bounded(name, 80)
            ),
        ));
    }
    Ok(name)
}

/// `tools`: each a well-formed `function` (or `custom`) tool with a valid,
/// unique name and a valid `parameters` schema. Returns the declared tools.
fn tools(tools: &[Value]) -> Result<Declared<'_>, GatewayError> {
    let mut names: Declared<'_> = Vec::with_capacity(tools.len());
    for (i, t) in tools.iter().enumerate() {
        let path = format!("tools[{i}]");
        let Some(t) = t.as_object() else {
            return Err(wrong_type(&path, format!("`{path}` must be an object")));
        };
        let kind = string_at(t, "type", &path)?;
        let name = match kind {
            "function" => {
                let fpath = format!("{path}.function");
                let f = object_at(t, "function", &path)?;
                let name = tool_name(f, &fpath)?;
                if let Some(d) = f.get("description") {
                    if !d.is_string() && !d.is_null() {
                        return Err(wrong_type(
                            format!("{fpath}.description"),
                            format!("`{fpath}.description` must be a string"),
                        ));
                    }
                }
                if let Some(s) = f.get("strict") {
                    if !s.is_boolean() && !s.is_null() {
                        return Err(wrong_type(
                            format!("{fpath}.strict"),
                            format!("`{fpath}.strict` must be a boolean"),
                        ));
                    }
                }
                match f.get("parameters") {
                    None | Some(Value::Null) => {}
                    Some(p @ Value::Object(_)) => {
                        if let Some(why) = schema::check(p) {
                            return Err(bad_schema(
                                format!("{fpath}.parameters"),
                                format!(
                                    "`{fpath}.parameters` is not a valid JSON Schema (draft 2020-12): {why}"
                                ),
                            ));
                        }
                    }
                    Some(_) => {
                        return Err(bad_schema(
                            format!("{fpath}.parameters"),
                            format!("`{fpath}.parameters` must be a JSON Schema object"),
                        ))
                    }
                }
                name
            }
            "custom" => tool_name(object_at(t, "custom", &path)?, &format!("{path}.custom"))?,
            other => {
                return Err(bad_value(
                    format!("{path}.type"),
                    format!(
                        "`{path}.type` is \"{}\"; expected \"function\" or \"custom\"",
                        crate::error::bounded(other, 80)
                    ),
                ))
            }
        };
        if let Some(j) = names.iter().position(|(_, n)| *n == name) {
            return Err(bad_value(
                format!("{path}.{kind}.name"),
                format!("`{path}.{kind}.name` \"{name}\" is already the name of `tools[{j}]`; tool names must be unique"),
            ));
        }
        names.push((kind, name));
    }
    Ok(names)
}

/// `tool_choice`: a mode, or a named tool among `declared`.
fn tool_choice(choice: Option<&Value>, declared: &Declared<'_>) -> Checked {
    let named = |kind: &str, obj: &Map<String, Value>, path: &str| -> Checked {
        let inner = object_at(obj, kind, path)?;
        let name = string_at(inner, "name", &format!("{path}.{kind}"))?;
        if declared.iter().any(|&(k, n)| k == kind && n == name) {
            Ok(())
        } else {
            Err(bad_value(
                format!("{path}.{kind}.name"),
                format!(
                    "`{path}.{kind}.name` is \"{}\", which is not a {kind} tool declared in `tools`",
                    crate::error::bounded(name, 80)
                ),
            ))
        }
    };
    match choice {
        None | Some(Value::Null) => Ok(()),
        Some(Value::String(s)) => match s.as_str() {
            "none" => Ok(()),
            "auto" | "required" if declared.is_empty() => Err(bad(
                "tool_choice",
                format!("`tool_choice` is \"{s}\" but the request declares no `tools`"),
            )),
            "auto" | "required" => Ok(()),
            other => Err(bad_value(
                "tool_choice",
                format!(
                    "`tool_choice` is \"{}\"; expected \"none\", \"auto\", \"required\" or an object naming a tool",
                    crate::error::bounded(other, 80)
                ),
            )),
        },
        Some(Value::Object(obj)) => match string_at(obj, "type", "tool_choice")? {
            k @ ("function" | "custom") => named(k, obj, "tool_choice"),
            "allowed_tools" => {
                let at = object_at(obj, "allowed_tools", "tool_choice")?;
                let mode = string_at(at, "mode", "tool_choice.allowed_tools")?;
                if mode != "auto" && mode != "required" {
                    return Err(bad_value(
                        "tool_choice.allowed_tools.mode",
                        "`tool_choice.allowed_tools.mode` must be \"auto\" or \"required\"",
                    ));
                }
                let Some(list) = at.get("tools").and_then(Value::as_array) else {
                    return Err(wrong_type(
                        "tool_choice.allowed_tools.tools",
                        "`tool_choice.allowed_tools.tools` must be an array of tools",
                    ));
                };
                for (i, t) in list.iter().enumerate() {
                    let path = format!("tool_choice.allowed_tools.tools[{i}]");
                    let Some(t) = t.as_object() else {
                        return Err(wrong_type(&path, format!("`{path}` must be an object")));
                    };
                    match string_at(t, "type", &path)? {
                        k @ ("function" | "custom") => named(k, t, &path)?,
                        _ => {
                            return Err(bad_value(
                                format!("{path}.type"),
                                format!("`{path}.type` must be \"function\" or \"custom\""),
                            ))
                        }
                    }
                }
                Ok(())
            }
            other => Err(bad_value(
                "tool_choice.type",
                format!(
                    "`tool_choice.type` is \"{}\"; expected \"function\", \"custom\" or \"allowed_tools\"",
                    crate::error::bounded(other, 80)
                ),
            )),
        },
        Some(_) => Err(wrong_type(
            "tool_choice",
            "`tool_choice` must be a string or an object naming a tool",
        )),
    }
}

/// The content part types a role may send (OpenAI's message types).
fn part_types(role: &str) -> &'static [&'static str] {
    match role {
        "user" => &["text", "image_url", "input_audio", "file"],
        "assistant" => &["text", "refusal"],
        _ => &["text"],
    }
}

/// One content part at `path` of a `role` message.
fn part(p: &Value, role: &str, path: &str) -> Checked {
    let Some(p) = p.as_object() else {
        return Err(wrong_type(
            path,
            format!("`{path}` must be an object with a `type`"),
        ));
    };
    let kind = string_at(p, "type", path)?;
    let allowed = part_types(role);
    if !allowed.contains(&kind) {
        return Err(bad_value(
            format!("{path}.type"),
            format!(
                "`{path}.type` is \"{}\"; a {role} message's content parts may be {}",
                crate::error::bounded(kind, 80),
                allowed.join(", ")
            ),
        ));
    }
    match kind {
        "text" => string_at(p, "text", path).map(drop),
        "refusal" => string_at(p, "refusal", path).map(drop),
        "image_url" => {
            let ipath = format!("{path}.image_url");
            let img = object_at(p, "image_url", path)?;
            string_at(img, "url", &ipath)?;
            match img.get("detail") {
                None | Some(Value::Null) => Ok(()),
                Some(Value::String(d)) if ["auto", "low", "high"].contains(&d.as_str()) => Ok(()),
                Some(_) => Err(bad_value(
                    format!("{ipath}.detail"),
                    format!("`{ipath}.detail` must be \"auto\", \"low\" or \"high\""),
                )),
            }
        }
        "input_audio" => {
            let apath = format!("{path}.input_audio");
            let a = object_at(p, "input_audio", path)?;
            string_at(a, "data", &apath)?;
            let format = string_at(a, "format", &apath)?;
            if format != "wav" && format != "mp3" {
                return Err(bad_value(
                    format!("{apath}.format"),
                    format!("`{apath}.format` must be \"wav\" or \"mp3\""),
                ));
            }
            Ok(())
        }
        _ => {
            // "file": a file_id or inline file_data (with an optional filename).
            let fpath = format!("{path}.file");
            let f = object_at(p, "file", path)?;
            for key in ["file_id", "file_data", "filename"] {
                if f.get(key).is_some_and(|v| !v.is_string() && !v.is_null()) {
                    return Err(wrong_type(
                        format!("{fpath}.{key}"),
                        format!("`{fpath}.{key}` must be a string"),
                    ));
                }
            }
            if !["file_id", "file_data"]
                .iter()
                .any(|k| f.get(*k).is_some_and(Value::is_string))
            {
                return Err(missing(
                    &fpath,
                    format!("`{fpath}` needs a `file_id` or `file_data`"),
                ));
            }
            Ok(())
        }
    }
}

/// An assistant message's `tool_calls` at `path`; their ids go into `ids`.
fn tool_calls<'a>(calls: &'a Value, path: &str, ids: &mut Vec<&'a str>) -> Checked {
    let Some(calls) = calls.as_array() else {
        return Err(wrong_type(path, format!("`{path}` must be an array")));
    };
    if calls.is_empty() {
        // OpenAI: "Invalid 'messages[2].tool_calls': empty array."
        return Err(empty(
            path,
            format!("`{path}` is an empty array; it needs at least one tool call, or leave it out"),
        ));
    }
    for (j, c) in calls.iter().enumerate() {
        let cpath = format!("{path}[{j}]");
        let Some(c) = c.as_object() else {
            return Err(wrong_type(&cpath, format!("`{cpath}` must be an object")));
        };
        let id = string_at(c, "id", &cpath)?;
        if id.is_empty() {
            return Err(bad_value(
                format!("{cpath}.id"),
                format!("`{cpath}.id` must not be empty"),
            ));
        }
        match string_at(c, "type", &cpath)? {
            "function" => {
                let fpath = format!("{cpath}.function");
                let f = object_at(c, "function", &cpath)?;
                string_at(f, "name", &fpath)?;
                string_at(f, "arguments", &fpath)?;
            }
            "custom" => {
                let fpath = format!("{cpath}.custom");
                let f = object_at(c, "custom", &cpath)?;
                string_at(f, "name", &fpath)?;
                string_at(f, "input", &fpath)?;
            }
            other => {
                return Err(bad_value(
                    format!("{cpath}.type"),
                    format!(
                        "`{cpath}.type` is \"{}\"; expected \"function\" or \"custom\"",
                        crate::error::bounded(other, 80)
                    ),
                ))
            }
        }
        ids.push(id);
    }
    Ok(())
}

/// Every message: content parts for its role, tool calls, tool results.
fn messages(req: &ChatRequest) -> Checked {
    let mut call_ids: Vec<&str> = Vec::new();
    for (i, m) in req.messages.iter().enumerate() {
        let role = m.role.as_str();
        if let Some(n) = m.extra.get("name") {
            if !n.is_string() && !n.is_null() {
                return Err(wrong_type(
                    format!("messages[{i}].name"),
                    format!("`messages[{i}].name` must be a string"),
                ));
            }
        }
        match &m.content {
            Value::Array(parts) => {
                if parts.is_empty() && role != "assistant" {
                    return Err(empty(
                        format!("messages[{i}].content"),
                        format!("`messages[{i}].content` must not be an empty array"),
                    ));
                }
                for (j, p) in parts.iter().enumerate() {
                    part(p, role, &format!("messages[{i}].content[{j}]"))?;
                }
            }
            Value::Null if role == "assistant" => {
                let has = |k: &str| m.extra.get(k).is_some_and(|v| !v.is_null());
                if !(has("tool_calls") || has("function_call") || has("audio")) {
                    return Err(missing(
                        format!("messages[{i}].content"),
                        format!("`messages[{i}].content` is required unless the assistant message has `tool_calls`"),
                    ));
                }
            }
            _ => {}
        }
        match role {
            "assistant" => {
                if let Some(calls) = m.extra.get("tool_calls").filter(|v| !v.is_null()) {
                    tool_calls(calls, &format!("messages[{i}].tool_calls"), &mut call_ids)?;
                }
            }
            "tool" => {
                let path = format!("messages[{i}]");
                let id = string_at(&m.extra, "tool_call_id", &path)?;
                if !call_ids.contains(&id) {
                    return Err(bad(
                        format!("{path}.tool_call_id"),
                        format!(
                            "`{path}.tool_call_id` is \"{}\", which is not the id of a tool call in an earlier assistant message",
                            crate::error::bounded(id, 80)
                        ),
                    ));
                }
            }
            "function" => {
                string_at(&m.extra, "name", &format!("messages[{i}]"))?;
            }
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
