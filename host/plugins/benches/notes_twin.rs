//! The `notes` tool (`guests/notes`) as plain Rust: the benchmark's native baseline, and the
//! body of the `notes-native` binary it runs as a subprocess. Same actions, same JSON, same
//! key layout as the component.

use serde_json::{Map, Value, json};

/// The key-value operations `notes` needs.
pub trait Kv {
    /// The value under `key`.
    fn get(&self, key: &str) -> Option<Vec<u8>>;
    /// Stores `value` under `key`.
    fn set(&self, key: &str, value: &[u8]);
}

/// Runs `action` with `input`, as the component does.
pub fn invoke(kv: &dyn Kv, action: &str, input: &str) -> Result<String, String> {
    let input: Map<String, Value> =
        serde_json::from_str(input).map_err(|e| format!("input is not a JSON object: {e}"))?;
    let text = |key: &str| {
        input
            .get(key)
            .and_then(Value::as_str)
            .ok_or_else(|| format!("`{key}` (a string) is required"))
    };
    let index = || -> Vec<String> {
        kv.get("index")
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .unwrap_or_default()
    };
    let answer = match action {
        "put" => {
            let key = text("key")?;
            let value = text("value")?;
            let mut keys = index();
            if !keys.iter().any(|k| k == key) {
                keys.push(key.to_owned());
                kv.set("index", Value::from(keys).to_string().as_bytes());
            }
            kv.set(&format!("note/{key}"), value.as_bytes());
            json!({ "stored": key })
        }
        "get" => {
            let key = text("key")?;
            let value = kv
                .get(&format!("note/{key}"))
                .map(|v| String::from_utf8_lossy(&v).into_owned());
            json!({ "key": key, "value": value })
        }
        "list" => json!({ "keys": index() }),
        other => return Err(format!("notes has no action `{other}`")),
    };
    Ok(answer.to_string())
}
