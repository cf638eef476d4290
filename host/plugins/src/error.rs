//! The plugin host's errors.
//!
//! Three layers, from the guest's point of view outward:
//! - [`ToolError`]: how one tool call ended when it did not succeed. The guest's own
//!   `tool-error` ([`ToolError::Recoverable`], [`ToolError::Fatal`]) or a [`Fault`] the host
//!   observed. Faults are recoverable: the LLM sees the message, the task goes on.
//! - [`Fault`]: the guest misbehaved or hit a limit (trap, panic, timeout, memory, output size,
//!   a refused host call) — or the instance pool stayed full ([`Fault::Busy`]). Never a host
//!   bug; the host serves the next call.
//! - [`PluginError`]: anything else — a file that is not a component, a component of the wrong
//!   world, a store or cache failure. For middleware and filters a [`Fault`] arrives as
//!   [`PluginError::Guest`] (the step failed).

use std::path::PathBuf;
use std::time::Duration;

use crate::kv::KvError;

/// The result type of this crate.
pub type Result<T, E = PluginError> = std::result::Result<T, E>;

/// Why a plugin operation failed for a reason other than the guest's own answer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PluginError {
    /// A component file could not be read.
    #[error("cannot read component {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The bytes are not a valid component (or do not compile).
    #[error("{path} is not a valid Wasm component: {message}")]
    Compile {
        /// The file.
        path: PathBuf,
        /// The compiler's explanation.
        message: String,
    },
    /// The component implements no agentmesh world, or several.
    #[error(
        "{path} exports {found}; a plugin exports exactly one of `agentmesh:plugin/tool`, `agentmesh:plugin/middleware`, `agentmesh:plugin/event-filter` (version 0.1)"
    )]
    World {
        /// The file.
        path: PathBuf,
        /// What it exports instead.
        found: String,
    },
    /// The component imports something its world does not offer (e.g. `wasi:http` in a
    /// middleware).
    #[error("{path} cannot be linked as a {world} component: {message}")]
    Link {
        /// The file.
        path: PathBuf,
        /// The world it was detected as.
        world: &'static str,
        /// The linker's explanation (names the missing import).
        message: String,
    },
    /// The component was asked for an interface of another world.
    #[error("component `{component}` is a {actual} component, not a {expected} component")]
    WrongWorld {
        /// The component's name.
        component: String,
        /// What the caller needed.
        expected: &'static str,
        /// What it is.
        actual: &'static str,
    },
    /// A sandbox setting is invalid (an `allowed_hosts` entry, a mount directory).
    #[error("invalid sandbox: {0}")]
    Sandbox(String),
    /// The plugin host configuration is invalid, or wasmtime refused it.
    #[error("invalid plugin host configuration: {0}")]
    Config(String),
    /// The guest failed (middleware and event-filter calls; tool calls report a
    /// [`ToolError::Fault`] instead).
    #[error(transparent)]
    Guest(#[from] Fault),
    /// The key-value store failed (a host fault, not the guest's).
    #[error("plugin key-value store: {0}")]
    Kv(#[from] KvError),
    /// Instantiating or calling failed for a host reason (e.g. the instance pool is exhausted).
    #[error("component `{component}`: {message}")]
    Runtime {
        /// The component's name.
        component: String,
        /// What went wrong.
        message: String,
    },
}

impl PluginError {
    /// Whether the guest, not the host, is at fault: for a middleware step this fails the step
    /// (its `on_fail` applies); for a filter the event does not match.
    pub fn is_guest_fault(&self) -> bool {
        matches!(self, PluginError::Guest(_))
    }
}

/// How a tool call ended when it did not produce an observation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolError {
    /// The guest's `tool-error.recoverable`: shown to the LLM, the task goes on.
    #[error("{0}")]
    Recoverable(String),
    /// The guest's `tool-error.fatal`: the task terminates with reason `error`.
    #[error("{0}")]
    Fatal(String),
    /// The host stopped or refused the guest; recoverable.
    #[error(transparent)]
    Fault(#[from] Fault),
}

impl ToolError {
    /// Whether the task must terminate (only the guest's own `fatal`).
    pub fn is_fatal(&self) -> bool {
        matches!(self, ToolError::Fatal(_))
    }
}

/// The guest misbehaved or hit one of its sandbox's limits.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Fault {
    /// The call ran past its wall-clock limit and was stopped.
    #[error("component `{component}` ran longer than its {}ms timeout and was stopped", limit.as_millis())]
    Timeout {
        /// The component's name.
        component: String,
        /// The limit.
        limit: Duration,
    },
    /// The guest tried to grow its memory past its limit.
    #[error("component `{component}` exceeded its memory limit of {} KiB", limit / 1024)]
    MemoryLimit {
        /// The component's name.
        component: String,
        /// The limit in bytes.
        limit: u64,
    },
    /// The guest's answer is larger than the sandbox allows.
    #[error(
        "component `{component}` returned {size} bytes, more than its output limit of {limit} bytes"
    )]
    OutputTooLarge {
        /// The component's name.
        component: String,
        /// The answer's size.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// The guest panicked (Rust guests print the panic message to stderr, then trap).
    #[error("component `{component}` panicked: {message}")]
    Panic {
        /// The component's name.
        component: String,
        /// The panic message from its stderr.
        message: String,
    },
    /// The guest trapped for another reason (unreachable code, stack overflow, ...).
    #[error("component `{component}` trapped: {message}")]
    Trap {
        /// The component's name.
        component: String,
        /// The trap's description.
        message: String,
    },
    /// The guest called the host in a way the host refuses (an oversized key-value entry, more
    /// WASI resources or larger HTTP headers than its memory limit allows, for instance); the
    /// call was ended.
    #[error("component `{component}` was stopped: {message}")]
    Refused {
        /// The component's name.
        component: String,
        /// What it did.
        message: String,
    },
    /// Every instance of the host's pool was busy in a call for as long as a call may wait
    /// for one (`policy.instance_wait`). A limit of the host, not the guest's doing: the call
    /// may be tried again.
    #[error(
        "component `{component}` could not run: all {instances} instances of the host are busy in calls (waited {}ms); try again later",
        waited.as_millis()
    )]
    Busy {
        /// The component's name.
        component: String,
        /// The pool's size (`policy.max_instances`).
        instances: u32,
        /// How long the call waited.
        waited: Duration,
    },
}
