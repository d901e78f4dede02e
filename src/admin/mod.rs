//! Operator endpoints under `/admin/`: views of the running gateway, and the forced
//! policy reload; and the status page at `/ui` that shows them.
//!
//! Each view lives in its own file; `ingress` routes to them with one match arm each.

pub mod endpoints;
pub mod policies;
pub mod recent;
pub mod ui;
