//! Task records between the store and a turn: the cache of idle tasks' records and the
//! journal of what a turn has done but not yet written.
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
//! The cache holds the records of tasks between turns, exactly as written: a turn takes its
//! record out ([`Engine::checkout`]) and puts it back once everything is written
//! ([`Engine::checkin`]); every other write removes the entry. Readers that miss read the
//! store, which always has the last written record. It is bounded by bytes (as stored): a
//! record keeps its log only while that is small, a big record is not kept, and past the
//! total arbitrary entries go.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use agentmesh_store::QueueKey;
use agentmesh_store::event::{Event, EventKind, EventSource};

use crate::task::TaskRecord;
use crate::{Engine, EngineError, Result, lock};

/// The most the cache holds, in bytes as stored; past it, arbitrary entries are dropped (and
/// read from the store when next needed).
const CACHE_BYTES: usize = 64 << 20;

/// A record bigger than this (with its log, if kept) is not cached.
const CACHED_ENTRY_BYTES: usize = 256 << 10;

/// A cached record keeps its task's log up to this many bytes (a longer log is read from the
/// store at the next turn).
const CACHED_LOG_BYTES: usize = 64 << 10;

/// A task's log as far as it is in memory, with what a turn has not written yet.
#[derive(Debug, Default)]
pub struct Journal {
    /// Numbered events, in order: the whole log once `complete`, otherwise only those logged
    /// since the record was read. The last `pending` are not written yet.
    log: Vec<Event>,
    /// `log` is the whole log ([`Engine::log_view`]).
    complete: bool,
    /// How many events at the end of `log` are not written yet.
    pending: usize,
    /// The queue entry the turn is processing, removed by the next write.
    take: Option<QueueKey>,
    /// The written part of `log`, in bytes as stored.
    log_bytes: usize,
    /// The record as last written, in bytes (0: not known).
    record_bytes: usize,
    /// `log` as chat messages, kept up to date as it grows.
    conversation: agentmesh_llm::Conversation,
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

    /// Makes the next write also remove queue entry `key` (the input being processed).
    pub(crate) fn take(&mut self, key: QueueKey) {
        self.take = Some(key);
    }

    fn is_empty(&self) -> bool {
        self.pending == 0 && self.take.is_none()
    }

    fn unwritten(&self) -> &[Event] {
        &self.log[self.log.len() - self.pending..]
    }

    /// The whole log, written and pending, after [`Engine::log_view`].
    pub(crate) fn view(&self) -> &[Event] {
        &self.log
    }

    /// The whole log as chat messages, after [`Engine::log_view`]; give them back with
    /// [`Journal::restore_messages`] once the request is done.
    pub(crate) fn messages(&mut self) -> Vec<agentmesh_llm::ChatMessage> {
        self.conversation.messages(&self.log)
    }

    /// Takes back what [`Journal::messages`] returned.
    pub(crate) fn restore_messages(&mut self, messages: Vec<agentmesh_llm::ChatMessage>) {
        self.conversation.restore(messages);
    }
}

/// Records of tasks between turns, by task id, with their size; and the total size.
#[derive(Default)]
pub(crate) struct RecordCache(Mutex<Cached>);

#[derive(Default)]
pub(crate) struct Cached {
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

impl Engine {
    /// Task `id`'s record, read-only: from the cache, or from the store.
    pub(crate) fn peek<T>(&self, id: &str, f: impl FnOnce(&TaskRecord) -> T) -> Result<T> {
        let cached = lock(&self.inner.records.0)
            .entries
            .get(id)
            .map(|(record, _)| Arc::clone(record));
        match cached {
            Some(record) => Ok(f(&record)),
            None => Ok(f(&self.stored_record(id)?)),
        }
    }

    /// Task `id`'s record as the store has it.
    pub(crate) fn stored_record(&self, id: &str) -> Result<TaskRecord> {
        self.inner
            .store
            .task(id)?
            .ok_or_else(|| EngineError::NotFound(format!("task `{id}`")))
    }

    /// Task `id`'s record to change, taken out of the cache. Hold the task's lock until
    /// [`Engine::checkin`].
    pub(crate) fn checkout(&self, id: &str) -> Result<TaskRecord> {
        let cached = lock(&self.inner.records.0).remove(id);
        match cached {
            Some(record) => Ok(Arc::unwrap_or_clone(record)),
            None => self.stored_record(id),
        }
    }

    /// Puts back a record taken by [`Engine::checkout`], once all of it is written.
    pub(crate) fn checkin(&self, mut record: TaskRecord) -> Arc<TaskRecord> {
        let journal = &mut record.journal;
        if !journal.is_empty() {
            // Unwritten changes must not be served as the task's state.
            return Arc::new(record);
        }
        if !journal.complete || journal.log_bytes > CACHED_LOG_BYTES {
            journal.log = Vec::new();
            journal.complete = false;
            journal.log_bytes = 0;
            journal.conversation.reset();
        }
        let bytes = journal.record_bytes + journal.log_bytes;
        let record = Arc::new(record);
        // A record read but never written here has no known size: it is not kept.
        if record.journal.record_bytes == 0 || bytes > CACHED_ENTRY_BYTES {
            return record;
        }
        let mut cache = lock(&self.inner.records.0);
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

    /// Adds `events` to the record's journal, numbered; they are written with the record at
    /// the next [`Engine::save`] or [`Engine::write_ahead`].
    pub(crate) fn log(
        &self,
        record: &mut TaskRecord,
        events: Vec<(EventSource, EventKind)>,
    ) -> Result<()> {
        let journal = &mut record.journal;
        // The log in memory ends at the task's last event (a journal that holds none, or was
        // read from the store, asks the store).
        let next = match journal.log.last() {
            Some(last) => last.seq + 1,
            None if journal.complete => 1,
            None => self.inner.store.last_seq(&record.id)? + 1,
        };
        let n = events.len();
        journal.log.extend(self.inner.store.stamp(next, events));
        journal.pending += n;
        Ok(())
    }

    /// Makes the journal hold the task's whole log (written and pending), reading the written
    /// part from the store unless it is there already; read it with [`Journal::view`].
    pub(crate) fn log_view(&self, record: &mut TaskRecord) -> Result<()> {
        let journal = &mut record.journal;
        if !journal.complete {
            let (mut log, bytes) = self.inner.store.events_sized(&record.id, 0)?;
            log.extend_from_slice(journal.unwritten());
            journal.log = log;
            journal.log_bytes = bytes;
            journal.complete = true;
            journal.conversation.reset();
        }
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
        lock(&self.inner.records.0).remove(&record.id);
        let journal = &record.journal;
        let written = self.inner.store.write(
            &record.id,
            &*record,
            journal.unwritten(),
            journal.take.as_ref(),
        )?;
        let Some(written) = written else {
            return Err(EngineError::Conflict(format!(
                "task `{}`: its input was taken by another writer",
                record.id
            )));
        };
        let journal = &mut record.journal;
        journal.pending = 0;
        journal.take = None;
        journal.record_bytes = written.record_bytes;
        journal.log_bytes += written.event_bytes;
        Ok(())
    }
}
