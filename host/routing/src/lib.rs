//! Inbound events for agentmesh: from a webhook request to the tasks it resumes.
//!
//! This crate is the pure logic of the webhook endpoints (CONTRACT §3, §5); the server does
//! the HTTP and the engine keeps the tasks. In the order a request meets them:
//!
//! - [`signature`]: is the request from who it claims? GitHub's `X-Hub-Signature-256`,
//!   Standard Webhooks and bearer tokens, checked on the raw body in constant time.
//! - [`delivery`]: a delivery as it arrived ([`Inbound`]: raw body and [`Headers`], no HTTP
//!   types), the delivery id that makes redelivery idempotent ([`delivery_id`]), and the
//!   headers an agent may see ([`safe_headers`]).
//! - [`filter`]: a tool event's `receive.filter` against one task's allow lists
//!   ([`Filter::matches`]): `parameters.X` is the task's set for X, some choice of one value
//!   per set must make the filter true, an empty set discards, errors fail closed.
//! - [`index`]: the [`SubscriptionIndex`], which finds the subscriptions an event can match
//!   from the values its filter pins (`event.payload.user.login == parameters.author`) instead
//!   of evaluating every subscription's filter.
//!
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

mod allow_list;
mod analysis;
pub mod delivery;
mod error;
pub mod filter;
pub mod index;
pub mod signature;

pub use allow_list::{AllowLists, allow_value};
pub use analysis::Pin;
pub use delivery::{Headers, Inbound, delivery_id, safe_headers};
pub use error::{Error, Result};
pub use filter::{Event, Filter, MAX_COMBINATIONS};
pub use index::SubscriptionIndex;
pub use signature::{BearerTokens, Scheme};
