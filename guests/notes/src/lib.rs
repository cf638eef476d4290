//! `notes`: a tool component (world `tool-plugin`) that keeps notes in the host's key-value
//! store, private to the task that wrote them.
//!
//! Actions: `put {key, value}` → `{"stored": key}`; `get {key}` → `{"key", "value"}` (`value`
//! is null for a missing note); `list` → `{"keys": [...]}` in the order they were first stored.

mod bindings {
    wit_bindgen::generate!({
        world: "tool-plugin",
        path: "../../wit",
        generate_all,
    });
}

use bindings::agentmesh::plugin::host::{kv_get, kv_set};
use bindings::agentmesh::plugin::types::ToolError;
use bindings::exports::agentmesh::plugin::tool::{Guest, GuestSession};
use serde_json::{Map, Value, json};

/// The key holding the list of note keys (note keys get a prefix, so none can collide with it).
const INDEX: &str = "index";
/// The prefix of a note's key in the store.
const NOTE: &str = "note/";

/// The component.
struct Notes;

impl Guest for Notes {
    type Session = Session;
}

/// A session; notes live in the store, so it holds nothing.
struct Session;

impl GuestSession for Session {
    fn new(_settings: String, _parameters: String) -> Self {
        Session
    }

    fn invoke(&self, action: String, input: String) -> Result<String, ToolError> {
        let input: Map<String, Value> = serde_json::from_str(&input)
            .map_err(|e| ToolError::Recoverable(format!("input is not a JSON object: {e}")))?;
        let answer = match action.as_str() {
            "put" => {
                let key = text(&input, "key")?;
                let value = text(&input, "value")?;
                let mut keys = index();
                if !keys.iter().any(|k| k == key) {
                    keys.push(key.to_owned());
                    kv_set(INDEX, Value::from(keys).to_string().as_bytes());
                }
                kv_set(&format!("{NOTE}{key}"), value.as_bytes());
                json!({ "stored": key })
            }
            "get" => {
                let key = text(&input, "key")?;
                let value = kv_get(&format!("{NOTE}{key}"))
                    .map(|v| String::from_utf8_lossy(&v).into_owned());
                json!({ "key": key, "value": value })
            }
            "list" => json!({ "keys": index() }),
            other => return Err(ToolError::Fatal(format!("notes has no action `{other}`"))),
        };
        Ok(answer.to_string())
    }
}

/// The keys stored so far.
fn index() -> Vec<String> {
    kv_get(INDEX)
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or_default()
}

/// A required string field of the input.
fn text<'a>(input: &'a Map<String, Value>, key: &str) -> Result<&'a str, ToolError> {
    input
        .get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| ToolError::Recoverable(format!("`{key}` (a string) is required")))
}

bindings::export!(Notes with_types_in bindings);
