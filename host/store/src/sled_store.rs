//! The sled backend: every area of [`crate::backend`] in the trees of one sled database.
//!
//! Task records (a head, see `head.rs`, then JSON), their appended parts, the events (one
//! write's events are one entry, keyed by the task id and the last one's number), each task's
//! queue (keyed by task id, `queued_at`, then a unique id), delivery ids, host state and
//! plugin key-value are trees of their own, keyed `owner NUL key`. A task write changes up to
//! three trees without a transaction, in an order [`SledStore::open`] can complete or undo
//! after a crash (`head.rs`); a delivery and its queue entries are one sled transaction.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use sled::transaction::{TransactionError, Transactional};

use agentmesh_model::event::Event;

use crate::backend::{
    Dedupe, Durability, Durable, HostState, Lease, Leases, NoticeHook, PluginKv, Queues, RawRecord,
    RawWrite, TaskLogs, durable_now,
};
use crate::chunk;
use crate::copy::Item;
use crate::flush::GroupFlush;
use crate::{AppendHook, Delivery, QueueKey, Result, StoreError, Written, head, now_ms};

/// The store on sled.
pub struct SledStore {
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
    flusher: Arc<GroupFlush>,
    /// Called with a task id after events were appended to its log (live streaming).
    on_append: OnceLock<AppendHook>,
    /// Writes that an acknowledgement may wait for; see [`GroupFlush`].
    writes: Arc<AtomicU64>,
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

/// The owner (a task id, a namespace, a scope) of a key from [`task_key`], and what follows it.
fn split_key(key: &[u8]) -> (String, &[u8]) {
    let at = key.iter().position(|&b| b == SEP).unwrap_or(key.len());
    let rest = key.get(at + 1..).unwrap_or_default();
    (String::from_utf8_lossy(&key[..at]).into_owned(), rest)
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

impl SledStore {
    /// Opens (or creates) the store in `dir`, completing or undoing writes a crash cut short.
    pub fn open(dir: &Path) -> Result<SledStore> {
        std::fs::create_dir_all(dir)
            .map_err(|e| StoreError::Io(format!("{}: {e}", dir.display())))?;
        let db = open_db(&dir.join("store"))?;
        let store = SledStore {
            tasks: db.open_tree("tasks")?,
            parts: db.open_tree("record_parts")?,
            events: db.open_tree("events")?,
            queue: db.open_tree("queue")?,
            kv: db.open_tree("kv")?,
            dedupe: db.open_tree("dedupe")?,
            state: db.open_tree("state")?,
            flusher: Arc::default(),
            on_append: OnceLock::new(),
            writes: Arc::default(),
            db,
        };
        store.repair()?;
        Ok(store)
    }

    /// Whether `dir` holds a store (one [`SledStore::open`] created), without creating one.
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

    /// One flush of the store for [`GroupFlush`]: the write count it covers, read before it
    /// starts.
    fn flush_job(&self) -> impl FnOnce() -> Result<u64> + Send + 'static {
        let (db, writes) = (self.db.clone(), Arc::clone(&self.writes));
        move || {
            let upto = writes.load(Ordering::SeqCst);
            db.flush()?;
            Ok(upto)
        }
    }

    /// Task `task_id`'s earliest queue entry, as stored (not copied). One descent of the tree
    /// (an iterator costs more to set up).
    fn first_entry(&self, task_id: &str) -> Result<Option<(sled::IVec, sled::IVec)>> {
        let prefix = prefix(task_id);
        Ok(self
            .queue
            .get_gt(&prefix)?
            .filter(|(key, _)| key.starts_with(&prefix)))
    }

    /// Counts a write for the next flush to cover (see [`GroupFlush`]).
    fn wrote(&self) {
        self.writes.fetch_add(1, Ordering::SeqCst);
    }

    fn appended(&self, task_id: &str) {
        if let Some(hook) = self.on_append.get() {
            hook(task_id);
        }
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

    fn queue_key(&self, task_id: &str, queued_at: i64) -> Result<QueueKey> {
        // Offset so that negative times still sort before positive ones.
        let time = (queued_at as u64) ^ (1 << 63);
        let mut suffix = time.to_be_bytes().to_vec();
        suffix.extend_from_slice(&self.db.generate_id()?.to_be_bytes());
        Ok(QueueKey(task_key(task_id, &suffix)))
    }

    /// Hands everything the store holds to `visit` (see [`crate::copy`]): each task with its
    /// record and log, queued inputs in queue order, delivery ids, host records, plugin values,
    /// then where ids continue.
    pub fn export(&self, visit: &mut dyn FnMut(Item) -> Result<()>) -> Result<()> {
        for id in self.record_ids()? {
            let Some(record) = self.record(&id)? else {
                continue;
            };
            let (events, _) = self.events_between(&id, 1, u64::MAX)?;
            visit(Item::Task { id, record, events })?;
        }
        for entry in self.queue.iter() {
            let (key, input) = entry?;
            let (task_id, suffix) = split_key(&key);
            let time = suffix.get(..8).map_or(0, decode_u64);
            visit(Item::Queued {
                task_id,
                queued_at: (time ^ (1 << 63)) as i64,
                input: input.to_vec(),
            })?;
        }
        for entry in self.dedupe.iter() {
            let (id, until) = entry?;
            visit(Item::Delivery {
                id: String::from_utf8_lossy(&id).into_owned(),
                until: decode_u64(&until) as i64,
            })?;
        }
        for entry in self.state.iter() {
            let (key, value) = entry?;
            let (ns, key) = split_key(&key);
            let key = String::from_utf8_lossy(key).into_owned();
            visit(Item::State {
                ns,
                key,
                value: value.to_vec(),
            })?;
        }
        for entry in self.kv.iter() {
            let (key, value) = entry?;
            let (scope, key) = split_key(&key);
            let key = String::from_utf8_lossy(key).into_owned();
            visit(Item::Kv {
                scope,
                key,
                value: value.to_vec(),
            })?;
        }
        visit(Item::NextId(self.db.generate_id()?))
    }

    /// Queues encoded `entries` atomically, not yet flushed. One entry is one insert
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
        self.wrote();
        Ok(())
    }

    /// Queues `inputs` and remembers `delivery` as [`Queues::queue_durably`] does, without the
    /// flush; whether it wrote anything (a duplicate writes nothing).
    fn queue_unflushed(
        &self,
        delivery: Option<(&str, i64)>,
        inputs: &[(&str, i64, &[u8])],
    ) -> Result<(Delivery, bool)> {
        let mut entries = Vec::with_capacity(inputs.len());
        for (task_id, queued_at, input) in inputs {
            entries.push((self.queue_key(task_id, *queued_at)?, input.to_vec()));
        }
        let Some((id, until)) = delivery else {
            let keys = entries.iter().map(|(k, _)| k.clone()).collect();
            self.queue_all(entries)?;
            return Ok((
                Delivery::Queued {
                    keys,
                    told: Vec::new(),
                },
                true,
            ));
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
                Ok(Delivery::Queued {
                    keys: entries.iter().map(|(k, _)| k.clone()).collect(),
                    told: Vec::new(),
                })
            })
            .map_err(tx_error)?;
        let written = matches!(outcome, Delivery::Queued { .. });
        if written {
            self.wrote();
        }
        Ok((outcome, written))
    }
}

impl TaskLogs for SledStore {
    fn write_buffered(
        &self,
        task_id: &str,
        record: RawWrite<'_>,
        events: &[Event],
        take: Option<&QueueKey>,
    ) -> Result<Option<Written>> {
        if let Some(key) = take
            && !self.queue.contains_key(key.0.as_slice())?
        {
            return Ok(None);
        }
        let log_end = match events.last() {
            Some(last) => last.seq,
            None => self.last_event_seq(task_id)?,
        };
        let mut bytes = head::encode(log_end, record.parts, take.map(|k| k.0.as_slice()));
        bytes.extend_from_slice(record.head);
        let part = record.new_part;
        let event_bytes = match (events.first(), events.last()) {
            (Some(first), Some(last)) => {
                let chunk = chunk::encode(events)?;
                // The log ends right before `first` (one write's events are one entry, keyed
                // by the last one's number, so the last key of a task is its last event; a
                // write starting behind it, or past it, does not continue the log), and no
                // entry ends where this one does.
                let follows = self.last_event_seq(task_id)? + 1 == first.seq;
                let key = task_key(task_id, &last.seq.to_be_bytes());
                if !follows
                    || self
                        .events
                        .compare_and_swap(key, None::<&[u8]>, Some(chunk.as_slice()))?
                        .is_err()
                {
                    return Err(StoreError::Conflict(format!(
                        "task `{task_id}`: events from {} do not continue its log",
                        first.seq
                    )));
                }
                chunk.len()
            }
            _ => 0,
        };
        // In this order: a crash leaves at most events and a part past the record's `log_end`
        // and `parts`, or a queue entry the record says was taken; [`SledStore::open`] removes
        // them.
        if let Some(part) = part {
            let key = task_key(task_id, &record.parts.to_be_bytes());
            self.parts.insert(key, part)?;
        }
        self.tasks.insert(task_id.as_bytes(), bytes.as_slice())?;
        if let Some(key) = take {
            self.queue.remove(key.0.as_slice())?;
        }
        self.wrote();
        if !events.is_empty() {
            self.appended(task_id);
        }
        Ok(Some(Written {
            record_bytes: bytes.len(),
            part_bytes: part.map_or(0, |p| p.len()),
            event_bytes,
            queue_empty: self.first_entry(task_id)?.is_none(),
        }))
    }

    fn record(&self, task_id: &str) -> Result<Option<RawRecord>> {
        match self.tasks.get(task_id.as_bytes())? {
            Some(stored) => Ok(Some(self.raw_record(task_id, &stored)?)),
            None => Ok(None),
        }
    }

    fn record_ids(&self) -> Result<Vec<String>> {
        self.tasks
            .iter()
            .keys()
            .map(|k| Ok(String::from_utf8_lossy(&k?).into_owned()))
            .collect()
    }

    fn events_between(&self, task_id: &str, from: u64, to: u64) -> Result<(Vec<Event>, usize)> {
        // Entries are keyed by their last event: the first to read ends at `from` or later.
        let start = task_key(task_id, &from.to_be_bytes());
        let end = task_key(task_id, &u64::MAX.to_be_bytes());
        let mut out = Vec::new();
        let mut bytes = 0;
        for entry in self.events.range(start..=end) {
            let (_, value) = entry?;
            bytes += value.len();
            if chunk::read_between(&value, from, to, &mut out)? {
                break;
            }
        }
        Ok((out, bytes))
    }

    fn last_event_seq(&self, task_id: &str) -> Result<u64> {
        // The task's keys are `id SEP …`: its last is the greatest key below `id SEP+1`.
        let prefix = prefix(task_id);
        let mut past = prefix.clone();
        past[task_id.len()] = SEP + 1;
        match self.events.get_lt(&past)? {
            Some((key, _)) if key.starts_with(&prefix) => Ok(decode_u64(&key[prefix.len()..])),
            _ => Ok(0),
        }
    }

    fn next_id(&self) -> Result<u64> {
        Ok(self.db.generate_id()?)
    }

    fn set_append_hook(&self, hook: AppendHook) {
        let _ = self.on_append.set(hook);
    }
}

impl Queues for SledStore {
    fn queue_durably(
        &self,
        delivery: Option<(&str, i64)>,
        inputs: &[(&str, i64, &[u8])],
    ) -> Result<Delivery> {
        let (outcome, written) = self.queue_unflushed(delivery, inputs)?;
        if written {
            self.flush()?;
        }
        Ok(outcome)
    }

    fn queue_deferred(
        &self,
        delivery: Option<(&str, i64)>,
        inputs: &[(&str, i64, &[u8])],
    ) -> Result<(Delivery, Durable)> {
        let (outcome, written) = self.queue_unflushed(delivery, inputs)?;
        if !written {
            return Ok((outcome, durable_now()));
        }
        let ticket = self.writes.load(Ordering::SeqCst);
        let durable = Arc::clone(&self.flusher).durable(ticket, self.flush_job());
        Ok((outcome, Box::pin(durable)))
    }

    fn first_queued(&self, task_id: &str) -> Result<Option<(QueueKey, Vec<u8>)>> {
        Ok(self
            .first_entry(task_id)?
            .map(|(key, value)| (QueueKey(key.to_vec()), value.to_vec())))
    }

    fn queued(&self, task_id: &str, limit: usize) -> Result<Vec<(QueueKey, Vec<u8>)>> {
        self.queue
            .scan_prefix(prefix(task_id))
            .take(limit)
            .map(|entry| {
                let (key, value) = entry?;
                Ok((QueueKey(key.to_vec()), value.to_vec()))
            })
            .collect()
    }

    fn queued_count(&self, task_id: &str) -> Result<usize> {
        let mut n = 0;
        for entry in self.queue.scan_prefix(prefix(task_id)).keys() {
            entry?;
            n += 1;
        }
        Ok(n)
    }

    fn queued_tasks(&self) -> Result<Vec<String>> {
        let mut ids: Vec<String> = Vec::new();
        for entry in self.queue.iter().keys() {
            let key = entry?;
            let id = key.split(|b| *b == SEP).next().unwrap_or_default();
            let id = String::from_utf8_lossy(id).into_owned();
            if ids.last() != Some(&id) {
                ids.push(id);
            }
        }
        Ok(ids)
    }

    fn clear_queue_buffered(&self, task_id: &str) -> Result<usize> {
        let mut n = 0;
        for key in self.queue.scan_prefix(prefix(task_id)).keys() {
            self.queue.remove(key?)?;
            n += 1;
        }
        if n > 0 {
            self.wrote();
        }
        Ok(n)
    }
}

impl Dedupe for SledStore {
    fn is_remembered(&self, id: &str) -> Result<bool> {
        Ok(self
            .dedupe
            .get(id.as_bytes())?
            .is_some_and(|v| decode_u64(&v) as i64 > now_ms()))
    }

    fn forget_expired_buffered(&self) -> Result<usize> {
        let now = now_ms();
        let mut n = 0;
        for entry in self.dedupe.iter() {
            let (key, value) = entry?;
            if decode_u64(&value) as i64 <= now {
                self.dedupe.remove(key)?;
                n += 1;
            }
        }
        if n > 0 {
            self.wrote();
        }
        Ok(n)
    }
}

impl HostState for SledStore {
    fn state_value(&self, ns: &str, key: &str) -> Result<Option<Vec<u8>>> {
        Ok(self
            .state
            .get(task_key(ns, key.as_bytes()))?
            .map(|v| v.to_vec()))
    }

    fn state_values(&self, ns: &str) -> Result<Vec<(String, Vec<u8>)>> {
        let prefix = task_key(ns, &[]);
        self.state
            .scan_prefix(&prefix)
            .map(|entry| {
                let (key, value) = entry?;
                let name = String::from_utf8_lossy(&key[prefix.len()..]).into_owned();
                Ok((name, value.to_vec()))
            })
            .collect()
    }

    fn put_state_buffered(&self, ns: &str, key: &str, value: &[u8]) -> Result<()> {
        self.state.insert(task_key(ns, key.as_bytes()), value)?;
        self.wrote();
        Ok(())
    }

    fn delete_state_buffered(&self, ns: &str, key: &str) -> Result<()> {
        self.state.remove(task_key(ns, key.as_bytes()))?;
        self.wrote();
        Ok(())
    }
}

impl PluginKv for SledStore {
    fn kv_value(&self, scope: &str, key: &str) -> Result<Option<Vec<u8>>> {
        Ok(self
            .kv
            .get(task_key(scope, key.as_bytes()))?
            .map(|v| v.to_vec()))
    }

    fn kv_put_buffered(&self, scope: &str, key: &str, value: &[u8]) -> Result<()> {
        self.kv.insert(task_key(scope, key.as_bytes()), value)?;
        self.wrote();
        Ok(())
    }

    fn kv_delete_buffered(&self, scope: &str, key: &str) -> Result<()> {
        self.kv.remove(task_key(scope, key.as_bytes()))?;
        self.wrote();
        Ok(())
    }

    fn kv_clear_task_buffered(&self, task: &str) -> Result<()> {
        // Keys begin with the component: the task's scopes are found among all of them.
        let suffix = format!("/{task}");
        for key in self.kv.iter().keys() {
            let key = key?;
            if split_key(&key).0.ends_with(&suffix) {
                self.kv.remove(key)?;
            }
        }
        self.wrote();
        Ok(())
    }
}

impl Durability for SledStore {
    /// Concurrent callers share one fsync; one that waits for another's flush gives up after
    /// 5 s with an I/O error (a file system that stopped answering holds up the one caller
    /// flushing on its thread, not every caller; an acknowledgement's flush, awaited by
    /// `queue_deferred`'s future, gives up after 5 s as well).
    fn flush(&self) -> Result<()> {
        let ticket = self.writes.load(Ordering::SeqCst);
        self.flusher.flush(ticket, self.flush_job())
    }

    fn write_count(&self) -> u64 {
        self.writes.load(Ordering::SeqCst)
    }
}

/// A sled store is one host's alone (its data directory is locked while open): this host holds
/// every lease.
impl Leases for SledStore {
    fn shared(&self) -> bool {
        false
    }

    fn host_id(&self) -> &str {
        "local"
    }

    fn take_lease(&self, _task_id: &str) -> Result<Lease> {
        Ok(Lease::Held {
            taken_from: None,
            was_active: false,
        })
    }

    fn renew_host(&self) -> Result<()> {
        Ok(())
    }

    fn orphaned_tasks(&self, _limit: usize) -> Result<Vec<String>> {
        Ok(Vec::new())
    }

    fn end_host(&self) -> Result<()> {
        Ok(())
    }

    fn tell(&self, host: &str, _body: &str) -> Result<()> {
        Err(StoreError::Io(format!(
            "no host `{host}` shares this store: a sled store has one host"
        )))
    }

    fn set_notice_hook(&self, _hook: NoticeHook) {}
}

/// How long [`SledStore::open`] waits for a data directory held by another handle.
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

#[cfg(test)]
mod tests {
    // Test code may panic: a panic is a failed test.
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::{RecordWrite, Typed};
    use agentmesh_model::event::{EventKind, EventSource};
    use serde_json::{Value, json};

    fn pause() -> Vec<(EventSource, EventKind)> {
        vec![(EventSource::Environment, EventKind::PauseEvent {})]
    }

    /// A crash between the steps of a write, made by undoing its later steps on the trees.
    #[test]
    fn open_completes_or_undoes_a_write_cut_short() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = SledStore::open(dir.path()).unwrap();
            store
                .commit_buffered("t", &json!({"turn": 0}), pause())
                .unwrap();
            let before = store.tasks.get("t").unwrap().unwrap();

            // Events appended, record not written (nor the input taken).
            let first = store.enqueue_durably("t", 1, &json!("first")).unwrap();
            let events = store.stamp(2, [pause(), pause()].concat()).unwrap();
            store
                .write_record_buffered(
                    "t",
                    RecordWrite::whole(&json!({"turn": 1})),
                    &events,
                    Some(&first),
                )
                .unwrap()
                .unwrap();
            store.tasks.insert("t", before).unwrap();
            store
                .queue
                .insert(first.0.as_slice(), &b"\"first\""[..])
                .unwrap();

            // Another task: record written, input not removed.
            let other = store.enqueue_durably("u", 1, &json!("other")).unwrap();
            let events = store.stamp(1, pause()).unwrap();
            store
                .write_record_buffered(
                    "u",
                    RecordWrite::whole(&json!({"turn": 1})),
                    &events,
                    Some(&other),
                )
                .unwrap()
                .unwrap();
            store
                .queue
                .insert(other.0.as_slice(), &b"\"other\""[..])
                .unwrap();
            store.flush().unwrap();
        }
        let store = SledStore::open(dir.path()).unwrap();
        // The cut write is undone: its events are gone and its input is queued again.
        assert_eq!(store.task::<Value>("t").unwrap(), Some(json!({"turn": 0})));
        assert_eq!(store.last_event_seq("t").unwrap(), 1);
        assert_eq!(store.events("t", 0).unwrap().len(), 1);
        assert_eq!(
            store.next_queued::<Value>("t").unwrap().map(|(_, v)| v),
            Some(json!("first"))
        );
        // The other is completed: its input is not taken twice.
        assert_eq!(store.task::<Value>("u").unwrap(), Some(json!({"turn": 1})));
        assert_eq!(store.events("u", 0).unwrap().len(), 1);
        assert!(store.next_queued::<Value>("u").unwrap().is_none());
        // The log goes on from where the record is.
        let events = store.stamp(2, pause()).unwrap();
        assert!(
            store
                .write_record_buffered("t", RecordWrite::whole(&json!({"turn": 1})), &events, None)
                .unwrap()
                .is_some()
        );
    }

    /// Parts come back in order with their record; a part a crash left past its record is
    /// removed with the events written with it.
    #[test]
    fn parts_read_in_order_and_a_part_cut_short_is_removed() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = SledStore::open(dir.path()).unwrap();
            for n in 1..=3u64 {
                let events = store.stamp(n, pause()).unwrap();
                let write = RecordWrite {
                    head: &json!({"parts": n}),
                    parts: n,
                    new_part: Some(&json!({"n": n})),
                    active: false,
                };
                store
                    .write_record_buffered("t", write, &events, None)
                    .unwrap()
                    .unwrap();
            }
            // A write that adds no part keeps the parts.
            let events = store.stamp(4, pause()).unwrap();
            let write = RecordWrite {
                head: &json!({"parts": 3}),
                parts: 3,
                new_part: None::<&Value>,
                active: false,
            };
            let written = store
                .write_record_buffered("t", write, &events, None)
                .unwrap()
                .unwrap();
            assert_eq!(written.part_bytes, 0);
            let (record, parts) = store.task_with_parts::<Value, Value>("t").unwrap().unwrap();
            assert_eq!(record, json!({"parts": 3}));
            assert_eq!(
                parts.parts,
                [json!({"n": 1}), json!({"n": 2}), json!({"n": 3})]
            );
            assert_eq!(parts.bytes, 3 * br#"{"n":1}"#.len());

            // Part 4 and its events written, the record not.
            let before = store.tasks.get("t").unwrap().unwrap();
            let events = store.stamp(5, pause()).unwrap();
            let write = RecordWrite {
                head: &json!({"parts": 4}),
                parts: 4,
                new_part: Some(&json!({"n": 4})),
                active: false,
            };
            store
                .write_record_buffered("t", write, &events, None)
                .unwrap()
                .unwrap();
            store.tasks.insert("t", before).unwrap();
            store.flush().unwrap();
        }
        let store = SledStore::open(dir.path()).unwrap();
        assert_eq!(store.parts.len(), 3);
        assert_eq!(store.last_event_seq("t").unwrap(), 4);
        let tasks = store.tasks_with_parts::<Value, Value>().unwrap();
        assert_eq!(tasks.len(), 1);
        assert_eq!(tasks[0].0, json!({"parts": 3}));
        assert_eq!(tasks[0].1.parts.len(), 3);
        // The task goes on with part 4.
        let events = store.stamp(5, pause()).unwrap();
        let write = RecordWrite {
            head: &json!({"parts": 4}),
            parts: 4,
            new_part: Some(&json!({"n": "4 again"})),
            active: false,
        };
        store
            .write_record_buffered("t", write, &events, None)
            .unwrap()
            .unwrap();
        let (_, parts) = store.task_with_parts::<Value, Value>("t").unwrap().unwrap();
        assert_eq!(parts.parts[3], json!({"n": "4 again"}));
    }

    /// Records written before heads existed read as they are and are left alone.
    #[test]
    fn a_record_without_a_head_reads_and_is_not_repaired() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = SledStore::open(dir.path()).unwrap();
            store.commit_buffered("t", &json!({}), pause()).unwrap();
            store.tasks.insert("t", &b"{\"old\":true}"[..]).unwrap();
            store.flush().unwrap();
        }
        let store = SledStore::open(dir.path()).unwrap();
        assert_eq!(
            store.task::<Value>("t").unwrap(),
            Some(json!({"old": true}))
        );
        let tasks = store.tasks_with_parts::<Value, Value>().unwrap();
        assert_eq!(tasks.len(), 1);
        assert_eq!(tasks[0].0, json!({"old": true}));
        assert!(tasks[0].1.parts.is_empty());
        assert_eq!(store.events("t", 0).unwrap().len(), 1);
    }
}
