//! Allow lists (CONTRACT §3, `allow_list` of a task object): what the engine stores when it
//! grows or seals one, and what routing reads when it matches an event against one.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value as Json;

/// One tool's allow lists of a task: parameter name → the set of values the task may act on
/// (CONTRACT §3, `allow_list` of a task object). Values are stored as text, see
/// [`allow_value`].
pub type AllowLists = BTreeMap<String, BTreeSet<String>>;

/// The stored form of a parameter value: a JSON string as itself, anything else as its
/// compact JSON text (`42`, `true`, `{"a":1}`). The engine stores action arguments and
/// binding values this way when it grows or seals an allow list.
pub fn allow_value(value: &Json) -> String {
    match value {
        Json::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn strings_are_stored_as_themselves_and_the_rest_as_json() {
        assert_eq!(allow_value(&json!("alice")), "alice");
        assert_eq!(allow_value(&json!(42)), "42");
        assert_eq!(allow_value(&json!({"a": [1, true]})), r#"{"a":[1,true]}"#);
    }
}
