//! The normalize phase: the body parsed and validated into a [`ChatRequest`], and the
//! request's policy features (body, headers, caller, time) computed once.
//!
//! The caller is read from the request's credentials when the context is made
//! ([`Caller::from_headers`](crate::routing::features::Caller::from_headers)); the
//! features carry it, so `request.api_key` and `request.org` mean the same in `serve`
//! as in `dry-run`.

use std::time::SystemTime;

use bytes::Bytes;
use http::HeaderMap;

use super::ctx::RequestCtx;
use crate::api::ChatRequest;
use crate::error::GatewayError;
use crate::policy::RequestFeatures;
use crate::routing::features::features;

/// Parses and validates the body.
///
/// # Errors
/// 400 naming the field at fault.
pub fn parse(ctx: &mut RequestCtx, body: Bytes) -> Result<ChatRequest, GatewayError> {
    let chat = ChatRequest::parse_bytes(body)?;
    ctx.stream = chat.is_stream();
    Ok(chat)
}

/// The policy features of `chat` with the client's `headers`, for the caller in
/// `ctx`, at the current time.
pub fn request_features(
    ctx: &RequestCtx,
    chat: &ChatRequest,
    headers: &HeaderMap,
) -> RequestFeatures {
    let now = SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let pairs = headers
        .iter()
        .filter_map(|(k, v)| Some((k.as_str(), v.to_str().ok()?)));
    features(chat, pairs, &ctx.caller, now)
}
