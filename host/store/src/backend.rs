//! The store as a set of traits: what the host needs of a backend, by area.
//! [`crate::SledStore`] is one implementation; [`crate::conformance`] is the suite every
//! backend must pass.
//!
//! - [`TaskLogs`]: task records (a head and appended parts) and their append-only event logs;
//! - [`Queues`]: each task's FIFO of inputs, taken once by the write that processes it;
//! - [`Dedupe`]: delivery ids remembered for their window;
//! - [`HostState`]: the host's own records outside tasks (trigger and schedule statuses,
//!   wakeups, throttle counts), by namespace and key;
//! - [`PluginKv`]: the key-value store of Wasm plugins, by scope (component and task);
//! - [`Durability`]: the flush that makes writes durable, shared by concurrent callers;
//! - [`Leases`]: when several hosts share the store, which one runs each task's turns, and the
//!   notices they send each other.
//!
//! Durability is in each writing method's name: `…_durably` returns once the change is on
//! disk (its flush shared with concurrent callers: a group commit), `…_buffered` once it is
//! written, durable with the next [`Durability::flush`]. Values cross the traits as bytes
//! (JSON their callers encode), so the traits are object-safe: a host can hold any backend as
//! `Arc<dyn Backend>`; [`crate::Typed`] encodes and decodes around them.

use agentmesh_model::event::Event;

use crate::{AppendHook, Delivery, QueueKey, Result, Written};

/// A task record as written: its head (JSON) and, when it grows, its new part.
#[derive(Debug, Clone, Copy)]
pub struct RawWrite<'a> {
    /// The record without its parts (JSON).
    pub head: &'a [u8],
    /// How many parts the record has with this write (numbered from 1; 0 for none).
    pub parts: u64,
    /// Part number `parts` (JSON), appended by this write; `None` when the parts do not
    /// change.
    pub new_part: Option<&'a [u8]>,
    /// The task is mid-turn (or waits in a review) with this write: a host that takes it over
    /// from one that died must bring it back (see [`Leases`]).
    pub active: bool,
}

/// A task record as stored: its head and its parts, in order (JSON each).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawRecord {
    /// The record without its parts.
    pub head: Vec<u8>,
    /// Parts 1 to n.
    pub parts: Vec<Vec<u8>>,
}

/// Task records and their event logs.
pub trait TaskLogs: Send + Sync {
    /// Writes task `task_id`'s record (with its new part, if any), appends `events` (numbered
    /// to continue the log without a gap) and, with `take`, removes that queue entry: all or
    /// nothing, also across a crash. `Ok(None)`, writing nothing, when `take` is gone; a
    /// [`crate::StoreError::Conflict`], writing nothing, when the events do not continue the
    /// log. Buffered: durable with the next flush. One writer per task at a time.
    fn write_buffered(
        &self,
        task_id: &str,
        record: RawWrite<'_>,
        events: &[Event],
        take: Option<&QueueKey>,
    ) -> Result<Option<Written>>;

    /// Task `task_id`'s record, with the parts its last write counted.
    ///
    /// On a [shared](Leases::shared) store a write takes the task's lease unless another live
    /// host holds it: then a [`crate::StoreError::LeaseLost`], writing nothing. (A host takes
    /// a lease with [`Leases::take_lease`] first, to learn whether it takes a task over.)
    fn record(&self, task_id: &str) -> Result<Option<RawRecord>>;

    /// The ids of every task with a record, in id order.
    fn record_ids(&self) -> Result<Vec<String>>;

    /// Task `task_id`'s events with `seq` in `from..=to`, in order, with the size read.
    fn events_between(&self, task_id: &str, from: u64, to: u64) -> Result<(Vec<Event>, usize)>;

    /// The `seq` of task `task_id`'s last event (0 for none).
    fn last_event_seq(&self, task_id: &str) -> Result<u64>;

    /// A new unique id, greater than every one given before (also across restarts).
    fn next_id(&self) -> Result<u64>;

    /// Sets the function told a task's id after a write appended events to its log (once;
    /// later calls are ignored). It runs on the writing thread: keep it short (a channel
    /// send).
    fn set_append_hook(&self, hook: AppendHook);
}

/// Each task's FIFO of inputs, ordered by `queued_at`, then arrival.
pub trait Queues: Send + Sync {
    /// Queues `inputs` (task id, `queued_at`, input JSON) and remembers `delivery` (an id and
    /// the epoch ms until which a repeat is a duplicate) all or nothing; a repeat of a
    /// remembered id queues nothing. Durable before it returns.
    fn queue_durably(
        &self,
        delivery: Option<(&str, i64)>,
        inputs: &[(&str, i64, &[u8])],
    ) -> Result<Delivery>;

    /// As [`Queues::queue_durably`], except that it returns before the disk has the write:
    /// with what it did and a wait that ends once that is durable, holding no thread while it
    /// waits (concurrent waits share one flush). Nobody may be told the inputs are taken
    /// before the wait ends without an error. Poll the wait on a tokio runtime.
    fn queue_deferred(
        &self,
        delivery: Option<(&str, i64)>,
        inputs: &[(&str, i64, &[u8])],
    ) -> Result<(Delivery, Durable)>;

    /// Task `task_id`'s earliest queued input.
    fn first_queued(&self, task_id: &str) -> Result<Option<(QueueKey, Vec<u8>)>>;

    /// Task `task_id`'s queued inputs, earliest first, at most `limit`.
    fn queued(&self, task_id: &str, limit: usize) -> Result<Vec<(QueueKey, Vec<u8>)>>;

    /// How many inputs task `task_id` has queued.
    fn queued_count(&self, task_id: &str) -> Result<usize>;

    /// The ids of the tasks with queued input.
    fn queued_tasks(&self) -> Result<Vec<String>>;

    /// Removes every queued input of task `task_id`; buffered. Returns how many.
    fn clear_queue_buffered(&self, task_id: &str) -> Result<usize>;
}

/// A wait for writes to be durable (see [`Queues::queue_deferred`]).
pub type Durable = std::pin::Pin<Box<dyn std::future::Future<Output = Result<()>> + Send>>;

/// The wait of a write that is durable already (or wrote nothing).
pub(crate) fn durable_now() -> Durable {
    Box::pin(std::future::ready(Ok(())))
}

/// Delivery ids, remembered for their window.
pub trait Dedupe: Send + Sync {
    /// Whether delivery id `id` is remembered (its window has not passed).
    fn is_remembered(&self, id: &str) -> Result<bool>;

    /// Forgets the ids whose window has passed; buffered. Returns how many.
    fn forget_expired_buffered(&self) -> Result<usize>;
}

/// The host's records outside tasks, by namespace and key (JSON values).
pub trait HostState: Send + Sync {
    /// The value of `key` in `ns`.
    fn state_value(&self, ns: &str, key: &str) -> Result<Option<Vec<u8>>>;

    /// Every key of `ns` with its value, in key order.
    fn state_values(&self, ns: &str) -> Result<Vec<(String, Vec<u8>)>>;

    /// Sets `key` in `ns`; buffered.
    fn put_state_buffered(&self, ns: &str, key: &str, value: &[u8]) -> Result<()>;

    /// Deletes `key` in `ns`; buffered.
    fn delete_state_buffered(&self, ns: &str, key: &str) -> Result<()>;
}

/// The key-value store of Wasm plugins, by scope: `{component}/{task}`, a component and a task
/// (task ids hold no `/`).
pub trait PluginKv: Send + Sync {
    /// The value of `key` in `scope`.
    fn kv_value(&self, scope: &str, key: &str) -> Result<Option<Vec<u8>>>;

    /// Sets `key` in `scope`; buffered.
    fn kv_put_buffered(&self, scope: &str, key: &str, value: &[u8]) -> Result<()>;

    /// Deletes `key` in `scope`; buffered.
    fn kv_delete_buffered(&self, scope: &str, key: &str) -> Result<()>;

    /// Deletes every key of every scope of task `task` (every component's, `…/{task}`), when
    /// the task is deleted; buffered. It may read every scope's keys to find them.
    fn kv_clear_task_buffered(&self, task: &str) -> Result<()>;
}

/// Making writes durable.
pub trait Durability: Send + Sync {
    /// Makes every write so far durable. Concurrent callers share one fsync (a group commit).
    fn flush(&self) -> Result<()>;

    /// How many writes this handle has made.
    fn write_count(&self) -> u64;
}

/// What [`Leases::take_lease`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lease {
    /// This host holds the lease (took it, or held it already).
    Held {
        /// The host it was taken from, one that is no longer live: the task's state is as
        /// that host left it.
        taken_from: Option<String>,
        /// The task was mid-turn when its last holder wrote it (see [`RawWrite::active`]).
        was_active: bool,
    },
    /// Another live host holds it.
    HeldBy(String),
}

/// What a host of a shared store hears of the others (see [`Leases::set_notice_hook`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Notice<'a> {
    /// Another host wrote task `.0`'s record (and maybe appended to its log).
    Written(&'a str),
    /// Another host sent this one a message ([`Leases::tell`]).
    Message(&'a str),
    /// Another host queued input for task `.0`, whose lease this one holds (told by the
    /// queuing's own transaction: no input is queued unannounced to its holder).
    Queued(&'a str),
    /// Notices may have been missed (the connection that carries them was lost and is back,
    /// or the other hosts forgot this one, not having heard from it for a lease past its
    /// expiry, and it registered anew): whatever is kept of other hosts' tasks must be read
    /// again.
    Missed,
}

/// A function told what other hosts did; it runs on the store's own thread: keep it short (a
/// channel send).
pub type NoticeHook = Box<dyn Fn(Notice<'_>) + Send + Sync>;

/// Which host runs each task's turns when several hosts share the store, and what they tell
/// each other. A host is live while it renews itself ([`Leases::renew_host`]); a task's lease
/// holds while its owner is live, and a host writes a task only while it holds its lease (a
/// host that was not heard from in time and lost its tasks to another writes nothing more
/// to them). A store of one host ([`Leases::shared`] false) always holds every lease.
pub trait Leases: Send + Sync {
    /// Whether other hosts may share this store.
    fn shared(&self) -> bool;

    /// This host's id among those sharing the store.
    fn host_id(&self) -> &str;

    /// Takes task `task_id`'s lease for this host unless another live host holds it.
    fn take_lease(&self, task_id: &str) -> Result<Lease>;

    /// Keeps this host live for another lease period; call well within it. A host not heard
    /// from for a lease past its expiry is forgotten by the others' renewals (they announce
    /// their writes to it no more); renewing then registers it anew and tells it
    /// [`Notice::Missed`].
    fn renew_host(&self) -> Result<()>;

    /// Tasks this host should take over, at most `limit`: those mid-turn or with queued input
    /// whose lease holder is no longer live, and those with queued input and no lease.
    fn orphaned_tasks(&self, limit: usize) -> Result<Vec<String>>;

    /// Ends this host's part (a clean stop): leases of tasks neither mid-turn nor with queued
    /// input are given up, and the rest pass to another host at once.
    fn end_host(&self) -> Result<()>;

    /// Sends host `host` the message `body` (its [`Notice::Message`]).
    fn tell(&self, host: &str, body: &str) -> Result<()>;

    /// Sets the function told what other hosts do (once; later calls are ignored).
    fn set_notice_hook(&self, hook: NoticeHook);
}

/// Every area: what the host holds a backend as.
pub trait Backend: TaskLogs + Queues + Dedupe + HostState + PluginKv + Durability + Leases {}

impl<T: TaskLogs + Queues + Dedupe + HostState + PluginKv + Durability + Leases> Backend for T {}
