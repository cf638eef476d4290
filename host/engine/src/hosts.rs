//! Several hosts on one store ([`agentmesh_store::Leases`]): which tasks this host runs, what
//! the other hosts tell it, and taking over the tasks of a host that went quiet.
//!
//! A task's turns run on the host that holds its lease. A host takes a task's lease when it
//! first runs or creates it, or when its holder is no longer live, and keeps it while it lives
//! (a task's tool sessions stay on one host). Input queued on another host wakes the holder
//! with a message (`kick`); an interrupt, a deletion or a review decision asked of another
//! host is made by the holder, asked with a request and answered with a reply. A write of
//! another host drops this host's cached record of the task; the watchers (routing index,
//! scheduler) read the tasks other hosts wrote again, gathered every [`REFRESH_EVERY`]. Every
//! [`SWEEP_EVERY`] a host takes over the tasks whose holder went quiet mid-turn or with input
//! waiting (see `Engine::serve_hosts`).

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use agentmesh_store::{Backend, Lease, Notice, NoticeHook};
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot};

use crate::{EngineError, Result, lock};

/// How often a host looks for tasks to take over.
pub(crate) const SWEEP_EVERY: Duration = Duration::from_secs(2);

/// How often the watchers read the tasks other hosts wrote.
pub(crate) const REFRESH_EVERY: Duration = Duration::from_millis(200);

/// How many tasks one sweep takes over at most.
pub(crate) const SWEEP_BATCH: usize = 200;

/// How long a request to another host waits for its reply.
const ASK_TIMEOUT: Duration = Duration::from_secs(30);

/// Where a task's turns run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Holder {
    /// On this host; `taken_over`: its lease was just taken from a host that went quiet, or
    /// the task was mid-turn when last written by a host that no longer holds it, so it must
    /// be brought back first.
    Here { taken_over: bool },
    /// On the live host with this id.
    Elsewhere(String),
}

/// What a host asks the holder of a task to do.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub(crate) enum Request {
    /// [`crate::Engine::interrupt`].
    Interrupt { task: String },
    /// [`crate::Engine::delete_task`].
    Delete { task: String },
    /// [`crate::Engine::lock_task`].
    Lock { task: String, reason: String },
    /// [`crate::Engine::decide_review`], by a decider the asking host has checked.
    Decide {
        task: String,
        review: String,
        approve: bool,
        admin: bool,
        subject: String,
    },
}

/// The holder's answer: `None` when it did what was asked, else why not.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Reply {
    error: Option<(ErrorKind, String)>,
}

/// An [`EngineError`]'s kind, as a reply carries it.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum ErrorKind {
    NotFound,
    Conflict,
    Forbidden,
    Input,
    Internal,
}

impl Reply {
    pub(crate) fn of(done: &Result<()>) -> Reply {
        let error = match done {
            Ok(()) => None,
            Err(e) => Some(match e {
                EngineError::NotFound(m) => (ErrorKind::NotFound, m.clone()),
                EngineError::Conflict(m) => (ErrorKind::Conflict, m.clone()),
                EngineError::Forbidden(m) => (ErrorKind::Forbidden, m.clone()),
                EngineError::Input(m) => (ErrorKind::Input, m.clone()),
                other => (ErrorKind::Internal, other.to_string()),
            }),
        };
        Reply { error }
    }

    fn into_result(self) -> Result<()> {
        match self.error {
            None => Ok(()),
            Some((kind, m)) => Err(match kind {
                ErrorKind::NotFound => EngineError::NotFound(m),
                ErrorKind::Conflict => EngineError::Conflict(m),
                ErrorKind::Forbidden => EngineError::Forbidden(m),
                ErrorKind::Input => EngineError::Input(m),
                ErrorKind::Internal => EngineError::Internal(m),
            }),
        }
    }
}

/// What this host heard from the others, in the order heard.
#[derive(Debug)]
pub(crate) enum Heard {
    /// Another host wrote this task.
    Written(String),
    /// Run this task's queued input (its lease is this host's).
    Kick(String),
    /// Do this for host `from`, and reply with request number `n`.
    Asked {
        from: String,
        n: u64,
        request: Request,
    },
    /// The reply to this host's request number `n`.
    Replied { n: u64, reply: Reply },
    /// Notices may have been missed: read everything of other hosts again.
    Missed,
}

/// This host among those sharing the store.
pub(crate) struct Hosts {
    /// Tasks whose lease this host holds, as far as it knows (a write that finds the lease
    /// lost, or another host's write, forgets it).
    held: Mutex<HashSet<String>>,
    /// Requests to other hosts waiting for their reply, by number.
    asked: Mutex<HashMap<u64, oneshot::Sender<Reply>>>,
    next_request: AtomicU64,
    /// What the store's notice hook heard, until `Engine::serve_hosts` takes it.
    heard: Mutex<Option<mpsc::UnboundedReceiver<Heard>>>,
    hear: mpsc::UnboundedSender<Heard>,
    /// Told when other hosts' writes may have gone unheard (see [`Hosts::missed`]).
    on_missed: Mutex<Vec<MissedHook>>,
}

/// A function told that notices of other hosts' writes may have been lost.
pub type MissedHook = Box<dyn Fn() + Send + Sync>;

impl Hosts {
    pub(crate) fn new() -> Hosts {
        let (hear, heard) = mpsc::unbounded_channel();
        Hosts {
            held: Mutex::new(HashSet::new()),
            asked: Mutex::new(HashMap::new()),
            next_request: AtomicU64::new(1),
            heard: Mutex::new(Some(heard)),
            hear,
            on_missed: Mutex::new(Vec::new()),
        }
    }

    /// The store's notice hook: hands what it hears on to [`Hosts::heard`].
    pub(crate) fn hook(&self) -> NoticeHook {
        let hear = self.hear.clone();
        Box::new(move |notice| {
            let heard = match notice {
                Notice::Written(task) => Heard::Written(task.to_owned()),
                Notice::Queued(task) => Heard::Kick(task.to_owned()),
                Notice::Missed => Heard::Missed,
                Notice::Message(body) => match parse(body) {
                    Some(heard) => heard,
                    None => {
                        tracing::warn!("a message from another host was not understood: {body}");
                        return;
                    }
                },
            };
            let _ = hear.send(heard);
        })
    }

    /// Adds `hook` to those told when other hosts' writes may have gone unheard.
    pub(crate) fn on_missed(&self, hook: MissedHook) {
        lock(&self.on_missed).push(hook);
    }

    /// Tells the hooks of [`Hosts::on_missed`] that other hosts' writes may have gone unheard.
    pub(crate) fn missed(&self) {
        for hook in lock(&self.on_missed).iter() {
            hook();
        }
    }

    /// What was heard, for the one loop that serves it (`None` once taken).
    pub(crate) fn heard(&self) -> Option<mpsc::UnboundedReceiver<Heard>> {
        lock(&self.heard).take()
    }

    /// Where task `id`'s turns run, taking its lease when no live host holds it. Call holding
    /// the task's lock.
    pub(crate) fn hold(&self, store: &dyn Backend, id: &str) -> Result<Holder> {
        if !store.shared() || lock(&self.held).contains(id) {
            return Ok(Holder::Here { taken_over: false });
        }
        match store.take_lease(id)? {
            Lease::Held {
                taken_from,
                was_active,
            } => {
                lock(&self.held).insert(id.to_owned());
                if let Some(from) = &taken_from {
                    tracing::warn!(task.id = %id, "taken over from host `{from}`, which went quiet");
                }
                Ok(Holder::Here {
                    taken_over: taken_from.is_some() || was_active,
                })
            }
            Lease::HeldBy(host) => Ok(Holder::Elsewhere(host)),
        }
    }

    /// Task `id` was just written here (its lease is this host's).
    pub(crate) fn wrote(&self, store: &dyn Backend, id: &str) {
        if store.shared() {
            lock(&self.held).insert(id.to_owned());
        }
    }

    /// Forgets that this host holds task `id` (another host wrote it, or a write found the
    /// lease lost).
    pub(crate) fn forget(&self, id: &str) {
        lock(&self.held).remove(id);
    }

    /// Tells host `host` to run task `id`'s queued input.
    pub(crate) fn kick(&self, store: &dyn Backend, host: &str, id: &str) -> Result<()> {
        Ok(store.tell(host, &format!("kick {id}"))?)
    }

    /// Asks host `host`, the holder of the task, to do `request`; its answer.
    pub(crate) async fn ask(
        &self,
        store: &dyn Backend,
        host: &str,
        request: Request,
    ) -> Result<()> {
        let n = self.next_request.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        lock(&self.asked).insert(n, tx);
        let body = serde_json::to_string(&request)
            .map_err(|e| EngineError::Internal(format!("a request to another host: {e}")))?;
        let me = store.host_id().to_owned();
        if let Err(e) = store.tell(host, &format!("ask {me} {n} {body}")) {
            lock(&self.asked).remove(&n);
            return Err(e.into());
        }
        match tokio::time::timeout(ASK_TIMEOUT, rx).await {
            Ok(Ok(reply)) => reply.into_result(),
            _ => {
                lock(&self.asked).remove(&n);
                Err(EngineError::Conflict(format!(
                    "host `{host}`, which runs the task, did not answer within {}s",
                    ASK_TIMEOUT.as_secs()
                )))
            }
        }
    }

    /// Sends host `to` the reply to its request number `n`.
    pub(crate) fn reply(&self, store: &dyn Backend, to: &str, n: u64, reply: &Reply) {
        let sent = serde_json::to_string(reply)
            .map_err(|e| e.to_string())
            .and_then(|body| {
                store
                    .tell(to, &format!("reply {n} {body}"))
                    .map_err(|e| e.to_string())
            });
        if let Err(e) = sent {
            tracing::warn!("replying to host `{to}` failed: {e}");
        }
    }

    /// Hands reply `reply` to request `n`'s waiter (gone when it timed out).
    pub(crate) fn replied(&self, n: u64, reply: Reply) {
        if let Some(waiter) = lock(&self.asked).remove(&n) {
            let _ = waiter.send(reply);
        }
    }
}

/// A message of another host (see [`Hosts`]): `kick TASK`, `ask FROM N REQUEST`,
/// `reply N REPLY`.
fn parse(body: &str) -> Option<Heard> {
    let (verb, rest) = body.split_once(' ')?;
    match verb {
        "kick" => Some(Heard::Kick(rest.to_owned())),
        "ask" => {
            let (from, rest) = rest.split_once(' ')?;
            let (n, request) = rest.split_once(' ')?;
            Some(Heard::Asked {
                from: from.to_owned(),
                n: n.parse().ok()?,
                request: serde_json::from_str(request).ok()?,
            })
        }
        "reply" => {
            let (n, reply) = rest.split_once(' ')?;
            Some(Heard::Replied {
                n: n.parse().ok()?,
                reply: serde_json::from_str(reply).ok()?,
            })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    // Test code may panic: a panic is a failed test.
    #![allow(clippy::unwrap_used, clippy::panic)]

    use super::*;

    #[test]
    fn messages_read_back_as_sent_and_garbage_is_not_understood() {
        let request = Request::Decide {
            task: "t_1".into(),
            review: "r 1".into(),
            approve: true,
            admin: false,
            subject: "user:ada".into(),
        };
        let body = format!("ask h-1 7 {}", serde_json::to_string(&request).unwrap());
        let Some(Heard::Asked { from, n, request }) = parse(&body) else {
            panic!("not read back: {body}");
        };
        assert_eq!((from.as_str(), n), ("h-1", 7));
        assert!(
            matches!(request, Request::Decide { review, approve: true, .. } if review == "r 1")
        );
        let reply = Reply::of(&Err(EngineError::NotFound("review `r`".into())));
        let body = format!("reply 7 {}", serde_json::to_string(&reply).unwrap());
        let Some(Heard::Replied { n: 7, reply }) = parse(&body) else {
            panic!("not read back: {body}");
        };
        assert!(matches!(reply.into_result(), Err(EngineError::NotFound(m)) if m == "review `r`"));
        assert!(matches!(parse("kick t_9"), Some(Heard::Kick(t)) if t == "t_9"));
        for garbage in [
            "",
            "kick",
            "ask h 1",
            "ask h x {}",
            "reply 1 nope",
            "dance t_1",
        ] {
            assert!(parse(garbage).is_none(), "{garbage}");
        }
    }
}
