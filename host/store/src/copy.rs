//! Moving a sled store into a PostgreSQL database (`agentmesh store copy --from DIR --to URL`),
//! so that a host can grow from one machine without losing state: task records with their
//! parts and event logs, queued inputs in their order, remembered delivery ids, the host's
//! records (trigger and schedule statuses, wakeups) and the plugins' key-value store. The
//! database receives it all in one transaction, or nothing.

use agentmesh_model::event::Event;

use crate::RawRecord;

/// One thing a store holds, as one backend hands it to another.
#[derive(Debug)]
pub enum Item {
    /// A task record and its whole event log.
    Task {
        /// The task id.
        id: String,
        /// The record: its head and its parts, in order.
        record: RawRecord,
        /// The log, in order.
        events: Vec<Event>,
    },
    /// A queued input (items of one task come in queue order).
    Queued {
        /// The task it is queued for.
        task_id: String,
        /// Its `queued_at`.
        queued_at: i64,
        /// The input (JSON).
        input: Vec<u8>,
    },
    /// A delivery id and the epoch ms until which it is remembered.
    Delivery {
        /// The id.
        id: String,
        /// Remembered until then.
        until: i64,
    },
    /// A host record.
    State {
        /// Its namespace.
        ns: String,
        /// Its key.
        key: String,
        /// Its value (JSON).
        value: Vec<u8>,
    },
    /// A plugin key-value entry.
    Kv {
        /// Its scope (component and task).
        scope: String,
        /// Its key.
        key: String,
        /// Its value.
        value: Vec<u8>,
    },
    /// The ids the source gave so far end below this one: the target's ids continue above.
    NextId(u64),
}

/// What a copy moved.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Copied {
    /// Task records.
    pub tasks: usize,
    /// Events of their logs.
    pub events: usize,
    /// Queued inputs.
    pub queued: usize,
    /// Remembered delivery ids.
    pub deliveries: usize,
    /// Host records.
    pub states: usize,
    /// Plugin key-value entries.
    pub kv: usize,
}

impl Copied {
    /// Counts `item`.
    pub fn count(&mut self, item: &Item) {
        match item {
            Item::Task { events, .. } => {
                self.tasks += 1;
                self.events += events.len();
            }
            Item::Queued { .. } => self.queued += 1,
            Item::Delivery { .. } => self.deliveries += 1,
            Item::State { .. } => self.states += 1,
            Item::Kv { .. } => self.kv += 1,
            Item::NextId(_) => {}
        }
    }
}

impl std::fmt::Display for Copied {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} task(s) with {} event(s), {} queued input(s), {} delivery id(s), {} host \
             record(s), {} plugin value(s)",
            self.tasks, self.events, self.queued, self.deliveries, self.states, self.kv
        )
    }
}
