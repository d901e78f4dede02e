//! Operator endpoints under `/admin/`: views of the running gateway, and the forced
//! policy reload.
//!
//! Each view lives in its own file; `ingress` routes to them with one match arm each.

pub mod endpoints;
pub mod policies;
