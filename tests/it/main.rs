//! Integration tests: the real binary (and, in `app`, the gateway started in
//! process), on loopback ephemeral ports, in one test binary.

mod access_log;
mod anthropic;
mod app;
mod attack;
mod auth;
mod bedrock;
mod budget;
mod cache;
mod common;
mod cors;
mod failover;
mod failures;
mod fidelity;
mod first_hour;
mod lazy_plan;
mod limits;
mod lsp;
mod mock_formats;
mod operator;
mod otel;
mod packaging;
mod policy;
mod provider_bad_input;
mod proxy;
mod readme;
mod regression;
mod reload;
mod resilience;
mod scheduling;
mod shutdown;
mod sse_script;
mod status_page;
mod strategies;
mod validation;
