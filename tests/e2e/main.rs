//! End-to-end tests: the real `agentmesh` binary, driven as a user would.

// Test code may panic: a panic is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod api;
mod auth;
mod blocks;
mod capacity;
mod cli;
mod connections;
mod disk;
mod durability;
mod governance;
mod guest_languages;
mod hosts;
mod inspect;
mod inspector;
mod kubernetes;
mod limits;
mod mcp_client;
mod mcp_events;
mod mcp_server;
mod mount;
mod new;
mod openapi;
mod poll;
mod postgres;
mod reload;
mod run;
mod secrets;
mod sessions;
mod triggers;
mod util;
mod wasm;
mod webhooks;

/// The binary under test, which Cargo builds for these tests.
const AGENTMESH: &str = env!("CARGO_BIN_EXE_agentmesh");
