//! Switchyard: an LLM gateway where routing is code.
//!
//! The request path, top to bottom (see `README.md` and `../shared/DESIGN.md`):
//!
//! ```text
//! client ─► server ─► ingress ─► gateway (normalize ─► admit ─► route ─► dispatch ─► respond)
//!                                   │          │         │          │
//!                                routing      auth     policy     providers ─► egress ─► provider
//! ```
//!
//! Modules mirror it one layer each; `app` wires them together; `config`, `cli`,
//! `admin`, `recent`, `reload`, `telemetry` and `mock` sit beside it. `policy` is pure (no I/O,
//! no HTTP): everything above it may import it, it imports none of them.

pub mod admin;
pub mod alloc;
pub mod api;
pub mod app;
pub mod auth;
pub mod body;
pub mod budget;
pub mod cache;
pub mod cli;
pub mod config;
pub mod cors;
pub mod egress;
pub mod error;
pub mod gateway;
pub mod ingress;
pub mod json_text;
pub mod limits;
pub mod logging;
pub mod lsp;
pub mod mock;
pub mod otel;
pub mod policy;
pub mod providers;
pub mod recent;
pub mod reload;
pub mod request_id;
pub mod routing;
pub mod sched;
pub mod server;
pub mod sse;
pub mod stats;
pub mod suggest;
pub mod telemetry;
