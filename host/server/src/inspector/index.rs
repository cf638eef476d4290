//! The inspector's index of tasks: one small row per task (status, agent, owner, created, last
//! activity, the trigger sources of its input) in creation order, so that a page of the task
//! list with its filters is a walk over memory from a cursor (keyset paging), not a read and
//! sort of every record in the store, whatever the number of tasks.
//!
//! It is built from the store once (in the background at start, or by the first view that
//! needs it) and then kept current from the store's append hook (this host's writes, and other
//! hosts' on a shared store): a task whose log grew is marked before the write's caller goes
//! on, and the next view re-reads the marked tasks' record heads and only their new events.
//! Notifications that may have been lost mark everything, and the index is rebuilt.
//!
//! The reviews inbox pages through it too: the reviews waiting for a decision (from the record
//! heads, oldest request first), and the decisions the logs hold (from the same walk over new
//! events, newest first). Every list is a [`keyset_page`] over a map ordered the way it is shown.

use std::cmp::Reverse;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::ops::Bound;
use std::sync::{Arc, Mutex, PoisonError, RwLock, RwLockReadGuard};

use agentmesh_engine::{Status, TaskRecord};
use agentmesh_model::event::{Event, EventKind};
use agentmesh_store::{Backend, StoreError, Typed};
use serde::Deserialize;

/// The trigger sources a task's input can carry, one bit each, in this order.
pub const SOURCES: [&str; 5] = ["schedule", "webhook", "api", "self-schedule", "mcp-event"];

/// Bit for a source not in [`SOURCES`].
const OTHER_SOURCE: u8 = 1 << 7;

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
    /// When the review it waits for was requested (epoch ms), if it waits for one.
    review_ms: Option<i64>,
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

/// A review waiting for a decision, as the index knows it (the rest is in the task record).
#[derive(Debug, Clone)]
pub struct Waiting {
    /// The task that waits.
    pub task_id: Arc<str>,
    /// The review.
    pub review_id: String,
    /// Who must decide it.
    pub reviewer: String,
    /// When it was requested, epoch ms.
    pub requested_ms: i64,
}

/// Where [`Waiting`] reviews are, oldest request first (ties by task id): the list is walked
/// from its greatest key, so the key reverses the order it is shown in.
pub type WaitingKey = (Reverse<i64>, Reverse<Arc<str>>);

/// Where a [`Decision`] is, newest first: `(at, task, review)`.
pub type DecisionKey = (String, Arc<str>, String);

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

    /// Whether task `record` matches as far as its record tells (not the trigger filter,
    /// which needs the log).
    pub fn matches_record(&self, record: &TaskRecord) -> bool {
        self.agent.is_none_or(|a| record.agent == a)
            && self.status.is_none_or(|s| record.status() == s)
            && self.owner.is_none_or(|o| record.user.id == o)
    }
}

/// Where a page of a list starts. A list is shown from its greatest key down (the task list
/// newest first): `After(k)` is the page of keys below `k` (the next page), `Before(k)` the
/// page of keys above it (the previous page).
#[derive(Debug, Clone)]
pub enum From<K> {
    /// The start of the list.
    Start,
    /// The entries shown after key `K`.
    After(K),
    /// The entries shown before key `K`.
    Before(K),
}

/// A page of a list, in the order it is shown.
pub struct Page<T> {
    /// The entries.
    pub rows: Vec<T>,
    /// Whether matching entries follow.
    pub more_after: bool,
    /// Whether matching entries precede.
    pub more_before: bool,
}

/// Up to `limit` values of `map` that `keep` lets through, from `from`, greatest key first:
/// a walk from a position (keyset paging), whatever the size of the map.
pub fn keyset_page<K: Ord, V: Clone>(
    map: &BTreeMap<K, V>,
    from: &From<K>,
    limit: usize,
    keep: impl Fn(&V) -> bool,
) -> Page<V> {
    let kept = |v: &&V| keep(v);
    match from {
        From::Start => {
            let mut it = map.values().rev().filter(kept);
            let rows: Vec<V> = it.by_ref().take(limit).cloned().collect();
            Page {
                more_after: it.next().is_some(),
                more_before: false,
                rows,
            }
        }
        From::After(key) => {
            let mut it = map
                .range((Bound::Unbounded, Bound::Excluded(key)))
                .rev()
                .map(|(_, v)| v)
                .filter(kept);
            let rows: Vec<V> = it.by_ref().take(limit).cloned().collect();
            let more_before = map
                .range((Bound::Included(key), Bound::Unbounded))
                .any(|(_, v)| keep(v));
            Page {
                more_after: it.next().is_some(),
                more_before,
                rows,
            }
        }
        From::Before(key) => {
            let mut it = map
                .range((Bound::Excluded(key), Bound::Unbounded))
                .map(|(_, v)| v)
                .filter(kept);
            let mut rows: Vec<V> = it.by_ref().take(limit).cloned().collect();
            rows.reverse();
            let more_after = map
                .range((Bound::Unbounded, Bound::Included(key)))
                .any(|(_, v)| keep(v));
            Page {
                more_before: it.next().is_some(),
                more_after,
                rows,
            }
        }
    }
}

/// A task's place in the list: `(created_ms, id)`.
pub type TaskKey = (i64, Arc<str>);

/// The rows, in creation order, with what the views need besides.
#[derive(Default)]
pub struct Rows {
    by_order: BTreeMap<TaskKey, Row>,
    created: HashMap<Arc<str>, i64>,
    /// Reviews waiting for a decision.
    waiting: BTreeMap<WaitingKey, Waiting>,
    /// Every decision in the logs of the tasks indexed (a few hundred bytes each, dropped with
    /// their task).
    decisions: BTreeMap<DecisionKey, Decision>,
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
    pending_review: Option<HeadReview>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct HeadReview {
    review_id: String,
    reviewer: String,
    requested_ms: i64,
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
    pub fn page(&self, filter: &Filter<'_>, from: &From<TaskKey>, limit: usize) -> Page<Row> {
        keyset_page(&self.by_order, from, limit, |r| filter.matches(r))
    }

    /// Up to `limit` waiting reviews that `keep` lets through, from `from`, oldest first.
    pub fn waiting(
        &self,
        from: &From<WaitingKey>,
        limit: usize,
        keep: impl Fn(&Waiting) -> bool,
    ) -> Page<Waiting> {
        keyset_page(&self.waiting, from, limit, keep)
    }

    /// Up to `limit` decisions that `keep` lets through, from `from`, newest first.
    pub fn decisions(
        &self,
        from: &From<DecisionKey>,
        limit: usize,
        keep: impl Fn(&Decision) -> bool,
    ) -> Page<Decision> {
        keyset_page(&self.decisions, from, limit, keep)
    }

    fn remove(&mut self, id: &str) -> Option<Row> {
        let ms = self.created.remove(id)?;
        let row = self.by_order.remove(&(ms, Arc::from(id)))?;
        if let Some(requested) = row.review_ms {
            self.waiting
                .remove(&(Reverse(requested), Reverse(Arc::clone(&row.id))));
        }
        count(&mut self.agents, &row.agent, false);
        count(&mut self.owners, &row.owner, false);
        Some(row)
    }

    fn insert(&mut self, row: Row, review: Option<HeadReview>) {
        let mut row = row;
        row.review_ms = None;
        if let Some(r) = review.filter(|_| row.status == Status::Waiting) {
            row.review_ms = Some(r.requested_ms);
            self.waiting.insert(
                (Reverse(r.requested_ms), Reverse(Arc::clone(&row.id))),
                Waiting {
                    task_id: Arc::clone(&row.id),
                    review_id: r.review_id,
                    reviewer: r.reviewer,
                    requested_ms: r.requested_ms,
                },
            );
        }
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
                    self.decisions.insert(
                        (
                            event.timestamp.clone(),
                            Arc::clone(&row.id),
                            review_id.clone(),
                        ),
                        Decision {
                            task_id: Arc::clone(&row.id),
                            owner: Arc::clone(&row.owner),
                            review_id: review_id.clone(),
                            reviewer,
                            approve: *approve,
                            decided_by: decided_by.clone(),
                            at: event.timestamp.clone(),
                        },
                    );
                }
                _ => {}
            }
        }
    }

    /// Reads task `id` again: its head, and its events after the last seen.
    fn refresh(&mut self, store: &dyn Backend, id: &str) -> Result<(), StoreError> {
        let Some(head) = store.task::<Head>(id)? else {
            if self.remove(id).is_some() {
                self.decisions.retain(|_, d| *d.task_id != *id);
                self.requested.retain(|(task, _), _| **task != *id);
            }
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
            review_ms: None,
        };
        let (events, _) = store.events_between(id, seen.saturating_add(1), u64::MAX)?;
        self.note_events(&mut row, &events);
        self.insert(row, head.pending_review);
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
            review_ms: None,
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
            rows.insert(row(i, agent, Status::Idle, triggers), None);
        }
        rows
    }

    fn ids(page: &Page<Row>) -> Vec<&str> {
        page.rows.iter().map(|r| &*r.id).collect()
    }

    #[test]
    fn pages_walk_newest_first_from_a_cursor_both_ways() {
        let rows = rows(10);
        let all = Filter::default();
        let first = rows.page(&all, &From::Start, 4);
        assert_eq!(ids(&first), ["t_0009", "t_0008", "t_0007", "t_0006"]);
        assert!(first.more_after && !first.more_before);
        let last = &first.rows[3];
        let second = rows.page(
            &all,
            &From::After((last.created_ms, Arc::clone(&last.id))),
            4,
        );
        assert_eq!(ids(&second), ["t_0005", "t_0004", "t_0003", "t_0002"]);
        assert!(second.more_after && second.more_before);
        let top = &second.rows[0];
        let back = rows.page(
            &all,
            &From::Before((top.created_ms, Arc::clone(&top.id))),
            4,
        );
        assert_eq!(ids(&back), ids(&first));
        assert!(!back.more_before && back.more_after);
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
                    call_id: None,
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
        let decided = rows.decisions(&From::Start, 1, |_| true).rows.remove(0);
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
            ids(&rows.page(&odd, &From::Start, 3)),
            ["t_0009", "t_0007", "t_0005"]
        );
        let scheduled = Filter {
            trigger: TriggerFilter::parse("schedule"),
            ..Filter::default()
        };
        assert_eq!(
            ids(&rows.page(&scheduled, &From::Start, 10)),
            ["t_0009", "t_0006", "t_0003", "t_0000"]
        );
        let typed = Filter {
            trigger: TriggerFilter::parse("none"),
            ..Filter::default()
        };
        assert_eq!(rows.page(&typed, &From::Start, 10).rows.len(), 6);
        assert_eq!(TriggerFilter::parse("bogus"), None);
        assert_eq!(rows.agents.get("a/odd"), Some(&5));
    }
}
