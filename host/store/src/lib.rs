//! The agentmesh store: everything stateful the host owns, on sled.
//!
//! - [`Store`]: task records (a record may keep what only grows in appended parts, so a write
//!   costs what changed, not the task's length), per-task append-only event logs (a `u64`
//!   sequence per task; the events of one write are one entry, keyed by the last one's
//!   number), FIFO
//!   input queues ordered by `queued_at`, and plugin key-value, in sled trees.
//!
//! A change that spans keys is all or nothing across crashes: [`Store::write`] writes a
//! task's record together with the events that changed it and, when it starts processing an
//! input, removes that queue entry, in an order [`Store::open`] can complete or undo (see
//! `head.rs`), so an input is processed exactly once across crashes ([`Store::commit`] numbers
//! the events too); the other multi-key changes are sled transactions. Input is flushed to
//! disk before it is acknowledged ([`Store::enqueue`]); concurrent flushes are grouped into one
//! fsync (`flush`, the group commit). `head` is the encoding of a record's head (its log end,
//! parts and the queue entry its write took) that makes writes crash-atomic.
//!
//! The store knows nothing of CEL, wasmtime or HTTP: task records are any serde type the
//! engine defines.
//!
//! [`backend`] states what the host needs of a store as traits, by area (task logs, queues,
//! dedupe, host state, plugin key-value, durability), each write's durability in its name
//! (`…_durably`, `…_buffered`), with bytes at the boundary so any backend can stand behind
//! `Arc<dyn Backend>`; [`Store`] implements them and its typed methods go through them.
//! [`conformance`] is the suite every backend must pass (`tests/conformance.rs` runs it for
//! sled). The engine still holds the sled [`Store`] itself.
//!
//! ```
//! # fn main() -> Result<(), agentmesh_store::StoreError> {
//! use agentmesh_model::event::{EventKind, EventSource};
//! use agentmesh_store::Store;
//! let dir = tempfile::tempdir().map_err(|e| agentmesh_store::StoreError::Io(e.to_string()))?;
//! let store = Store::open(dir.path())?;
//! let events = store.commit("t_1", &serde_json::json!({"status": "idle"}), vec![
//!     (EventSource::Environment, EventKind::PauseEvent {}),
//! ])?;
//! assert_eq!(events[0].seq, 1);
//! assert_eq!(store.events("t_1", 0)?.len(), 1);
//! # Ok(()) }
//! ```

pub mod backend;
pub mod conformance;
mod flush;
mod head;

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;
use serde::de::DeserializeOwned;
use sled::transaction::{TransactionError, Transactional};

use agentmesh_model::event::{Event, EventKind, EventSource};
use flush::GroupFlush;

pub use backend::{
    Backend, Dedupe, Durability, HostState, PluginKv, Queues, RawRecord, RawWrite, TaskLogs,
};

/// Errors of the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// sled failed (I/O, corruption).
    #[error("store: {0}")]
    Sled(#[from] sled::Error),
    /// A record could not be encoded or decoded.
    #[error("store: bad record: {0}")]
    Codec(#[from] serde_json::Error),
    /// Filesystem trouble outside sled.
    #[error("store: {0}")]
    Io(String),
    /// Two writers raced on one task's log.
    #[error("store: {0}")]
    Conflict(String),
}

impl StoreError {
    /// Whether the disk (or the file system) failed: a write that may pass later, once space
    /// is freed or permissions are fixed, unlike a bad record or a race.
    pub fn is_io(&self) -> bool {
        matches!(
            self,
            StoreError::Sled(sled::Error::Io(_)) | StoreError::Io(_)
        )
    }
}

/// The store's result.
pub type Result<T> = std::result::Result<T, StoreError>;

/// A queued input's place in its task's queue: ordered by `queued_at`, then arrival.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueKey(Vec<u8>);

/// What [`Store::write`] wrote, in bytes as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    /// The record.
    pub record_bytes: usize,
    /// The record's new part (0 for none).
    pub part_bytes: usize,
    /// The events.
    pub event_bytes: usize,
}

/// A task record for [`Store::write`]: what replaces the stored record, and the part it
/// appends.
///
/// A record may keep what only grows (lists of past calls, inputs, outputs) in parts: each
/// write appends the part that grew, so it costs what changed rather than the task's length.
/// Reading the record ([`Store::task_with_parts`]) gives the fixed part and the parts, in
/// order, for the caller to join.
#[derive(Debug)]
pub struct RecordWrite<'a, R, P> {
    /// The record without its parts.
    pub head: &'a R,
    /// How many parts the record has with this write (numbered from 1; 0 for none).
    pub parts: u64,
    /// Part number `parts`, appended by this write; `None` when the parts do not change.
    pub new_part: Option<&'a P>,
}

// Copied whatever `R` and `P` are: it holds only references (a derive would ask `R: Copy`).
impl<R, P> Clone for RecordWrite<'_, R, P> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<R, P> Copy for RecordWrite<'_, R, P> {}

impl<'a, R> RecordWrite<'a, R, ()> {
    /// A record kept whole, without parts.
    pub fn whole(record: &'a R) -> Self {
        RecordWrite {
            head: record,
            parts: 0,
            new_part: None,
        }
    }
}

/// A stored record's parts, in order, with their size as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct Parts<P> {
    /// Parts 1 to n.
    pub parts: Vec<P>,
    /// Their bytes as stored.
    pub bytes: usize,
}

/// A function told which task's log grew.
pub type AppendHook = Box<dyn Fn(&str) + Send + Sync>;

/// What [`Store::deliver`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivery {
    /// The delivery id was seen within its window: nothing was queued.
    Duplicate,
    /// Every input was queued (and is durable).
    Queued(Vec<QueueKey>),
}

/// The store.
pub struct Store {
    db: sled::Db,
    tasks: sled::Tree,
    /// Task records' appended parts, by task id and part number.
    parts: sled::Tree,
    events: sled::Tree,
    queue: sled::Tree,
    kv: sled::Tree,
    /// Delivery ids seen, with the epoch ms until which they are remembered.
    dedupe: sled::Tree,
    /// Host state outside tasks (trigger status, schedules, wakeups), by namespace and key.
    state: sled::Tree,
    flusher: GroupFlush,
    /// Called with a task id after events were appended to its log (live streaming).
    on_append: std::sync::OnceLock<AppendHook>,
    /// Writes that an acknowledgement may wait for; see [`GroupFlush`].
    writes: AtomicU64,
}

/// Separates a task id from what follows it in keys (ids never contain NUL).
const SEP: u8 = 0;

fn task_key(task_id: &str, suffix: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(task_id.len() + 1 + suffix.len());
    k.extend_from_slice(task_id.as_bytes());
    k.push(SEP);
    k.extend_from_slice(suffix);
    k
}

fn prefix(task_id: &str) -> Vec<u8> {
    task_key(task_id, &[])
}

/// Flattens sled's transaction error into ours.
fn tx_error(e: TransactionError<StoreError>) -> StoreError {
    match e {
        TransactionError::Abort(e) => e,
        TransactionError::Storage(e) => StoreError::Sled(e),
    }
}

/// Now, RFC 3339 in UTC with milliseconds.
pub fn now_rfc3339() -> String {
    thread_local! {
        /// The last millisecond formatted on this thread: a turn stamps many things in one.
        static LAST: std::cell::RefCell<(i64, String)> = const { std::cell::RefCell::new((i64::MIN, String::new())) };
    }
    let now = chrono::Utc::now();
    let ms = now.timestamp_millis();
    LAST.with_borrow_mut(|(at, text)| {
        if *at != ms {
            *at = ms;
            *text = now.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        }
        text.clone()
    })
}

/// Now, epoch milliseconds.
pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

impl Store {
    /// Opens (or creates) the store in `dir`.
    pub fn open(dir: &Path) -> Result<Store> {
        std::fs::create_dir_all(dir)
            .map_err(|e| StoreError::Io(format!("{}: {e}", dir.display())))?;
        let db = open_db(&dir.join("store"))?;
        let store = Store {
            tasks: db.open_tree("tasks")?,
            parts: db.open_tree("record_parts")?,
            events: db.open_tree("events")?,
            queue: db.open_tree("queue")?,
            kv: db.open_tree("kv")?,
            dedupe: db.open_tree("dedupe")?,
            state: db.open_tree("state")?,
            flusher: GroupFlush::default(),
            on_append: std::sync::OnceLock::new(),
            writes: AtomicU64::new(0),
            db,
        };
        store.repair()?;
        Ok(store)
    }

    /// Whether `dir` holds a store (one [`Store::open`] created), without creating one.
    pub fn exists(dir: &Path) -> bool {
        dir.join("store").is_dir()
    }

    /// Finishes or undoes writes a crash cut short (see [`head`]): removes events and parts
    /// past their task record's `log_end` and `parts`, and queue entries a record says were
    /// taken. Reads every record's head and the keys past it.
    fn repair(&self) -> Result<()> {
        let (mut orphans, mut taken) = (0usize, 0usize);
        for entry in self.tasks.iter() {
            let (id, stored) = entry?;
            let Some(head) = head::decode(&stored).0 else {
                continue;
            };
            let id = String::from_utf8_lossy(&id);
            let end = task_key(&id, &u64::MAX.to_be_bytes());
            for (tree, last) in [(&self.events, head.log_end), (&self.parts, head.parts)] {
                let start = task_key(&id, &last.saturating_add(1).to_be_bytes());
                for key in tree.range(start..=end.clone()).keys() {
                    tree.remove(key?)?;
                    orphans += 1;
                }
            }
            if let Some(key) = head.took
                && self.queue.remove(key)?.is_some()
            {
                taken += 1;
            }
        }
        if orphans + taken > 0 {
            tracing::warn!(
                entries.removed = orphans,
                inputs.removed = taken,
                "store: completed writes cut short by a crash"
            );
            self.db.flush()?;
        }
        Ok(())
    }

    /// Writes `record` as task `task_id`'s whole record (no parts) and appends `events` to
    /// its log, in one write ([`Store::write`]). Returns the events with their sequence
    /// numbers.
    pub fn commit<R: Serialize>(
        &self,
        task_id: &str,
        record: &R,
        events: Vec<(EventSource, EventKind)>,
    ) -> Result<Vec<Event>> {
        let stamped = self.stamp(self.last_seq(task_id)? + 1, events);
        self.write(task_id, RecordWrite::whole(record), &stamped, None)?;
        Ok(stamped)
    }

    /// Gives `events` their ids, a timestamp and the sequence numbers `first_seq`,
    /// `first_seq + 1`, …, ready for [`Store::write`].
    pub fn stamp(&self, first_seq: u64, events: Vec<(EventSource, EventKind)>) -> Vec<Event> {
        let timestamp = now_rfc3339();
        events
            .into_iter()
            .zip(first_seq..)
            .map(|((source, kind), seq)| Event {
                seq,
                id: format!("ev_{:016x}", self.db.generate_id().unwrap_or_default()),
                timestamp: timestamp.clone(),
                source,
                kind,
            })
            .collect()
    }

    /// Writes `record` as task `task_id`'s record (with its new part, if any), appends
    /// `events` (stamped by [`Store::stamp`], continuing the log without a gap) and, with
    /// `take`, removes that queue entry: all or nothing across crashes (see `head.rs`).
    /// Returns what was written, or `None`, writing nothing, when `take` is gone; fails,
    /// writing nothing, when the events do not continue the log (another writer appended).
    ///
    /// One writer per task at a time (the engine's task lock); writers of different tasks
    /// do not wait for each other.
    pub fn write<R: Serialize, P: Serialize>(
        &self,
        task_id: &str,
        record: RecordWrite<'_, R, P>,
        events: &[Event],
        take: Option<&QueueKey>,
    ) -> Result<Option<Written>> {
        let head = serde_json::to_vec(record.head)?;
        let part = record.new_part.map(serde_json::to_vec).transpose()?;
        let raw = RawWrite {
            head: &head,
            parts: record.parts,
            new_part: part.as_deref(),
        };
        self.write_buffered(task_id, raw, events, take)
    }

    /// Sets the function called after events are appended to a task's log (once; later calls
    /// are ignored). It runs on the committing thread: keep it short (e.g. a channel send).
    pub fn set_append_hook(&self, hook: AppendHook) {
        let _ = self.on_append.set(hook);
    }

    fn appended(&self, task_id: &str) {
        if let Some(hook) = self.on_append.get() {
            hook(task_id);
        }
    }

    /// A new unique id (monotonic, also across restarts).
    pub fn generate_id(&self) -> Result<u64> {
        Ok(self.db.generate_id()?)
    }

    /// Task `task_id`'s record, without its parts.
    pub fn task<R: DeserializeOwned>(&self, task_id: &str) -> Result<Option<R>> {
        match self.tasks.get(task_id.as_bytes())? {
            Some(bytes) => Ok(Some(serde_json::from_slice(head::decode(&bytes).1)?)),
            None => Ok(None),
        }
    }

    /// Task `task_id`'s record and its parts, in order (see [`RecordWrite`]).
    pub fn task_with_parts<R: DeserializeOwned, P: DeserializeOwned>(
        &self,
        task_id: &str,
    ) -> Result<Option<(R, Parts<P>)>> {
        match self.tasks.get(task_id.as_bytes())? {
            Some(stored) => Ok(Some(self.decode_task(task_id, &stored)?)),
            None => Ok(None),
        }
    }

    /// Every task record with its parts, in id order. Records that do not decode are skipped
    /// with a warning rather than failing the listing.
    pub fn tasks_with_parts<R: DeserializeOwned, P: DeserializeOwned>(
        &self,
    ) -> Result<Vec<(R, Parts<P>)>> {
        let mut out = Vec::new();
        for entry in self.tasks.iter() {
            let (key, stored) = entry?;
            let id = String::from_utf8_lossy(&key);
            match self.decode_task(&id, &stored) {
                Ok(task) => out.push(task),
                Err(StoreError::Codec(e)) => {
                    tracing::warn!(task.id = %id, "undecodable task record: {e}")
                }
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }

    /// A stored record and the parts its head counts, decoded.
    fn decode_task<R: DeserializeOwned, P: DeserializeOwned>(
        &self,
        task_id: &str,
        stored: &[u8],
    ) -> Result<(R, Parts<P>)> {
        let raw = self.raw_record(task_id, stored)?;
        let record = serde_json::from_slice(&raw.head)?;
        let mut parts = Parts {
            parts: Vec::with_capacity(raw.parts.len()),
            bytes: 0,
        };
        for part in &raw.parts {
            parts.bytes += part.len();
            parts.parts.push(serde_json::from_slice(part)?);
        }
        Ok((record, parts))
    }

    /// A stored record's head (JSON) and the parts its head counts.
    fn raw_record(&self, task_id: &str, stored: &[u8]) -> Result<RawRecord> {
        let (head, json) = head::decode(stored);
        let count = head.map_or(0, |h| h.parts);
        let mut parts = Vec::new();
        if count > 0 {
            let start = task_key(task_id, &1u64.to_be_bytes());
            let end = task_key(task_id, &count.to_be_bytes());
            for entry in self.parts.range(start..=end) {
                parts.push(entry?.1.to_vec());
            }
        }
        Ok(RawRecord {
            head: json.to_vec(),
            parts,
        })
    }

    /// Task `task_id`'s events with `seq > after`, in order.
    pub fn events(&self, task_id: &str, after: u64) -> Result<Vec<Event>> {
        Ok(self.events_sized(task_id, after)?.0)
    }

    /// Like [`Store::events`], with the size of what was read (bytes as stored).
    pub fn events_sized(&self, task_id: &str, after: u64) -> Result<(Vec<Event>, usize)> {
        self.events_in(task_id, after.saturating_add(1), u64::MAX)
    }

    /// Task `task_id`'s events with `seq` in `from..=to`, in order, with the size of what was
    /// read (bytes as stored: whole entries, which may hold events outside the range).
    pub fn events_in(&self, task_id: &str, from: u64, to: u64) -> Result<(Vec<Event>, usize)> {
        // Entries are keyed by their last event: the first to read ends at `from` or later.
        let start = task_key(task_id, &from.to_be_bytes());
        let end = task_key(task_id, &u64::MAX.to_be_bytes());
        let mut out = Vec::new();
        let mut bytes = 0;
        for entry in self.events.range(start..=end) {
            let (_, value) = entry?;
            bytes += value.len();
            let chunk: Vec<Event> = if value.first() == Some(&b'[') {
                serde_json::from_slice(&value)?
            } else {
                // One event an entry, as earlier versions wrote them.
                vec![serde_json::from_slice(&value)?]
            };
            let past = chunk.last().is_some_and(|e| e.seq >= to);
            out.extend(chunk.into_iter().filter(|e| (from..=to).contains(&e.seq)));
            if past {
                break;
            }
        }
        Ok((out, bytes))
    }

    /// The sequence number of task `task_id`'s last event (0 for none).
    pub fn last_seq(&self, task_id: &str) -> Result<u64> {
        // The task's keys are `id SEP …`: its last is the greatest key below `id SEP+1`.
        let prefix = prefix(task_id);
        let mut past = prefix.clone();
        past[task_id.len()] = SEP + 1;
        match self.events.get_lt(&past)? {
            Some((key, _)) if key.starts_with(&prefix) => Ok(decode_u64(&key[prefix.len()..])),
            _ => Ok(0),
        }
    }

    /// Queues an input for task `task_id` and flushes it to disk before returning, so the
    /// caller may acknowledge it. Inputs are taken in `queued_at` order, then arrival order.
    pub fn enqueue<I: Serialize>(
        &self,
        task_id: &str,
        queued_at: i64,
        input: &I,
    ) -> Result<QueueKey> {
        let key = self.queue_key(task_id, queued_at)?;
        self.queue_all(vec![(key.clone(), serde_json::to_vec(input)?)])?;
        Ok(key)
    }

    /// Queues `inputs` (task id, `queued_at`, input) and remembers `delivery` (an id and the
    /// epoch ms until which a repeat counts as a duplicate), in one transaction, flushed before
    /// returning: a repeat of a remembered id queues nothing. With no delivery id the inputs
    /// are simply queued.
    pub fn deliver<I: Serialize>(
        &self,
        delivery: Option<(&str, i64)>,
        inputs: &[(&str, i64, &I)],
    ) -> Result<Delivery> {
        let mut entries = Vec::with_capacity(inputs.len());
        for (task_id, queued_at, input) in inputs {
            entries.push((
                self.queue_key(task_id, *queued_at)?,
                serde_json::to_vec(input)?,
            ));
        }
        self.queue_entries(delivery, entries)
    }

    /// [`Store::deliver`] with the inputs encoded ([`Queues::queue_durably`]).
    fn queue_encoded(
        &self,
        delivery: Option<(&str, i64)>,
        inputs: &[(&str, i64, &[u8])],
    ) -> Result<Delivery> {
        let mut entries = Vec::with_capacity(inputs.len());
        for (task_id, queued_at, input) in inputs {
            entries.push((self.queue_key(task_id, *queued_at)?, input.to_vec()));
        }
        self.queue_entries(delivery, entries)
    }

    /// Queues keyed, encoded `entries` and remembers `delivery`, as [`Store::deliver`] says.
    fn queue_entries(
        &self,
        delivery: Option<(&str, i64)>,
        entries: Vec<(QueueKey, Vec<u8>)>,
    ) -> Result<Delivery> {
        let Some((id, until)) = delivery else {
            let keys = entries.iter().map(|(k, _)| k.clone()).collect();
            self.queue_all(entries)?;
            return Ok(Delivery::Queued(keys));
        };
        let now = now_ms();
        let outcome = (&self.queue, &self.dedupe)
            .transaction(|(queue, dedupe)| {
                let seen = dedupe.get(id.as_bytes())?;
                if seen.is_some_and(|v| decode_u64(&v) as i64 > now) {
                    return Ok(Delivery::Duplicate);
                }
                dedupe.insert(id.as_bytes(), &(until as u64).to_be_bytes())?;
                for (key, bytes) in &entries {
                    queue.insert(key.0.as_slice(), bytes.as_slice())?;
                }
                Ok(Delivery::Queued(
                    entries.iter().map(|(k, _)| k.clone()).collect(),
                ))
            })
            .map_err(tx_error)?;
        if let Delivery::Queued(_) = outcome {
            self.writes.fetch_add(1, Ordering::SeqCst);
            self.flush()?;
        }
        Ok(outcome)
    }

    /// Queues encoded `entries` atomically, flushed before returning. One entry is one insert
    /// (a batch or a transaction costs several times more in sled), several are one batch.
    fn queue_all(&self, entries: Vec<(QueueKey, Vec<u8>)>) -> Result<()> {
        match entries.as_slice() {
            [(key, bytes)] => {
                self.queue.insert(key.0.as_slice(), bytes.as_slice())?;
            }
            _ => {
                let mut batch = sled::Batch::default();
                for (key, bytes) in entries {
                    batch.insert(key.0, bytes);
                }
                self.queue.apply_batch(batch)?;
            }
        }
        self.writes.fetch_add(1, Ordering::SeqCst);
        self.flush()
    }

    /// Whether delivery id `id` was seen and is still remembered.
    pub fn seen_delivery(&self, id: &str) -> Result<bool> {
        Ok(self
            .dedupe
            .get(id.as_bytes())?
            .is_some_and(|v| decode_u64(&v) as i64 > now_ms()))
    }

    /// Forgets delivery ids whose window has passed; returns how many.
    pub fn prune_deliveries(&self) -> Result<usize> {
        let now = now_ms();
        let mut n = 0;
        for entry in self.dedupe.iter() {
            let (key, value) = entry?;
            if decode_u64(&value) as i64 <= now {
                self.dedupe.remove(key)?;
                n += 1;
            }
        }
        Ok(n)
    }

    /// Host state `key` in namespace `ns` (e.g. `trigger`, `schedule`, `wakeup`).
    pub fn state<T: DeserializeOwned>(&self, ns: &str, key: &str) -> Result<Option<T>> {
        match self.state_value(ns, key)? {
            Some(bytes) => Ok(Some(serde_json::from_slice(&bytes)?)),
            None => Ok(None),
        }
    }

    /// Writes host state `key` in namespace `ns`, durably (flushed) before returning.
    pub fn set_state<T: Serialize>(&self, ns: &str, key: &str, value: &T) -> Result<()> {
        self.put_state(ns, key, value)?;
        self.flush()
    }

    /// Writes host state `key` in namespace `ns`, durable once a later [`flush`](Self::flush)
    /// returns. For a caller that holds a lock over a read-modify-write: it can release the
    /// lock before flushing, so that concurrent writers share one fsync.
    pub fn put_state<T: Serialize>(&self, ns: &str, key: &str, value: &T) -> Result<()> {
        self.put_state_buffered(ns, key, &serde_json::to_vec(value)?)
    }

    /// Deletes host state `key` in namespace `ns`, durably.
    pub fn delete_state(&self, ns: &str, key: &str) -> Result<()> {
        self.remove_state(ns, key)?;
        self.flush()
    }

    /// Deletes host state `key` in namespace `ns`, durable once a later [`flush`](Self::flush)
    /// returns (like [`put_state`](Self::put_state)).
    pub fn remove_state(&self, ns: &str, key: &str) -> Result<()> {
        self.state.remove(task_key(ns, key.as_bytes()))?;
        self.writes.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    /// Every state entry of namespace `ns`: key and value. Entries that do not decode as `T`
    /// are skipped with a warning.
    pub fn states<T: DeserializeOwned>(&self, ns: &str) -> Result<Vec<(String, T)>> {
        let mut out = Vec::new();
        for (name, value) in self.state_values(ns)? {
            match serde_json::from_slice(&value) {
                Ok(v) => out.push((name, v)),
                Err(e) => {
                    tracing::warn!(state.ns = ns, state.key = %name, "undecodable state entry: {e}")
                }
            }
        }
        Ok(out)
    }

    fn queue_key(&self, task_id: &str, queued_at: i64) -> Result<QueueKey> {
        // Offset so that negative times still sort before positive ones.
        let time = (queued_at as u64) ^ (1 << 63);
        let mut suffix = time.to_be_bytes().to_vec();
        suffix.extend_from_slice(&self.db.generate_id()?.to_be_bytes());
        Ok(QueueKey(task_key(task_id, &suffix)))
    }

    /// The earliest queued input of task `task_id`.
    pub fn next_queued<I: DeserializeOwned>(&self, task_id: &str) -> Result<Option<(QueueKey, I)>> {
        match self.first_queued_bytes(task_id)? {
            Some((key, bytes)) => Ok(Some((key, serde_json::from_slice(&bytes)?))),
            None => Ok(None),
        }
    }

    /// The earliest queued input of task `task_id`, encoded.
    fn first_queued_bytes(&self, task_id: &str) -> Result<Option<(QueueKey, Vec<u8>)>> {
        // One descent of the tree (an iterator costs more to set up).
        let prefix = prefix(task_id);
        match self.queue.get_gt(&prefix)? {
            Some((key, value)) if key.starts_with(&prefix) => {
                Ok(Some((QueueKey(key.to_vec()), value.to_vec())))
            }
            _ => Ok(None),
        }
    }

    /// How many inputs task `task_id` has queued.
    pub fn queue_depth(&self, task_id: &str) -> usize {
        self.queue.scan_prefix(prefix(task_id)).count()
    }

    /// Task ids with queued input.
    pub fn tasks_with_queued_input(&self) -> Result<Vec<String>> {
        let mut ids: Vec<String> = Vec::new();
        for entry in self.queue.iter() {
            let (key, _) = entry?;
            let id = key.split(|b| *b == SEP).next().unwrap_or_default();
            let id = String::from_utf8_lossy(id).into_owned();
            if ids.last() != Some(&id) {
                ids.push(id);
            }
        }
        Ok(ids)
    }

    /// Removes every queued input of task `task_id` (when it is deleted or terminated).
    pub fn clear_queue(&self, task_id: &str) -> Result<usize> {
        let mut n = 0;
        for entry in self.queue.scan_prefix(prefix(task_id)) {
            let (key, _) = entry?;
            self.queue.remove(key)?;
            n += 1;
        }
        Ok(n)
    }

    /// A plugin's value under `key` in `scope` (a component and task).
    pub fn kv_get(&self, scope: &str, key: &str) -> Result<Option<Vec<u8>>> {
        Ok(self
            .kv
            .get(task_key(scope, key.as_bytes()))?
            .map(|v| v.to_vec()))
    }

    /// Sets a plugin's value.
    pub fn kv_set(&self, scope: &str, key: &str, value: &[u8]) -> Result<()> {
        self.kv.insert(task_key(scope, key.as_bytes()), value)?;
        Ok(())
    }

    /// Deletes a plugin's value.
    pub fn kv_delete(&self, scope: &str, key: &str) -> Result<()> {
        self.kv.remove(task_key(scope, key.as_bytes()))?;
        Ok(())
    }

    /// Deletes every value in `scope`.
    pub fn kv_clear(&self, scope: &str) -> Result<()> {
        for entry in self.kv.scan_prefix(prefix(scope)) {
            let (key, _) = entry?;
            self.kv.remove(key)?;
        }
        Ok(())
    }

    /// How many writes this handle has made (each one or more keys at once).
    pub fn writes(&self) -> u64 {
        self.writes.load(Ordering::SeqCst)
    }

    /// Writes and flushes a small mark in the host state: whether the store can write now.
    pub fn probe(&self) -> Result<()> {
        self.set_state("host", "probe", &now_ms())
    }

    /// Makes every write so far durable. Concurrent callers share one fsync; one that waits
    /// for another's flush gives up after 5 s with an I/O error (a file
    /// system that stopped answering holds up the one caller flushing, not every caller).
    pub fn flush(&self) -> Result<()> {
        let ticket = self.writes.load(Ordering::SeqCst);
        self.flusher.flush(ticket, || {
            let upto = self.writes.load(Ordering::SeqCst);
            self.db.flush()?;
            Ok(upto)
        })
    }
}

/// How long [`Store::open`] waits for a data directory held by another handle.
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Opens sled in `path`. A directory still held — by a process that is exiting, or by a
/// handle dropped in this one whose last background write is finishing — is retried for
/// [`LOCK_WAIT`]; after that it is in use, and the error says so.
fn open_db(path: &Path) -> Result<sled::Db> {
    let start = std::time::Instant::now();
    loop {
        match sled::Config::new().path(path).open() {
            // sled reports a held lock only in its message.
            Err(sled::Error::Io(e)) if e.to_string().contains("could not acquire lock") => {
                if start.elapsed() >= LOCK_WAIT {
                    return Err(StoreError::Io(format!(
                        "{} is in use by another agentmesh process",
                        path.display()
                    )));
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            other => return Ok(other?),
        }
    }
}

fn decode_u64(bytes: &[u8]) -> u64 {
    let mut buf = [0u8; 8];
    if bytes.len() == 8 {
        buf.copy_from_slice(bytes);
    }
    u64::from_be_bytes(buf)
}
