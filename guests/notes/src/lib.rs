//! `notes`: a tool component (world `tool-plugin`) that keeps notes in the host's key-value
//! store, private to the task that wrote them.
//!
//! Actions: `put {key, value}` → `{"stored": key}`; `get {key}` → `{"key", "value"}` (`value`
//! is null for a missing note); `list` → `{"keys": [...]}` in the order they were first stored.

use agentmesh_guest::{Actions, Error, NoInput, Start, Tool, kv};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// The key holding the list of note keys (note keys get a prefix, so none can collide with it).
const INDEX: &str = "index";
/// The prefix of a note's key in the store.
const NOTE: &str = "note/";

/// A session; notes live in the store, so it holds nothing.
struct Notes;

/// Store a note under a key.
#[derive(Deserialize, JsonSchema)]
struct Put {
    /// The note's name.
    key: String,
    /// Its text.
    value: String,
}

/// Read the note stored under a key.
#[derive(Deserialize, JsonSchema)]
struct Get {
    /// The note's name.
    key: String,
}

/// The answer of `list`.
#[derive(Serialize)]
struct Keys {
    keys: Vec<String>,
}

impl Tool for Notes {
    fn new(_start: &Start) -> Result<Self, Error> {
        Ok(Notes)
    }

    fn actions(actions: &mut Actions<Self>) {
        actions
            .add("put", Self::put)
            .add("get", Self::get)
            .add("list", Self::list);
    }
}

impl Notes {
    fn put(&mut self, input: Put) -> Result<Value, Error> {
        let mut keys = index()?;
        if !keys.contains(&input.key) {
            keys.push(input.key.clone());
            kv::set_json(INDEX, &keys)?;
        }
        kv::set(&format!("{NOTE}{}", input.key), input.value.as_bytes());
        Ok(json!({ "stored": input.key }))
    }

    fn get(&mut self, input: Get) -> Result<Value, Error> {
        let value = kv::get(&format!("{NOTE}{}", input.key))
            .map(|v| String::from_utf8_lossy(&v).into_owned());
        Ok(json!({ "key": input.key, "value": value }))
    }

    fn list(&mut self, _input: NoInput) -> Result<Keys, Error> {
        Ok(Keys { keys: index()? })
    }
}

/// The keys stored so far.
fn index() -> Result<Vec<String>, Error> {
    Ok(kv::get_json(INDEX)?.unwrap_or_default())
}

agentmesh_guest::export_tool!(Notes);

#[cfg(test)]
mod tests {
    /// The manifest's actions from the input types (`cargo test -- --nocapture` prints them):
    /// a doc comment is the description, the fields the parameters; `NoInput` has neither.
    #[test]
    fn manifest_actions_come_from_the_input_types() {
        let actions = agentmesh_guest::manifest_actions::<super::Notes>();
        println!("{actions}");
        let expected = r#"actions:
  - name: put
    description: "Store a note under a key."
    parameters: {"properties":{"key":{"description":"The note's name.","type":"string"},"value":{"description":"Its text.","type":"string"}},"required":["key","value"],"type":"object"}
  - name: get
    description: "Read the note stored under a key."
    parameters: {"properties":{"key":{"description":"The note's name.","type":"string"}},"required":["key"],"type":"object"}
  - name: list
    parameters: {"type":"object"}
"#;
        assert_eq!(actions, expected);
    }
}
