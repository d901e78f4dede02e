//! Operator endpoints under `/admin/` (read-only views of the running gateway).
//!
//! Each view lives in its own file; `ingress` routes to them with one match arm each.

pub mod endpoints;
