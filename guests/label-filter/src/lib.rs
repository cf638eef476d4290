//! `label-filter`: an event-filter component (world `event-filter-plugin`).
//!
//! Passes an event when one of its labels is in the task's `labels` allow list. Labels are read
//! GitHub-style from `payload.labels` (strings or `{"name": ...}` objects) and `payload.label`
//! (the label a `labeled` event added). No `labels` allow list, or an empty one, discards the
//! event (allow lists fail closed).

mod bindings {
    wit_bindgen::generate!({
        world: "event-filter-plugin",
        path: "../../wit",
        generate_all,
    });
}

use bindings::exports::agentmesh::plugin::event_filter::{AllowList, Guest};
use serde_json::Value;

/// The allow list this filter reads.
const LABELS: &str = "labels";

/// The component.
struct LabelFilter;

impl Guest for LabelFilter {
    fn matches(event: String, parameters: Vec<AllowList>) -> bool {
        let Some(allowed) = parameters.iter().find(|p| p.name == LABELS) else {
            return false;
        };
        let Ok(event) = serde_json::from_str::<Value>(&event) else {
            return false;
        };
        let payload = &event["payload"];
        let listed = payload["labels"].as_array().into_iter().flatten();
        let added = std::iter::once(&payload["label"]);
        listed
            .chain(added)
            .filter_map(label_name)
            .any(|name| allowed.values.iter().any(|v| v == name))
    }
}

/// A label's name: the string itself or its `name` member.
fn label_name(label: &Value) -> Option<&str> {
    label.as_str().or_else(|| label["name"].as_str())
}

bindings::export!(LabelFilter with_types_in bindings);
