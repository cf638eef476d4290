//! Parameter and settings schemas: each property's schema compiles, and its `default` meets it.

use serde_json::Value;

use super::{Checker, K, Seg, key_pos, pos_at};
use crate::load::Source;
use crate::model::common::{ParameterSchema, Property};

/// Checks the properties of the schema at `path` (`what` names them in messages: `parameter`,
/// `setting`). A schema that does not compile would stop the host from loading the config; a
/// default its own schema refuses would reach the tool or the agent as if it had been given.
pub(crate) fn check(
    c: &mut Checker,
    src: &Source,
    path: &[Seg],
    schema: &ParameterSchema,
    what: &str,
) {
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
        if let Some(default) = &prop.default
            && let Some(why) = first_error(&validator, default, prop.is_secret())
        {
            let mut at = at;
            at.push(K("default"));
            c.error(
                src,
                pos_at(&src.node, &at),
                format!("the default of {what} `{name}` is refused by its own schema: {why}"),
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

fn first_error(validator: &jsonschema::Validator, value: &Value, secret: bool) -> Option<String> {
    let error = validator.iter_errors(value).next()?;
    Some(if secret {
        error.masked().to_string()
    } else {
        error.to_string()
    })
}
