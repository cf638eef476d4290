//! What a task record carries besides its fields: its [`Journal`] (the log as far as it is in
//! memory, with what a turn has not written yet) and what the store holds of it ([`Stored`]).
//! Kept and written by `records`.

use std::collections::HashMap;

use agentmesh_model::event::Event;
use agentmesh_store::QueueKey;

/// A task's log as far as it is in memory, with what a turn has not written yet.
#[derive(Debug, Default)]
pub struct Journal {
    /// Numbered events, in order: the log as far as the LLM's view reaches once `complete`
    /// (see [`Records::log_view`](crate::records::Records::log_view)), otherwise only those logged since the record was read.
    /// The last `pending` are not written yet.
    pub(crate) log: Vec<Event>,
    /// `log` is all of the log the view reaches ([`Records::log_view`](crate::records::Records::log_view)).
    pub(crate) complete: bool,
    /// How many events at the end of `log` are not written yet.
    pub(crate) pending: usize,
    /// The queue entry of the input the turn is processing, held (still queued) until the
    /// input is in the log: writes before that, e.g. ahead of a guardrail step that calls out,
    /// leave it queued, so a host that goes down then runs it again instead of losing it.
    pub(crate) held: Option<QueueKey>,
    /// The queue entry the next write removes, with the events that log its input.
    pub(crate) take: Option<QueueKey>,
    /// The written part of `log`, in bytes as stored.
    pub(crate) log_bytes: usize,
    /// The record as last written, in bytes (0: not known).
    pub(crate) record_bytes: usize,
    /// `log` as chat messages, kept up to date as it grows.
    pub(crate) conversation: agentmesh_llm::Conversation,
}

/// A copy of a record (what readers get) is a snapshot of the task: it carries no journal, so
/// reading a task never copies its log.
impl Clone for Journal {
    fn clone(&self) -> Journal {
        Journal::default()
    }
}

impl Journal {
    /// The journal of a task with no log yet: what it logs is its whole log.
    pub(crate) fn new_task() -> Journal {
        Journal {
            complete: true,
            ..Journal::default()
        }
    }

    /// Holds queue entry `key`, the input the turn processes, until [`Journal::take_held`].
    pub(crate) fn hold(&mut self, key: QueueKey) {
        self.held = Some(key);
    }

    /// The held input is in the log (or done with): the next write removes its queue entry,
    /// in the same write as the events logged with it.
    pub(crate) fn take_held(&mut self) {
        if let Some(key) = self.held.take() {
            self.take = Some(key);
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.pending == 0 && self.take.is_none()
    }

    pub(crate) fn unwritten(&self) -> &[Event] {
        &self.log[self.log.len() - self.pending..]
    }

    /// The log as far as the view reaches, written and pending, after [`Records::log_view`](crate::records::Records::log_view).
    pub(crate) fn view(&self) -> &[Event] {
        &self.log
    }

    /// The view as chat messages, with their token estimate, after [`Records::log_view`](crate::records::Records::log_view); give them back with
    /// [`Journal::restore_messages`] once the request is done.
    pub(crate) fn messages(&mut self) -> (Vec<agentmesh_llm::ChatMessage>, u64) {
        self.conversation.messages(&self.log)
    }

    /// The token estimate of the view as chat messages, kept as the log grows (reading it
    /// converts only the events logged since it was last read).
    pub(crate) fn prompt_estimate(&mut self) -> u64 {
        let (messages, tokens) = self.messages();
        self.restore_messages(messages);
        tokens
    }

    /// Takes back what [`Journal::messages`] returned.
    pub(crate) fn restore_messages(&mut self, messages: Vec<agentmesh_llm::ChatMessage>) {
        self.conversation.restore(messages);
    }
}

/// How much of a record's growing fields its stored parts hold (the rest is new since the
/// last write).
#[derive(Debug, Clone, Default)]
pub(crate) struct Stored {
    /// The number of parts.
    pub(crate) parts: u64,
    /// Their bytes as stored.
    pub(crate) bytes: usize,
    pub(crate) history: usize,
    pub(crate) inputs: usize,
    pub(crate) outputs: usize,
    pub(crate) invocations: usize,
    /// Per function: its calls, and its child task ids.
    pub(crate) calls: HashMap<String, (usize, usize)>,
}
