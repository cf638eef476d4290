//! The inspector's index of tasks: one small row per task (status, agent, owner, created, last
//! activity, the trigger sources of its input) in creation order, so that a page of the task
//! list with its filters is a walk over memory from a cursor (keyset paging), not a read and
//! sort of every record in the store, whatever the number of tasks.
//!
//! It is built from the store once (in the background at start, or by the first view that
//! needs it) and then kept current from the store's append notifications: a task whose log
//! grew is marked, and the next view re-reads the marked tasks' record heads and only their new
//! events. A notification stream that fell behind marks everything, and the index is rebuilt.
//! The same walk over new events collects the latest review decisions for the reviews inbox.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::ops::Bound;
use std::sync::{Arc, Mutex, PoisonError, RwLock, RwLockReadGuard};

use agentmesh_engine::Status;
use agentmesh_model::event::{Event, EventKind};
use agentmesh_store::{Backend, StoreError, Typed};
use serde::Deserialize;
use tokio::sync::broadcast;

/// The trigger sources a task's input can carry, one bit each, in this order.
pub const SOURCES: [&str; 5] = ["schedule", "webhook", "api", "self-schedule", "mcp-event"];

/// Bit for a source not in [`SOURCES`].
const OTHER_SOURCE: u8 = 1 << 7;

/// Decided reviews kept for the inbox, newest first.
const DECISIONS_KEPT: usize = 500;

/// One task, as the list shows it.
#[derive(Debug, Clone)]
pub struct Row {
    /// `t_…`.
    pub id: Arc<str>,
    /// `namespace/name`.
    pub agent: Arc<str>,
    /// The owner's subject.
    pub owner: Arc<str>,
    /// The run state.
    pub status: Status,
    /// Epoch ms.
    pub created_ms: i64,
    /// Epoch ms of the last processing step.
    pub last_ms: i64,
    /// The trigger sources of its inputs so far (bits of [`SOURCES`]).
    pub triggers: u8,
    /// The last event seen.
    seen: u64,
}

impl Row {
    /// The names of the trigger sources of its inputs.
    pub fn trigger_names(&self) -> Vec<&'static str> {
        let mut names: Vec<&'static str> = SOURCES
            .iter()
            .enumerate()
            .filter(|(i, _)| self.triggers & (1 << i) != 0)
            .map(|(_, s)| *s)
            .collect();
        if self.triggers & OTHER_SOURCE != 0 {
            names.push("other");
        }
        names
    }
}

/// A review decision seen in a log.
#[derive(Debug, Clone)]
pub struct Decision {
    /// The task.
    pub task_id: Arc<str>,
    /// Its owner.
    pub owner: Arc<str>,
    /// The review.
    pub review_id: String,
    /// Whom it asked, when the request was seen.
    pub reviewer: Option<String>,
    /// Approved or denied.
    pub approve: bool,
    /// Who decided (or `timeout`).
    pub decided_by: String,
    /// When (RFC 3339).
    pub at: String,
}

/// The trigger filter of the list: any triggered input, one source, or none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TriggerFilter {
    /// At least one input came from a trigger.
    Any,
    /// Every input was typed by someone (no trigger envelope).
    None,
    /// An input came from this source (a bit of [`SOURCES`]).
    Source(u8),
}

impl TriggerFilter {
    /// The filter a query names (`any`, `none` or a source), if it names one.
    pub fn parse(s: &str) -> Option<TriggerFilter> {
        match s {
            "any" => Some(TriggerFilter::Any),
            "none" => Some(TriggerFilter::None),
            _ => SOURCES
                .iter()
                .position(|x| *x == s)
                .map(|i| TriggerFilter::Source(1 << i)),
        }
    }

    fn matches(self, bits: u8) -> bool {
        match self {
            TriggerFilter::Any => bits != 0,
            TriggerFilter::None => bits == 0,
            TriggerFilter::Source(b) => bits & b != 0,
        }
    }
}

/// What a page of the list selects.
#[derive(Debug, Default, Clone)]
pub struct Filter<'a> {
    /// Only this agent's tasks.
    pub agent: Option<&'a str>,
    /// Only tasks in this state.
    pub status: Option<Status>,
    /// Only this owner's tasks.
    pub owner: Option<&'a str>,
    /// Only tasks whose input came (or never came) from a trigger.
    pub trigger: Option<TriggerFilter>,
}

impl Filter<'_> {
    fn matches(&self, row: &Row) -> bool {
        self.agent.is_none_or(|a| *row.agent == *a)
            && self.status.is_none_or(|s| row.status == s)
            && self.owner.is_none_or(|o| *row.owner == *o)
            && self.trigger.is_none_or(|t| t.matches(row.triggers))
    }
}

/// Where a page starts: strictly older than `Older`, or strictly newer than `Newer`, a task's
/// `(created_ms, id)`.
#[derive(Debug, Clone)]
pub enum From {
    /// The newest tasks.
    Newest,
    /// Tasks older than this one.
    Older(i64, String),
    /// Tasks newer than this one (the page before).
    Newer(i64, String),
}

/// A page of the list, newest first.
pub struct Page {
    /// The rows.
    pub rows: Vec<Row>,
    /// Whether older matching tasks follow.
    pub more_older: bool,
    /// Whether newer matching tasks precede.
    pub more_newer: bool,
}

/// The rows, in creation order, with what the views need besides.
#[derive(Default)]
pub struct Rows {
    by_order: BTreeMap<(i64, Arc<str>), Row>,
    created: HashMap<Arc<str>, i64>,
    /// Decided reviews, newest first.
    pub decisions: VecDeque<Decision>,
    /// Reviewers named by requests not decided yet: (task, review) → reviewer.
    requested: HashMap<(Arc<str>, String), String>,
    /// Agents and owners seen, with their task counts (for the filters' choices).
    pub agents: BTreeMap<Arc<str>, usize>,
    /// See `agents`.
    pub owners: BTreeMap<Arc<str>, usize>,
}

/// The head of a task record, as much of it as a row needs.
#[derive(Deserialize, Default)]
#[serde(default)]
struct Head {
    id: String,
    agent: String,
    user: HeadUser,
    status: Option<Status>,
    created_ms: i64,
    last_activity_ms: i64,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct HeadUser {
    id: String,
}

fn count(map: &mut BTreeMap<Arc<str>, usize>, key: &Arc<str>, up: bool) {
    if up {
        *map.entry(Arc::clone(key)).or_default() += 1;
    } else if let Some(n) = map.get_mut(key) {
        *n = n.saturating_sub(1);
        if *n == 0 {
            map.remove(key);
        }
    }
}

/// A source name's bit.
fn source_bit(source: &str) -> u8 {
    SOURCES
        .iter()
        .position(|s| *s == source)
        .map_or(OTHER_SOURCE, |i| 1 << i)
}

impl Rows {
    /// The number of tasks.
    pub fn len(&self) -> usize {
        self.by_order.len()
    }

    /// Whether there is no task.
    pub fn is_empty(&self) -> bool {
        self.by_order.is_empty()
    }

    /// Task `id`'s row.
    pub fn get(&self, id: &str) -> Option<&Row> {
        let ms = self.created.get(id)?;
        self.by_order.get(&(*ms, Arc::from(id)))
    }

    /// Up to `limit` matching rows from `from`, newest first.
    pub fn page(&self, filter: &Filter<'_>, from: &From, limit: usize) -> Page {
        let matching = |r: &&Row| filter.matches(r);
        match from {
            From::Newest => {
                let mut it = self.by_order.values().rev().filter(matching);
                let rows: Vec<Row> = it.by_ref().take(limit).cloned().collect();
                Page {
                    more_older: it.next().is_some(),
                    more_newer: false,
                    rows,
                }
            }
            From::Older(ms, id) => {
                let key = (*ms, Arc::from(id.as_str()));
                let mut it = self
                    .by_order
                    .range(..key.clone())
                    .rev()
                    .map(|(_, r)| r)
                    .filter(matching);
                let rows: Vec<Row> = it.by_ref().take(limit).cloned().collect();
                let more_newer = self
                    .by_order
                    .range((Bound::Included(key), Bound::Unbounded))
                    .map(|(_, r)| r)
                    .any(|r| filter.matches(r));
                Page {
                    more_older: it.next().is_some(),
                    more_newer,
                    rows,
                }
            }
            From::Newer(ms, id) => {
                let key = (*ms, Arc::from(id.as_str()));
                let mut it = self
                    .by_order
                    .range((Bound::Excluded(key.clone()), Bound::Unbounded))
                    .map(|(_, r)| r)
                    .filter(matching);
                let mut rows: Vec<Row> = it.by_ref().take(limit).cloned().collect();
                rows.reverse();
                let more_older = self
                    .by_order
                    .range(..=key)
                    .map(|(_, r)| r)
                    .any(|r| filter.matches(r));
                Page {
                    more_newer: it.next().is_some(),
                    more_older,
                    rows,
                }
            }
        }
    }

    fn remove(&mut self, id: &str) -> Option<Row> {
        let ms = self.created.remove(id)?;
        let row = self.by_order.remove(&(ms, Arc::from(id)))?;
        count(&mut self.agents, &row.agent, false);
        count(&mut self.owners, &row.owner, false);
        Some(row)
    }

    fn insert(&mut self, row: Row) {
        count(&mut self.agents, &row.agent, true);
        count(&mut self.owners, &row.owner, true);
        self.created.insert(Arc::clone(&row.id), row.created_ms);
        self.by_order
            .insert((row.created_ms, Arc::clone(&row.id)), row);
    }

    /// Notes what `events` (of `row`'s task, in order) say about triggers and reviews.
    fn note_events(&mut self, row: &mut Row, events: &[Event]) {
        for event in events {
            row.seen = row.seen.max(event.seq);
            match &event.kind {
                EventKind::MessageEvent {
                    metadata: Some(meta),
                    ..
                } => {
                    if let Some(trigger) = &meta.trigger {
                        row.triggers |= source_bit(&trigger.source);
                    }
                }
                EventKind::ConversationStateUpdateEvent { key, value } if key == "triggered" => {
                    if let Some(source) = value.pointer("/trigger/source").and_then(|s| s.as_str())
                    {
                        row.triggers |= source_bit(source);
                    }
                }
                EventKind::ReviewRequestEvent {
                    review_id,
                    reviewer,
                    ..
                } => {
                    self.requested
                        .insert((Arc::clone(&row.id), review_id.clone()), reviewer.clone());
                }
                EventKind::ReviewDecisionEvent {
                    review_id,
                    approve,
                    decided_by,
                } => {
                    let reviewer = self
                        .requested
                        .remove(&(Arc::clone(&row.id), review_id.clone()));
                    self.decisions.push_front(Decision {
                        task_id: Arc::clone(&row.id),
                        owner: Arc::clone(&row.owner),
                        review_id: review_id.clone(),
                        reviewer,
                        approve: *approve,
                        decided_by: decided_by.clone(),
                        at: event.timestamp.clone(),
                    });
                    self.decisions.truncate(DECISIONS_KEPT);
                }
                _ => {}
            }
        }
    }

    /// Reads task `id` again: its head, and its events after the last seen.
    fn refresh(&mut self, store: &dyn Backend, id: &str) -> Result<(), StoreError> {
        let Some(head) = store.task::<Head>(id)? else {
            self.remove(id);
            return Ok(());
        };
        let old = self.remove(id);
        let (seen, triggers) = old.as_ref().map_or((0, 0), |r| (r.seen, r.triggers));
        let interned = |map: &BTreeMap<Arc<str>, usize>, s: String| {
            map.get_key_value(s.as_str())
                .map_or_else(|| Arc::from(s), |(k, _)| Arc::clone(k))
        };
        let mut row = Row {
            id: old.map_or_else(|| Arc::from(head.id.as_str()), |r| r.id),
            agent: interned(&self.agents, head.agent),
            owner: interned(&self.owners, head.user.id),
            status: head.status.unwrap_or(Status::Idle),
            created_ms: head.created_ms,
            last_ms: head.last_activity_ms,
            triggers,
            seen,
        };
        let (events, _) = store.events_between(id, seen.saturating_add(1), u64::MAX)?;
        self.note_events(&mut row, &events);
        self.insert(row);
        Ok(())
    }

    /// Every task of `store`.
    fn build(store: &dyn Backend) -> Result<Rows, StoreError> {
        let mut rows = Rows::default();
        for id in store.record_ids()? {
            match rows.refresh(store, &id) {
                Err(StoreError::Codec(e)) => {
                    tracing::warn!(task.id = %id, "inspector: undecodable task record: {e}");
                }
                other => other?,
            }
        }
        // Decisions were noted task by task: newest first across tasks.
        let mut decisions: Vec<Decision> = rows.decisions.drain(..).collect();
        decisions.sort_by(|a, b| b.at.cmp(&a.at));
        decisions.truncate(DECISIONS_KEPT);
        rows.decisions = decisions.into();
        Ok(rows)
    }
}

/// Tasks whose rows are out of date.
#[derive(Default)]
struct Dirty {
    ids: HashSet<Arc<str>>,
    /// Everything: not built yet, or notifications were lost.
    all: bool,
}

/// The index, shared by the views and kept current by the store's notifications.
pub struct TaskIndex {
    rows: RwLock<Rows>,
    dirty: Mutex<Dirty>,
    /// Held while the index is brought up to date, so that one view does it at a time.
    updating: Mutex<()>,
}

impl Default for TaskIndex {
    fn default() -> Self {
        TaskIndex {
            rows: RwLock::default(),
            dirty: Mutex::new(Dirty {
                ids: HashSet::new(),
                all: true,
            }),
            updating: Mutex::new(()),
        }
    }
}

impl TaskIndex {
    /// Marks task `id` as changed.
    pub fn touch(&self, id: Arc<str>) {
        self.dirty
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .ids
            .insert(id);
    }

    /// Marks every task as changed (notifications were lost).
    pub fn touch_all(&self) {
        self.dirty
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .all = true;
    }

    /// Follows `appended` (task ids whose log grew) until it closes or the index is dropped.
    /// Needs a Tokio runtime.
    pub fn follow(index: &Arc<TaskIndex>, mut appended: broadcast::Receiver<Arc<str>>) {
        let weak = Arc::downgrade(index);
        tokio::spawn(async move {
            loop {
                let next = appended.recv().await;
                let Some(index) = weak.upgrade() else { return };
                match next {
                    Ok(id) => index.touch(id),
                    Err(broadcast::error::RecvError::Lagged(_)) => index.touch_all(),
                    Err(broadcast::error::RecvError::Closed) => return,
                }
            }
        });
    }

    /// The rows, brought up to date with `store` first. Blocks on the store: call off the
    /// async workers.
    pub fn current(&self, store: &dyn Backend) -> Result<RwLockReadGuard<'_, Rows>, StoreError> {
        {
            let _one = self.updating.lock().unwrap_or_else(PoisonError::into_inner);
            let dirty =
                std::mem::take(&mut *self.dirty.lock().unwrap_or_else(PoisonError::into_inner));
            if dirty.all {
                let built = Rows::build(store);
                match built {
                    Ok(rows) => *self.rows.write().unwrap_or_else(PoisonError::into_inner) = rows,
                    Err(e) => {
                        self.touch_all();
                        return Err(e);
                    }
                }
            } else if !dirty.ids.is_empty() {
                let mut rows = self.rows.write().unwrap_or_else(PoisonError::into_inner);
                for id in dirty.ids {
                    if let Err(e) = rows.refresh(store, &id) {
                        self.touch(id);
                        return Err(e);
                    }
                }
            }
        }
        Ok(self.rows.read().unwrap_or_else(PoisonError::into_inner))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn row(i: i64, agent: &str, status: Status, triggers: u8) -> Row {
        Row {
            id: Arc::from(format!("t_{i:04}").as_str()),
            agent: Arc::from(agent),
            owner: Arc::from("user:a"),
            status,
            created_ms: 1000 + i / 2,
            last_ms: 0,
            triggers,
            seen: 0,
        }
    }

    fn rows(n: i64) -> Rows {
        let mut rows = Rows::default();
        for i in 0..n {
            let agent = if i % 2 == 0 { "a/even" } else { "a/odd" };
            let triggers = if i % 3 == 0 {
                source_bit("schedule")
            } else {
                0
            };
            rows.insert(row(i, agent, Status::Idle, triggers));
        }
        rows
    }

    fn ids(page: &Page) -> Vec<&str> {
        page.rows.iter().map(|r| &*r.id).collect()
    }

    #[test]
    fn pages_walk_newest_first_from_a_cursor_both_ways() {
        let rows = rows(10);
        let all = Filter::default();
        let first = rows.page(&all, &From::Newest, 4);
        assert_eq!(ids(&first), ["t_0009", "t_0008", "t_0007", "t_0006"]);
        assert!(first.more_older && !first.more_newer);
        let last = &first.rows[3];
        let second = rows.page(&all, &From::Older(last.created_ms, last.id.to_string()), 4);
        assert_eq!(ids(&second), ["t_0005", "t_0004", "t_0003", "t_0002"]);
        assert!(second.more_older && second.more_newer);
        let top = &second.rows[0];
        let back = rows.page(&all, &From::Newer(top.created_ms, top.id.to_string()), 4);
        assert_eq!(ids(&back), ids(&first));
        assert!(!back.more_newer && back.more_older);
    }

    #[test]
    fn events_give_a_row_its_trigger_sources_and_the_inbox_its_decisions() {
        use agentmesh_model::event::{ContentPart, EventSource, MessageMetadata, TriggerEnvelope};
        let event = |seq, kind| Event {
            seq,
            id: format!("ev_{seq}"),
            timestamp: format!("2026-11-26T11:00:0{seq}.000Z"),
            source: EventSource::User,
            kind,
        };
        let triggered = |source: &str| MessageMetadata {
            queued_at: Some(0),
            trigger: Some(TriggerEnvelope {
                source: source.into(),
                ..TriggerEnvelope::default()
            }),
        };
        let mut rows = Rows::default();
        let mut row = row(1, "a/x", Status::Idle, 0);
        let events = [
            event(
                1,
                EventKind::MessageEvent {
                    content: vec![ContentPart::text("tick")],
                    metadata: Some(triggered("schedule")),
                },
            ),
            event(
                2,
                EventKind::ConversationStateUpdateEvent {
                    key: "triggered".into(),
                    value: serde_json::json!({"trigger": {"source": "webhook"}}),
                },
            ),
            event(
                3,
                EventKind::ReviewRequestEvent {
                    review_id: "rv_1".into(),
                    reviewer: "user:ops".into(),
                    subject: serde_json::Value::Null,
                },
            ),
            event(
                4,
                EventKind::ReviewDecisionEvent {
                    review_id: "rv_1".into(),
                    approve: false,
                    decided_by: "user:admin".into(),
                },
            ),
        ];
        rows.note_events(&mut row, &events);
        assert_eq!(row.trigger_names(), ["schedule", "webhook"]);
        assert_eq!(row.seen, 4);
        let decided = &rows.decisions[0];
        assert_eq!(decided.reviewer.as_deref(), Some("user:ops"));
        assert_eq!(decided.decided_by, "user:admin");
        assert!(!decided.approve);
        assert!(
            TriggerFilter::parse("webhook")
                .unwrap()
                .matches(row.triggers)
        );
        assert!(!TriggerFilter::parse("api").unwrap().matches(row.triggers));
    }

    #[test]
    fn filters_select_by_agent_and_trigger_source() {
        let rows = rows(10);
        let odd = Filter {
            agent: Some("a/odd"),
            ..Filter::default()
        };
        assert_eq!(
            ids(&rows.page(&odd, &From::Newest, 3)),
            ["t_0009", "t_0007", "t_0005"]
        );
        let scheduled = Filter {
            trigger: TriggerFilter::parse("schedule"),
            ..Filter::default()
        };
        assert_eq!(
            ids(&rows.page(&scheduled, &From::Newest, 10)),
            ["t_0009", "t_0006", "t_0003", "t_0000"]
        );
        let typed = Filter {
            trigger: TriggerFilter::parse("none"),
            ..Filter::default()
        };
        assert_eq!(rows.page(&typed, &From::Newest, 10).rows.len(), 6);
        assert_eq!(TriggerFilter::parse("bogus"), None);
        assert_eq!(rows.agents.get("a/odd"), Some(&5));
    }
}
