//! Test support shared by the workspace's tests and benches.
//!
//! - [`server`]: the real `agentmesh` binary as `agentmesh serve` on a loopback port it picks
//!   itself, with a data dir the test gives (usually in a temp dir): started and waited for,
//!   then stopped (SIGTERM), killed (SIGKILL, as a crash) or dropped.
//! - [`browser`]: a real headless Chromium over WebDriver (`chromedriver`), for the
//!   inspector's tests.
//! - [`client`]: HTTP/1.1 clients of that server over loopback: one request per connection
//!   ([`client::Request`], what tests use) and a keep-alive [`client::Connection`] (what load
//!   generators use).
//! - [`engine`]: an engine in-process over a config dir (for the crates that drive one).
//! - [`fixtures`]: config dirs in temp dirs, and the manifests several tests and benches write.
//! - [`kubernetes`]: a stand-in for the Kubernetes API server (the Job, pod and log endpoints
//!   the `kubernetes_job` runtime uses), whose Jobs end as the test says.
//! - [`postgres`]: a real PostgreSQL server in a temp dir on a free loopback port, for the
//!   store's PostgreSQL backend and hosts sharing a database.
//! - [`serve`] (`remote`): a small HTTP/1.1 server on loopback standing in for a remote service (a REST
//!   API a tool calls, an LLM endpoint), which records what it receives.
//!
//! The binary is the root package's, and Cargo names it only to that package's tests and
//! benches (`env!("CARGO_BIN_EXE_agentmesh")`): they pass its path in.
//!
//! ```
//! use std::io::{Read, Write};
//! let (port, received) = agentmesh_testkit::serve(1, |_| ("200 OK", "{}".into()));
//! let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
//! stream.write_all(b"GET /x HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
//! let mut answer = String::new();
//! stream.read_to_string(&mut answer).unwrap();
//! assert!(answer.starts_with("HTTP/1.1 200 OK"));
//! assert_eq!(received.recv().unwrap().request_line, "GET /x HTTP/1.1");
//! ```

// Test support: a server that does not start, or an answer that does not parse, is a failed
// test, reported by a panic that says what went wrong.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

pub mod browser;
pub mod client;
pub mod engine;
pub mod fixtures;
pub mod kubernetes;
pub mod postgres;
mod remote;
pub mod server;

pub use remote::{Request, read_head, serve, serve_for, serve_located};
