//! The request path's scheduling steps ([`crate::sched`]):
//! - admit: the request's starting priority, the key's `priority` or the level the
//!   `x-switchyard-priority` header asks for, up to the key's ceiling
//!   ([`crate::auth::Principal::priority_ceiling`]); and whether the caller opts
//!   into the off-peak hold (`x-switchyard-defer: off-peak`);
//! - between cache and dispatch: the off-peak hold ([`hold`]), for a request whose
//!   final priority (after the policy's `set priority`) is low and whose caller or
//!   route/rule (`hold off_peak`) opted in;
//! - dispatch: a slot of the endpoint's gate per attempt (`super::dispatch`).
//!
//! The rate limits run between the admit step and the policy, so the level that
//! bypasses them (`critical`) is the key's and the header's; a policy's `set
//! priority critical` bypasses the queues only.

use std::time::Duration;

use http::{HeaderMap, HeaderName};

use super::ctx::RequestCtx;
use super::Gateway;
use crate::error::{Code, ErrorKind, GatewayError};
use crate::policy::ast::PriorityLevel;

/// Request header: the level a request asks for (`low`, `normal`, `high`,
/// `critical`), at most the key's `max_priority`.
pub const PRIORITY_HEADER: &str = "x-switchyard-priority";
/// Request header: `off-peak` opts a low-priority request into the off-peak hold.
pub const DEFER_HEADER: &str = "x-switchyard-defer";
/// Response header: the request's final priority.
pub const PRIORITY_RESPONSE_HEADER: HeaderName = HeaderName::from_static(PRIORITY_HEADER);
/// Response header: how long the request was held for the off-peak window, ms.
pub const HELD_HEADER: HeaderName = HeaderName::from_static("x-switchyard-held-ms");
/// Response header: how long its attempts waited in endpoint queues, ms.
pub const QUEUED_HEADER: HeaderName = HeaderName::from_static("x-switchyard-queued-ms");

/// [`PRIORITY_HEADER`] and [`DEFER_HEADER`] as header names, made when compiled: a
/// lookup by `&str` parses the name on every request.
const PRIORITY_NAME: HeaderName = HeaderName::from_static(PRIORITY_HEADER);
const DEFER_NAME: HeaderName = HeaderName::from_static(DEFER_HEADER);

/// Sets `ctx.caller.priority` from the header, and `ctx.defer` from the defer header.
///
/// # Errors
/// 400 naming the header for a value that is not a level (or not `off-peak`); 403
/// `priority_not_allowed` for a level above the caller's ceiling.
pub fn admit(ctx: &mut RequestCtx, headers: &HeaderMap) -> Result<(), GatewayError> {
    // The key's level first: a refusal of the header below answers with it (its
    // `x-switchyard-priority` and access line said `normal` whatever the key's,
    // found by attack, 2026-12-07).
    ctx.priority = ctx.caller.priority;
    if let Some(v) = headers.get(PRIORITY_NAME) {
        let text = v.to_str().unwrap_or("").trim();
        let Some(level) = PriorityLevel::parse(&text.to_ascii_lowercase()) else {
            return Err(GatewayError::new(
                ErrorKind::InvalidRequest,
                format!(
                    "header {PRIORITY_HEADER}: `{}` is not one of low, normal, high, critical",
                    crate::error::bounded(text, 64)
                ),
            )
            .with_param(PRIORITY_HEADER)
            .with_code(Code::InvalidValue));
        };
        let ceiling = ctx.principal.priority_ceiling();
        if level > ceiling {
            return Err(GatewayError::new(
                ErrorKind::PermissionDenied,
                format!(
                    "this credential may ask for priority up to `{}`, not `{}` ({PRIORITY_HEADER})",
                    ceiling.as_str(),
                    level.as_str()
                ),
            )
            .with_param(PRIORITY_HEADER)
            .with_code(Code::PriorityNotAllowed));
        }
        ctx.caller.priority = level;
    }
    ctx.priority = ctx.caller.priority;
    if let Some(v) = headers.get(DEFER_NAME) {
        let text = v.to_str().unwrap_or("").trim();
        if !text.eq_ignore_ascii_case("off-peak") {
            return Err(GatewayError::new(
                ErrorKind::InvalidRequest,
                format!(
                    "header {DEFER_HEADER}: `{}` is not `off-peak`",
                    crate::error::bounded(text, 64)
                ),
            )
            .with_param(DEFER_HEADER)
            .with_code(Code::InvalidValue));
        }
        ctx.hold_off_peak = true;
    }
    Ok(())
}

/// Holds the request for the off-peak window when its final priority is low and
/// it opted in (`ctx.hold_off_peak`), recording the time held in `ctx.held`. Returns
/// at once otherwise, and when no window is configured or it is open now.
pub async fn hold(gw: &Gateway, ctx: &mut RequestCtx) {
    if !ctx.hold_off_peak || ctx.priority != PriorityLevel::Low {
        return;
    }
    let Some(window) = gw.sched.off_peak() else {
        return;
    };
    if let Some((held, _why)) = window.hold().await {
        ctx.held = Some(held);
    }
}

/// Milliseconds of `d`, for the response headers.
pub fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
