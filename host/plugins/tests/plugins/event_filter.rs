//! The `label-filter` event-filter component.

use agentmesh_plugins::{AllowList, Limits};
use serde_json::json;

use crate::util::load;

fn labels(values: &[&str]) -> Vec<AllowList> {
    vec![AllowList {
        name: "labels".into(),
        values: values.iter().map(|v| (*v).to_owned()).collect(),
    }]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_passes_when_one_of_its_labels_is_allowed() {
    let filter = load("label-filter");
    let limits = Limits::default();
    let event =
        json!({"name": "pr_labeled", "payload": {"labels": [{"name": "bug"}, {"name": "ui"}]}})
            .to_string();
    assert!(
        filter
            .event_filter_matches(&limits, &event, &labels(&["ui"]))
            .await
            .unwrap()
    );
    assert!(
        !filter
            .event_filter_matches(&limits, &event, &labels(&["backend"]))
            .await
            .unwrap()
    );

    // GitHub's `labeled` event names the added label in `payload.label`.
    let added = json!({"name": "pr_labeled", "payload": {"label": {"name": "urgent"}}}).to_string();
    assert!(
        filter
            .event_filter_matches(&limits, &added, &labels(&["urgent"]))
            .await
            .unwrap()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_labels_allow_list_nothing_passes() {
    let filter = load("label-filter");
    let limits = Limits::default();
    let event = json!({"payload": {"labels": ["bug"]}}).to_string();
    assert!(
        !filter
            .event_filter_matches(&limits, &event, &[])
            .await
            .unwrap()
    );
    assert!(
        !filter
            .event_filter_matches(&limits, &event, &labels(&[]))
            .await
            .unwrap()
    );
    let other = vec![AllowList {
        name: "owner".into(),
        values: vec!["bug".into()],
    }];
    assert!(
        !filter
            .event_filter_matches(&limits, &event, &other)
            .await
            .unwrap()
    );
}
