//! The routing state: every active subscription of every task in the subscription index,
//! with each task's allow lists and subscription deadlines, kept in step with the task
//! records by the engine ([`Watcher`]: rebuilt from them at start and on reload, updated as
//! each is saved). Filters are the plan's compiled expressions, analysed once per plan.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use std::sync::RwLock;

use agentmesh_engine::PollKey;
use agentmesh_engine::plan::{EventPlan, Plan, PollPlan, Via};
use agentmesh_engine::{TaskRecord, Watcher};

use crate::{AllowLists, Event, Filter, SubscriptionIndex};

/// A subscription: task, tool, event.
type SubId = (Arc<str>, Arc<str>, Arc<str>);

/// What routing keeps of one task.
struct TaskRoutes {
    /// Tool → its allow lists.
    allow_lists: BTreeMap<String, AllowLists>,
    /// Tool → the parameters its bindings sealed.
    sealed: BTreeMap<String, BTreeSet<String>>,
    /// (tool, event) → when the subscription expires (epoch ms; `None`: never).
    deadlines: HashMap<(Arc<str>, Arc<str>), Option<i64>>,
}

/// Subscriptions, indexed for routing.
#[derive(Default)]
pub(crate) struct Routes {
    index: SubscriptionIndex<SubId>,
    tasks: HashMap<Arc<str>, TaskRoutes>,
    /// The analysed filter of each (tool, event), for the plan whose expression it holds.
    filters: HashMap<(Arc<str>, Arc<str>), Arc<Filter>>,
}

/// The routing state, shared by the engine (which keeps it in step) and the router.
#[derive(Default)]
pub(crate) struct SharedRoutes(pub(crate) RwLock<Routes>);

impl SharedRoutes {
    /// The routing state, for reading.
    pub(crate) fn read(&self) -> std::sync::RwLockReadGuard<'_, Routes> {
        self.0
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Routes> {
        self.0
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Watcher for SharedRoutes {
    fn rebuild(&self, plan: &Plan, records: &[TaskRecord]) {
        let mut routes = Routes::default();
        for record in records {
            routes.sync(plan, record);
        }
        *self.write() = routes;
    }

    fn saved(&self, plan: &Plan, record: &TaskRecord) {
        self.write().sync(plan, record);
    }
}

impl Routes {
    /// Brings task `record`'s entries in step with it: its active subscriptions with its
    /// current allow lists and deadlines (none while interrupted or terminated).
    pub(crate) fn sync(&mut self, plan: &Plan, record: &TaskRecord) {
        self.remove_task(&record.id);
        let active = record.active_subscriptions();
        if active.is_empty() {
            return;
        }
        let task: Arc<str> = Arc::from(record.id.as_str());
        let mut deadlines = HashMap::new();
        for sub in active {
            let Some(event) = plan
                .tools
                .get(&sub.tool)
                .and_then(|t| t.events.iter().find(|e| e.name == sub.event))
            else {
                // The tool or event is gone from the configuration: nothing can arrive.
                continue;
            };
            let tool: Arc<str> = Arc::from(sub.tool.as_str());
            let name: Arc<str> = Arc::from(sub.event.as_str());
            let filter = self.filter(&tool, &name, event);
            let empty = AllowLists::new();
            let lists = record.allow_lists.get(&sub.tool).unwrap_or(&empty);
            self.index.insert(
                (Arc::clone(&task), Arc::clone(&tool), Arc::clone(&name)),
                &sub.tool,
                &sub.event,
                &filter,
                lists,
            );
            deadlines.insert((tool, name), sub.expires_at(record.last_activity_ms));
        }
        self.tasks.insert(
            task,
            TaskRoutes {
                allow_lists: record.allow_lists.clone(),
                sealed: record.sealed.clone(),
                deadlines,
            },
        );
    }

    /// The analysed filter of `event` (of `tool`, named `name`): analysed once for the
    /// expression the plan compiled, again only when a reload compiled a new one.
    fn filter(&mut self, tool: &Arc<str>, name: &Arc<str>, event: &EventPlan) -> Arc<Filter> {
        let key = (Arc::clone(tool), Arc::clone(name));
        match self.filters.get(&key) {
            Some(f) if std::ptr::eq(f.expression(), &*event.filter) => Arc::clone(f),
            _ => {
                let f = Arc::new(Filter::new(Arc::clone(&event.filter)));
                self.filters.insert(key, Arc::clone(&f));
                f
            }
        }
    }

    /// Removes every entry of task `id`.
    pub(crate) fn remove_task(&mut self, id: &str) {
        let Some(routes) = self.tasks.remove(id) else {
            return;
        };
        let task: Arc<str> = Arc::from(id);
        for (tool, event) in routes.deadlines.into_keys() {
            self.index.remove(&(Arc::clone(&task), tool, event));
        }
    }

    /// The tasks whose subscription to `event_name` of `tool` matches `event` and has not
    /// expired at `now_ms`.
    pub(crate) fn route(
        &self,
        tool: &str,
        event_name: &str,
        event: &Event,
        now_ms: i64,
    ) -> Vec<String> {
        let matched = self
            .index
            .route(tool, event_name, event, |(task, tool, _)| {
                self.tasks
                    .get(task)
                    .and_then(|t| t.allow_lists.get(&**tool))
            });
        matched
            .into_iter()
            .filter(|(task, tool, name)| {
                self.tasks.get(task).is_some_and(|t| {
                    t.deadlines
                        .get(&(Arc::clone(tool), Arc::clone(name)))
                        .is_some_and(|d| d.is_none_or(|at| at > now_ms))
                })
            })
            .map(|(task, _, _)| task.to_string())
            .collect()
    }

    /// The pollers the live subscriptions at `now_ms` want: one per poll event and distinct
    /// set of values the subscribed tasks' bindings sealed for the parameters its request
    /// reads. A task without a sealed value for one of them wants none (`validate` requires
    /// the bindings).
    pub(crate) fn pollers(&self, plan: &Plan, now_ms: i64) -> HashMap<PollKey, Arc<PollPlan>> {
        let mut out = HashMap::new();
        for task in self.tasks.values() {
            for ((tool, event), deadline) in &task.deadlines {
                if deadline.is_some_and(|at| at <= now_ms) {
                    continue;
                }
                let Some(poll) = poll_of(plan, tool, event) else {
                    continue;
                };
                if let Some(key) = task.poll_key(tool, event, poll) {
                    out.insert(key, Arc::clone(poll));
                }
            }
        }
        out
    }

    /// The tasks whose subscription is polled by `key` (its event, their sealed values).
    pub(crate) fn polled_by(&self, plan: &Plan, key: &PollKey) -> HashSet<String> {
        let Some(poll) = poll_of(plan, &key.tool, &key.event) else {
            return HashSet::new();
        };
        self.tasks
            .iter()
            .filter(|(_, t)| t.poll_key(&key.tool, &key.event, poll).as_ref() == Some(key))
            .map(|(id, _)| id.to_string())
            .collect()
    }

    /// Tasks with a subscription expired at `now_ms`.
    pub(crate) fn expired(&self, now_ms: i64) -> Vec<String> {
        self.tasks
            .iter()
            .filter(|(_, t)| {
                t.deadlines
                    .values()
                    .any(|d| d.is_some_and(|at| at <= now_ms))
            })
            .map(|(id, _)| id.to_string())
            .collect()
    }
}

impl TaskRoutes {
    /// The poller of `event` of `tool` (polled by `poll`) this task wants: the values its
    /// bindings sealed for the parameters the request reads; `None` when it does not
    /// subscribe to the event or one of them is not sealed.
    fn poll_key(&self, tool: &str, event: &str, poll: &PollPlan) -> Option<PollKey> {
        let subscribed = self
            .deadlines
            .keys()
            .any(|(t, e)| &**t == tool && &**e == event);
        if !subscribed {
            return None;
        }
        let sealed = self.sealed.get(tool);
        let lists = self.allow_lists.get(tool);
        let values = poll.parameters.iter().map(|name| {
            let value = lists?.get(name)?.first()?;
            let only = lists?.get(name)?.len() == 1;
            (sealed?.contains(name) && only).then(|| (name.clone(), value.clone()))
        });
        Some(PollKey {
            tool: tool.to_owned(),
            event: event.to_owned(),
            values: values.collect::<Option<_>>()?,
        })
    }
}

/// The poll plan of `event` of `tool`, when it is received by polling.
fn poll_of<'p>(plan: &'p Plan, tool: &str, event: &str) -> Option<&'p Arc<PollPlan>> {
    let event = plan
        .tools
        .get(tool)?
        .events
        .iter()
        .find(|e| e.name == event)?;
    match &event.via {
        Via::Poll(poll) => Some(poll),
        _ => None,
    }
}
