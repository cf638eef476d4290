//! Tool events received by polling (`receive.poll`): one poller per event and distinct set of
//! values the subscribed tasks' bindings sealed for the parameters its request reads (a
//! [`PollKey`]), not one per task. The set of pollers follows the routing state (tasks
//! subscribing, ending, expiring) and reloads; each polls its endpoint every `interval`
//! ([`Engine::poll`]) and routes each new item as a webhook's events are routed (filters,
//! allow lists, middleware) to the tasks of its key, through the door with a delivery id made
//! from the key and the item's id; then records the items as seen ([`Engine::polled`]).
//!
//! A poll that fails (the endpoint unreachable or slow, a failing status, `detect` giving no
//! list) is logged and tried again after a pause that doubles from `interval` up to
//! [`LONGEST_PAUSE`] (or `interval`, when longer); the key keeps its cursor and seen ids, so
//! nothing is skipped and nothing is delivered twice. A restart polls each key at once and
//! goes on from what the store kept.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use agentmesh_engine::plan::{EventPlan, PollPlan, Via};
use agentmesh_engine::sources::SourceKind;
use agentmesh_engine::{EngineError, PollError, PollKey, PolledItem};
use agentmesh_expr::Bound;
use agentmesh_store::now_ms;
use tokio::task::JoinHandle;
use tokio::time::sleep;

use crate::webhooks::WEBHOOK;
use crate::{EventRouter, Headers};

/// How often the routing state is looked at for pollers to start or stop.
const WANTED_CHECK: Duration = Duration::from_millis(500);

/// The longest pause after failed polls (unless the interval is longer).
pub const LONGEST_PAUSE: Duration = Duration::from_secs(600);

impl EventRouter {
    /// Runs the pollers the live subscriptions want (see the module docs) until dropped;
    /// dropping it stops them all.
    pub async fn run_pollers(&self) {
        let mut running = Pollers::default();
        loop {
            let plan = self.engine.plan();
            let wanted = self.routes.read().pollers(&plan, now_ms());
            running.0.retain(|key, (poll, task)| {
                let keep = wanted.get(key).is_some_and(|p| Arc::ptr_eq(p, poll));
                if !keep {
                    task.abort();
                    self.engine
                        .event_sources()
                        .stopped(SourceKind::Poll, &key.id());
                }
                keep
            });
            for (key, poll) in wanted {
                if let Entry::Vacant(slot) = running.0.entry(key) {
                    let poller = run_poller(self.clone(), slot.key().clone(), Arc::clone(&poll));
                    slot.insert((poll, tokio::spawn(poller)));
                }
            }
            drop(plan);
            sleep(WANTED_CHECK).await;
        }
    }

    /// One poll of `key`: its new items delivered, then recorded as seen. Returns how many
    /// items were new.
    pub async fn poll_once(&self, key: &PollKey, poll: &PollPlan) -> Result<usize, PollError> {
        let polled = self.engine.poll(poll, key).await?;
        if !polled.items.is_empty() {
            // The tasks of the key, once for all the poll's items.
            let polled_by = self.routes.read().polled_by(&self.engine.plan(), key);
            for item in &polled.items {
                self.deliver_polled(key, item, &polled_by).await?;
            }
        }
        let new = polled.items.len();
        self.engine.polled(key, &polled)?;
        Ok(new)
    }

    /// Routes `item` of `key` to the tasks of `key` (`polled_by`) its event's filter passes;
    /// returns them.
    async fn deliver_polled(
        &self,
        key: &PollKey,
        item: &PolledItem,
        polled_by: &HashSet<String>,
    ) -> Result<Vec<String>, EngineError> {
        let pick = |e: &EventPlan| e.name == key.event && matches!(e.via, Via::Poll(_));
        let headers: Headers = [("x-delivery-id", item.delivery_id.as_str())]
            .into_iter()
            .collect();
        self.deliver_events(
            (&key.tool, pick),
            (&Bound::new(item.payload.clone()), &WEBHOOK),
            &headers,
            |task| polled_by.contains(task),
        )
        .await
    }
}

/// The running pollers by key, with the plan they poll; dropped, it stops them all.
#[derive(Default)]
struct Pollers(HashMap<PollKey, (Arc<PollPlan>, JoinHandle<()>)>);

impl Drop for Pollers {
    fn drop(&mut self) {
        for (_, task) in self.0.values() {
            task.abort();
        }
    }
}

/// Polls `key` every `interval`, backing off after failures (see the module docs).
async fn run_poller(router: EventRouter, key: PollKey, poll: Arc<PollPlan>) {
    let id = key.id();
    let sources = router.engine.event_sources();
    sources.started(SourceKind::Poll, &id);
    let longest = LONGEST_PAUSE.max(poll.interval);
    let mut pause = poll.interval;
    loop {
        match router.poll_once(&key, &poll).await {
            Ok(new) => {
                sources.worked(SourceKind::Poll, &id, now_ms());
                tracing::debug!(poll = %id, new, "polled");
                pause = poll.interval;
            }
            Err(e) => {
                sources.failed(SourceKind::Poll, &id, now_ms(), &e.to_string());
                pause = (pause * 2).min(longest);
                tracing::warn!(poll = %id, "poll failed: {e}; polling again in {pause:?}");
            }
        }
        sleep(pause).await;
    }
}
