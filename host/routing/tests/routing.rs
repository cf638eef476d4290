//! Routing events to tasks: allow-list filters and the subscription index, as the engine and
//! the webhook endpoint use them.

// Tests unwrap and index what they just built; a failure should stop the test loudly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use agentmesh_routing::{AllowLists, Event, Filter, SubscriptionIndex, allow_value};
use serde_json::{Value as Json, json};

const TOOL: &str = "engineering/github-pr";

/// The spec's github-pr `comment` filter.
const GITHUB_PR: &str = "event.payload.repository.owner.login == parameters.owner \
    && event.payload.repository.name == parameters.repo \
    && event.payload.comment.user.login == parameters.author";

fn lists(pairs: &[(&str, &[&str])]) -> AllowLists {
    pairs
        .iter()
        .map(|(name, values)| {
            (
                (*name).to_owned(),
                values.iter().map(|v| (*v).to_owned()).collect(),
            )
        })
        .collect()
}

fn comment(owner: &str, repo: &str, author: &str) -> Event {
    Event::new(json!({
        "name": "comment",
        "delivery_id": "d1",
        "received_at": "2025-06-01T12:00:00Z",
        "headers": {},
        "payload": {
            "action": "created",
            "repository": {"name": repo, "owner": {"login": owner}},
            "comment": {"user": {"login": author}, "body": "LGTM"},
        },
    }))
}

fn filter(source: &str) -> Arc<Filter> {
    Arc::new(Filter::compile(source).unwrap())
}

/// An index over tasks whose allow lists live beside it, as in the engine.
#[derive(Default)]
struct Tasks {
    index: SubscriptionIndex<String>,
    lists: HashMap<String, AllowLists>,
}

impl Tasks {
    fn subscribe(&mut self, task: &str, event: &str, filter: &Arc<Filter>, lists: AllowLists) {
        self.index.insert(task.into(), TOOL, event, filter, &lists);
        self.lists.insert(task.into(), lists);
    }

    fn grow(&mut self, task: &str, parameter: &str, value: &Json) {
        let lists = self.lists.get_mut(task).unwrap();
        lists
            .entry(parameter.into())
            .or_default()
            .insert(allow_value(value));
        assert!(self.index.update_allow_lists(&task.to_owned(), lists));
    }

    fn route(&self, event_name: &str, event: &Event) -> BTreeSet<String> {
        self.index
            .route(TOOL, event_name, event, |task| self.lists.get(task))
            .into_iter()
            .collect()
    }
}

fn set(tasks: &[&str]) -> BTreeSet<String> {
    tasks.iter().map(|t| (*t).to_owned()).collect()
}

mod github_pr {
    use super::*;

    fn sealed(authors: &[&str]) -> AllowLists {
        lists(&[
            ("owner", &["buoyant-systems"]),
            ("repo", &["agent-mesh"]),
            ("author", authors),
        ])
    }

    #[test]
    fn comment_routes_only_for_authors_in_the_allow_list() {
        let mut tasks = Tasks::default();
        tasks.subscribe("t_1", "comment", &filter(GITHUB_PR), sealed(&["alice"]));
        assert_eq!(
            tasks.route(
                "comment",
                &comment("buoyant-systems", "agent-mesh", "alice")
            ),
            set(&["t_1"])
        );
        assert!(
            tasks
                .route(
                    "comment",
                    &comment("buoyant-systems", "agent-mesh", "carol")
                )
                .is_empty()
        );
    }

    #[test]
    fn sealed_owner_and_repo_scope_the_event() {
        let mut tasks = Tasks::default();
        tasks.subscribe("t_1", "comment", &filter(GITHUB_PR), sealed(&["alice"]));
        for (owner, repo) in [("buoyant-systems", "other"), ("someone", "agent-mesh")] {
            assert!(
                tasks
                    .route("comment", &comment(owner, repo, "alice"))
                    .is_empty()
            );
        }
    }

    #[test]
    fn a_new_author_routes_after_the_allow_list_grows() {
        let mut tasks = Tasks::default();
        tasks.subscribe("t_1", "comment", &filter(GITHUB_PR), sealed(&["alice"]));
        let bob = comment("buoyant-systems", "agent-mesh", "bob");
        assert!(tasks.route("comment", &bob).is_empty());
        tasks.grow("t_1", "author", &json!("bob"));
        assert_eq!(tasks.route("comment", &bob), set(&["t_1"]));
        let alice = comment("buoyant-systems", "agent-mesh", "alice");
        assert_eq!(tasks.route("comment", &alice), set(&["t_1"]));
    }

    #[test]
    fn one_event_fans_out_to_every_matching_task() {
        let mut tasks = Tasks::default();
        let f = filter(GITHUB_PR);
        tasks.subscribe("t_1", "comment", &f, sealed(&["alice"]));
        tasks.subscribe("t_2", "comment", &f, sealed(&["alice", "bob"]));
        tasks.subscribe("t_3", "comment", &f, sealed(&["bob"]));
        let alice = comment("buoyant-systems", "agent-mesh", "alice");
        assert_eq!(tasks.route("comment", &alice), set(&["t_1", "t_2"]));
        assert!(tasks.route("review", &alice).is_empty(), "other event");
    }

    #[test]
    fn removed_subscriptions_stop_routing() {
        let mut tasks = Tasks::default();
        tasks.subscribe("t_1", "comment", &filter(GITHUB_PR), sealed(&["alice"]));
        assert!(tasks.index.remove(&"t_1".to_owned()));
        assert!(!tasks.index.remove(&"t_1".to_owned()));
        assert!(tasks.index.is_empty());
        let alice = comment("buoyant-systems", "agent-mesh", "alice");
        assert!(tasks.route("comment", &alice).is_empty());
        assert!(
            !tasks
                .index
                .update_allow_lists(&"t_1".to_owned(), &sealed(&[]))
        );
    }
}

mod filters {
    use super::*;

    #[test]
    fn an_empty_set_discards_the_event() {
        let f = Filter::compile(GITHUB_PR).unwrap();
        let alice = comment("buoyant-systems", "agent-mesh", "alice");
        let empty = lists(&[
            ("owner", &["buoyant-systems"]),
            ("repo", &["agent-mesh"]),
            ("author", &[]),
        ]);
        assert!(!f.matches(&alice, &empty));
        let absent = lists(&[("owner", &["buoyant-systems"]), ("repo", &["agent-mesh"])]);
        assert!(!f.matches(&alice, &absent));

        let mut tasks = Tasks::default();
        tasks.subscribe("t_1", "comment", &filter(GITHUB_PR), empty);
        assert!(tasks.route("comment", &alice).is_empty());
    }

    #[test]
    fn an_empty_set_discards_even_when_the_filter_would_not_read_it() {
        let f =
            Filter::compile("event.payload.action == 'created' || parameters.x == 'y'").unwrap();
        let event = comment("o", "r", "alice");
        assert!(!f.matches(&event, &AllowLists::new()));
        assert!(f.matches(&event, &lists(&[("x", &["anything"])])));
    }

    #[test]
    fn evaluation_errors_fail_closed() {
        let all = lists(&[
            ("owner", &["buoyant-systems"]),
            ("repo", &["agent-mesh"]),
            ("author", &["alice"]),
        ]);
        // A review event has no `comment`: a missing key is an error, not false.
        let review = Event::new(json!({
            "name": "review",
            "payload": {"repository": {"name": "agent-mesh", "owner": {"login": "buoyant-systems"}}},
        }));
        assert!(!Filter::compile(GITHUB_PR).unwrap().matches(&review, &all));
        // Type errors, and a non-boolean result.
        for source in [
            "event.payload.action + 1 == parameters.author",
            "parameters.author",
            "event.payload.action == parameters.author || event.nope.nope",
        ] {
            let f = Filter::compile(source).unwrap();
            assert!(
                !f.matches(&comment("o", "r", "carol"), &all),
                "{source} should fail closed"
            );
        }
        let mut tasks = Tasks::default();
        tasks.subscribe("t_1", "review", &filter(GITHUB_PR), all);
        assert!(tasks.route("review", &review).is_empty());
    }

    #[test]
    fn has_event_is_true_in_event_activations() {
        let source = "!has(event) || event.payload.comment.user.login == parameters.author";
        let f = filter(source);
        assert!(f.pins().is_empty(), "a disjunction is not indexable");
        let alice_only = lists(&[("author", &["alice"])]);
        assert!(f.matches(&comment("o", "r", "alice"), &alice_only));
        assert!(!f.matches(&comment("o", "r", "carol"), &alice_only));

        let guard = Filter::compile(
            "has(event) && event.payload.comment.user.login != 'dependabot[bot]' \
             && event.payload.comment.user.login == parameters.author",
        )
        .unwrap();
        assert_eq!(guard.pins().len(), 1);
        assert!(guard.matches(&comment("o", "r", "alice"), &alice_only));
        let bot = lists(&[("author", &["dependabot[bot]"])]);
        assert!(!guard.matches(&comment("o", "r", "dependabot[bot]"), &bot));
    }

    #[test]
    fn integer_parameters_match_integer_payloads() {
        let f = Filter::compile("event.payload.issue.number == parameters.number").unwrap();
        let mut l = AllowLists::new();
        l.entry("number".into())
            .or_default()
            .insert(allow_value(&json!(1347)));
        let event = |n: Json| Event::new(json!({"payload": {"issue": {"number": n}}}));
        assert!(f.matches(&event(json!(1347)), &l));
        assert!(!f.matches(&event(json!(1348)), &l));
    }

    /// An event `e` carrying `payload`.
    fn with_payload(payload: Json) -> Event {
        let mut event = json!({"name": "e"});
        event["payload"] = payload;
        Event::new(event)
    }

    #[test]
    fn numbers_in_an_allow_list_compare_as_numbers_and_as_text() {
        let f = Filter::compile("event.payload.number == parameters.number").unwrap();
        let l = lists(&[("number", &["42"])]);
        assert!(f.matches(&with_payload(json!({"number": 42})), &l));
        assert!(f.matches(&with_payload(json!({"number": 42.0})), &l));
        assert!(f.matches(&with_payload(json!({"number": "42"})), &l));
        assert!(!f.matches(&with_payload(json!({"number": 43})), &l));
    }

    #[test]
    fn unpinned_sets_try_every_combination() {
        let f = Filter::compile("parameters.a + parameters.b == event.payload.ab").unwrap();
        assert!(f.pins().is_empty());
        let l = lists(&[("a", &["x", "y"]), ("b", &["1", "2"])]);
        assert!(f.matches(&with_payload(json!({"ab": "y2"})), &l));
        assert!(!f.matches(&with_payload(json!({"ab": "z1"})), &l));
    }

    #[test]
    fn too_many_combinations_fail_closed() {
        let f = Filter::compile("parameters.a + parameters.b == event.payload.ab").unwrap();
        let many: Vec<String> = (0..100).map(|i| format!("v{i}")).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        let l = lists(&[("a", &many), ("b", &many)]);
        assert!(!f.matches(&with_payload(json!({"ab": "v1v2"})), &l));
        let small = lists(&[("a", &many), ("b", &["v2"])]);
        assert!(f.matches(&with_payload(json!({"ab": "v1v2"})), &small));
    }

    #[test]
    fn pinned_sets_do_not_count_towards_the_limit() {
        let f =
            Filter::compile("event.payload.a == parameters.a && event.payload.b == parameters.b")
                .unwrap();
        let many: Vec<String> = (0..1000).map(|i| format!("v{i}")).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        let l = lists(&[("a", &many), ("b", &many)]);
        assert!(f.matches(&with_payload(json!({"a": "v7", "b": "v999"})), &l));
    }

    #[test]
    fn whole_sets_are_lists_for_in() {
        let f = Filter::compile("event.payload.label in parameters.labels").unwrap();
        assert!(f.pins()[0].is_membership());
        let l = lists(&[("labels", &["bug", "7"])]);
        assert!(f.matches(&with_payload(json!({"label": "bug"})), &l));
        assert!(f.matches(&with_payload(json!({"label": 7})), &l));
        assert!(!f.matches(&with_payload(json!({"label": "feature"})), &l));
        assert!(!f.matches(&with_payload(json!({"label": "bug"})), &AllowLists::new()));
    }

    #[test]
    fn unnamed_references_require_every_set_nonempty() {
        let f = Filter::compile("parameters[event.payload.key] == 'yes'").unwrap();
        assert_eq!(f.referenced_parameters(), None);
        let l = lists(&[("a", &["yes"]), ("b", &["no"])]);
        assert!(f.matches(&with_payload(json!({"key": "a"})), &l));
        assert!(!f.matches(&with_payload(json!({"key": "b"})), &l));
        let with_empty = lists(&[("a", &["yes"]), ("b", &[])]);
        assert!(!f.matches(&with_payload(json!({"key": "a"})), &with_empty));
    }

    #[test]
    fn a_filter_without_parameters_ignores_allow_lists() {
        let f = Filter::compile("event.payload.action == 'created'").unwrap();
        assert!(!f.reads_parameters());
        assert!(f.matches(
            &with_payload(json!({"action": "created"})),
            &AllowLists::new()
        ));
        assert!(!f.matches(
            &with_payload(json!({"action": "deleted"})),
            &AllowLists::new()
        ));
    }
}

mod index {
    use super::*;

    #[test]
    fn a_filter_without_pins_falls_back_to_full_evaluation() {
        let source = "event.payload.comment.user.login.startsWith(parameters.prefix)";
        let f = filter(source);
        assert!(f.pins().is_empty());
        let mut tasks = Tasks::default();
        tasks.subscribe("t_a", "comment", &f, lists(&[("prefix", &["al"])]));
        tasks.subscribe("t_c", "comment", &f, lists(&[("prefix", &["ca"])]));
        let alice = comment("o", "r", "alice");
        let mut candidates = tasks.index.candidates(TOOL, "comment", &alice);
        candidates.sort();
        assert_eq!(candidates, ["t_a", "t_c"], "both are evaluated");
        assert_eq!(tasks.route("comment", &alice), set(&["t_a"]));
    }

    #[test]
    fn pins_narrow_the_candidates_to_the_matching_values() {
        let f = filter(GITHUB_PR);
        let mut tasks = Tasks::default();
        for i in 0..50 {
            let author = format!("user{i}");
            tasks.subscribe(
                &format!("t_{i}"),
                "comment",
                &f,
                lists(&[("owner", &["o"]), ("repo", &["r"]), ("author", &[&author])]),
            );
        }
        let event = comment("o", "r", "user7");
        assert_eq!(tasks.index.candidates(TOOL, "comment", &event), ["t_7"]);
        assert!(
            tasks
                .index
                .candidates(TOOL, "comment", &comment("o", "r", "nobody"))
                .is_empty()
        );
    }

    #[test]
    fn a_filter_without_parameters_is_decided_once_for_all() {
        let f = filter("event.payload.action == 'created'");
        let mut tasks = Tasks::default();
        tasks.subscribe("t_1", "comment", &f, AllowLists::new());
        tasks.subscribe("t_2", "comment", &f, lists(&[("x", &["y"])]));
        let routed = tasks
            .index
            .route(TOOL, "comment", &comment("o", "r", "a"), |_| {
                None::<&AllowLists>
            });
        assert_eq!(
            routed.into_iter().collect::<BTreeSet<_>>(),
            set(&["t_1", "t_2"])
        );
    }

    #[test]
    fn the_index_can_be_shared_between_threads() {
        fn shared<T: Send + Sync>() {}
        shared::<SubscriptionIndex<String>>();
        shared::<Event>();
    }

    #[test]
    fn reinserting_an_id_replaces_its_subscription() {
        let mut tasks = Tasks::default();
        let f = filter(GITHUB_PR);
        let l = lists(&[("owner", &["o"]), ("repo", &["r"]), ("author", &["alice"])]);
        tasks.subscribe("t_1", "comment", &f, l.clone());
        tasks.subscribe("t_1", "review", &f, l);
        assert_eq!(tasks.index.len(), 1);
        let alice = comment("o", "r", "alice");
        assert!(tasks.route("comment", &alice).is_empty());
        assert_eq!(tasks.route("review", &alice), set(&["t_1"]));
    }

    #[test]
    fn subscriptions_with_different_filters_share_an_event() {
        let mut tasks = Tasks::default();
        tasks.subscribe(
            "t_pr",
            "comment",
            &filter(GITHUB_PR),
            lists(&[("owner", &["o"]), ("repo", &["r"]), ("author", &["alice"])]),
        );
        // The same source compiled again joins the same group.
        tasks.subscribe(
            "t_pr2",
            "comment",
            &filter(GITHUB_PR),
            lists(&[("owner", &["o"]), ("repo", &["r"]), ("author", &["alice"])]),
        );
        tasks.subscribe(
            "t_any",
            "comment",
            &filter("event.payload.repository.name in parameters.repo"),
            lists(&[("repo", &["r", "s"])]),
        );
        let alice = comment("o", "r", "alice");
        assert_eq!(
            tasks.route("comment", &alice),
            set(&["t_pr", "t_pr2", "t_any"])
        );
        assert_eq!(
            tasks.route("comment", &comment("o", "s", "bob")),
            set(&["t_any"])
        );
    }
}

/// The index returns exactly what evaluating every subscription's filter returns.
mod agreement {
    use proptest::prelude::*;

    use super::*;

    const FILTERS: &[&str] = &[
        "event.payload.owner == parameters.owner && event.payload.author == parameters.author",
        "event.payload.number == parameters.number && parameters.owner == event.payload.owner",
        "event.payload.author in parameters.author",
        "!has(event) || event.payload.author == parameters.author",
        "event.payload.owner == 'o1'",
        "parameters.owner == event.payload.owner \
         && (event.payload.author == parameters.author || event.payload.number == 2)",
        "event.payload.author.lowerAscii() == parameters.author && size(parameters.owner) > 1",
        "event.payload.tags == parameters.tags",
    ];

    fn subset(pool: &'static [&'static str]) -> impl Strategy<Value = BTreeSet<String>> {
        proptest::sample::subsequence(pool, 0..=pool.len())
            .prop_map(|values| values.into_iter().map(str::to_owned).collect())
    }

    fn allow_lists() -> impl Strategy<Value = AllowLists> {
        (
            subset(&["o1", "o2"]),
            subset(&["a", "b", "1"]),
            subset(&["1", "2", "1.0", "x"]),
            subset(&[r#"["p","q"]"#, r#"["q"]"#]),
            any::<bool>(),
        )
            .prop_map(|(owner, author, number, tags, with_tags)| {
                let mut lists = AllowLists::from([
                    ("owner".to_owned(), owner),
                    ("author".to_owned(), author),
                    ("number".to_owned(), number),
                ]);
                if with_tags {
                    lists.insert("tags".into(), tags);
                }
                lists
            })
    }

    fn event() -> impl Strategy<Value = Json> {
        (
            prop::sample::select(&["o1", "o2", "o3"][..]),
            prop::sample::select(&["a", "A", "b", "c", "1"][..]),
            prop::sample::select(vec![json!(1), json!(2), json!(1.5), json!("1"), json!(1.0)]),
            prop::sample::select(vec![json!(["p", "q"]), json!(["q"]), json!([])]),
        )
            .prop_map(|(owner, author, number, tags)| {
                json!({
                    "name": "e",
                    "payload": {"owner": owner, "author": author, "number": number, "tags": tags},
                })
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        #[test]
        fn index_and_scan_agree(
            subs in prop::collection::vec((0..FILTERS.len(), allow_lists()), 0..24),
            grown in prop::collection::vec((0usize..24, allow_lists()), 0..6),
            events in prop::collection::vec(event(), 1..6),
        ) {
            let filters: Vec<Arc<Filter>> = FILTERS.iter().map(|s| filter(s)).collect();
            let mut index = SubscriptionIndex::new();
            let mut state: Vec<(usize, AllowLists)> = Vec::new();
            for (id, (f, lists)) in subs.iter().enumerate() {
                index.insert(id, TOOL, "e", &filters[*f], lists);
                state.push((*f, lists.clone()));
            }
            for (id, lists) in grown {
                if let Some((_, current)) = state.get_mut(id) {
                    *current = lists;
                    prop_assert!(index.update_allow_lists(&id, current));
                }
            }
            for event in events {
                let event = &Event::new(event);
                let scanned: BTreeSet<usize> = state
                    .iter()
                    .enumerate()
                    .filter(|(_, (f, lists))| filters[*f].matches(event, lists))
                    .map(|(id, _)| id)
                    .collect();
                let routed: BTreeSet<usize> = index
                    .route(TOOL, "e", event, |id| state.get(*id).map(|(_, l)| l))
                    .into_iter()
                    .collect();
                prop_assert_eq!(&routed, &scanned);
                let candidates: BTreeSet<usize> =
                    index.candidates(TOOL, "e", event).into_iter().collect();
                prop_assert!(candidates.is_superset(&scanned));
            }
        }
    }
}
