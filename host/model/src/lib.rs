//! Domain types every other agentmesh crate may share, with no behaviour of their own:
//!
//! - [`allow_list`]: a task's allow lists and the stored form of their values;
//! - [`event`]: the events of a task's log (CONTRACT §4) as they are stored, served and turned
//!   into an LLM's conversation;
//! - [`delivery`]: a delivery as it arrived at a webhook endpoint, without HTTP ([`Inbound`]:
//!   raw body and [`Headers`]), its delivery id and the headers an agent may see.

pub mod allow_list;
pub mod delivery;
pub mod event;

pub use delivery::{Headers, Inbound};
