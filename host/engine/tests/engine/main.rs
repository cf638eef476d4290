//! The engine on a real sled directory, with config dirs written by the tests and the
//! `scripted` model.

// Test code may panic: a panic is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod capabilities;
mod condensation;
mod host_failures;
mod http;
mod lifecycle;
mod limits;
mod queue;
mod reviews;
mod secrets;
mod util;
