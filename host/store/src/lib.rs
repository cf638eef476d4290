//! The agentmesh store: everything stateful the host owns, behind traits any backend can
//! implement.
//!
//! - [`backend`]: what the host needs of a store, by area — task records and their
//!   append-only event logs ([`TaskLogs`]), each task's input queue ([`Queues`]), delivery
//!   ids ([`Dedupe`]), the host's own records ([`HostState`]), plugin key-value
//!   ([`PluginKv`]) and flushing ([`Durability`]) — with each write's durability in its name
//!   (`…_durably` returns once the change is on disk, `…_buffered` once it is written, durable
//!   with the next flush) and bytes at the boundary, so the host holds any backend as
//!   `Arc<dyn Backend>`;
//! - [`typed`]: [`Typed`], the same methods over the engine's serde types, for every backend;
//! - `chunk`: one write's events as one stored value (both backends);
//! - [`sled_store`]: [`SledStore`], the backend on sled (with `head`, the record encoding that
//!   makes its task writes crash-atomic, and `flush`, the group commit that lets concurrent
//!   acknowledgements share one fsync);
//! - [`postgres`]: [`PgStore`], the backend on PostgreSQL (its schema versioned and migrated
//!   at open, each operation one statement, durability mapped onto `synchronous_commit`);
//! - [`offload`]: [`Offloaded`], any backend with every call run through the host's function
//!   (which keeps a blocked call off the async workers that must answer);
//! - [`copy`]: what a sled store hands a PostgreSQL one (`agentmesh store copy`);
//! - [`conformance`]: the suite every backend must pass (`tests/conformance.rs` runs it for
//!   sled).
//!
//! A change that spans keys is all or nothing across crashes: a task write stores the record
//! together with the events that changed it and, when it starts processing an input, removes
//! that queue entry, so an input is processed exactly once across crashes. Input is durable
//! before it is acknowledged. The store knows nothing of CEL, wasmtime or HTTP: task records
//! are any serde type the engine defines.
//!
//! ```
//! # fn main() -> Result<(), agentmesh_store::StoreError> {
//! use agentmesh_model::event::{EventKind, EventSource};
//! use agentmesh_store::Typed;
//! let dir = tempfile::tempdir().map_err(|e| agentmesh_store::StoreError::Io(e.to_string()))?;
//! let store = agentmesh_store::open(dir.path())?;
//! let events = store.commit_buffered("t_1", &serde_json::json!({"status": "idle"}), vec![
//!     (EventSource::Environment, EventKind::PauseEvent {}),
//! ])?;
//! store.flush()?;
//! assert_eq!(events[0].seq, 1);
//! assert_eq!(store.events("t_1", 0)?.len(), 1);
//! # Ok(()) }
//! ```

pub mod backend;
mod chunk;
pub mod conformance;
pub mod copy;
mod flush;
mod head;
pub mod offload;
pub mod postgres;
pub mod sled_store;
pub mod typed;

use std::path::Path;
use std::sync::Arc;

pub use backend::{
    Backend, Dedupe, Durability, Durable, HostState, Lease, Leases, Notice, NoticeHook, PluginKv,
    Queues, RawRecord, RawWrite, TaskLogs,
};
pub use offload::{Offload, Offloaded};
pub use postgres::{PgOptions, PgStore};
pub use sled_store::SledStore;
pub use typed::Typed;

/// Opens (or creates) the host's store in data directory `dir`.
pub fn open(dir: &Path) -> Result<Arc<dyn Backend>> {
    Ok(Arc::new(SledStore::open(dir)?))
}

/// Whether data directory `dir` holds a store, without creating one.
pub fn exists(dir: &Path) -> bool {
    SledStore::exists(dir)
}

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
    /// The database refused or failed an operation (not a lost connection: that is
    /// [`StoreError::Io`]).
    #[error("store: {0}")]
    Database(String),
    /// Two writers raced on one task's log.
    #[error("store: {0}")]
    Conflict(String),
    /// This host no longer holds the task's lease (see [`Leases`]): another host took the
    /// task over.
    #[error("store: {0}")]
    LeaseLost(String),
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

/// A queued input's place in its task's queue: ordered by `queued_at`, then arrival. Keys of
/// one task's queue compare in that order.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct QueueKey(pub(crate) Vec<u8>);

/// What [`Typed::write_record_buffered`] wrote, in bytes as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    /// The record.
    pub record_bytes: usize,
    /// The record's new part (0 for none).
    pub part_bytes: usize,
    /// The events.
    pub event_bytes: usize,
    /// The task's queue was empty once the write was done (input queued since may have filled
    /// it): whoever runs the task's turns need not ask for the next input.
    pub queue_empty: bool,
}

/// A task record for [`Typed::write_record_buffered`]: what replaces the stored record, and the part it
/// appends.
///
/// A record may keep what only grows (lists of past calls, inputs, outputs) in parts: each
/// write appends the part that grew, so it costs what changed rather than the task's length.
/// Reading the record ([`Typed::task_with_parts`]) gives the fixed part and the parts, in
/// order, for the caller to join.
#[derive(Debug)]
pub struct RecordWrite<'a, R, P> {
    /// The record without its parts.
    pub head: &'a R,
    /// How many parts the record has with this write (numbered from 1; 0 for none).
    pub parts: u64,
    /// Part number `parts`, appended by this write; `None` when the parts do not change.
    pub new_part: Option<&'a P>,
    /// The task is mid-turn (or waits in a review) with this write (see [`RawWrite::active`]).
    pub active: bool,
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
            active: false,
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

/// What [`Queues::queue_durably`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivery {
    /// The delivery id was seen within its window: nothing was queued.
    Duplicate,
    /// Every input was queued (and is durable): each one's key, and the tasks among them the
    /// store told of it already, as another live host holds their leases (see [`Leases`]: it
    /// heard [`Notice::Queued`] on commit), so the queuing host need not wake their runners.
    Queued {
        /// The inputs' keys, in order.
        keys: Vec<QueueKey>,
        /// Tasks whose holders were told (always empty on a store of one host).
        told: Vec<String>,
    },
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
