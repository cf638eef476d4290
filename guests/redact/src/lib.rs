//! `redact`: a middleware component (world `middleware-plugin`).
//!
//! Config: `{"fields": ["token", ...], "deny_fields": ["password", ...]}`.
//! - `after` replaces the value of every object member named in `fields`, at any depth of the
//!   output, with `"[redacted]"` (a `replace` verdict; `pass` when there was nothing to redact);
//! - `before` and `after` deny when the input (or the output) holds a member named in
//!   `deny_fields`, saying which.

mod bindings {
    wit_bindgen::generate!({
        world: "middleware-plugin",
        path: "../../wit",
        generate_all,
    });
}

use bindings::agentmesh::plugin::host::{Level, log};
use bindings::exports::agentmesh::plugin::middleware::{Guest, Verdict};
use serde_json::Value;

/// What replaces a redacted value.
const REDACTED: &str = "[redacted]";

/// The component.
struct Redact;

impl Guest for Redact {
    fn before(config: String, _context: String, input: String, _event: Option<String>) -> Verdict {
        let config = Config::parse(&config);
        match serde_json::from_str::<Value>(&input) {
            Ok(input) => deny_verdict(&config, &input, "input").unwrap_or(Verdict::Pass),
            Err(e) => Verdict::Deny(format!("redact: the input is not JSON: {e}")),
        }
    }

    fn after(
        config: String,
        _context: String,
        _input: String,
        output: String,
        _event: Option<String>,
    ) -> Verdict {
        let config = Config::parse(&config);
        let mut output = match serde_json::from_str::<Value>(&output) {
            Ok(output) => output,
            // A plain-text output has no fields to redact.
            Err(_) => return Verdict::Pass,
        };
        if let Some(deny) = deny_verdict(&config, &output, "output") {
            return deny;
        }
        let count = redact(&mut output, &config.fields);
        if count == 0 {
            Verdict::Pass
        } else {
            log(Level::Debug, &format!("redacted {count} field(s)"));
            Verdict::Replace(output.to_string())
        }
    }
}

/// The step's configuration.
struct Config {
    /// Members whose values are replaced.
    fields: Vec<String>,
    /// Members whose presence denies the call.
    deny_fields: Vec<String>,
}

impl Config {
    /// Reads the config; missing or malformed lists are empty.
    fn parse(text: &str) -> Config {
        let value: Value = serde_json::from_str(text).unwrap_or(Value::Null);
        let list = |key: &str| -> Vec<String> {
            value
                .get(key)
                .and_then(Value::as_array)
                .map(|items| {
                    items
                        .iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default()
        };
        Config {
            fields: list("fields"),
            deny_fields: list("deny_fields"),
        }
    }
}

/// A deny verdict when `value` holds a member named in `deny_fields`.
fn deny_verdict(config: &Config, value: &Value, what: &str) -> Option<Verdict> {
    config
        .deny_fields
        .iter()
        .find(|name| contains(value, name))
        .map(|name| {
            Verdict::Deny(format!(
                "the {what} contains `{name}`, which this step does not let through"
            ))
        })
}

/// Whether an object member named `name` occurs anywhere in `value`.
fn contains(value: &Value, name: &str) -> bool {
    match value {
        Value::Object(map) => map.iter().any(|(k, v)| k == name || contains(v, name)),
        Value::Array(items) => items.iter().any(|v| contains(v, name)),
        _ => false,
    }
}

/// Replaces the values of members named in `fields`, at any depth; returns how many.
fn redact(value: &mut Value, fields: &[String]) -> usize {
    match value {
        Value::Object(map) => map
            .iter_mut()
            .map(|(k, v)| {
                if fields.iter().any(|f| f == k) {
                    *v = Value::String(REDACTED.to_owned());
                    1
                } else {
                    redact(v, fields)
                }
            })
            .sum(),
        Value::Array(items) => items.iter_mut().map(|v| redact(v, fields)).sum(),
        _ => 0,
    }
}

bindings::export!(Redact with_types_in bindings);
