//! Parameter and settings schemas: each property's schema compiles, and its `default` meets it.

use serde_json::Value;

use super::{Checker, K, Seg, key_pos, pos_at};
use crate::load::Source;
use crate::model::common::{ParameterSchema, Property};

/// What a schema's properties are, as messages name them.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Of {
    /// A tool's settings.
    Settings,
    /// A tool's, an action's or an event's parameters.
    Parameters,
    /// An agent's parameters, whose `message` is a message whatever its schema says.
    Agent,
}

/// Checks the properties of the schema at `path`. A schema that does not compile would stop
/// the host from loading the config; a default its own schema refuses would reach the tool or
/// the agent as if it had been given.
pub(crate) fn check(c: &mut Checker, src: &Source, path: &[Seg], schema: &ParameterSchema, of: Of) {
    let what = if of == Of::Settings {
        "setting"
    } else {
        "parameter"
    };
    for (name, prop) in &schema.properties {
        let at = [path, &[K("properties"), K(name)]].concat();
        let validator = match jsonschema::validator_for(&prop.json_schema()) {
            Ok(v) => v,
            Err(e) => {
                c.error(
                    src,
                    key_pos(&src.node, &at),
                    format!("the schema of {what} `{name}` does not compile: {e}"),
                );
                continue;
            }
        };
        let default = prop.default.as_ref();
        let why = match default {
            // The engine reads `message` as a string or content parts (and nothing else).
            Some(d) if of == Of::Agent && name == "message" => (!is_message(d)).then(|| {
                "is not a message: text or a list of content parts (`{mimeType, text}`)".to_owned()
            }),
            Some(d) => first_error(&validator, d, prop.is_secret())
                .map(|why| format!("is refused by its own schema: {why}")),
            None => None,
        };
        if let Some(why) = why {
            let mut at = at;
            at.push(K("default"));
            c.error(
                src,
                pos_at(&src.node, &at),
                format!("the default of {what} `{name}` {why}"),
            );
        }
    }
}

/// Why the schema of `prop` refuses `value` (its first rule broken), the value itself left out
/// when it is a `secret`; `None` when it is accepted, and when the schema does not compile
/// (which `check` reports at the schema).
pub(crate) fn refused(prop: &Property, value: &Value, secret: bool) -> Option<String> {
    let validator = jsonschema::validator_for(&prop.json_schema()).ok()?;
    first_error(&validator, value, secret)
}

/// A message as an input may give it: text, or content parts (objects).
fn is_message(value: &Value) -> bool {
    match value {
        Value::String(_) => true,
        Value::Array(parts) => parts.iter().all(Value::is_object),
        _ => false,
    }
}

fn first_error(validator: &jsonschema::Validator, value: &Value, secret: bool) -> Option<String> {
    let error = validator.iter_errors(value).next()?;
    Some(if secret {
        error.masked().to_string()
    } else {
        error.to_string()
    })
}
