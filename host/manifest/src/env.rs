//! `{env: NAME}` for every scalar of the host config (CONTRACT §1): before the document is
//! shape-checked, each `{env: NAME}` standing where the host config's schema wants a scalar
//! (a string, a number, a duration, a size, a boolean) is replaced by the variable's value,
//! typed as the schema wants it. The fields that take an [`EnvValue`] (tool settings, source
//! secrets, model API keys) keep their `{env: …}`: the engine reads those itself when it
//! starts. Every variable read here is named in [`HostConfig::env_reads`] so that its value is
//! scrubbed like every other secret.
//!
//! [`EnvValue`]: crate::model::common::EnvValue
//! [`HostConfig::env_reads`]: crate::model::HostConfig::env_reads

use serde_json::{Number, Value};

use crate::shape::follow_ref;
use crate::yaml::{Node, NodeValue, Pos, Style};

/// A variable that is not set: where it is asked for, and its name.
pub(crate) struct Unset {
    pub pos: Pos,
    pub name: String,
}

/// Replaces the `{env: NAME}` scalars of `node` (a document of the kind `root` is the JSON
/// Schema of): returns the names of the variables read, and those that are not set (their
/// scalars become null, as if absent).
pub(crate) fn resolve(
    node: &mut Node,
    root: &Value,
    env: &dyn Fn(&str) -> Option<String>,
) -> (Vec<String>, Vec<Unset>) {
    let mut walk = Walk {
        root,
        env,
        read: Vec::new(),
        unset: Vec::new(),
    };
    walk.node(node, root, 0);
    (walk.read, walk.unset)
}

/// Schemas nest no deeper than this; a deeper document is left to the shape check.
const MAX_DEPTH: usize = 32;

struct Walk<'a> {
    root: &'a Value,
    env: &'a dyn Fn(&str) -> Option<String>,
    read: Vec<String>,
    unset: Vec<Unset>,
}

impl<'a> Walk<'a> {
    /// `schema` with its `$ref` followed, and, for `anyOf` or `oneOf`, each alternative that
    /// way.
    fn alternatives(&self, schema: &'a Value) -> Vec<&'a Value> {
        let schema = self.follow(schema);
        let options = schema.get("anyOf").or_else(|| schema.get("oneOf"));
        match options.and_then(Value::as_array) {
            Some(options) => options.iter().map(|o| self.follow(o)).collect(),
            None => vec![schema],
        }
    }

    fn follow(&self, schema: &'a Value) -> &'a Value {
        follow_ref(self.root, schema)
    }

    fn node(&mut self, node: &mut Node, schema: &'a Value, depth: usize) {
        if depth > MAX_DEPTH {
            return;
        }
        let options = self.alternatives(schema);
        if options.iter().any(|o| is_env_value(o)) {
            // An `EnvValue`: the engine reads its variable at start.
            return;
        }
        if let Some(name) = env_name(node) {
            if !options.iter().any(|o| takes_map(o)) {
                let pos = node.pos;
                match (self.env)(&name) {
                    Some(value) => {
                        node.value = typed(value, &options);
                        self.read.push(name);
                    }
                    None => {
                        // Left out, so the rest of the document is still checked.
                        node.value = NodeValue::Null;
                        self.unset.push(Unset { pos, name });
                    }
                }
            }
            return;
        }
        match &mut node.value {
            NodeValue::Map(entries) => {
                for (key, value) in entries {
                    let key = key.key_text();
                    if let Some(child) = options.iter().find_map(|o| field(o, &key)) {
                        self.node(value, child, depth + 1);
                    }
                }
            }
            NodeValue::Seq(items) => {
                if let Some(child) = options.iter().find_map(|o| o.get("items")) {
                    for item in items {
                        self.node(item, child, depth + 1);
                    }
                }
            }
            _ => {}
        }
    }
}

/// The variable `node` names, if it is `{env: NAME}` and nothing else.
fn env_name(node: &Node) -> Option<String> {
    let NodeValue::Map(entries) = &node.value else {
        return None;
    };
    match entries.as_slice() {
        [(key, value)] if key.as_str() == Some("env") => value.as_str().map(str::to_owned),
        _ => None,
    }
}

/// Whether `schema` is the `{env: NAME}` form of an `EnvValue` (an object whose only property
/// is `env`).
fn is_env_value(schema: &Value) -> bool {
    schema
        .get("properties")
        .and_then(Value::as_object)
        .is_some_and(|p| p.len() == 1 && p.contains_key("env"))
}

/// Whether a map may stand where `schema` is.
fn takes_map(schema: &Value) -> bool {
    has_type(schema, "object")
        || schema.get("properties").is_some()
        || schema.get("additionalProperties").is_some()
        || ["type", "enum", "const", "anyOf", "oneOf"]
            .iter()
            .all(|k| schema.get(k).is_none())
}

/// The schema of `key` in an object schema.
fn field<'s>(schema: &'s Value, key: &str) -> Option<&'s Value> {
    schema
        .get("properties")
        .and_then(|p| p.get(key))
        .or_else(|| schema.get("additionalProperties").filter(|a| a.is_object()))
}

/// `value` as the scalar the schema wants: a number or a boolean where one is taken and the
/// text is one, else a string.
fn typed(value: String, options: &[&Value]) -> NodeValue {
    let wants = |t: &str| options.iter().any(|o| has_type(o, t));
    if (wants("integer") || wants("number"))
        && let Ok(n) = value.trim().parse::<Number>()
    {
        return NodeValue::Number(n);
    }
    if wants("boolean") {
        match value.trim() {
            "true" => return NodeValue::Bool(true),
            "false" => return NodeValue::Bool(false),
            _ => {}
        }
    }
    NodeValue::Str(value, Style::Quoted)
}

/// Whether `schema`'s `type` is or includes `t`.
fn has_type(schema: &Value, t: &str) -> bool {
    match schema.get("type") {
        Some(Value::String(s)) => s == t,
        Some(Value::Array(types)) => types.iter().any(|x| x == t),
        _ => false,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::path::Path;

    use crate::load::{Config, load_text};
    use crate::model::common::EnvValue;

    /// Loads `text` (one host config) with `vars` set: the config and the diagnostics.
    fn load(text: &str, vars: &[(&str, &str)]) -> (Config, Vec<String>) {
        let env = |name: &str| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
        };
        let mut config = Config::default();
        let mut diags = Vec::new();
        let place = (Path::new("host.yaml"), Path::new("."));
        load_text(text, place, &env, &mut config, &mut diags);
        (config, diags.iter().map(ToString::to_string).collect())
    }

    #[test]
    fn scalars_take_their_variables_typed_and_env_values_keep_theirs() {
        let text = "kind: agentmesh/v1/host
policy: {max_body_bytes: {env: BODY}, max_wakeups_per_task: {env: WAKEUPS}}
settings:
  ns: {tool: {api_key: {env: KEY}}}
";
        let vars = [("BODY", "2048"), ("WAKEUPS", "3")];
        let (config, diags) = load(text, &vars);
        assert!(diags.is_empty(), "{diags:?}");
        let host = config.host.unwrap().value;
        assert_eq!(host.policy.max_body_bytes.map(|b| b.0), Some(2048));
        assert_eq!(host.policy.max_wakeups_per_task, Some(3));
        assert_eq!(host.env_reads, ["BODY", "WAKEUPS"]);
        // A setting keeps its `{env: …}`: the engine reads it at start (KEY is not set here).
        assert!(matches!(
            &host.settings["ns"]["tool"]["api_key"],
            EnvValue::Env { env } if env == "KEY"
        ));
    }

    #[test]
    fn a_value_of_the_wrong_type_is_a_shape_error_at_its_place() {
        let text = "kind: agentmesh/v1/host\npolicy: {max_wakeups_per_task: {env: WAKEUPS}}\n";
        let (config, diags) = load(text, &[("WAKEUPS", "many")]);
        assert!(config.host.is_none());
        assert_eq!(diags.len(), 1, "{diags:?}");
        assert!(diags[0].starts_with("host.yaml:2:"), "{diags:?}");
    }
}
