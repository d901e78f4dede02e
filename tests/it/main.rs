//! Integration tests: the real binary, on loopback ephemeral ports, in one test binary.

mod common;
mod failures;
mod policy;
mod proxy;
mod regression;
mod reload;
mod shutdown;
mod strategies;
