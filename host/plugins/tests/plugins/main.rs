//! Integration tests of the plugin host, against the real components built from `guests/`
//! (build them first: `cargo build --release --target wasm32-wasip2 --manifest-path guests/Cargo.toml`).
//!
//! One module per area; `util` holds the shared host, the guest locator and the fake GitHub
//! server; `guests` checks that every guest crate is exercised by some test here.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod cache;
mod capacity;
mod event_filter;
mod faults;
mod github_pr;
mod guests;
mod kv;
mod limits;
mod middleware;
mod registry;
mod util;
