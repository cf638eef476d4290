//! The subscription index: which subscriptions an inbound event can match, found without
//! trying the ones that cannot.
//!
//! Subscriptions of one (tool, event) that share a filter form a group. For a filter with
//! [pins](crate::Filter::pins), the group keeps, per pin, a map from a value's key to the
//! subscriptions whose allow-list set for the pin's parameter holds that value. Routing an
//! event evaluates each pin's event side once, looks its key up, and takes the smallest of
//! those postings as candidates: a subscription missing from any of them fails that pin's
//! conjunct, hence the filter. Only the candidates are evaluated in full. The cost of routing
//! thus grows with the subscriptions that share the event's values, not with all of them.
//!
//! A filter without pins cannot be indexed: its group is a fallback list, evaluated in full
//! for every event. A filter that reads no allow list has one verdict for all tasks: it is
//! evaluated once per event for the whole group.
//!
//! Memory: per subscription, one entry in the id map (the group and the keys it is posted
//! under, sharing the posting's allocation) and one posting per pinned value. Tool, event and
//! parameter names are stored once per group, never per subscription. The benchmark's
//! github-pr filter (three pins, `u64` ids) takes about 280 bytes per subscription. Ids are
//! cloned into each posting: for a large index prefer a small `Copy` id or an `Arc<str>`
//! over a `String`.

use std::borrow::Borrow;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::hash::Hash;
use std::sync::Arc;

use crate::allow_list::{AllowLists, keys};
use crate::filter::{Event, Filter};

/// The index of the subscriptions of every tool event, keyed by an opaque subscription id
/// (one id per task and (tool, event)).
pub struct SubscriptionIndex<Id> {
    /// tool → event name → the groups of that event.
    routes: HashMap<Box<str>, HashMap<Box<str>, Vec<GroupId>>>,
    groups: HashMap<GroupId, Group<Id>>,
    next_group: GroupId,
    placements: HashMap<Id, Placement>,
}

type GroupId = u64;

/// The subscriptions of one (tool, event) that share a filter.
struct Group<Id> {
    tool: Box<str>,
    event: Box<str>,
    filter: Arc<Filter>,
    members: usize,
    /// Per pin of the filter (same order): a value's key → the subscriptions holding it.
    postings: Vec<HashMap<Arc<str>, Posting<Id>>>,
    /// Every member, when the filter has no pins.
    unpinned: HashSet<Id>,
}

/// Where a subscription is: its group and the keys it is posted under (pin, key).
struct Placement {
    group: GroupId,
    keys: Box<[(usize, Arc<str>)]>,
}

/// The subscriptions under one key. Most keys (an author, an issue number) belong to one
/// subscription, which needs no set; the set is boxed so that those stay small.
enum Posting<Id> {
    One(Id),
    // Boxed on purpose: a bare `HashSet` would make every one-id posting six words, not two.
    #[allow(clippy::box_collection)]
    Many(Box<HashSet<Id>>),
}

/// What a group yields for an event.
enum Found<'a, Id> {
    /// These subscriptions match; nothing is left to check.
    Matched(Vec<&'a Id>),
    /// These may match: evaluate the filter for each, with the pins' keys.
    Candidates(Vec<&'a Id>, Vec<String>),
}

impl<Id> Default for SubscriptionIndex<Id> {
    fn default() -> Self {
        SubscriptionIndex {
            routes: HashMap::new(),
            groups: HashMap::new(),
            next_group: 0,
            placements: HashMap::new(),
        }
    }
}

impl<Id: Clone + Eq + Hash> SubscriptionIndex<Id> {
    /// An empty index.
    pub fn new() -> Self {
        Self::default()
    }

    /// The number of subscriptions.
    pub fn len(&self) -> usize {
        self.placements.len()
    }

    /// Whether there are no subscriptions.
    pub fn is_empty(&self) -> bool {
        self.placements.is_empty()
    }

    /// Whether subscription `id` is in the index.
    pub fn contains(&self, id: &Id) -> bool {
        self.placements.contains_key(id)
    }

    /// Adds subscription `id` to `event` of `tool`, for a task with `allow_lists` (the
    /// tool's). Replaces an earlier subscription with the same id.
    pub fn insert(
        &mut self,
        id: Id,
        tool: &str,
        event: &str,
        filter: &Arc<Filter>,
        allow_lists: &AllowLists,
    ) {
        self.remove(&id);
        let group_id = self.group_for(tool, event, filter);
        let Some(group) = self.groups.get_mut(&group_id) else {
            return;
        };
        group.members += 1;
        let keys = group.post(&id, allow_lists);
        self.placements.insert(
            id,
            Placement {
                group: group_id,
                keys,
            },
        );
    }

    /// Re-posts subscription `id` after its task's allow lists changed (an action call grew
    /// a set). Returns whether the subscription was found.
    pub fn update_allow_lists(&mut self, id: &Id, allow_lists: &AllowLists) -> bool {
        let Some(placement) = self.placements.get_mut(id) else {
            return false;
        };
        let Some(group) = self.groups.get_mut(&placement.group) else {
            return false;
        };
        group.unpost(id, &placement.keys);
        placement.keys = group.post(id, allow_lists);
        true
    }

    /// Removes subscription `id`. Returns whether it was there.
    pub fn remove(&mut self, id: &Id) -> bool {
        let Some(placement) = self.placements.remove(id) else {
            return false;
        };
        let Some(group) = self.groups.get_mut(&placement.group) else {
            return true;
        };
        group.unpost(id, &placement.keys);
        group.unpinned.remove(id);
        group.members -= 1;
        if group.members == 0 {
            self.drop_group(placement.group);
        }
        true
    }

    /// The subscriptions to `event_name` of `tool` that `event` may match: a superset of the
    /// matches, to be checked with [`Filter::matches`] (subscriptions whose filter reads no
    /// allow list are already decided). In no particular order.
    pub fn candidates(&self, tool: &str, event_name: &str, event: &Event) -> Vec<Id> {
        let mut out = Vec::new();
        for group in self.groups_of(tool, event_name) {
            match group.find(event) {
                Found::Matched(ids) | Found::Candidates(ids, _) => {
                    out.extend(ids.into_iter().cloned());
                }
            }
        }
        out
    }

    /// The subscriptions to `event_name` of `tool` that `event` matches, in no particular
    /// order. `allow_lists` gives a candidate's allow lists for this tool (a reference, or
    /// an owned value loaded for the occasion); a candidate without any is skipped.
    pub fn route<L, F>(
        &self,
        tool: &str,
        event_name: &str,
        event: &Event,
        mut allow_lists: F,
    ) -> Vec<Id>
    where
        L: Borrow<AllowLists>,
        F: FnMut(&Id) -> Option<L>,
    {
        let mut out = Vec::new();
        for group in self.groups_of(tool, event_name) {
            match group.find(event) {
                Found::Matched(ids) => out.extend(ids.into_iter().cloned()),
                Found::Candidates(ids, keys) => {
                    for id in ids {
                        let Some(lists) = allow_lists(id) else {
                            continue;
                        };
                        if group.filter.matches_pinned(event, lists.borrow(), &keys) {
                            out.push(id.clone());
                        }
                    }
                }
            }
        }
        out
    }

    fn groups_of(&self, tool: &str, event_name: &str) -> impl Iterator<Item = &Group<Id>> {
        self.routes
            .get(tool)
            .and_then(|events| events.get(event_name))
            .into_iter()
            .flatten()
            .filter_map(|id| self.groups.get(id))
    }

    /// The group of (tool, event) with `filter` (the same one, or one with the same source),
    /// created when there is none.
    fn group_for(&mut self, tool: &str, event: &str, filter: &Arc<Filter>) -> GroupId {
        let groups = self
            .routes
            .entry(tool.into())
            .or_default()
            .entry(event.into())
            .or_default();
        let existing = groups.iter().copied().find(|id| {
            self.groups.get(id).is_some_and(|g| {
                Arc::ptr_eq(&g.filter, filter)
                    || g.filter.expression().source() == filter.expression().source()
            })
        });
        if let Some(id) = existing {
            return id;
        }
        let id = self.next_group;
        self.next_group += 1;
        groups.push(id);
        self.groups.insert(
            id,
            Group {
                tool: tool.into(),
                event: event.into(),
                filter: Arc::clone(filter),
                members: 0,
                postings: filter.pins().iter().map(|_| HashMap::new()).collect(),
                unpinned: HashSet::new(),
            },
        );
        id
    }

    fn drop_group(&mut self, id: GroupId) {
        let Some(group) = self.groups.remove(&id) else {
            return;
        };
        let Some(events) = self.routes.get_mut(&group.tool) else {
            return;
        };
        if let Some(groups) = events.get_mut(&group.event) {
            groups.retain(|g| *g != id);
            if groups.is_empty() {
                events.remove(&group.event);
            }
        }
        if events.is_empty() {
            self.routes.remove(&group.tool);
        }
    }
}

impl<Id: Clone + Eq + Hash> Group<Id> {
    /// Posts `id` under the keys of its values for each pin; returns them.
    fn post(&mut self, id: &Id, allow_lists: &AllowLists) -> Box<[(usize, Arc<str>)]> {
        if self.postings.is_empty() {
            self.unpinned.insert(id.clone());
            return Box::default();
        }
        let wanted: BTreeSet<(usize, String)> = self
            .filter
            .pins()
            .iter()
            .enumerate()
            .flat_map(|(pin, p)| {
                allow_lists
                    .get(p.parameter())
                    .into_iter()
                    .flatten()
                    .flat_map(|stored| keys(stored))
                    .map(move |key| (pin, key))
            })
            .collect();
        let mut posted = Vec::with_capacity(wanted.len());
        for (pin, key) in wanted {
            let Some(postings) = self.postings.get_mut(pin) else {
                continue;
            };
            let key = match postings.get_key_value(key.as_str()) {
                Some((shared, _)) => Arc::clone(shared),
                None => Arc::from(key),
            };
            match postings.get_mut(&key) {
                Some(posting) => posting.insert(id.clone()),
                None => {
                    postings.insert(Arc::clone(&key), Posting::One(id.clone()));
                }
            }
            posted.push((pin, key));
        }
        posted.into_boxed_slice()
    }

    /// Takes `id` out of the postings under `keys`.
    fn unpost(&mut self, id: &Id, keys: &[(usize, Arc<str>)]) {
        for (pin, key) in keys {
            let Some(postings) = self.postings.get_mut(*pin) else {
                continue;
            };
            if postings.get_mut(key).is_some_and(|p| p.remove(id)) {
                postings.remove(key);
            }
        }
    }

    fn find(&self, event: &Event) -> Found<'_, Id> {
        if !self.filter.reads_parameters() {
            let all = if self.filter.matches(event, &AllowLists::new()) {
                self.unpinned.iter().collect()
            } else {
                Vec::new()
            };
            return Found::Matched(all);
        }
        if self.postings.is_empty() {
            return Found::Candidates(self.unpinned.iter().collect(), Vec::new());
        }
        let Some(keys) = self.filter.pin_keys(event) else {
            return Found::Matched(Vec::new());
        };
        let mut smallest: Option<&Posting<Id>> = None;
        for (postings, key) in self.postings.iter().zip(&keys) {
            let Some(posting) = postings.get(key.as_str()) else {
                return Found::Matched(Vec::new());
            };
            if smallest.is_none_or(|s| posting.len() < s.len()) {
                smallest = Some(posting);
            }
        }
        let ids = smallest.map(Posting::ids).unwrap_or_default();
        Found::Candidates(ids, keys)
    }
}

impl<Id: Clone + Eq + Hash> Posting<Id> {
    fn len(&self) -> usize {
        match self {
            Posting::One(_) => 1,
            Posting::Many(ids) => ids.len(),
        }
    }

    fn ids(&self) -> Vec<&Id> {
        match self {
            Posting::One(id) => vec![id],
            Posting::Many(ids) => ids.iter().collect(),
        }
    }

    fn insert(&mut self, id: Id) {
        match self {
            Posting::One(only) if *only == id => {}
            Posting::One(only) => {
                *self = Posting::Many(Box::new(HashSet::from([only.clone(), id])));
            }
            Posting::Many(ids) => {
                ids.insert(id);
            }
        }
    }

    /// Removes `id`; returns whether the posting is now empty.
    fn remove(&mut self, id: &Id) -> bool {
        match self {
            Posting::One(only) => only == id,
            Posting::Many(ids) => {
                ids.remove(id);
                if ids.len() == 1
                    && let Some(last) = ids.iter().next().cloned()
                {
                    *self = Posting::One(last);
                    return false;
                }
                ids.is_empty()
            }
        }
    }
}
