//! OpenAI request → [`RequestFeatures`]: what a policy sees of one request. Used by
//! `switchyard dry-run` and, per request, by the gateway, so both decide alike.
//!
//! The mapping:
//! - `model`, `stream`, `temperature`, tools present, number of messages come from the
//!   body; `max_tokens` is `max_completion_tokens` if set, else `max_tokens`;
//! - `input_tokens` is [`ChatRequest::estimated_input_tokens`] here; the gateway
//!   (`gateway::normalize`) and `dry-run` replace it with the model family's
//!   tokenizer count (`crate::limits::tokens`) when the policy set reads it
//!   ([`super::reads`]);
//! - headers are lowercased; `x-switchyard-meta-<key>` headers and the body's
//!   `metadata` object (string values) become request metadata (body wins);
//! - the caller's identity (API key id, organization) and priority come from the
//!   request's credentials ([`Caller::from_headers`]), never from the body;
//! - UTC hour and ISO weekday come from the given time.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

use smallvec::SmallVec;

use crate::api::ChatRequest;
use crate::policy::ast::PriorityLevel;
use crate::policy::RequestFeatures;
use crate::routing::reads::ReadNames;

/// Prefix of headers that carry request metadata.
pub const META_HEADER_PREFIX: &str = "x-switchyard-meta-";

/// Who sent the request: what `request.api_key`, `request.org`, `scope("...")` and
/// the starting `priority` of a policy read.
///
/// The admit phase sets it from the authenticated principal; `dry-run
/// --api-key/--org/--scope` sets the same fields.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Caller {
    /// The API key id, never the key itself: see [`key_id`].
    pub api_key: Option<Arc<str>>,
    /// The organization.
    pub org: Option<Arc<str>>,
    /// Priority assigned before routing.
    pub priority: PriorityLevel,
    /// OAuth2 scopes of the credential, sorted and deduplicated (empty for API keys
    /// and unverified callers: a scope is only believed once its token is verified).
    pub scopes: Vec<String>,
    /// The API key entry's own rate limits, for admission (`crate::limits`); not a
    /// policy fact.
    pub limits: Option<crate::config::RateLimit>,
    /// The API key entry's own spend budget, for admission; not a policy fact.
    pub budget: Option<crate::config::Budget>,
    /// The least spend left (USD) among the caller's budgets for the current periods,
    /// as the admit phase found it (`request.budget_remaining`; `None`: no budget
    /// applies, read as [`crate::policy::NO_BUDGET`]). `dry-run --budget-remaining`
    /// sets it too.
    pub budget_remaining: Option<f64>,
}

pub use crate::auth::{key_id, MAX_CREDENTIAL_BYTES, MAX_ORG_BYTES};

impl Caller {
    /// The caller a request presents, unverified (what `auth.mode: none` uses):
    /// - the API key is the credential of [`crate::auth::credential`] (`Authorization:
    ///   Bearer`, else `x-api-key`, else `api-key`); `api_key` is its [`key_id`], so
    ///   no policy, trace, log or metric ever holds the secret;
    /// - the organization is the `OpenAI-Organization` header.
    ///
    /// With authentication on, the admit phase replaces this with the verified
    /// principal ([`Caller::from_principal`]).
    pub fn from_headers(headers: &http::HeaderMap) -> Caller {
        Caller {
            api_key: crate::auth::credential(headers).map(|k| Arc::from(key_id(k))),
            org: crate::auth::claimed_org(headers).map(Arc::from),
            priority: PriorityLevel::default(),
            scopes: Vec::new(),
            limits: None,
            budget: None,
            budget_remaining: None,
        }
    }

    /// The caller a verified (or, in `mode: none`, presented) principal is.
    pub fn from_principal(p: &crate::auth::Principal) -> Caller {
        Caller {
            api_key: p.key_id.clone(),
            org: p.org.clone(),
            priority: p.priority,
            scopes: crate::policy::features::normalize_scopes(p.scopes.iter().cloned()),
            limits: p.limits,
            budget: p.budget,
            budget_remaining: None,
        }
    }
}

/// Headers never shown to policies (credentials), so no trace or log can print them.
pub const SECRET_HEADERS: [&str; 5] = [
    "authorization",
    "proxy-authorization",
    "cookie",
    "x-api-key",
    "api-key",
];

/// Most headers copied into the features; the rest are ignored.
pub const MAX_HEADERS: usize = 64;

/// Maps one chat request to policy features.
///
/// `headers` are `(name, value)` pairs in any case (credentials are dropped, at most
/// [`MAX_HEADERS`] kept); `unix_secs` is the request time. `off_peak` is always false
/// here: whether the off-peak window holds is the scheduler's to say, and the caller
/// sets it afterwards.
pub fn features<'h>(
    req: &ChatRequest,
    headers: impl IntoIterator<Item = (&'h str, &'h str)>,
    caller: &Caller,
    unix_secs: u64,
) -> RequestFeatures {
    features_reading(req, headers, caller, unix_secs, None)
}

/// [`features`] with only the headers and metadata keys in `names` kept (`None`:
/// all of them), for a policy set that reads only those ([`ReadNames`], from
/// [`super::reads::read_names`]): what the set decides is the same, and a request
/// copies only the few values its policies read instead of every header. Credentials
/// are dropped either way, and the cap of [`MAX_HEADERS`] counts every other header
/// whether kept or not, so a header past it is unseen here as in [`features`].
pub fn features_reading<'h>(
    req: &ChatRequest,
    headers: impl IntoIterator<Item = (&'h str, &'h str)>,
    caller: &Caller,
    unix_secs: u64,
    names: Option<&ReadNames>,
) -> RequestFeatures {
    let mut h = BTreeMap::new();
    let mut metadata = BTreeMap::new();
    // The names seen, credentials aside: the cap counts these, kept or not (as
    // `h` counts them when every header is kept).
    let mut seen: SmallVec<[Cow<'h, str>; 16]> = SmallVec::new();
    for (k, v) in headers {
        if seen.len() >= MAX_HEADERS {
            break;
        }
        // Names from an `http::HeaderMap` are lowercase already.
        let k = if k.bytes().any(|b| b.is_ascii_uppercase()) {
            Cow::Owned(k.to_ascii_lowercase())
        } else {
            Cow::Borrowed(k)
        };
        if SECRET_HEADERS.contains(&&*k) {
            continue;
        }
        if !seen.contains(&k) {
            seen.push(k.clone());
        }
        if let Some(m) = k.strip_prefix(META_HEADER_PREFIX) {
            if names.is_none_or(|n| n.metadata(m)) {
                metadata.insert(m.to_string(), v.to_string());
            }
        }
        if names.is_none_or(|n| n.header(&k)) {
            h.insert(k.into_owned(), v.to_string());
        }
    }
    if let Some(serde_json::Value::Object(m)) = req.extra.get("metadata") {
        for (k, v) in m {
            if let serde_json::Value::String(s) = v {
                if names.is_none_or(|n| n.metadata(k)) {
                    metadata.insert(k.clone(), s.clone());
                }
            }
        }
    }
    let (hour, weekday) = hour_weekday(unix_secs);
    RequestFeatures {
        model: req.model.clone(),
        input_tokens: req.estimated_input_tokens(),
        max_tokens: req.max_completion_tokens.or(req.max_tokens),
        temperature: req.temperature,
        stream: req.stream.unwrap_or(false),
        tools: req.tools.as_ref().is_some_and(|t| !t.is_empty()),
        messages: req.messages.len() as u64,
        headers: h,
        metadata,
        api_key: caller.api_key.clone(),
        org: caller.org.clone(),
        priority: caller.priority,
        scopes: caller.scopes.clone(),
        hour,
        weekday,
        task: task(req),
        budget_remaining: caller.budget_remaining.unwrap_or(crate::policy::NO_BUDGET),
        // The window is the scheduler's (`scheduler.off_peak`); the gateway sets this
        // after building the features, `dry-run --off-peak` likewise.
        off_peak: false,
    }
}

/// UTC hour (0..=23) and ISO weekday (1 = Monday ..= 7 = Sunday) of a Unix time.
pub fn hour_weekday(unix_secs: u64) -> (u8, u8) {
    let days = unix_secs / 86_400;
    let hour = ((unix_secs % 86_400) / 3_600) as u8;
    // 1970-01-01 was a Thursday (ISO weekday 4).
    let weekday = ((days + 3) % 7 + 1) as u8;
    (hour, weekday)
}

/// Task category for quality scores: `tool_use` when tools are offered, `code` when
/// the last user message contains a fenced code block, else `chat`.
pub fn task(req: &ChatRequest) -> Cow<'static, str> {
    if req.tools.as_ref().is_some_and(|t| !t.is_empty()) {
        return Cow::Borrowed("tool_use");
    }
    let last_user = req.messages.iter().rev().find(|m| m.role == "user");
    let code = last_user.is_some_and(|m| has_fence(&m.content));
    Cow::Borrowed(if code { "code" } else { "chat" })
}

/// Whether the JSON text of `v` contains "```", found in place: serializing a large
/// message just to search it would copy the whole prompt per request. JSON escaping
/// never touches a backtick, so only strings and object keys can hold the fence.
fn has_fence(v: &serde_json::Value) -> bool {
    use serde_json::Value;
    match v {
        Value::String(s) => fenced(s),
        Value::Array(a) => a.iter().any(has_fence),
        Value::Object(m) => m.iter().any(|(k, v)| fenced(k) || has_fence(v)),
        Value::Null | Value::Bool(_) | Value::Number(_) => false,
    }
}

/// Whether `s` holds three backticks in a row: each backtick found by `memchr`, the
/// two bytes after it compared. `str::contains` set up a substring searcher per
/// call, about 440 instructions per request for a prompt without a backtick
/// (`benches/load/callgrind.sh`), where this is a vector scan.
fn fenced(s: &str) -> bool {
    let b = s.as_bytes();
    memchr::memchr_iter(b'`', b).any(|i| b[i..].starts_with(b"```"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn callers_come_from_their_credentials_never_the_secret() {
        let mut h = http::HeaderMap::new();
        h.insert("authorization", "Bearer sk-alpha".parse().unwrap());
        h.insert("openai-organization", "org-search".parse().unwrap());
        let c = Caller::from_headers(&h);
        let id = c.api_key.clone().expect("a key id");
        assert_eq!(&*id, key_id("sk-alpha"));
        assert!(id.starts_with("key-") && id.len() == 20, "{id}");
        assert!(!id.contains("alpha"));
        assert_eq!(c.org.as_deref(), Some("org-search"));
        // The Anthropic SDK's header, and Azure's.
        let mut h = http::HeaderMap::new();
        h.insert("x-api-key", "sk-alpha".parse().unwrap());
        assert_eq!(Caller::from_headers(&h).api_key, Some(id.clone()));
        let mut h = http::HeaderMap::new();
        h.insert("api-key", "sk-beta".parse().unwrap());
        assert_ne!(Caller::from_headers(&h).api_key, Some(id));
        // A tab after the scheme, as RFC 9110 allows.
        let mut h = http::HeaderMap::new();
        h.insert("authorization", "Bearer\tsk-alpha".parse().unwrap());
        assert_eq!(
            Caller::from_headers(&h).api_key.as_deref(),
            Some(&*key_id("sk-alpha"))
        );
        // An unusable bearer token does not hide the x-api-key header.
        let mut h = http::HeaderMap::new();
        let huge = format!("Bearer {}", "k".repeat(MAX_CREDENTIAL_BYTES + 1));
        h.insert("authorization", huge.parse().unwrap());
        h.insert("x-api-key", "sk-alpha".parse().unwrap());
        assert_eq!(
            Caller::from_headers(&h).api_key.as_deref(),
            Some(&*key_id("sk-alpha"))
        );
        // No credentials, another scheme, an empty token: no key.
        assert_eq!(
            Caller::from_headers(&http::HeaderMap::new()),
            Caller::default()
        );
        for v in ["Basic dXNlcg==", "Bearer ", "Bearer"] {
            let mut h = http::HeaderMap::new();
            h.insert("authorization", v.parse().unwrap());
            assert_eq!(Caller::from_headers(&h).api_key, None, "{v}");
        }
    }

    #[test]
    fn maps_body_headers_and_time() {
        let body = br#"{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],
            "stream":true,"max_tokens":50,"metadata":{"tier":"batch"}}"#;
        let req = ChatRequest::parse(body).expect("valid body");
        let headers = [
            ("X-Team", "search"),
            ("x-switchyard-meta-env", "prod"),
            ("Authorization", "Bearer sk-secret"),
        ];
        let caller = Caller {
            api_key: Some("k1".into()),
            ..Caller::default()
        };
        // 2024-01-01T13:00:00Z was a Monday.
        let f = features(&req, headers, &caller, 1_704_114_000);
        assert_eq!(
            f.header("authorization"),
            None,
            "credentials never reach policies"
        );
        assert_eq!(f.model, "gpt-4o");
        assert!(f.stream);
        assert_eq!(f.max_tokens, Some(50));
        assert_eq!(f.header("x-team"), Some("search"));
        assert_eq!(f.metadata.get("tier").map(String::as_str), Some("batch"));
        assert_eq!(f.metadata.get("env").map(String::as_str), Some("prod"));
        assert_eq!((f.hour, f.weekday), (13, 1));
        assert_eq!(f.messages, 1);
        assert!(f.input_tokens > 0);
        assert_eq!(f.api_key.as_deref(), Some("k1"));
        assert_eq!(f.task, "chat");
    }

    /// Review of the header filter: the cap counted only the headers kept, so with a
    /// filter a header past the 64th was seen by `serve` but not by `dry-run`.
    #[test]
    fn a_header_past_the_cap_is_unseen_whether_or_not_names_are_filtered() {
        let req =
            ChatRequest::parse(br#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#)
                .expect("valid body");
        let pads: Vec<String> = (0..MAX_HEADERS).map(|i| format!("x-pad-{i}")).collect();
        let names = ReadNames {
            headers: vec!["x-team".into(), "x-pad-3".into()],
            metadata: vec!["late".into()],
        };
        let run = |headers: &[(&str, &str)]| {
            let caller = Caller::default();
            let all = features(&req, headers.iter().copied(), &caller, 0);
            let some = features_reading(&req, headers.iter().copied(), &caller, 0, Some(&names));
            (all, some)
        };
        // 64 distinct names (a repeat, a credential and the capitals of one do not
        // count twice), then the ones past the cap.
        let mut headers: Vec<(&str, &str)> = vec![("authorization", "Bearer k")];
        for (i, p) in pads.iter().enumerate() {
            headers.push((p, "1"));
            if i == 3 {
                headers.push(("X-Pad-3", "2"));
                headers.push(("x-pad-0", "3"));
            }
        }
        headers.push(("x-team", "search"));
        headers.push(("x-switchyard-meta-late", "yes"));
        let (all, some) = run(&headers);
        assert_eq!(all.headers.len(), MAX_HEADERS);
        assert_eq!(all.header("x-team"), None);
        assert_eq!(some.header("x-team"), None);
        assert_eq!(some.metadata.get("late"), None);
        assert_eq!(some.header("x-pad-3"), all.header("x-pad-3"));
        assert_eq!(some.header("x-pad-3"), Some("2"));
        // Two names fewer, and both see them.
        headers.retain(|(k, _)| *k != "x-pad-62" && *k != "x-pad-63");
        let (all, some) = run(&headers);
        assert_eq!(all.header("x-team"), Some("search"));
        assert_eq!(some.header("x-team"), Some("search"));
        assert_eq!(all.metadata.get("late").map(String::as_str), Some("yes"));
        assert_eq!(some.metadata.get("late").map(String::as_str), Some("yes"));
    }

    #[test]
    fn only_the_names_a_set_reads_are_kept_and_they_read_the_same() {
        let body = br#"{"model":"m","messages":[{"role":"user","content":"hi"}],
            "metadata":{"tier":"batch","job":"nightly"}}"#;
        let req = ChatRequest::parse(body).expect("valid body");
        let headers = [
            ("X-Team", "search"),
            ("x-other", "1"),
            ("x-switchyard-meta-env", "prod"),
            ("x-switchyard-meta-zone", "eu"),
            ("Authorization", "Bearer sk-secret"),
        ];
        let caller = Caller::default();
        let all = features(&req, headers, &caller, 1_704_114_000);
        let names = ReadNames {
            headers: vec!["x-team".into(), "authorization".into(), "x-absent".into()],
            metadata: vec!["env".into(), "tier".into()],
        };
        let some = features_reading(&req, headers, &caller, 1_704_114_000, Some(&names));
        // What the set reads is what it would have read from every name.
        for h in ["x-team", "X-Team", "authorization", "x-absent"] {
            assert_eq!(some.header(h), all.header(h), "{h}");
        }
        assert_eq!(some.header("x-team"), Some("search"));
        for m in ["env", "tier"] {
            assert_eq!(some.metadata.get(m), all.metadata.get(m), "{m}");
        }
        // And nothing else was copied; credentials never are.
        assert_eq!(some.headers.keys().collect::<Vec<_>>(), ["x-team"]);
        assert_eq!(some.metadata.keys().collect::<Vec<_>>(), ["env", "tier"]);
        assert!(all.header("x-other").is_some() && all.metadata.contains_key("job"));
        // Everything that is not a header or metadata is as before.
        let strip = |mut f: RequestFeatures| {
            f.headers.clear();
            f.metadata.clear();
            f
        };
        assert_eq!(strip(some), strip(all));
    }

    #[test]
    fn a_fence_is_three_backticks_in_a_row_wherever_they_stand() {
        for (text, fence) in [
            ("", false),
            ("`", false),
            ("``", false),
            ("`` `", false),
            ("a `b` and ``c``", false),
            ("```", true),
            ("````", true),
            ("x``` ", true),
            ("tail ``", false),
            ("ends with ```", true),
            ("é``´```", true),
            ("é``´``", false),
        ] {
            assert_eq!(fenced(text), text.contains("```"), "{text:?}");
            assert_eq!(fenced(text), fence, "{text:?}");
        }
        let nested = serde_json::json!([{"type": "text", "text": "see\n```rust\nfn"}]);
        assert!(has_fence(&nested));
        assert!(!has_fence(&serde_json::json!({"k": ["``", 3, null]})));
        assert!(has_fence(&serde_json::json!({"```": 1})));
    }
}
