//! The context check of the route phase: endpoints of the plan that cannot take the
//! request (input tokens plus the output cap it asks for over a known
//! `context_window`, or that cap over a known `max_output_tokens`) are dropped
//! before any upstream call; when none is left, the client gets a 400.
//!
//! Input tokens are counted only when an endpoint of the plan has a known context
//! window ([`super::normalize::input_tokens`]: OpenAI's tokenizer for OpenAI
//! families, else the estimate); a count the policy features already hold is
//! reused. A count that is not exact (the 4-characters estimate, or a long prompt
//! extrapolated from its first 512 bytes) is trusted only down to
//! [`ESTIMATE_SLACK_PERCENT`] below itself: an endpoint is dropped only when even
//! that lower bound does not fit, so an estimate never refuses a request the
//! provider would take (the provider's own error, and dispatch's move to a larger
//! window, handle the rest).

use super::ctx::RequestCtx;
use super::Gateway;
use crate::api::ChatRequest;
use crate::error::{Code, ErrorKind, GatewayError};
use crate::policy::interp::strategy::PlanRest;
use crate::policy::RequestFeatures;

/// How far below an inexact count the true count may be, in percent.
pub const ESTIMATE_SLACK_PERCENT: u64 = 10;

/// Drops the endpoints of `plan` and of its unordered fallbacks `rest` that cannot
/// take `chat` (see the module doc).
///
/// # Errors
/// 400 `context_length_exceeded` (param `messages`) when no endpoint of a
/// non-empty plan has room for the input and the requested output; 400 naming
/// `max_completion_tokens` (or `max_tokens`) when the cap alone is over every
/// endpoint's `max_output_tokens`.
pub fn fit(
    gw: &Gateway,
    ctx: &RequestCtx,
    plan: &mut Vec<usize>,
    mut rest: Option<&mut PlanRest>,
    chat: &ChatRequest,
    features: &RequestFeatures,
) -> Result<(), GatewayError> {
    if !gw.registry.has_limits {
        return Ok(());
    }
    let eps = &gw.registry.endpoints;
    // Every endpoint of the plan, in no particular order: what is checked here does
    // not depend on it.
    let rest_ro = rest.as_deref();
    let all = || {
        let rest = rest_ro.into_iter().flat_map(|r| r.indices());
        plan.iter().copied().chain(rest).map(|i| &eps[i])
    };
    let cap = chat.output_cap();
    let windows = all().any(|e| e.has_context_window());
    let output_limits = cap.is_some() && all().any(|e| e.max_output_tokens.is_some());
    if all().next().is_none() || !(windows || output_limits) {
        return Ok(());
    }
    let (counted, exact) = if !windows {
        (0, true)
    } else {
        let counter = gw.limits.token_counter();
        let n = if ctx.snapshot.reads_input_tokens {
            features.input_tokens
        } else {
            super::normalize::input_tokens(gw, chat)
        };
        (n, counter.is_exact(chat))
    };
    let input = if exact {
        counted
    } else {
        counted - counted * ESTIMATE_SLACK_PERCENT / 100
    };
    if all().all(|e| e.fits_request(input, cap)) {
        return Ok(());
    }
    let model = crate::error::bounded(&chat.model, crate::routing::MAX_ECHOED_NAME);
    let out = cap.unwrap_or(0);
    if all().all(|e| e.max_output_tokens.is_some_and(|m| out > m)) {
        let most = all().filter_map(|e| e.max_output_tokens).max().unwrap_or(0);
        let param = if chat.max_completion_tokens.is_some() {
            "max_completion_tokens"
        } else {
            "max_tokens"
        };
        return Err(GatewayError::invalid_param(
            crate::error::Code::InvalidValue,
            param,
            format!("`{param}` is {out}, but the endpoints of model `{model}` produce at most {most} output tokens"),
        ));
    }
    // The plan's, not the model's: a policy may have routed to another model.
    let largest = all().filter_map(|e| e.context_window).max();
    plan.retain(|&i| eps[i].fits_request(input, cap));
    if let Some(r) = rest.as_deref_mut() {
        r.retain(|i| eps[i].fits_request(input, cap));
    }
    if !plan.is_empty() || rest.is_some_and(|r| !r.is_empty()) {
        return Ok(());
    }
    let about = if exact { "" } else { "about " };
    let mut message = format!(
        "This request needs {about}{} tokens ({about}{counted} of input plus {out} of output requested), more than any endpoint of model `{model}` can take",
        counted.saturating_add(out)
    );
    if let Some(w) = largest {
        message.push_str(&format!(": its largest context window is {w} tokens"));
    }
    message.push_str(". Shorten the messages or lower `max_completion_tokens`.");
    Err(GatewayError::new(ErrorKind::ContextWindowExceeded, message)
        .with_code(Code::ContextLengthExceeded)
        .with_param("messages"))
}
