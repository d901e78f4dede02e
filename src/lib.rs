//! Switchyard: an LLM gateway where routing is code.
//!
//! The request path, top to bottom (see `README.md` and `../shared/DESIGN.md`):
//!
//! ```text
//! client ─► ingress ─► routing ─► transform (providers) ─► egress ─► provider
//! ```
//!
//! Modules mirror it one layer each; `config` and `cli` sit beside it.

pub mod api;
pub mod config;
pub mod error;
pub mod mock;
pub mod suggest;
