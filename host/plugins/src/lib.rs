//! The Wasm plugin host of agentmesh: tool backends, custom middleware and custom event filters
//! as sandboxed WebAssembly components of the WIT package `agentmesh:plugin@0.1.0` (`wit/`).
//!
//! - [`PluginHost`] owns the wasmtime engine (pooling allocator, epoch-based timeouts), one
//!   linker per world and the compiled-component cache; [`PluginHost::load`] gives a
//!   [`LoadedComponent`] whose [`World`] is detected from its exports, and
//!   [`LoadedComponent::named`] the same one under another name (one file, several tools).
//! - Tools ([`tool`]): a [`ToolSession`] per (component, task) — Initialize on open, Teardown on
//!   [`ToolSession::close`] — or [`LoadedComponent::call_tool`] for one call in a fresh instance.
//! - Capacity: at most [`PluginConfig::max_instances`] instances live at once. An idle session
//!   keeps its instance until the pool is full and another is wanted: then the least recently
//!   used idle session is evicted (Teardown now, Initialize again at its next call). A call
//!   that finds every instance busy waits [`PluginConfig::instance_wait`], then fails with
//!   [`Fault::Busy`]. [`PluginHost::pool_metrics`] counts instances, evictions and calls.
//! - Middleware ([`middleware`]): [`LoadedComponent::middleware_before`] / `_after` → [`MiddlewareVerdict`].
//! - Event filters ([`event_filter`]): [`LoadedComponent::event_filter_matches`].
//! - The sandbox ([`sandbox`], [`http`]): no environment, no sockets, no files but the mount,
//!   stdout/stderr to the log, outgoing HTTP only to `allowed_hosts` (DNS-rebinding safe),
//!   memory, time and output limits; the WASI resources an instance holds in the host (how
//!   many, how large) bounded by its memory limit. Breaking a limit is a [`Fault`], never a host
//!   failure.
//! - `interface host`: `log` to `tracing` (a budget per call), and `kv-*` on a
//!   [`KvStore`] scoped to (component, task).
//! - Hot reload: [`ComponentRegistry`] swaps versions; in-flight calls keep theirs.
//! - Threads: a guest call starts on the async worker that awaits it; one still in Wasm after
//!   a tick of the epoch moves off the async workers (`offload`), so a looping guest holds
//!   its own thread until its timeout and never the workers that answer HTTP.
//!
//! Modules: `plugin_host` ([`PluginHost`], the engine and loading), `cache` (compiled
//! components by content hash), `component` ([`LoadedComponent`], worlds), `bindings` (one
//! `bindgen!` per world), `capacity` (the instance pool), `state` (a store's state, limits and
//! the epoch clock), `host` (`interface host`), `kv` ([`KvStore`]), `stdio` (guest output to
//! the log), `offload` (long guest calls off the async workers), `registry` (hot reload),
//! [`tool`], [`middleware`], [`event_filter`], [`sandbox`], [`http`], `error`
//! ([`PluginError`], [`Fault`]).
//!
//! Errors: a tool call answers `Result<Result<json, ToolError>, PluginError>` — the inner
//! error is what the LLM sees (recoverable unless the guest said `fatal`), the outer one a host
//! failure. Middleware and filters answer `Result<_, PluginError>`, with guest faults as
//! [`PluginError::Guest`].
//!
//! ```no_run
//! # async fn demo() -> Result<(), agentmesh_plugins::PluginError> {
//! use std::sync::Arc;
//! use agentmesh_plugins::{MemoryKv, PluginConfig, PluginHost, Sandbox, ToolSession};
//!
//! let host = PluginHost::new(PluginConfig::default(), Arc::new(MemoryKv::new()))?;
//! let github = host.load_named("engineering/github-pr", "plugins/github_pr.wasm".as_ref())?;
//! let sandbox = Sandbox::default().allow("https://api.github.com")?;
//! let session = ToolSession::lazy(github, sandbox, r#"{"token": "…"}"#, r#"{"owner": "acme", "repo": "web"}"#, "t_1")?;
//! let mut session = session.open().await?;
//! match session.invoke("list_prs", r#"{"state": "open"}"#).await? {
//!     Ok(observation) => println!("{observation}"),
//!     Err(error) if error.is_fatal() => println!("terminate the task: {error}"),
//!     Err(error) => println!("tell the LLM: {error}"),
//! }
//! session.close().await?;
//! # Ok(()) }
//! ```

mod bindings;
mod cache;
mod capacity;
mod component;
mod error;
pub mod event_filter;
mod host;
pub mod http;
pub mod kv;
pub mod middleware;
mod offload;
mod plugin_host;
mod registry;
pub mod sandbox;
mod state;
mod stdio;
pub mod tool;

pub use capacity::{ComponentMetrics, LATENCY_BUCKETS, PoolMetrics};
pub use component::{LoadedComponent, World};
pub use error::{Fault, PluginError, Result, ToolError};
pub use event_filter::AllowList;
pub use http::{Origin, OriginError};
pub use kv::{KvError, KvScope, KvStore, MemoryKv};
pub use middleware::{MiddlewareCall, MiddlewareVerdict};
pub use plugin_host::{CacheStats, PluginConfig, PluginHost};
pub use registry::ComponentRegistry;
pub use sandbox::{Limits, MountDir, Sandbox};
pub use tool::ToolSession;
