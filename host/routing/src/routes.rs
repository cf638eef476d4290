//! The routing state: every active subscription of every task in the subscription index,
//! with each task's allow lists and subscription deadlines, kept in step with the task
//! records by the engine ([`Watcher`]: rebuilt from them at start and on reload, updated as
//! each is saved). Filters are the plan's compiled expressions, analysed once per plan.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use std::sync::RwLock;

use agentmesh_engine::plan::{EventPlan, Plan};
use agentmesh_engine::{TaskRecord, Watcher};

use crate::{AllowLists, Event, Filter, SubscriptionIndex};

/// A subscription: task, tool, event.
type SubId = (Arc<str>, Arc<str>, Arc<str>);

/// What routing keeps of one task.
struct TaskRoutes {
    /// Tool → its allow lists.
    allow_lists: BTreeMap<String, AllowLists>,
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
