//! The host's log: messages land in its tracing output, tagged with the component's name (long
//! ones truncated; a call's messages past its first 64 KiB dropped and counted). A guest's
//! stderr goes there too, and its last lines before a failure reach the task's error
//! observation.

use crate::bindings::agentmesh::plugin::host::{self, Level};

/// Logs `message` at trace level (off by default).
pub fn trace(message: &str) {
    host::log(Level::Trace, message);
}

/// Logs `message` at debug level.
pub fn debug(message: &str) {
    host::log(Level::Debug, message);
}

/// Logs `message` at info level.
pub fn info(message: &str) {
    host::log(Level::Info, message);
}

/// Logs `message` at warn level: something unexpected that the component handled.
pub fn warn(message: &str) {
    host::log(Level::Warn, message);
}

/// Logs `message` at error level.
pub fn error(message: &str) {
    host::log(Level::Error, message);
}
