//! The admit phase: who the caller is, and whether it may make this request.
//!
//! [`authenticate`] runs before the body is read into a request (a client without
//! valid credentials gets 401 whatever it sent) and writes the principal and the
//! policy-visible caller into the context; [`check_model`] runs once normalize has
//! parsed the model. The provider scope is applied to the plan by the route phase
//! (`route::restrict`), as only the plan knows which providers serve the request.

use http::HeaderMap;

use super::ctx::RequestCtx;
use super::Gateway;
use crate::api::ChatRequest;
use crate::error::{Code, ErrorKind, GatewayError};
use crate::routing::features::Caller;

/// Authenticates the request's credentials into `ctx.principal` and `ctx.caller`.
///
/// # Errors
/// 401 `invalid_api_key` (the same whatever was wrong).
pub fn authenticate(
    gw: &Gateway,
    ctx: &mut RequestCtx,
    headers: &HeaderMap,
) -> Result<(), GatewayError> {
    let p = gw.auth.authenticate(headers)?;
    ctx.caller = Caller::from_principal(&p);
    ctx.principal = p;
    Ok(())
}

/// Checks the requested model against the caller's allowed models.
///
/// # Errors
/// 403 `model_not_allowed`, naming the model (never the credential).
pub fn check_model(ctx: &RequestCtx, chat: &ChatRequest) -> Result<(), GatewayError> {
    if ctx.principal.allows_model(&chat.model) {
        return Ok(());
    }
    Err(GatewayError::new(
        ErrorKind::PermissionDenied,
        format!(
            "this credential may not use model `{}`",
            crate::error::bounded(&chat.model, crate::routing::MAX_ECHOED_NAME)
        ),
    )
    .with_param("model")
    .with_code(Code::ModelNotAllowed))
}
