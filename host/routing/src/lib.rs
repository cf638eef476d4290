//! Inbound tool events for agentmesh: from a webhook delivery to the door of the tasks it
//! resumes (CONTRACT §3, §5). The server does the HTTP and hands over an [`Inbound`] (raw
//! body and [`Headers`]); the engine keeps the tasks and owns the door. In the order a
//! delivery meets them:
//!
//! - `webhooks`: the pipeline, [`EventRouter::deliver_tool_webhook`]: the tool's events whose
//!   signature the raw body passes ([`signature`], from `agentmesh-secrets`), then the
//!   engine's door ([`Engine::arrive`](agentmesh_engine::Engine::arrive): the delivery id
//!   checked and held while `admit` runs, one durable write of the queue entries);
//! - `admit`: what a delivery brings, decided at the door: its events routed, then admitted
//!   by each matched task ([`Engine::admit_event`](agentmesh_engine::Engine::admit_event):
//!   filter component, middleware, message);
//! - `poll`: the pollers of `receive.poll` events, one per event and distinct set of sealed
//!   parameter values ([`EventRouter::run_pollers`]), each new item routed as a webhook's
//!   events are;
//! - `routes`: every active subscription of every task, kept in step with the task records
//!   (an engine [`Watcher`](agentmesh_engine::Watcher)), with their deadlines;
//! - [`index`]: the [`SubscriptionIndex`], which finds the subscriptions an event can match
//!   from the values its filter pins (`event.payload.user.login == parameters.author`) instead
//!   of evaluating every subscription's filter;
//! - [`filter`]: a tool event's `receive.filter` against one task's allow lists
//!   ([`Filter::matches`]): `parameters.X` is the task's set for X, some choice of one value
//!   per set must make the filter true, an empty set discards, errors fail closed;
//! - `analysis`: what a filter's compiled tree pins and which sets it reads, worked out once;
//! - `allow_list`: the values a stored allow-list entry stands for, and their index keys.
//!
//! [`delivery`] (the delivery id, the headers an agent may see) is `agentmesh-model`'s.
//! Allow lists are [`AllowLists`] (parameter → set of stored values, see [`allow_value`]).
//! `benches/routing.rs` measures the index against a scan at 10k to 1M subscriptions.
//!
//! ```
//! use std::sync::Arc;
//! use agentmesh_routing::{AllowLists, Event, Filter, SubscriptionIndex};
//! use serde_json::json;
//!
//! let filter = Arc::new(Filter::compile(
//!     "event.payload.repo == parameters.repo && event.payload.user == parameters.author",
//! )?);
//! let mut lists = AllowLists::new();
//! lists.entry("repo".into()).or_default().insert("agent-mesh".into());
//! lists.entry("author".into()).or_default().insert("alice".into());
//!
//! let mut index = SubscriptionIndex::new();
//! index.insert("t_1", "ns/github-pr", "comment", &filter, &lists);
//!
//! let event = Event::new(json!({
//!     "name": "comment",
//!     "payload": {"repo": "agent-mesh", "user": "alice"},
//! }));
//! let matched = index.route("ns/github-pr", "comment", &event, |_task| Some(&lists));
//! assert_eq!(matched, ["t_1"]);
//! # Ok::<(), agentmesh_expr::CompileError>(())
//! ```

mod admit;
mod allow_list;
mod analysis;
pub mod filter;
pub mod index;
mod poll;
mod routes;
mod webhooks;

pub use agentmesh_model::delivery::{self, Headers, Inbound, Proof, delivery_id, safe_headers};
pub use agentmesh_secrets::signature;
pub use allow_list::{AllowLists, allow_value};
pub use analysis::Pin;
pub use filter::{Event, Filter, MAX_COMBINATIONS};
pub use index::SubscriptionIndex;
pub use poll::LONGEST_PAUSE;
pub use webhooks::{EventRouter, WebhookOutcome};
