//! Task records between the store and a turn: the cache of idle tasks' records, the
//! journal of what a turn has done but not yet written, and each task's queue as far as this
//! host knows it without asking the store (`known.rs`).
//!
//! A turn writes its record, its events and the taking of its input in one write at
//! the points where it reaches outside the process — before a remote LLM call, a tool
//! runtime other than `cel`, an `invoke` or `wasm` step, a host tool, a `review()` — and
//! when it ends. Between those points events collect in the record's [`Journal`], already
//! numbered, so the turn's own view of the log is complete. A turn that never leaves the
//! process (a scripted model and `cel` tools) is one write; a crash before its first write
//! leaves the input queued and the turn runs again from the start, which is safe because
//! nothing outside saw it.
//!
//! A record is stored as its fixed fields (the record's JSON) and parts: what only grows
//! (`history`, `inputs`, `outputs`, the per-call statistics in `capabilities`,
//! `invocations`, the values of the allow lists) goes into a [`Part`] per write, holding what
//! that write added, so a write costs what changed, not the task's length. [`Stored`] remembers how much of each the
//! stored parts hold; reading a record joins its parts back in.
//!
//! The cache holds the records of tasks between turns, exactly as written: a turn takes its
//! record out ([`Records::checkout`]) and puts it back once everything is written
//! ([`Records::checkin`]); every other write removes the entry. Readers that miss read the
//! store, which always has the last written record. It is bounded by bytes (as stored): a
//! record keeps its log only while that is small, a big record is not kept, and past the
//! total arbitrary entries go.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use agentmesh_model::event::{Event, EventKind, EventSource};
use agentmesh_store::{Parts, QueueKey, RecordWrite};
use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use agentmesh_secrets::SharedSecrets;
use agentmesh_store::{Backend, Typed};

use crate::journal::{Journal, Stored};
use crate::known::{KnownQueues, Next};
use crate::task::{CapStats, Status, TaskRecord, allow_list};
use crate::{EngineError, QueuedInput, Result, lock};

/// The most the cache holds, in bytes as stored; past it, arbitrary entries are dropped (and
/// read from the store when next needed).
const CACHE_BYTES: usize = 64 << 20;

/// A record bigger than this (with its parts, and its log if kept) is not cached, and is
/// read from the store at its task's next turn.
const CACHED_ENTRY_BYTES: usize = 16 << 20;

/// A cached record keeps its task's log (as far as the LLM's view reaches: all of it before
/// a condensation, the prompt and what follows the forgotten range after) up to this many
/// bytes; a longer one is read from the store at the next turn, and converted again (~60 ms
/// per turn at 4 MiB here). A task with condensation configured stays far below it.
const CACHED_LOG_BYTES: usize = 4 << 20;

/// The `seq` of the system prompt's event among `events`, if it is there.
fn prompt_seq(events: &[Event]) -> Option<u64> {
    events
        .iter()
        .find(|e| matches!(e.kind, EventKind::SystemPromptEvent { .. }))
        .map(|e| e.seq)
}

/// Drops from a journal's log, all of it written, what the LLM's view no longer reaches once
/// the log is condensed up to `condensed_to`: the events after the system prompt
/// (`prompt_seq`) up to there. Returns the bytes of what is left (as JSON, about as stored),
/// or `None` when there was nothing to drop.
fn trim(journal: &mut Journal, prompt_seq: u64, condensed_to: u64) -> Option<usize> {
    let dropped = |e: &Event| e.seq <= condensed_to && e.seq != prompt_seq;
    let first_kept = usize::from(journal.log.first().is_some_and(|e| e.seq == prompt_seq));
    if journal.pending > 0 || !journal.log.get(first_kept).is_some_and(dropped) {
        return None;
    }
    journal.log.retain(|e| !dropped(e));
    journal.conversation.reset();
    Some(
        journal
            .log
            .iter()
            .map(|e| serde_json::to_vec(e).map_or(0, |v| v.len()))
            .sum(),
    )
}

impl TaskRecord {
    /// What the store holds once everything the record holds is written, in `parts` parts
    /// of `bytes`.
    fn stored_as(&self, parts: u64, bytes: usize) -> Stored {
        let mut stored = Stored::default();
        self.advance_stored(&mut stored, parts, bytes);
        stored
    }

    /// `stored` advanced to everything the record holds, in `parts` parts of `bytes`.
    fn advance_stored(&self, stored: &mut Stored, parts: u64, bytes: usize) {
        stored.parts = parts;
        stored.bytes = bytes;
        stored.history = self.history.len();
        stored.inputs = self.inputs.len();
        stored.outputs = self.outputs.len();
        stored.invocations = self.invocations.len();
        for (name, stats) in &self.capabilities {
            let counts = call_counts(stats);
            match stored.calls.get_mut(name) {
                Some(s) => *s = counts,
                None => {
                    stored.calls.insert(name.clone(), counts);
                }
            }
        }
    }
}

/// A function's calls and child task ids so far.
fn call_counts(stats: &CapStats) -> (usize, usize) {
    (
        stats.timestamps.len(),
        stats.task_ids.as_ref().map_or(0, VecDeque::len),
    )
}

/// What one write added to a record's growing fields, as read back.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct Part {
    history: Vec<String>,
    inputs: Vec<Value>,
    outputs: Vec<Value>,
    invocations: Vec<String>,
    /// Each function's new calls, newest first (as in its statistics), with their counts.
    calls: IndexMap<String, CapStats>,
    /// Allow-list values added: (tool, parameter, value).
    allow: Vec<(String, String, String)>,
}

/// What a write adds to a record's growing fields: [`Part`] as written, borrowed from the
/// record.
#[derive(Serialize)]
struct NewPart<'a> {
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    history: &'a [String],
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    inputs: &'a [Value],
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    outputs: &'a [Value],
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    invocations: &'a [String],
    #[serde(skip_serializing_if = "Vec::is_empty", serialize_with = "as_map")]
    calls: Vec<(&'a str, NewCalls<'a>)>,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    allow: &'a [(String, String, String)],
}

/// A function's calls since the last write: the newest entries of its [`CapStats`] lists.
#[derive(Serialize)]
struct NewCalls<'a> {
    count_successful: usize,
    count_errored: usize,
    count_restricted: usize,
    timestamps: Front<'a, String>,
    inputs: Front<'a, Value>,
    outputs: Front<'a, Value>,
    successful: Front<'a, bool>,
    errored: Front<'a, bool>,
    restricted: Front<'a, bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    task_ids: Option<Front<'a, String>>,
}

/// The first `n` items of a list (or all of them), serialized as a sequence.
struct Front<'a, T>(&'a VecDeque<T>, usize);

impl<T: Serialize> Serialize for Front<'_, T> {
    fn serialize<S: serde::Serializer>(
        &self,
        serializer: S,
    ) -> std::result::Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.iter().take(self.1))
    }
}

fn as_map<S: serde::Serializer>(
    calls: &[(&str, NewCalls<'_>)],
    serializer: S,
) -> std::result::Result<S::Ok, S::Error> {
    serializer.collect_map(calls.iter().map(|(k, v)| (k, v)))
}

/// The end of `list` past the first `stored` items.
fn tail<T>(list: &[T], stored: usize) -> &[T] {
    &list[stored.min(list.len())..]
}

impl TaskRecord {
    /// What the record's growing fields gained since its last write, if anything.
    fn new_part(&self) -> Option<NewPart<'_>> {
        let stored = &self.stored;
        let mut calls = Vec::new();
        for (name, stats) in &self.capabilities {
            let (now, ids_now) = call_counts(stats);
            let (before, ids_before) = stored.calls.get(name).copied().unwrap_or_default();
            let n = now.saturating_sub(before);
            if n == 0 {
                continue;
            }
            let count = |flags: &VecDeque<bool>| flags.iter().take(n).filter(|f| **f).count();
            let ids = ids_now.saturating_sub(ids_before);
            calls.push((
                name.as_str(),
                NewCalls {
                    count_successful: count(&stats.successful),
                    count_errored: count(&stats.errored),
                    count_restricted: count(&stats.restricted),
                    timestamps: Front(&stats.timestamps, n),
                    inputs: Front(&stats.inputs, n),
                    outputs: Front(&stats.outputs, n),
                    successful: Front(&stats.successful, n),
                    errored: Front(&stats.errored, n),
                    restricted: Front(&stats.restricted, n),
                    task_ids: (ids > 0)
                        .then(|| stats.task_ids.as_ref().map(|v| Front(v, ids)))
                        .flatten(),
                },
            ));
        }
        let part = NewPart {
            history: tail(&self.history, stored.history),
            inputs: tail(&self.inputs, stored.inputs),
            outputs: tail(&self.outputs, stored.outputs),
            invocations: tail(&self.invocations, stored.invocations),
            calls,
            allow: &self.allow_added,
        };
        let empty = part.history.is_empty()
            && part.inputs.is_empty()
            && part.outputs.is_empty()
            && part.invocations.is_empty()
            && part.calls.is_empty()
            && part.allow.is_empty();
        (!empty).then_some(part)
    }

    /// A record as read from the store: its JSON joined with its parts.
    pub(crate) fn from_stored(mut record: TaskRecord, parts: Parts<Part>) -> TaskRecord {
        let count = parts.parts.len() as u64;
        if count == 0 {
            // Nothing stored in parts: a record written before parts existed keeps its growing
            // fields in its JSON, and its next write moves them into its first part.
            record.stored = Stored::default();
            record.allow_added = record
                .allow_lists
                .iter()
                .flat_map(|(tool, lists)| {
                    lists.iter().flat_map(move |(param, values)| {
                        values
                            .iter()
                            .map(move |v| (tool.clone(), param.clone(), v.clone()))
                    })
                })
                .collect();
        } else {
            // A record with parts holds no statistics in its JSON. Each part lists its calls
            // newest first; parts are oldest first: each call goes to the front, oldest first.
            for part in parts.parts {
                record.join(part);
            }
            record.stored = record.stored_as(count, parts.bytes);
        }
        // Sealed lists exist even when empty (a binding that did not evaluate).
        for (tool, names) in &record.sealed {
            for name in names {
                allow_list(&mut record.allow_lists, tool, name);
            }
        }
        record
    }

    /// Adds what one stored part holds to the record's growing fields.
    fn join(&mut self, part: Part) {
        self.history.extend(part.history);
        self.inputs.extend(part.inputs);
        self.outputs.extend(part.outputs);
        self.invocations.extend(part.invocations);
        for (tool, param, value) in part.allow {
            allow_list(&mut self.allow_lists, &tool, &param).insert(value);
        }
        for (name, new) in part.calls {
            let stats = self.capabilities.entry(name).or_default();
            stats.count_successful += new.count_successful;
            stats.count_errored += new.count_errored;
            stats.count_restricted += new.count_restricted;
            prepend(&mut stats.timestamps, new.timestamps);
            prepend(&mut stats.inputs, new.inputs);
            prepend(&mut stats.outputs, new.outputs);
            prepend(&mut stats.successful, new.successful);
            prepend(&mut stats.errored, new.errored);
            prepend(&mut stats.restricted, new.restricted);
            if let Some(ids) = new.task_ids {
                prepend(stats.task_ids.get_or_insert_with(VecDeque::new), ids);
            }
        }
    }
}

/// Puts `newer` (newest first) in front of `list` (newest first).
fn prepend<T>(list: &mut VecDeque<T>, newer: VecDeque<T>) {
    for item in newer.into_iter().rev() {
        list.push_front(item);
    }
}

/// Task records between the store and the turns: reads (through the cache), the journal
/// and writes. One per engine.
pub(crate) struct Records {
    store: Arc<dyn Backend>,
    /// Records of tasks between turns.
    cache: Mutex<Cached>,
    /// The secrets of the plan in force, scrubbed from every event logged.
    secrets: SharedSecrets,
    /// Tasks' queues as this host knows them: each write tells whether it left the queue
    /// empty.
    queues: KnownQueues,
}

/// Records of tasks between turns, by task id, with their size; and the total size.
#[derive(Default)]
struct Cached {
    entries: HashMap<String, (Arc<TaskRecord>, usize)>,
    bytes: usize,
}

impl Cached {
    fn remove(&mut self, id: &str) -> Option<Arc<TaskRecord>> {
        let (record, bytes) = self.entries.remove(id)?;
        self.bytes -= bytes;
        Some(record)
    }
}

impl Records {
    /// The records of `store`, events scrubbed of the secrets `secrets` holds at the time.
    pub(crate) fn new(store: Arc<dyn Backend>, secrets: SharedSecrets) -> Records {
        Records {
            store,
            cache: Mutex::new(Cached::default()),
            secrets,
            queues: KnownQueues::default(),
        }
    }

    /// Task `id`'s record, read-only: from the cache, or from the store.
    pub(crate) fn peek<T>(&self, id: &str, f: impl FnOnce(&TaskRecord) -> T) -> Result<T> {
        let cached = lock(&self.cache)
            .entries
            .get(id)
            .map(|(record, _)| Arc::clone(record));
        match cached {
            Some(record) => Ok(f(&record)),
            None => Ok(f(&self.stored_record(id)?)),
        }
    }

    /// Drops task `id`'s cached record and what is known of its queue (another host wrote
    /// it): its next reader reads the store.
    pub(crate) fn forget(&self, id: &str) {
        lock(&self.cache).remove(id);
        self.queues.forget(id);
    }

    /// Drops every cached record and what is known of every queue.
    pub(crate) fn forget_all(&self) {
        let mut cache = lock(&self.cache);
        cache.entries.clear();
        cache.bytes = 0;
        drop(cache);
        self.queues.forget_all();
    }

    /// What task `id`'s runner does next, as far as this host knows its queue (see
    /// [`KnownQueues`]): [`Next::Ask`] when the store must be read.
    pub(crate) fn next_input(&self, id: &str) -> Next {
        self.queues.next(id)
    }

    /// Whether task `id`'s queue is known exactly here (see [`KnownQueues`]): when it is, its
    /// runner need not read the store for it.
    pub(crate) fn queue_known(&self, id: &str) -> bool {
        self.queues.is_known(id)
    }

    /// The door queued `input` as `key` for task `id` (see [`KnownQueues::queued`]).
    pub(crate) fn queued(&self, id: &str, key: QueueKey, input: QueuedInput) {
        self.queues.queued(id, key, input);
    }

    /// Task `id`'s queue may have changed other than through this host's door (input from
    /// another host, a cleared queue, a failed turn): the runner reads it from the store.
    pub(crate) fn forget_queue(&self, id: &str) {
        self.queues.forget(id);
    }

    /// Task `id`'s record as the store has it.
    pub(crate) fn stored_record(&self, id: &str) -> Result<TaskRecord> {
        match self.store.task_with_parts(id)? {
            Some((record, parts)) => Ok(TaskRecord::from_stored(record, parts)),
            None => Err(EngineError::NotFound(format!("task `{id}`"))),
        }
    }

    /// Every task's record as the store has it, in id order.
    pub(crate) fn stored_records(&self) -> Result<Vec<TaskRecord>> {
        stored_tasks(self.store.as_ref())
    }

    /// Task `id`'s record to change, taken out of the cache. Hold the task's lock until
    /// [`Records::checkin`].
    pub(crate) fn checkout(&self, id: &str) -> Result<TaskRecord> {
        let cached = lock(&self.cache).remove(id);
        match cached {
            Some(record) => Ok(Arc::unwrap_or_clone(record)),
            None => self.stored_record(id),
        }
    }

    /// Puts back a record taken by [`Records::checkout`], once all of it is written.
    pub(crate) fn checkin(&self, mut record: TaskRecord) -> Arc<TaskRecord> {
        let journal = &mut record.journal;
        if !journal.is_empty() {
            // Unwritten changes must not be served as the task's state.
            return Arc::new(record);
        }
        if journal.complete
            && record.condensed_to > 0
            && let Some(bytes) = trim(journal, record.prompt_seq, record.condensed_to)
        {
            journal.log_bytes = bytes;
        }
        if !journal.complete || journal.log_bytes > CACHED_LOG_BYTES {
            journal.log = Vec::new();
            journal.complete = false;
            journal.log_bytes = 0;
            journal.conversation.reset();
        }
        // The log is held twice: as events and as chat messages.
        let bytes = journal.record_bytes + 2 * journal.log_bytes;
        let record = Arc::new(record);
        // A record read but never written here has no known size: it is not kept.
        if record.journal.record_bytes == 0 || bytes > CACHED_ENTRY_BYTES {
            return record;
        }
        let mut cache = lock(&self.cache);
        cache.remove(&record.id);
        while cache.bytes + bytes > CACHE_BYTES {
            let Some(evict) = cache.entries.keys().next().cloned() else {
                break;
            };
            cache.remove(&evict);
        }
        cache.bytes += bytes;
        cache
            .entries
            .insert(record.id.clone(), (Arc::clone(&record), bytes));
        record
    }

    /// Adds `events` to the record's journal, numbered, with every secret replaced (the one
    /// door to the log, so to the API, SSE and the LLM's conversation); they are written with
    /// the record at the next [`Records::save`] or [`Records::write_ahead`].
    pub(crate) fn log(
        &self,
        record: &mut TaskRecord,
        mut events: Vec<(EventSource, EventKind)>,
    ) -> Result<()> {
        let secrets = self.secrets.get();
        if !secrets.is_empty() {
            for (_, kind) in &mut events {
                crate::secrets::scrub_event(&secrets, kind);
            }
        }
        let journal = &mut record.journal;
        // The log in memory ends at the task's last event (a journal that holds none, or was
        // read from the store, asks the store).
        let next = match journal.log.last() {
            Some(last) => last.seq + 1,
            None if journal.complete => 1,
            None => self.store.last_event_seq(&record.id)? + 1,
        };
        let n = events.len();
        journal.log.extend(self.store.stamp(next, events)?);
        journal.pending += n;
        if let Some(seq) = prompt_seq(&journal.log[journal.log.len() - n..]) {
            record.prompt_seq = seq;
        }
        Ok(())
    }

    /// Makes the journal hold the task's log as far as the LLM's view reaches (written and
    /// pending), reading the written part from the store unless it is there already; read it
    /// with [`Journal::view`]. That is the whole log until a condensation; after one, the
    /// system prompt and the events past the last forgotten range (all the view shows), so a
    /// condensed task's turn reads the same whatever its age.
    pub(crate) fn log_view(&self, record: &mut TaskRecord) -> Result<()> {
        if record.journal.complete {
            return Ok(());
        }
        let store = &self.store;
        let (mut log, mut bytes) = if record.condensed_to > 0 {
            let (mut log, bytes) = if (1..=record.condensed_to).contains(&record.prompt_seq) {
                store.events_between(&record.id, record.prompt_seq, record.prompt_seq)?
            } else {
                (Vec::new(), 0)
            };
            let (tail, tail_bytes) =
                store.events_between(&record.id, record.condensed_to + 1, u64::MAX)?;
            log.extend(tail);
            (log, bytes + tail_bytes)
        } else {
            let (log, bytes) = store.events_between(&record.id, 1, u64::MAX)?;
            // Records written before these fields existed learn them here.
            if record.prompt_seq == 0
                && let Some(seq) = prompt_seq(&log)
            {
                record.prompt_seq = seq;
            }
            record.condensed_to = forgotten_to(&log);
            (log, bytes)
        };
        let journal = &mut record.journal;
        log.extend_from_slice(journal.unwritten());
        journal.log = log;
        journal.complete = true;
        journal.conversation.reset();
        if record.condensed_to > 0 {
            bytes = trim(journal, record.prompt_seq, record.condensed_to).unwrap_or(bytes);
        }
        record.journal.log_bytes = bytes;
        Ok(())
    }

    /// Writes the record with its journal and `events` in one write.
    pub(crate) fn save(
        &self,
        record: &mut TaskRecord,
        events: Vec<(EventSource, EventKind)>,
    ) -> Result<()> {
        self.log(record, events)?;
        self.write_journal(record)
    }

    /// Writes the journal (with the record) if it holds anything: call before the turn
    /// reaches outside the process.
    pub(crate) fn write_ahead(&self, record: &mut TaskRecord) -> Result<()> {
        if record.journal.is_empty() {
            return Ok(());
        }
        self.write_journal(record)
    }

    fn write_journal(&self, record: &mut TaskRecord) -> Result<()> {
        lock(&self.cache).remove(&record.id);
        let new_part = record.new_part();
        let parts = record.stored.parts + u64::from(new_part.is_some());
        let journal = &record.journal;
        let ticket = self.queues.ticket(&record.id);
        let written = self.store.write_record_buffered(
            &record.id,
            RecordWrite {
                head: &*record,
                parts,
                new_part: new_part.as_ref(),
                active: matches!(record.status(), Status::Running | Status::Waiting),
            },
            journal.unwritten(),
            journal.take.as_ref(),
        )?;
        let Some(written) = written else {
            return Err(EngineError::Conflict(format!(
                "task `{}`: its input was taken by another writer",
                record.id
            )));
        };
        if new_part.is_some() {
            let mut stored = std::mem::take(&mut record.stored);
            let bytes = stored.bytes + written.part_bytes;
            record.advance_stored(&mut stored, parts, bytes);
            record.stored = stored;
            record.allow_added.clear();
        }
        let taken = record.journal.take.take();
        self.queues
            .written(&record.id, ticket, taken, written.queue_empty);
        let journal = &mut record.journal;
        journal.pending = 0;
        journal.record_bytes = written.record_bytes + record.stored.bytes;
        journal.log_bytes += written.event_bytes;
        Ok(())
    }
}

/// The end of the last range forgotten in `history` (0: none).
pub(crate) fn forgotten_to(history: &[Event]) -> u64 {
    history
        .iter()
        .filter_map(|e| match e.kind {
            EventKind::Condensation { forgotten_to, .. } => Some(forgotten_to),
            _ => None,
        })
        .max()
        .unwrap_or(0)
}

/// Every task record in `store`, as a host reads them: for a command that reads a store no
/// host serves (`agentmesh tasks --data`).
pub fn stored_tasks(store: &dyn Backend) -> Result<Vec<TaskRecord>> {
    Ok(store
        .tasks_with_parts()?
        .into_iter()
        .map(|(record, parts)| TaskRecord::from_stored(record, parts))
        .collect())
}
