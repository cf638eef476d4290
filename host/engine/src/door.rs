//! The one door for arrivals: every input a task takes (a user's, a tool webhook's event, a
//! source webhook's or an API fire's new task, a schedule tick's, a wakeup's) enters here.
//!
//! A delivery comes through with [`Engine::arrive`]: the door checks its delivery id against
//! the dedupe window and holds that id's lock while the caller's admission decides what the
//! delivery brings (routing and filters, middleware, triggers creating tasks), so that a
//! redelivery racing its original waits for it, while deliveries with other ids never wait
//! for it; then it accepts what was admitted. [`Arrival::accept`] (also the way in for an
//! arrival that is no delivery: a user's input, a tick, a wakeup) builds each input's trigger
//! envelope from its [`Origin`], writes every queue entry and the delivery id in one
//! transaction, flushed (a group commit) before it returns, and wakes the tasks' runners.
//! Nothing else queues input or starts a runner for it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use agentmesh_expr::Bound;
use agentmesh_model::delivery::{Headers, Proof, delivery_id, safe_headers};
use agentmesh_model::event::TriggerEnvelope;
use agentmesh_store::{Backend, Delivery, Typed, now_ms, now_rfc3339};
use serde_json::{Value, json};
use tokio::sync::{Mutex, OwnedMutexGuard};

use crate::{Engine, EngineError, QueuedInput, Result, lock};

/// Why a delivery was refused.
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    /// No tool `ns/name`, or it declares no webhook event.
    #[error("no tool `{0}` with webhook events")]
    UnknownTool(String),
    /// No trigger source of this name in the host config.
    #[error("no trigger source `{0}` in the host config")]
    UnknownSource(String),
    /// No event of the tool accepts the signature.
    #[error("{0}")]
    Unauthorized(String),
    /// The body is not JSON.
    #[error("the body is not JSON: {0}")]
    NotJson(String),
    /// The host failed.
    #[error(transparent)]
    Engine(#[from] EngineError),
}

/// How long delivery ids are remembered when the host config says nothing (30 days).
pub const DEFAULT_DEDUPE_WINDOW: Duration = Duration::from_secs(30 * 24 * 3600);

/// Where an arrival came from: what its inputs' trigger envelope says.
#[derive(Debug, Clone, PartialEq)]
pub enum Origin {
    /// Typed by a user (`POST /v1/tasks`, `POST /v1/tasks/{id}/input`, `agentmesh run`): no
    /// envelope.
    User,
    /// A webhook delivery, of a tool's event or to a trigger source (the envelope carries
    /// its headers an agent may see).
    Webhook {
        /// Who the source authenticated, if it says.
        auth_subject: Option<String>,
    },
    /// `POST /v1/triggers/{id}/fire` (the envelope carries its headers an agent may see).
    Api {
        /// Who the bearer token belongs to.
        auth_subject: Option<String>,
    },
    /// A tick of schedule `id`.
    Schedule {
        /// `namespace/name`.
        id: String,
    },
    /// Wakeup `id`, requested by the task itself.
    Wakeup {
        /// The wakeup's id.
        id: String,
    },
    /// A resource update an MCP server sent (`notifications/resources/updated`).
    McpEvent,
}

/// The trigger envelope's `source` of a schedule's tick.
pub(crate) const SCHEDULE_SOURCE: &str = "schedule";

impl Origin {
    /// The envelope of an input of this origin in `arrival`; `None` for a user's.
    fn envelope(&self, arrival: &Arrival<'_>) -> Option<TriggerEnvelope> {
        let delivered = || arrival.delivered.as_ref().map(|(headers, _)| headers);
        let (source, schedule_id, headers, auth_subject) = match self {
            Origin::User => return None,
            Origin::Webhook { auth_subject } => ("webhook", None, delivered(), auth_subject),
            Origin::Api { auth_subject } => ("api", None, delivered(), auth_subject),
            Origin::Schedule { id } => (SCHEDULE_SOURCE, Some(id), None, &None),
            Origin::Wakeup { id } => ("self-schedule", Some(id), None, &None),
            Origin::McpEvent => ("mcp-event", None, None, &None),
        };
        Some(TriggerEnvelope {
            source: source.into(),
            fired_at: arrival.fired_at,
            schedule_id: schedule_id.cloned(),
            delivery_id: arrival.delivery_id().map(str::to_owned),
            headers: headers.cloned(),
            auth_subject: auth_subject.clone(),
        })
    }
}

/// Where a delivery came in. The door remembers a delivery id within its entrance only, so
/// that one sender's ids never stand for another's: a bearer token's holder or an unsigned
/// event's sender cannot name, ahead of time, the id a signed delivery will bring elsewhere.
/// Every key starts with the entrance's kind (`tool:`, `poll:`, `source:`, `trigger:`), so none names
/// a claim of the host's own ([`Arrival::once`]: `tick:…`, `wakeup:…`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entrance<'a> {
    /// The webhook of tool `namespace/name`.
    Tool(&'a str),
    /// The items tool `namespace/name`'s pollers fetched, under delivery ids the host made
    /// ([`PollKey::delivery_id`](crate::PollKey::delivery_id)), which anyone may compute: no
    /// webhook delivery claims one first.
    Poll(&'a str),
    /// Trigger source `name`'s webhook.
    Source(&'a str),
    /// Trigger `namespace/name`'s API fire.
    Trigger(&'a str),
}

impl Entrance<'_> {
    /// The key delivery id `id` is remembered by at this entrance: its kind, its name with `%`
    /// and `:` escaped (so that no name and id spell another name's key), then `id`.
    fn key(self, id: &str) -> String {
        let (kind, name) = match self {
            Entrance::Tool(name) => ("tool", name),
            Entrance::Poll(name) => ("poll", name),
            Entrance::Source(name) => ("source", name),
            Entrance::Trigger(name) => ("trigger", name),
        };
        let name = name.replace('%', "%25").replace(':', "%3A");
        format!("{kind}:{name}:{id}")
    }
}

/// A delivery at the door: its headers, and its delivery id (read from the header its
/// [`Proof`] covers) with the key it is remembered by at its [`Entrance`].
#[derive(Debug, Clone)]
pub struct Delivered<'a> {
    headers: &'a Headers,
    /// The id as sent, and its key.
    id: Option<(&'a str, String)>,
}

impl<'a> Delivered<'a> {
    /// A delivery with `headers`, proved by `proof`, at `entrance`.
    pub fn new(headers: &'a Headers, proof: Proof, entrance: Entrance<'_>) -> Self {
        let id = delivery_id(headers, proof).map(|id| (id, entrance.key(id)));
        Delivered { headers, id }
    }

    /// A delivery without an id, never a repeat of another (an MCP server's resource update).
    pub fn unnamed(headers: &'a Headers) -> Self {
        Delivered { headers, id: None }
    }
}

/// Who runs the input an arrival queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Run {
    /// The task's runner, woken now, in the background (the server, triggers, schedules).
    Background,
    /// The caller, with [`Engine::run_until_idle`] (`agentmesh run`, a delegating task); the
    /// input is written on the caller's thread, which is about to run the task anyway.
    Caller,
}

/// What an accepted arrival became.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Accepted {
    /// On disk in these tasks' queues (in the order given), at `queued_at` (epoch ms).
    Queued {
        /// The tasks, one per input (a lock is none).
        tasks: Vec<String>,
        /// When (epoch ms).
        queued_at: i64,
    },
    /// A repeat of a delivery id seen within the dedupe window: nothing was queued.
    Duplicate,
}

/// What a delivery's admission decided, while its delivery id was held at the door.
pub enum Admitted<T> {
    /// Queue these inputs (none: only the delivery id is remembered); `T` goes back to the
    /// caller.
    Inputs(Vec<Input>, T),
    /// Nothing to queue, and the delivery id is not remembered: a redelivery is admitted
    /// afresh.
    Nothing(T),
}

/// What a delivery became at the door.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Through<T> {
    /// A repeat of a delivery id seen within the dedupe window: nothing was admitted or
    /// queued.
    Duplicate,
    /// Admitted and queued (on disk) in these tasks' queues, in the order given, at
    /// `queued_at` (epoch ms).
    Queued {
        /// The tasks, one per input (a lock is none).
        tasks: Vec<String>,
        /// When (epoch ms).
        queued_at: i64,
        /// What admission returned.
        admitted: T,
    },
    /// Admission queued nothing and left the delivery id unremembered.
    Nothing(T),
}

/// The delivery ids at the door (by key, see [`Entrance`]), each with the lock its repeats
/// wait on. An id is forgotten when its arrival ends and nobody waits behind it.
#[derive(Default)]
pub(crate) struct Door {
    arriving: std::sync::Mutex<HashMap<String, Arc<Mutex<()>>>>,
}

/// Delivery id `id` held at the door by its `key`; dropping it lets the next arrival of the
/// key in.
struct Serial<'a> {
    door: &'a Door,
    id: String,
    key: String,
    lock: Arc<Mutex<()>>,
    guard: Option<OwnedMutexGuard<()>>,
}

impl Drop for Serial<'_> {
    fn drop(&mut self) {
        let mut arriving = lock(&self.door.arriving);
        drop(self.guard.take());
        // Waiters clone the lock under the map's lock: with only the map's and this one left,
        // nobody waits.
        if Arc::strong_count(&self.lock) <= 2 {
            arriving.remove(&self.key);
        }
    }
}

/// An input for a task, as it arrived; or the task's lock ([`Input::lock`]).
pub struct Input {
    /// The task's id.
    pub task: String,
    /// The TaskIO: `message` (content parts) and parameter values, normalized.
    pub io: Value,
    /// Where it came from.
    pub origin: Origin,
    /// For a lock, its reason.
    lock: Option<String>,
}

impl Input {
    /// Input `io` (normalized) for task `task`, from `origin`.
    pub fn new(task: String, io: Value, origin: Origin) -> Self {
        Input {
            task,
            io,
            origin,
            lock: None,
        }
    }

    /// Task `task`'s lock, for `reason`, which event middleware asked for on an arrival from
    /// `origin`: no input. It is written with the arrival, ahead of every input of the task,
    /// so that the lock holds once the arrival is answered even if the host goes down before
    /// the task's running turn reaches its next step (where the lock ends it): whichever host
    /// runs the task next locks it before anything else of it runs.
    pub fn lock(task: String, reason: String, origin: Origin) -> Self {
        Input {
            task,
            io: Value::Null,
            origin,
            lock: Some(reason),
        }
    }
}

/// Where a lock waits in its task's queue: ahead of every input (`queued_at` 0).
const LOCK_QUEUED_AT: i64 = 0;

/// An arrival through the door, not yet accepted: while it lives, a repeat of its delivery id
/// waits.
pub struct Arrival<'a> {
    fired_at: i64,
    /// A delivery's headers an agent may see, and when it was received (RFC 3339).
    delivered: Option<(Value, String)>,
    /// Its delivery id, held at the door.
    serial: Option<Serial<'a>>,
    /// The id it is remembered by when it is no delivery but may come to several hosts
    /// sharing the store at once (see [`Arrival::once`]).
    once: Option<String>,
    /// Until when its id is remembered, when not for the dedupe window.
    until: Option<i64>,
}

impl Default for Arrival<'_> {
    fn default() -> Self {
        Arrival::new()
    }
}

impl Arrival<'_> {
    /// An arrival that is no delivery (never a repeat): a user's input, a tick, a wakeup.
    pub fn new() -> Self {
        Arrival {
            fired_at: now_ms(),
            delivered: None,
            serial: None,
            once: None,
            until: None,
        }
    }

    /// An arrival that is no delivery but that every host sharing the store makes (a wakeup's
    /// fire, a schedule's tick): remembered by `id` as a delivery is, so that only the first
    /// is queued and the others are [`Accepted::Duplicate`]. No delivery can name `id` when it
    /// starts with none of an [`Entrance`]'s kinds (the host's claims are `tick:…` and
    /// `wakeup:…`).
    pub fn once(id: String) -> Self {
        Arrival {
            once: Some(id),
            ..Arrival::new()
        }
    }

    /// An arrival [`once`](Arrival::once) by `id`, remembered until `until` (epoch ms) rather
    /// than for the dedupe window.
    pub fn once_until(id: String, until: i64) -> Self {
        Arrival {
            until: Some(until),
            ..Arrival::once(id)
        }
    }

    /// When it arrived (epoch ms).
    pub fn fired_at(&self) -> i64 {
        self.fired_at
    }

    /// Its delivery id, if it has one.
    fn delivery_id(&self) -> Option<&str> {
        self.serial.as_ref().map(|s| s.id.as_str())
    }

    /// The delivery's event `name` with `payload`, as routing, filters, middleware and
    /// `source.before` see it (`event`). The event shares `payload`: however many events,
    /// tasks and steps read it, the delivery's JSON is one tree.
    pub fn event(&self, name: &str, payload: &Bound) -> Bound {
        let (headers, received_at) = match &self.delivered {
            Some((headers, received_at)) => (headers.clone(), received_at.as_str()),
            None => (Value::Null, ""),
        };
        Bound::object([
            ("name", Bound::new(json!(name))),
            ("payload", payload.clone()),
            ("headers", Bound::new(headers)),
            ("delivery_id", Bound::new(json!(self.delivery_id()))),
            ("received_at", Bound::new(json!(received_at))),
        ])
    }

    /// Queues `inputs`, each with its origin's envelope, and remembers the arrival's
    /// delivery id for the dedupe window, in one transaction flushed before it returns (off
    /// the async workers); then, for [`Run::Background`], wakes each task's runner. With no
    /// input, only the delivery id is remembered (a delivery that created no task is still
    /// not taken twice).
    pub async fn accept(self, engine: &Engine, inputs: Vec<Input>, run: Run) -> Result<Accepted> {
        let queued_at = now_ms();
        if inputs.is_empty() && self.serial.is_none() && self.once.is_none() {
            return Ok(Accepted::Queued {
                tasks: Vec::new(),
                queued_at,
            });
        }
        let window = engine
            .plan()
            .host
            .policy
            .dedupe_window
            .map_or(DEFAULT_DEDUPE_WINDOW, |d| d.0);
        let until = self.until.unwrap_or_else(|| {
            queued_at.saturating_add(i64::try_from(window.as_millis()).unwrap_or(i64::MAX))
        });
        let (tasks, entries): (Vec<String>, Vec<QueuedInput>) = inputs
            .into_iter()
            .map(
                |Input {
                     task,
                     io,
                     origin,
                     lock,
                 }| {
                    let trigger = origin.envelope(&self);
                    let input = QueuedInput {
                        io,
                        queued_at,
                        trigger,
                        lock,
                    };
                    (task, input)
                },
            )
            .unzip();
        let store = engine.store();
        let delivery = self
            .serial
            .as_ref()
            .map(|s| s.key.as_str())
            .or(self.once.as_deref())
            .map(|key| (key, until));
        let refs: Vec<(&str, i64, &QueuedInput)> = tasks
            .iter()
            .zip(&entries)
            .map(|(task, input)| {
                let at = match input.lock {
                    Some(_) => LOCK_QUEUED_AT,
                    None => input.queued_at,
                };
                (task.as_str(), at, input)
            })
            .collect();
        // The write waits for an fsync, shared with concurrent writes (a group commit): in
        // the background it is awaited holding no thread; the caller that runs the task on
        // its own thread anyway waits there.
        let outcome = match run {
            Run::Background => {
                let (outcome, durable) = store.deliver_deferred(delivery, &refs)?;
                durable.await?;
                outcome
            }
            Run::Caller => store.deliver_durably(delivery, &refs)?,
        };
        // What waited for this delivery id may now find it recorded.
        drop(self.serial);
        match outcome {
            Delivery::Duplicate => Ok(Accepted::Duplicate),
            Delivery::Queued { keys, told } => {
                let mut queued = Vec::with_capacity(tasks.len());
                for ((task, key), input) in tasks.into_iter().zip(keys).zip(entries) {
                    match input.lock {
                        // Ahead of what is known of the queue: its runner reads the store.
                        // The running turn is asked to stop here now; the lock written
                        // stands if this host goes down first.
                        Some(reason) => {
                            engine.records().forget_queue(&task);
                            engine.lock_in_background(task, reason);
                        }
                        // Their runners learn of these inputs here, not from the store.
                        None => {
                            engine.records().queued(&task, key, input);
                            queued.push(task);
                        }
                    }
                }
                // A task another host holds was told by the store in the same commit; its
                // runner here would only find the lease elsewhere and tell the holder again.
                if run == Run::Background {
                    let told: std::collections::HashSet<&String> = told.iter().collect();
                    for task in queued.iter().filter(|t| !told.contains(t)) {
                        engine.wake(task);
                    }
                }
                Ok(Accepted::Queued {
                    tasks: queued,
                    queued_at,
                })
            }
        }
    }
}

impl Door {
    /// Takes a webhook delivery through the door (see [`Engine::arrive`]).
    pub(crate) async fn through<T, E: From<EngineError>>(
        &self,
        engine: &Engine,
        delivered: Delivered<'_>,
        admit: impl AsyncFnOnce(&Arrival<'_>) -> std::result::Result<Admitted<T>, E>,
    ) -> std::result::Result<Through<T>, E> {
        let Some(arrival) = self.open(engine.store(), delivered).await? else {
            return Ok(Through::Duplicate);
        };
        let (inputs, admitted) = match admit(&arrival).await? {
            Admitted::Nothing(admitted) => return Ok(Through::Nothing(admitted)),
            Admitted::Inputs(inputs, admitted) => (inputs, admitted),
        };
        Ok(
            match arrival.accept(engine, inputs, Run::Background).await? {
                Accepted::Duplicate => Through::Duplicate,
                Accepted::Queued { tasks, queued_at } => Through::Queued {
                    tasks,
                    queued_at,
                    admitted,
                },
            },
        )
    }

    /// Opens the door for a webhook delivery: `None` when its delivery id was seen within the
    /// dedupe window; otherwise its id is held until the arrival is dropped.
    async fn open<'d>(
        &'d self,
        store: &dyn Backend,
        Delivered { headers, id }: Delivered<'_>,
    ) -> Result<Option<Arrival<'d>>> {
        let delivered = Some((Value::Object(safe_headers(headers)), now_rfc3339()));
        let Some((id, key)) = id else {
            return Ok(Some(Arrival {
                fired_at: now_ms(),
                delivered,
                serial: None,
                once: None,
                until: None,
            }));
        };
        let gate = Arc::clone(lock(&self.arriving).entry(key.clone()).or_default());
        let mut serial = Serial {
            door: self,
            id: id.to_owned(),
            key,
            lock: Arc::clone(&gate),
            guard: None,
        };
        serial.guard = Some(gate.lock_owned().await);
        // Seen: `serial` lets the next one in as it goes.
        if store.is_remembered(&serial.key)? {
            return Ok(None);
        }
        Ok(Some(Arrival {
            fired_at: now_ms(),
            delivered,
            serial: Some(serial),
            once: None,
            until: None,
        }))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::future::Future;
    use std::pin::pin;
    use std::task::{Context, Poll, Waker};

    use super::*;

    fn headers(id: &str) -> Headers {
        [("X-Delivery-Id", id)].into_iter().collect()
    }

    fn at_tool(headers: &Headers) -> Delivered<'_> {
        Delivered::new(headers, Proof::Unsigned, Entrance::Tool("ops/pager"))
    }

    #[test]
    fn no_entrance_and_id_spell_another_entrances_key() {
        let key = |entrance: Entrance<'_>, id: &str| entrance.key(id);
        assert_eq!(
            key(Entrance::Tool("ops/pager"), "d-1"),
            "tool:ops/pager:d-1"
        );
        assert_ne!(
            key(Entrance::Source("a:b"), "c"),
            key(Entrance::Source("a"), "b:c")
        );
        assert_ne!(
            key(Entrance::Source("a%3Ab"), "c"),
            key(Entrance::Source("a:b"), "c")
        );
        assert_ne!(
            key(Entrance::Trigger("a/b"), "d"),
            key(Entrance::Tool("a/b"), "d")
        );
        for entrance in [
            Entrance::Tool("t"),
            Entrance::Source("s"),
            Entrance::Trigger("g"),
        ] {
            let claim = key(entrance, "tick:t/nightly:1700000000000");
            assert!(
                !claim.starts_with("tick:") && !claim.starts_with("wakeup:"),
                "{claim}"
            );
        }
    }

    #[tokio::test]
    async fn an_arrival_given_up_while_waiting_at_the_door_leaves_no_id_behind() {
        let dir = tempfile::tempdir().unwrap();
        let store = agentmesh_store::open(dir.path()).unwrap();
        let door = Door::default();
        let first_headers = headers("d-1");
        let first = door
            .open(store.as_ref(), at_tool(&first_headers))
            .await
            .unwrap()
            .unwrap();
        {
            // A redelivery waits behind the first, then its caller gives up (its connection
            // closed): the future is dropped while waiting.
            let again = headers("d-1");
            let mut waiting = pin!(door.open(store.as_ref(), at_tool(&again)));
            let mut cx = Context::from_waker(Waker::noop());
            assert!(matches!(waiting.as_mut().poll(&mut cx), Poll::Pending));
        }
        drop(first);
        assert!(
            lock(&door.arriving).is_empty(),
            "the door still holds an id nobody waits for"
        );
    }
}
