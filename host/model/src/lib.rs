//! Domain types every other agentmesh crate may share, with no behaviour of their own:
//!
//! - [`event`]: the events of a task's log (CONTRACT §4) as they are stored, served and turned
//!   into an LLM's conversation.

pub mod event;
