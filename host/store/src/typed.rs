//! Typed access to any backend: [`Typed`] encodes what callers hand it as JSON and decodes
//! what the backend's traits return, so the engine works with its own serde types while a
//! backend sees bytes. Implemented for every [`Backend`], `dyn Backend` included; durability
//! is in each writing method's name, as in the traits.

use serde::Serialize;
use serde::de::DeserializeOwned;

use agentmesh_model::event::{Event, EventKind, EventSource};

use crate::backend::{Backend, RawRecord, RawWrite};
use crate::{
    Delivery, Parts, QueueKey, RecordWrite, Result, StoreError, Written, now_ms, now_rfc3339,
};

/// The typed methods of a backend.
pub trait Typed: Backend {
    /// Gives `events` their ids, a timestamp and the sequence numbers `first_seq`,
    /// `first_seq + 1`, …, ready for [`Typed::write_record_buffered`].
    fn stamp(&self, first_seq: u64, events: Vec<(EventSource, EventKind)>) -> Result<Vec<Event>> {
        let timestamp = now_rfc3339();
        events
            .into_iter()
            .zip(first_seq..)
            .map(|((source, kind), seq)| {
                Ok(Event {
                    seq,
                    id: format!("ev_{:016x}", self.next_id()?),
                    timestamp: timestamp.clone(),
                    source,
                    kind,
                })
            })
            .collect()
    }

    /// Writes `record` as task `task_id`'s record (with its new part, if any), appends
    /// `events` (stamped by [`Typed::stamp`], continuing the log without a gap) and, with
    /// `take`, removes that queue entry, all or nothing, as [`crate::TaskLogs::write_buffered`]
    /// says. Returns what was written, or `None`, writing nothing, when `take` is gone.
    fn write_record_buffered<R: Serialize, P: Serialize>(
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
            active: record.active,
        };
        self.write_buffered(task_id, raw, events, take)
    }

    /// Writes `record` as task `task_id`'s whole record (no parts) and appends `events`,
    /// numbered to continue its log, in one write. Returns the events as stamped.
    fn commit_buffered<R: Serialize>(
        &self,
        task_id: &str,
        record: &R,
        events: Vec<(EventSource, EventKind)>,
    ) -> Result<Vec<Event>> {
        let stamped = self.stamp(self.last_event_seq(task_id)? + 1, events)?;
        self.write_record_buffered(task_id, RecordWrite::whole(record), &stamped, None)?;
        Ok(stamped)
    }

    /// Task `task_id`'s record, without its parts.
    fn task<R: DeserializeOwned>(&self, task_id: &str) -> Result<Option<R>> {
        match self.record(task_id)? {
            Some(raw) => Ok(Some(serde_json::from_slice(&raw.head)?)),
            None => Ok(None),
        }
    }

    /// Task `task_id`'s record and its parts, in order (see [`RecordWrite`]).
    fn task_with_parts<R: DeserializeOwned, P: DeserializeOwned>(
        &self,
        task_id: &str,
    ) -> Result<Option<(R, Parts<P>)>> {
        match self.record(task_id)? {
            Some(raw) => Ok(Some(decode_record(&raw)?)),
            None => Ok(None),
        }
    }

    /// Every task record with its parts, in id order. Records that do not decode are skipped
    /// with a warning rather than failing the listing.
    fn tasks_with_parts<R: DeserializeOwned, P: DeserializeOwned>(
        &self,
    ) -> Result<Vec<(R, Parts<P>)>> {
        let mut out = Vec::new();
        for id in self.record_ids()? {
            let Some(raw) = self.record(&id)? else {
                continue;
            };
            match decode_record(&raw) {
                Ok(task) => out.push(task),
                Err(StoreError::Codec(e)) => {
                    tracing::warn!(task.id = %id, "undecodable task record: {e}")
                }
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }

    /// Task `task_id`'s events with `seq > after`, in order.
    fn events(&self, task_id: &str, after: u64) -> Result<Vec<Event>> {
        Ok(self
            .events_between(task_id, after.saturating_add(1), u64::MAX)?
            .0)
    }

    /// Queues `input` for task `task_id`, durable before it returns (the caller may
    /// acknowledge it). Inputs are taken in `queued_at` order, then arrival order.
    fn enqueue_durably<I: Serialize>(
        &self,
        task_id: &str,
        queued_at: i64,
        input: &I,
    ) -> Result<QueueKey> {
        match self.deliver_durably(None, &[(task_id, queued_at, input)])? {
            Delivery::Queued { keys, .. } => keys.into_iter().next().ok_or_else(|| {
                StoreError::Conflict(format!("task `{task_id}`: its input was not queued"))
            }),
            // Only a delivery id is ever a duplicate.
            Delivery::Duplicate => Err(StoreError::Conflict(format!(
                "task `{task_id}`: an input without a delivery id was called a duplicate"
            ))),
        }
    }

    /// Queues `inputs` (task id, `queued_at`, input) and remembers `delivery`, durable before
    /// it returns, as [`crate::Queues::queue_durably`] says.
    fn deliver_durably<I: Serialize>(
        &self,
        delivery: Option<(&str, i64)>,
        inputs: &[(&str, i64, &I)],
    ) -> Result<Delivery> {
        let encoded = encode_inputs(inputs)?;
        self.queue_durably(delivery, &input_refs(&encoded))
    }

    /// As [`Typed::deliver_durably`], returning before the disk has it, with the wait for
    /// that ([`crate::Queues::queue_deferred`]).
    fn deliver_deferred<I: Serialize>(
        &self,
        delivery: Option<(&str, i64)>,
        inputs: &[(&str, i64, &I)],
    ) -> Result<(Delivery, crate::Durable)> {
        let encoded = encode_inputs(inputs)?;
        self.queue_deferred(delivery, &input_refs(&encoded))
    }

    /// The earliest queued input of task `task_id`.
    fn next_queued<I: DeserializeOwned>(&self, task_id: &str) -> Result<Option<(QueueKey, I)>> {
        match self.first_queued(task_id)? {
            Some((key, bytes)) => Ok(Some((key, serde_json::from_slice(&bytes)?))),
            None => Ok(None),
        }
    }

    /// Host state `key` in namespace `ns` (e.g. `trigger`, `schedule`, `wakeup`).
    fn state<T: DeserializeOwned>(&self, ns: &str, key: &str) -> Result<Option<T>> {
        match self.state_value(ns, key)? {
            Some(bytes) => Ok(Some(serde_json::from_slice(&bytes)?)),
            None => Ok(None),
        }
    }

    /// Every state entry of namespace `ns`: key and value. Entries that do not decode as `T`
    /// are skipped with a warning.
    fn states<T: DeserializeOwned>(&self, ns: &str) -> Result<Vec<(String, T)>> {
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

    /// Sets host state `key` in namespace `ns`, durable with the next flush. For a caller
    /// that holds a lock over a read-modify-write: it can release the lock before flushing,
    /// so that concurrent writers share one fsync.
    fn save_state_buffered<T: Serialize>(&self, ns: &str, key: &str, value: &T) -> Result<()> {
        self.put_state_buffered(ns, key, &serde_json::to_vec(value)?)
    }

    /// Sets host state `key` in namespace `ns`, durable before it returns.
    fn save_state_durably<T: Serialize>(&self, ns: &str, key: &str, value: &T) -> Result<()> {
        self.save_state_buffered(ns, key, value)?;
        self.flush()
    }

    /// Deletes host state `key` in namespace `ns`, durable before it returns.
    fn delete_state_durably(&self, ns: &str, key: &str) -> Result<()> {
        self.delete_state_buffered(ns, key)?;
        self.flush()
    }

    /// Writes and flushes a small mark in the host state: whether the store can write now.
    fn probe_durably(&self) -> Result<()> {
        self.save_state_durably("host", "probe", &now_ms())
    }
}

impl<B: Backend + ?Sized> Typed for B {}

/// A stored record and its parts, decoded.
fn decode_record<R: DeserializeOwned, P: DeserializeOwned>(
    raw: &RawRecord,
) -> Result<(R, Parts<P>)> {
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

/// Inputs (task id, `queued_at`, input) with each input as JSON.
fn encode_inputs<'a, I: Serialize>(
    inputs: &[(&'a str, i64, &I)],
) -> Result<Vec<(&'a str, i64, Vec<u8>)>> {
    inputs
        .iter()
        .map(|(task, at, input)| Ok((*task, *at, serde_json::to_vec(input)?)))
        .collect()
}

/// `encoded` borrowed, as the store's queue calls take it.
fn input_refs<'a>(encoded: &'a [(&'a str, i64, Vec<u8>)]) -> Vec<(&'a str, i64, &'a [u8])> {
    encoded
        .iter()
        .map(|(task, at, bytes)| (*task, *at, bytes.as_slice()))
        .collect()
}
