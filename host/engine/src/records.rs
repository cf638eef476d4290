//! Task records between the store and a turn: the cache of idle tasks' records and the
//! journal of what a turn has done but not yet written.
//!
//! A turn writes its record, its events and the taking of its input in one transaction at
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
//! store, which always has the last written record.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use agentmesh_store::QueueKey;
use agentmesh_store::event::{Event, EventKind, EventSource};

use crate::task::TaskRecord;
use crate::{Engine, EngineError, Result, lock};

/// How many idle tasks' records the cache keeps; past it, an arbitrary one is dropped (and
/// read from the store when next needed).
const CACHED_RECORDS: usize = 4096;

/// A cached record keeps its task's log in memory up to this many events (a longer log is
/// read from the store at the next turn).
const CACHED_LOG: usize = 512;

/// A task's log as far as it is in memory, with what a turn has not written yet.
#[derive(Debug, Clone, Default)]
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
    /// The sequence number of the next event; `None`: ask the store.
    next_seq: Option<u64>,
}

impl Journal {
    /// The journal of a task with no log yet: what it logs is its whole log.
    pub(crate) fn new_task() -> Journal {
        Journal {
            complete: true,
            next_seq: Some(1),
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
}

/// Records of tasks between turns, by task id.
#[derive(Default)]
pub(crate) struct RecordCache(Mutex<HashMap<String, Arc<TaskRecord>>>);

impl Engine {
    /// Task `id`'s record, read-only: from the cache, or from the store.
    pub(crate) fn peek<T>(&self, id: &str, f: impl FnOnce(&TaskRecord) -> T) -> Result<T> {
        let cached = lock(&self.inner.records.0).get(id).cloned();
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
        if journal.is_empty() && (!journal.complete || journal.log.len() > CACHED_LOG) {
            journal.log = Vec::new();
            journal.complete = false;
        }
        let record = Arc::new(record);
        if !record.journal.is_empty() {
            // Unwritten changes must not be served as the task's state.
            return record;
        }
        let mut cache = lock(&self.inner.records.0);
        if cache.len() >= CACHED_RECORDS
            && let Some(evict) = cache.keys().next().cloned()
        {
            cache.remove(&evict);
        }
        cache.insert(record.id.clone(), Arc::clone(&record));
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
        let next = match journal.next_seq {
            Some(next) => next,
            None => self.inner.store.last_seq(&record.id)? + 1,
        };
        let n = events.len();
        journal.log.extend(self.inner.store.stamp(next, events));
        journal.pending += n;
        journal.next_seq = Some(next + n as u64);
        Ok(())
    }

    /// Makes the journal hold the task's whole log (written and pending), reading the written
    /// part from the store unless it is there already; read it with [`Journal::view`].
    pub(crate) fn log_view(&self, record: &mut TaskRecord) -> Result<()> {
        let journal = &mut record.journal;
        if !journal.complete {
            let mut log = self.inner.store.events(&record.id, 0)?;
            log.extend_from_slice(journal.unwritten());
            journal.log = log;
            journal.complete = true;
        }
        Ok(())
    }

    /// Writes the record with its journal and `events` in one transaction.
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
        if !written {
            return Err(EngineError::Conflict(format!(
                "task `{}`: its input was taken by another writer",
                record.id
            )));
        }
        let journal = &mut record.journal;
        journal.pending = 0;
        journal.take = None;
        // Ask the store again next time: a record read elsewhere may have written since.
        journal.next_seq = None;
        Ok(())
    }
}
