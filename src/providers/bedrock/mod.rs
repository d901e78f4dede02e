//! Amazon Bedrock Runtime, Converse API.
//!
//! Source: Amazon Bedrock API reference, "Converse" and "ConverseStream" (request
//! `messages`, `system`, `inferenceConfig`, `toolConfig`; response `output.message`,
//! `stopReason`, `usage`, `metrics`; the stream's `messageStart`,
//! `contentBlockStart`, `contentBlockDelta`, `contentBlockStop`, `messageStop` and
//! `metadata` events and its exceptions), "Common errors" (`{"message": ...}` bodies
//! with the error type in `x-amzn-ErrorType`), AWS General Reference "Signature
//! Version 4 signing process", and the AWS SDKs' "Shared config and credentials
//! files" (the `[profile]` INI format of `~/.aws/credentials`).
//!
//! Requests go to `POST {base_url}/model/{modelId}/converse`, or `/converse-stream`
//! when streaming, with `base_url` defaulting to
//! `https://bedrock-runtime.{region}.amazonaws.com`. Each request is signed with
//! SigV4 (service `bedrock`) from credentials read once at startup, or carries a
//! Bedrock API key as `Authorization: Bearer`. The OpenAI request is translated in
//! `request`, the binary event stream in `stream`, extended thinking for Claude
//! models in `thinking`.

mod frame;
mod request;
mod stream;
mod thinking;

use std::time::SystemTime;

use aws_smithy_runtime_api::client::identity::Identity;
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method};
use serde::Deserialize;
use serde_json::Value;

use super::common::{bad_upstream, completion, random_id, Choice};
use super::{upstream_error, Adapter, StreamContext, StreamTranscoder, Target};
use crate::api::{ChatRequest, PromptTokensDetails, Usage};
use crate::body::{self, Body};
use crate::config::ProviderConfig;
use crate::error::{ErrorKind, GatewayError};

/// SigV4 service name of Bedrock Runtime.
const SERVICE: &str = "bedrock";

/// Environment variable of a Bedrock API key (AWS docs, "Use an Amazon Bedrock API
/// key"), sent as `Authorization: Bearer` when the provider has no `api_key_env`.
pub const BEARER_ENV: &str = "AWS_BEARER_TOKEN_BEDROCK";

/// How requests are authenticated.
#[derive(Clone)]
enum Auth {
    /// SigV4 with these credentials (an `Arc` inside: cloning and signing copy no key).
    SigV4(Identity),
    /// A Bedrock API key.
    Bearer(HeaderValue),
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Auth::SigV4(_) => "SigV4(..)",
            Auth::Bearer(_) => "Bearer(..)",
        })
    }
}

/// The Bedrock Converse adapter: region, default endpoint and credentials, all
/// settled at startup.
#[derive(Debug, Clone)]
pub struct Bedrock {
    region: String,
    /// `https://bedrock-runtime.{region}.amazonaws.com`, used when the provider has
    /// no `base_url`.
    default_base: String,
    auth: Auth,
}

/// AWS credentials read from the environment or a shared credentials file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AwsKeys {
    /// `aws_access_key_id`.
    pub access_key_id: String,
    /// `aws_secret_access_key`.
    pub secret_access_key: String,
    /// `aws_session_token`, for temporary credentials.
    pub session_token: Option<String>,
}

/// Reads the `[profile]` section of an AWS shared credentials file (INI: `[name]`
/// headers, `key = value` lines, `#` and `;` comments). `None` when the profile is
/// absent or lacks a key id or secret.
pub fn parse_credentials_file(text: &str, profile: &str) -> Option<AwsKeys> {
    let mut in_profile = false;
    let (mut id, mut secret, mut token) = (None, None, None);
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            let name = name.trim();
            // The config file spells named profiles `[profile x]`; accept both.
            let name = name.strip_prefix("profile ").map_or(name, str::trim);
            in_profile = name == profile;
            continue;
        }
        if !in_profile {
            continue;
        }
        let Some((k, v)) = line.split_once('=') else {
            continue;
        };
        let v = v.trim().to_string();
        match k.trim().to_ascii_lowercase().as_str() {
            "aws_access_key_id" => id = Some(v),
            "aws_secret_access_key" => secret = Some(v),
            "aws_session_token" => token = Some(v),
            _ => {}
        }
    }
    Some(AwsKeys {
        access_key_id: id.filter(|s| !s.is_empty())?,
        secret_access_key: secret.filter(|s| !s.is_empty())?,
        session_token: token.filter(|s| !s.is_empty()),
    })
}

impl Bedrock {
    /// The adapter for provider `cfg`, reading region and credentials through `env`
    /// (and the shared credentials file it points to) once.
    ///
    /// Region: `region:` in the provider's config, else `AWS_REGION`, else
    /// `AWS_DEFAULT_REGION`. Credentials, first found: the key in the provider's
    /// `api_key_env` or `AWS_BEARER_TOKEN_BEDROCK` (Bearer); `AWS_ACCESS_KEY_ID` and
    /// `AWS_SECRET_ACCESS_KEY` (with `AWS_SESSION_TOKEN`); the profile
    /// (`profile:`, else `AWS_PROFILE`, else `default`) of the shared credentials file
    /// (`credentials_file:`, else `AWS_SHARED_CREDENTIALS_FILE`, else
    /// `$HOME/.aws/credentials`).
    ///
    /// # Errors
    /// A sentence naming the provider when there is no region or no credentials.
    pub fn from_config(
        cfg: &ProviderConfig,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Bedrock, String> {
        let name = &cfg.name;
        let get = |k: &str| env(k).filter(|v| !v.trim().is_empty());
        let region = cfg
            .region
            .clone()
            .or_else(|| get("AWS_REGION"))
            .or_else(|| get("AWS_DEFAULT_REGION"))
            .ok_or_else(|| {
                format!(
                    "providers.{name}: kind `bedrock` needs a region: set `region:` or AWS_REGION"
                )
            })?;
        let default_base = format!("https://bedrock-runtime.{region}.amazonaws.com");
        let bearer = cfg
            .api_key_env
            .as_deref()
            .and_then(get)
            .or_else(|| get(BEARER_ENV));
        let auth = if let Some(key) = bearer {
            let mut v = HeaderValue::from_str(&format!("Bearer {}", key.trim())).map_err(|_| {
                format!("providers.{name}: the Bedrock API key is not a valid header value")
            })?;
            v.set_sensitive(true);
            Auth::Bearer(v)
        } else {
            let keys = match (get("AWS_ACCESS_KEY_ID"), get("AWS_SECRET_ACCESS_KEY")) {
                (Some(id), Some(secret)) => AwsKeys {
                    access_key_id: id,
                    secret_access_key: secret,
                    session_token: get("AWS_SESSION_TOKEN"),
                },
                _ => {
                    let path = cfg
                        .credentials_file
                        .clone()
                        .or_else(|| get("AWS_SHARED_CREDENTIALS_FILE"))
                        .or_else(|| get("HOME").map(|h| format!("{h}/.aws/credentials")));
                    let profile = cfg
                        .profile
                        .clone()
                        .or_else(|| get("AWS_PROFILE"))
                        .unwrap_or_else(|| "default".to_string());
                    let text = path
                        .as_deref()
                        .and_then(|p| std::fs::read_to_string(p).ok());
                    text.as_deref()
                        .and_then(|t| parse_credentials_file(t, &profile))
                        .ok_or_else(|| {
                            format!(
                                "providers.{name}: no AWS credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, a Bedrock API key in {}, or profile `{profile}` in {}",
                                cfg.api_key_env.as_deref().unwrap_or(BEARER_ENV),
                                path.as_deref().unwrap_or("~/.aws/credentials")
                            )
                        })?
                }
            };
            Auth::SigV4(identity(keys))
        };
        Ok(Bedrock {
            region,
            default_base,
            auth,
        })
    }

    /// An adapter signing with `keys` in `region` (tests and embedders).
    pub fn with_keys(region: &str, keys: AwsKeys) -> Bedrock {
        Bedrock {
            region: region.to_string(),
            default_base: format!("https://bedrock-runtime.{region}.amazonaws.com"),
            auth: Auth::SigV4(identity(keys)),
        }
    }

    /// Builds the signed request: `uri` (already percent-encoded), JSON `body`,
    /// signed at `time`.
    fn signed(
        &self,
        uri: &str,
        stream: bool,
        body: Vec<u8>,
        time: SystemTime,
    ) -> Result<http::Request<Body>, GatewayError> {
        let internal = |m: String| GatewayError::new(ErrorKind::Internal, m);
        let accept = if stream {
            "application/vnd.amazon.eventstream"
        } else {
            "application/json"
        };
        let mut req = http::Request::builder()
            .method(Method::POST)
            .uri(uri)
            .header(http::header::CONTENT_TYPE, "application/json")
            .header(http::header::ACCEPT, accept)
            .body(())
            .map_err(|e| internal(format!("could not build upstream request: {e}")))?;
        match &self.auth {
            Auth::Bearer(v) => {
                req.headers_mut()
                    .insert(http::header::AUTHORIZATION, v.clone());
            }
            Auth::SigV4(identity) => {
                use aws_sigv4::http_request::{
                    sign, SignableBody, SignableRequest, SigningSettings,
                };
                let params = aws_sigv4::sign::v4::SigningParams::builder()
                    .identity(identity)
                    .region(&self.region)
                    .name(SERVICE)
                    .time(time)
                    .settings(SigningSettings::default())
                    .build()
                    .map_err(|e| internal(format!("SigV4 parameters: {e}")))?
                    .into();
                let headers = [("content-type", "application/json"), ("accept", accept)];
                let signable = SignableRequest::new(
                    "POST",
                    uri,
                    headers.into_iter(),
                    SignableBody::Bytes(&body),
                )
                .map_err(|e| internal(format!("SigV4 request: {e}")))?;
                let (instructions, _) = sign(signable, &params)
                    .map_err(|e| internal(format!("SigV4 signing failed: {e}")))?
                    .into_parts();
                instructions.apply_to_request_http1x(&mut req);
            }
        }
        Ok(req.map(|()| body::full(body)))
    }
}

fn identity(keys: AwsKeys) -> Identity {
    aws_credential_types::Credentials::new(
        keys.access_key_id,
        keys.secret_access_key,
        keys.session_token,
        None,
        "switchyard",
    )
    .into()
}

/// The model id as a URI path segment: Bedrock ids and ARNs hold `:` and `/`, which
/// the AWS SDKs percent-encode (everything but RFC 3986 unreserved characters).
fn path_segment(model: &str) -> String {
    let mut out = String::with_capacity(model.len() + 8);
    for b in model.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A Converse response.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ConverseResponse {
    output: Output,
    #[serde(default)]
    stop_reason: Option<String>,
    #[serde(default)]
    usage: Option<TokenUsage>,
}

#[derive(Deserialize)]
struct Output {
    #[serde(default)]
    message: Option<OutMessage>,
}

#[derive(Deserialize)]
struct OutMessage {
    #[serde(default)]
    content: Vec<OutBlock>,
}

/// A response content block; one field set.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct OutBlock {
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    tool_use: Option<OutToolUse>,
    #[serde(default)]
    reasoning_content: Option<thinking::ReasoningBlock>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct OutToolUse {
    tool_use_id: String,
    name: String,
    #[serde(default)]
    input: Option<Value>,
}

/// `usage`, in tokens. `inputTokens` excludes cache reads and writes, which Bedrock
/// reports separately; OpenAI's `prompt_tokens` includes them.
#[derive(Deserialize, Default, Clone, Copy, Debug)]
#[serde(rename_all = "camelCase")]
pub(super) struct TokenUsage {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
    #[serde(default)]
    cache_write_input_tokens: Option<u64>,
}

impl TokenUsage {
    /// OpenAI usage; cache reads and writes are added to `prompt_tokens` and reported
    /// in `prompt_tokens_details` when non-zero.
    pub(super) fn to_openai(self) -> Option<Usage> {
        let input = self.input_tokens?;
        let read = self.cache_read_input_tokens.unwrap_or(0);
        let write = self.cache_write_input_tokens.unwrap_or(0);
        let mut u = Usage::new(input + read + write, self.output_tokens.unwrap_or(0));
        if read > 0 || write > 0 {
            u.prompt_tokens_details = Some(PromptTokensDetails {
                cached_tokens: read,
                cache_creation_tokens: (write > 0).then_some(write),
            });
        }
        Some(u)
    }
}

/// Bedrock `stopReason` → OpenAI `finish_reason`. `malformed_model_output` and
/// `malformed_tool_use` are not finish reasons but failures (see
/// [`malformed_stop`]).
pub(super) fn finish_reason(reason: Option<&str>, tool_calls: bool) -> &'static str {
    match reason {
        Some("tool_use") => "tool_calls",
        Some("max_tokens" | "model_context_window_exceeded") => "length",
        Some("guardrail_intervened" | "content_filtered") => "content_filter",
        _ if tool_calls => "tool_calls",
        // end_turn, stop_sequence and reasons added later.
        _ => "stop",
    }
}

/// The failure a `stopReason` of `malformed_model_output` or `malformed_tool_use`
/// is (Bedrock's Converse API reference, `StopReason`): the model's output, or a
/// tool call in it, could not be read, so the answer is not a finished one. A 502
/// (`upstream_bad_response`) that moves on to another endpoint, or, once a stream
/// has sent content, its one error event. `None` for every other reason.
pub(super) fn malformed_stop(reason: Option<&str>) -> Option<GatewayError> {
    let reason =
        reason.filter(|r| matches!(*r, "malformed_model_output" | "malformed_tool_use"))?;
    Some(bad_upstream(format!(
        "Bedrock stopped the answer with stopReason {reason}: the model's output could not be read as an answer"
    )))
}

/// Error body of Bedrock Runtime (`{"message": ...}`; some services spell it
/// `Message`).
#[derive(Deserialize)]
struct ErrorBody {
    #[serde(default, alias = "Message")]
    message: Option<String>,
}

impl Adapter for Bedrock {
    fn request(
        &self,
        target: &Target<'_>,
        chat: &ChatRequest,
    ) -> Result<http::Request<Body>, GatewayError> {
        let mut body = request::build(chat)?;
        if thinking::is_claude(target.model) {
            body.for_claude();
        }
        if let Some(plan) = thinking::plan(chat, target.model)? {
            body.think(plan);
        }
        let json = serde_json::to_vec(&body).map_err(|e| {
            GatewayError::new(
                ErrorKind::Internal,
                format!("could not encode request: {e}"),
            )
        })?;
        let base = if target.base_url.is_empty() {
            &self.default_base
        } else {
            target.base_url
        };
        let op = if chat.is_stream() {
            "converse-stream"
        } else {
            "converse"
        };
        let uri = format!("{base}/model/{}/{op}", path_segment(target.model));
        self.signed(&uri, chat.is_stream(), json, SystemTime::now())
    }

    fn response(&self, body: &[u8], logical_model: &str) -> Result<Bytes, GatewayError> {
        let r: ConverseResponse = crate::api::read_json(body).map_err(|e| {
            bad_upstream(format!(
                "Bedrock sent a response that is not a Converse response: {e}"
            ))
        })?;
        // `output` is a union whose one member is `message`: without it the answer
        // has nothing in it, which is not an empty answer.
        let message = r.output.message.ok_or_else(|| {
            bad_upstream("Bedrock sent a Converse response without `output.message`")
        })?;
        let mut c = Choice::default();
        for b in message.content {
            if let Some(t) = b.tool_use {
                let args = t
                    .input
                    .filter(|v| !v.is_null())
                    .map_or_else(|| "{}".to_string(), |v| v.to_string());
                c.tool_calls.push((t.tool_use_id, t.name, args));
            } else if let Some(t) = b.text.filter(|t| !t.is_empty()) {
                match &mut c.content {
                    Some(s) => s.push_str(&t),
                    None => c.content = Some(t),
                }
            } else if let Some(r) = b.reasoning_content {
                thinking::add_to_choice(&mut c, r);
            }
        }
        if let Some(e) = malformed_stop(r.stop_reason.as_deref()) {
            return Err(e);
        }
        c.finish_reason = finish_reason(r.stop_reason.as_deref(), !c.tool_calls.is_empty());
        let usage = r.usage.and_then(TokenUsage::to_openai).unwrap_or_default();
        Ok(completion(
            &random_id("chatcmpl-"),
            logical_model,
            &[c],
            usage,
        ))
    }

    fn stream(&self, ctx: StreamContext) -> Box<dyn StreamTranscoder> {
        Box::new(stream::BedrockStream::new(ctx))
    }

    /// Maps an error answer like [`upstream_error`], reading Bedrock's
    /// `{"message"}` body and its `x-amzn-ErrorType` header (the type before `:`).
    /// A client error's `code` is that type (`ValidationException`, ...), or
    /// `context_length_exceeded` for an input too long; a 5xx body is never relayed,
    /// only its type named; `ServiceUnavailableException` (503) is
    /// `upstream_overloaded`. `ModelErrorException` (HTTP 424, "The request failed
    /// due to an error while processing the model") is the model's failure, not the
    /// client's request: mapped like a 5xx (502, retried).
    ///
    /// Quotas and access (Amazon Bedrock API reference, "Converse", Errors; User
    /// Guide, "Troubleshooting Amazon Bedrock API Error Codes"):
    /// - `ThrottlingException` (429, "Your request was denied due to exceeding the
    ///   account quotas for Amazon Bedrock") is a rate limit, as any 429.
    /// - `ServiceQuotaExceededException` (400, "Your request exceeds the service
    ///   quota for your account. ... You can resubmit your request later.") is one
    ///   too, not the client's request: 429 `upstream_rate_limited`, retried after
    ///   the backoff or on the next endpoint.
    /// - `AccessDeniedException` (403, "You do not have sufficient permissions to
    ///   perform the requested action", including a model the account has no
    ///   access to) is Switchyard's configuration, as any 403: 502
    ///   `upstream_auth_failed`, the next endpoint; the message names the IAM
    ///   permissions and model access rather than an API key.
    fn error(&self, status: u16, headers: &HeaderMap, body: &[u8]) -> GatewayError {
        use crate::error::{bounded, Code};
        let message = serde_json::from_slice::<ErrorBody>(body)
            .ok()
            .and_then(|b| b.message);
        let kind = headers
            .get("x-amzn-errortype")
            .and_then(|v| v.to_str().ok())
            .map(|t| bounded(t.split(':').next().unwrap_or(t), 64).into_owned())
            .filter(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_alphanumeric()));
        if kind.as_deref() == Some("ServiceQuotaExceededException") && status < 500 {
            return GatewayError::new(
                ErrorKind::RateLimited,
                format!(
                    "upstream rate limit: Bedrock ServiceQuotaExceededException (HTTP {status}): {}",
                    bounded(message.as_deref().unwrap_or(""), 2_000)
                ),
            )
            .with_code(Code::UpstreamRateLimited)
            .with_retry_after(crate::stats::ratelimit::retry_after(
                headers,
                std::time::SystemTime::now(),
            ));
        }
        let model_error = status == 424 || kind.as_deref() == Some("ModelErrorException");
        // The status the answer is mapped by: a model error is a server error.
        let mapped = if model_error && status < 500 {
            502
        } else {
            status
        };
        let mut e = match &message {
            Some(m) => {
                let body = serde_json::json!({ "error": { "message": m } });
                upstream_error(
                    mapped,
                    headers,
                    &serde_json::to_vec(&body).unwrap_or_default(),
                )
            }
            None => upstream_error(mapped, headers, body),
        };
        let named = kind
            .as_deref()
            .map(|k| format!(", {k}"))
            .unwrap_or_default();
        if status == 403 {
            e.message = format!(
                "Bedrock refused Switchyard's request (HTTP 403{named}); check the provider's AWS credentials, their IAM permissions (bedrock:InvokeModel) and the account's access to the model"
            );
        } else if mapped >= 500 {
            e.message = format!("Bedrock answered an error (HTTP {status}{named})");
            if status == 503 || kind.as_deref() == Some("ServiceUnavailableException") {
                e = e.with_code(Code::UpstreamOverloaded);
            }
        } else if e.status() == 400 {
            let lower = message.as_deref().unwrap_or("").to_ascii_lowercase();
            if lower.contains("too long")
                || lower.contains("context window")
                || crate::providers::context_overflow(&lower)
            {
                e = e
                    .with_kind(ErrorKind::ContextWindowExceeded)
                    .with_code(Code::ContextLengthExceeded);
            } else if let Some(k) = kind {
                e = e.with_code(Code::provider(&k));
            }
        }
        e
    }
}

#[cfg(test)]
mod tests;
