//! [`Offloaded`]: any backend whose every call runs through a function the host gives. A
//! store call can block for as long as its disk does (sled's writes wait behind a stuck
//! flush): the host's function runs it where blocking holds up nothing that must answer — on
//! a thread of the turn pool as it is, elsewhere after moving the async worker's other tasks
//! to another thread — so that `/healthz`, the API and webhooks keep answering while a call is
//! stuck. The store knows nothing of the runtime: the host passes the function.

use std::sync::Arc;

use agentmesh_model::event::Event;

use crate::{
    AppendHook, Backend, Dedupe, Delivery, Durability, Durable, HostState, Lease, Leases,
    NoticeHook, PluginKv, QueueKey, Queues, RawRecord, RawWrite, Result, StoreError, TaskLogs,
    Written,
};

/// Runs the closure it is given, store call `name` (the method's name), on a thread where it
/// may block. A function that does not run it refuses the call: its caller gets an error
/// (how tests make a store fail chosen calls).
pub type Offload = fn(name: &'static str, call: &mut dyn FnMut());

/// `inner` with every call run through `offload`.
pub struct Offloaded {
    inner: Arc<dyn Backend>,
    offload: Offload,
}

impl Offloaded {
    /// `inner`, each of whose calls runs through `offload`.
    pub fn new(inner: Arc<dyn Backend>, offload: Offload) -> Offloaded {
        Offloaded { inner, offload }
    }

    fn off<T>(&self, name: &'static str, f: impl FnOnce(&dyn Backend) -> Result<T>) -> Result<T> {
        let mut f = Some(f);
        let mut out = None;
        (self.offload)(name, &mut || {
            if let Some(f) = f.take() {
                out = Some(f(self.inner.as_ref()));
            }
        });
        match (out, f) {
            (Some(out), _) => out,
            (None, Some(_)) => Err(StoreError::Io(format!("store call `{name}` was refused"))),
            (None, None) => Err(StoreError::Io(format!(
                "store call `{name}` ran and gave no result"
            ))),
        }
    }
}

impl TaskLogs for Offloaded {
    fn write_buffered(
        &self,
        task_id: &str,
        record: RawWrite<'_>,
        events: &[Event],
        take: Option<&QueueKey>,
    ) -> Result<Option<Written>> {
        self.off("write_buffered", |s| {
            s.write_buffered(task_id, record, events, take)
        })
    }
    fn record(&self, task_id: &str) -> Result<Option<RawRecord>> {
        self.off("record", |s| s.record(task_id))
    }
    fn record_ids(&self) -> Result<Vec<String>> {
        self.off("record_ids", |s| s.record_ids())
    }
    fn events_between(&self, task_id: &str, from: u64, to: u64) -> Result<(Vec<Event>, usize)> {
        self.off("events_between", |s| s.events_between(task_id, from, to))
    }
    fn last_event_seq(&self, task_id: &str) -> Result<u64> {
        self.off("last_event_seq", |s| s.last_event_seq(task_id))
    }
    fn next_id(&self) -> Result<u64> {
        self.off("next_id", |s| s.next_id())
    }
    fn set_append_hook(&self, hook: AppendHook) {
        self.inner.set_append_hook(hook);
    }
}

impl Queues for Offloaded {
    fn queue_durably(
        &self,
        delivery: Option<(&str, i64)>,
        inputs: &[(&str, i64, &[u8])],
    ) -> Result<Delivery> {
        self.off("queue_durably", |s| s.queue_durably(delivery, inputs))
    }
    fn queue_deferred(
        &self,
        delivery: Option<(&str, i64)>,
        inputs: &[(&str, i64, &[u8])],
    ) -> Result<(Delivery, Durable)> {
        // The write runs through the host's function; the wait holds no thread.
        self.off("queue_deferred", |s| s.queue_deferred(delivery, inputs))
    }
    fn first_queued(&self, task_id: &str) -> Result<Option<(QueueKey, Vec<u8>)>> {
        self.off("first_queued", |s| s.first_queued(task_id))
    }
    fn queued(&self, task_id: &str, limit: usize) -> Result<Vec<(QueueKey, Vec<u8>)>> {
        self.off("queued", |s| s.queued(task_id, limit))
    }
    fn queued_count(&self, task_id: &str) -> Result<usize> {
        self.off("queued_count", |s| s.queued_count(task_id))
    }
    fn queued_tasks(&self) -> Result<Vec<String>> {
        self.off("queued_tasks", |s| s.queued_tasks())
    }
    fn clear_queue_buffered(&self, task_id: &str) -> Result<usize> {
        self.off("clear_queue_buffered", |s| s.clear_queue_buffered(task_id))
    }
}

impl Dedupe for Offloaded {
    fn is_remembered(&self, id: &str) -> Result<bool> {
        self.off("is_remembered", |s| s.is_remembered(id))
    }
    fn forget_expired_buffered(&self) -> Result<usize> {
        self.off("forget_expired_buffered", |s| s.forget_expired_buffered())
    }
}

impl HostState for Offloaded {
    fn state_value(&self, ns: &str, key: &str) -> Result<Option<Vec<u8>>> {
        self.off("state_value", |s| s.state_value(ns, key))
    }
    fn state_values(&self, ns: &str) -> Result<Vec<(String, Vec<u8>)>> {
        self.off("state_values", |s| s.state_values(ns))
    }
    fn put_state_buffered(&self, ns: &str, key: &str, value: &[u8]) -> Result<()> {
        self.off("put_state_buffered", |s| {
            s.put_state_buffered(ns, key, value)
        })
    }
    fn delete_state_buffered(&self, ns: &str, key: &str) -> Result<()> {
        self.off("delete_state_buffered", |s| {
            s.delete_state_buffered(ns, key)
        })
    }
}

impl PluginKv for Offloaded {
    fn kv_value(&self, scope: &str, key: &str) -> Result<Option<Vec<u8>>> {
        self.off("kv_value", |s| s.kv_value(scope, key))
    }
    fn kv_put_buffered(&self, scope: &str, key: &str, value: &[u8]) -> Result<()> {
        self.off("kv_put_buffered", |s| s.kv_put_buffered(scope, key, value))
    }
    fn kv_delete_buffered(&self, scope: &str, key: &str) -> Result<()> {
        self.off("kv_delete_buffered", |s| s.kv_delete_buffered(scope, key))
    }
    fn kv_clear_task_buffered(&self, task: &str) -> Result<()> {
        self.off("kv_clear_task_buffered", |s| s.kv_clear_task_buffered(task))
    }
}

impl Durability for Offloaded {
    fn flush(&self) -> Result<()> {
        self.off("flush", |s| s.flush())
    }
    fn write_count(&self) -> u64 {
        self.inner.write_count()
    }
}

impl Leases for Offloaded {
    fn shared(&self) -> bool {
        self.inner.shared()
    }
    fn host_id(&self) -> &str {
        self.inner.host_id()
    }
    fn take_lease(&self, task_id: &str) -> Result<Lease> {
        self.off("take_lease", |s| s.take_lease(task_id))
    }
    fn renew_host(&self) -> Result<()> {
        self.off("renew_host", |s| s.renew_host())
    }
    fn orphaned_tasks(&self, limit: usize) -> Result<Vec<String>> {
        self.off("orphaned_tasks", |s| s.orphaned_tasks(limit))
    }
    fn end_host(&self) -> Result<()> {
        self.off("end_host", |s| s.end_host())
    }
    fn tell(&self, host: &str, body: &str) -> Result<()> {
        self.off("tell", |s| s.tell(host, body))
    }
    fn set_notice_hook(&self, hook: NoticeHook) {
        self.inner.set_notice_hook(hook);
    }
}
