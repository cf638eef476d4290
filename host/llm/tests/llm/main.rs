//! Integration tests of agentmesh-llm, one module per area.

// Tests fail loudly: unwrap, expect and panic are the point here.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod fake_server;
mod history;
mod openai;
mod scripted;
