//! A pool of sessions kept per task, bounded in number: MCP sessions (`mcp.rs`) and remote
//! sessions (`session.rs`).
//!
//! Each task has a slot per session key; a slot is held through a call, so a task's calls of
//! one session take turns. When the pool is full, a call that needs a new slot closes the
//! least recently used session not in a call to make room, or, when every one is in a call,
//! waits for one to end until its deadline.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::{Notify, OwnedMutexGuard};
use tokio::time::{Instant, timeout_at};

use crate::lock;

/// A session's place: the task, and the session's key within it.
pub(crate) type SessionKey = (String, String);

/// Sessions of type `S` of every task, bounded in number.
pub(crate) struct Pool<S> {
    /// Every slot, its session open or not (yet); their count is what the pool bounds.
    slots: Mutex<HashMap<SessionKey, Arc<Slot<S>>>>,
    /// Woken when a call ends or a session closes: a call waiting for room looks again.
    room: Notify,
    /// Stamps of use, for least-recently-used eviction.
    clock: AtomicU64,
}

/// A place in the pool: a task's session of one key.
pub(crate) struct Slot<S> {
    /// Held through a call (and an opening).
    state: Arc<tokio::sync::Mutex<State<S>>>,
    /// When it was last used (a stamp of [`Pool::clock`]).
    last_used: AtomicU64,
}

/// What a slot holds.
pub(crate) enum State<S> {
    /// No session: not opened yet, or the last one broke; the next call opens one.
    Closed,
    /// An open session.
    Open(S),
    /// Evicted to make room: the slot is out of the pool, and a caller that held on to it
    /// looks for its place again.
    Evicted,
    /// Closed with its task (or the host): a caller that held on to it opens nothing.
    Ended,
}

/// A slot held for a call, its state at hand (`*held`). Dropped — the call ended, or was
/// dropped itself — it counts as used now, and a call waiting for room looks again.
pub(crate) struct Held<'p, S> {
    pool: &'p Pool<S>,
    slot: Arc<Slot<S>>,
    state: Option<OwnedMutexGuard<State<S>>>,
}

impl<S> std::ops::Deref for Held<'_, S> {
    type Target = State<S>;

    fn deref(&self) -> &State<S> {
        // Taken only by `drop`.
        self.state.as_deref().unwrap_or(&State::Ended)
    }
}

impl<S> std::ops::DerefMut for Held<'_, S> {
    fn deref_mut(&mut self) -> &mut State<S> {
        match self.state.as_deref_mut() {
            Some(state) => state,
            None => unreachable!("a held slot's state is taken only when it is dropped"),
        }
    }
}

impl<S> Drop for Held<'_, S> {
    fn drop(&mut self) {
        self.slot.touch(&self.pool.clock);
        drop(self.state.take());
        self.pool.room.notify_waiters();
    }
}

/// What [`Pool::reserve`] found.
enum Found<S> {
    /// The session's own slot.
    Own(Arc<Slot<S>>),
    /// No room: the least recently used idle slot, taken out (with its session), if any.
    Full(Option<(SessionKey, Option<S>)>),
}

impl<S: Send + 'static> Pool<S> {
    pub(crate) fn new() -> Pool<S> {
        Pool {
            slots: Mutex::new(HashMap::new()),
            room: Notify::new(),
            clock: AtomicU64::new(0),
        }
    }

    /// The slot of `key`, held: its own if it has one, else a new one when the pool (of at
    /// most `max` slots) has room, made if need be by closing the least recently used session
    /// not in a call with `close`; waits for room until `deadline`, then is `Err(())`. The
    /// slot held may be [`State::Evicted`] (reserve again) or [`State::Ended`].
    pub(crate) async fn reserve<F, C>(
        &self,
        key: &SessionKey,
        max: usize,
        deadline: Instant,
        close: C,
    ) -> Result<Held<'_, S>, ()>
    where
        C: Fn(SessionKey, S) -> F,
        F: Future<Output = ()>,
    {
        loop {
            // Registered before looking, so that room made after the look is not missed.
            let room = self.room.notified();
            tokio::pin!(room);
            room.as_mut().enable();
            let found = {
                let mut slots = lock(&self.slots);
                match slots.get(key) {
                    Some(slot) => Found::Own(Arc::clone(slot)),
                    None if slots.len() < max.max(1) => {
                        let slot = Arc::new(Slot::new());
                        // A new slot is held before anyone else can see it, so it is never
                        // taken for an idle one.
                        let Ok(state) = Arc::clone(&slot.state).try_lock_owned() else {
                            continue;
                        };
                        slot.touch(&self.clock);
                        slots.insert(key.clone(), Arc::clone(&slot));
                        return Ok(self.held(slot, state));
                    }
                    None => Found::Full(evict_idle(&mut slots)),
                }
            };
            match found {
                Found::Own(slot) => {
                    let state = Arc::clone(&slot.state).lock_owned().await;
                    slot.touch(&self.clock);
                    return Ok(self.held(slot, state));
                }
                Found::Full(Some((evicted, session))) => {
                    if let Some(session) = session {
                        close(evicted, session).await;
                    }
                }
                Found::Full(None) => {
                    if timeout_at(deadline, room).await.is_err() {
                        return Err(());
                    }
                }
            }
        }
    }

    fn held(&self, slot: Arc<Slot<S>>, state: OwnedMutexGuard<State<S>>) -> Held<'_, S> {
        Held {
            pool: self,
            slot,
            state: Some(state),
        }
    }

    /// Looks at task `task`'s slots without waiting for any: `f` gets each one's key within
    /// the task and its state (`None`: in a call).
    pub(crate) fn of_task<V>(
        &self,
        task: &str,
        f: impl Fn(&str, Option<&State<S>>) -> V,
    ) -> Vec<V> {
        lock(&self.slots)
            .iter()
            .filter(|((t, _), _)| t == task)
            .map(|((_, key), slot)| match slot.state.try_lock() {
                Ok(state) => f(key, Some(&state)),
                Err(_) => f(key, None),
            })
            .collect()
    }

    /// Closes every session of `task` with `close` (the task ended), each after the call it
    /// may be in.
    pub(crate) async fn close_task<F, C>(&self, task: &str, close: C)
    where
        C: Fn(SessionKey, S) -> F,
        F: Future<Output = ()>,
    {
        let slots: Vec<_> = {
            let mut all = lock(&self.slots);
            let keys: Vec<SessionKey> = all.keys().filter(|(t, _)| t == task).cloned().collect();
            keys.into_iter()
                .filter_map(|k| all.remove(&k).map(|slot| (k, slot)))
                .collect()
        };
        self.close_slots(slots, close).await;
    }

    /// Closes every session with `close` (the host stops).
    pub(crate) async fn close_all<F, C>(&self, close: C)
    where
        C: Fn(SessionKey, S) -> F,
        F: Future<Output = ()>,
    {
        let slots: Vec<_> = lock(&self.slots).drain().collect();
        self.close_slots(slots, close).await;
    }

    /// Closes the sessions of `slots` (taken out of the pool) at once, each after the call it
    /// may be in.
    async fn close_slots<F, C>(&self, slots: Vec<(SessionKey, Arc<Slot<S>>)>, close: C)
    where
        C: Fn(SessionKey, S) -> F,
        F: Future<Output = ()>,
    {
        let closing = slots.into_iter().map(|(key, slot)| {
            let close = &close;
            async move {
                let mut state = slot.state.lock().await;
                if let State::Open(session) = std::mem::replace(&mut *state, State::Ended) {
                    close(key, session).await;
                }
            }
        });
        futures::future::join_all(closing).await;
        self.room.notify_waiters();
    }
}

/// Takes the least recently used slot not in a call out of `slots`, with its session.
fn evict_idle<S>(slots: &mut HashMap<SessionKey, Arc<Slot<S>>>) -> Option<(SessionKey, Option<S>)> {
    let mut by_age: Vec<(u64, SessionKey)> = slots
        .iter()
        .map(|(k, s)| (s.last_used.load(Ordering::Relaxed), k.clone()))
        .collect();
    by_age.sort();
    for (_, key) in by_age {
        let Some(slot) = slots.get(&key).cloned() else {
            continue;
        };
        let Ok(mut state) = slot.state.try_lock() else {
            continue;
        };
        let session = match std::mem::replace(&mut *state, State::Evicted) {
            State::Open(session) => Some(session),
            _ => None,
        };
        drop(state);
        slots.remove(&key);
        return Some((key, session));
    }
    None
}

impl<S> Slot<S> {
    fn new() -> Slot<S> {
        Slot {
            state: Arc::new(tokio::sync::Mutex::new(State::Closed)),
            last_used: AtomicU64::new(0),
        }
    }

    /// Records a use now.
    fn touch(&self, clock: &AtomicU64) {
        let now = clock.fetch_add(1, Ordering::Relaxed);
        self.last_used.store(now, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::time::Duration;

    use super::*;

    fn key(task: &str) -> SessionKey {
        (task.to_owned(), "t/x {}".to_owned())
    }

    async fn nothing(_: SessionKey, _: &'static str) {}

    #[tokio::test]
    async fn a_full_pool_waits_for_a_call_to_end_and_refuses_when_none_does() {
        let pool = Arc::new(Pool::<&'static str>::new());
        let soon = || Instant::now() + Duration::from_secs(30);
        let busy = pool.reserve(&key("t1"), 1, soon(), nothing).await.unwrap();

        // The only session is in a call: a call of another task waits, then is refused.
        let refused = pool
            .reserve(
                &key("t2"),
                1,
                Instant::now() + Duration::from_millis(20),
                nothing,
            )
            .await;
        assert!(refused.is_err());

        // A waiting call takes the place once the call ends.
        let waiting = {
            let pool = Arc::clone(&pool);
            tokio::spawn(async move {
                let held = pool.reserve(&key("t3"), 1, soon(), nothing).await.unwrap();
                matches!(*held, State::Closed)
            })
        };
        tokio::task::yield_now().await;
        drop(busy);
        assert!(waiting.await.unwrap());
        let slots = lock(&pool.slots);
        assert!(slots.contains_key(&key("t3")) && !slots.contains_key(&key("t1")));
    }

    #[tokio::test]
    async fn room_is_made_by_closing_the_least_recently_used_idle_session() {
        let pool = Pool::<&'static str>::new();
        let soon = || Instant::now() + Duration::from_secs(30);
        for (task, session) in [("t1", "s1"), ("t2", "s2")] {
            let mut held = pool.reserve(&key(task), 2, soon(), nothing).await.unwrap();
            *held = State::Open(session);
        }
        // t1 used again: t2's session is now the least recently used.
        drop(pool.reserve(&key("t1"), 2, soon(), nothing).await.unwrap());
        let closed = Mutex::new(Vec::new());
        let held = pool
            .reserve(&key("t3"), 2, soon(), |key: SessionKey, session| {
                lock(&closed).push((key.0, session));
                async {}
            })
            .await
            .unwrap();
        assert!(matches!(*held, State::Closed));
        assert_eq!(*lock(&closed), [("t2".to_owned(), "s2")]);
        let slots = lock(&pool.slots);
        assert!(slots.contains_key(&key("t1")) && !slots.contains_key(&key("t2")));
    }

    #[tokio::test]
    async fn closing_a_task_waits_for_its_call_then_ends_its_session() {
        let pool = Arc::new(Pool::<&'static str>::new());
        let soon = || Instant::now() + Duration::from_secs(30);
        let mut held = pool.reserve(&key("t1"), 4, soon(), nothing).await.unwrap();
        *held = State::Open("s1");
        let slot = Arc::clone(&held.slot);
        let closing = {
            let pool = Arc::clone(&pool);
            tokio::spawn(async move {
                let closed = Mutex::new(Vec::new());
                pool.close_task("t1", |_, session| {
                    lock(&closed).push(session);
                    async {}
                })
                .await;
                closed.into_inner().unwrap()
            })
        };
        tokio::task::yield_now().await;
        // The call in progress ends; the task's session is closed after it.
        drop(held);
        assert_eq!(closing.await.unwrap(), ["s1"]);
        assert!(matches!(*slot.state.lock().await, State::Ended));
        assert!(lock(&pool.slots).is_empty());
    }

    #[tokio::test]
    async fn a_call_dropped_midway_makes_room_for_a_waiting_one_at_once() {
        let pool = Arc::new(Pool::<&'static str>::new());
        let soon = || Instant::now() + Duration::from_secs(60);
        let busy = pool.reserve(&key("t1"), 1, soon(), nothing).await.unwrap();
        let waiting = {
            let pool = Arc::clone(&pool);
            tokio::spawn(async move { pool.reserve(&key("t2"), 1, soon(), nothing).await.is_ok() })
        };
        // The call is a future that holds the slot and is dropped midway (its task was
        // interrupted), never giving the slot back itself.
        let mut call = Box::pin(async move {
            let _busy = busy;
            std::future::pending::<()>().await;
        });
        assert!(futures::poll!(call.as_mut()).is_pending());
        tokio::task::yield_now().await;
        drop(call);
        let took = tokio::time::timeout(Duration::from_secs(10), waiting).await;
        assert!(
            matches!(took, Ok(Ok(true))),
            "the waiting call did not get the room a dropped call left: {took:?}"
        );
    }
}
