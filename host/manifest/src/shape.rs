//! Checks a document's shape against its kind's JSON Schema, reporting every problem at its
//! node: wrong types, unknown fields (with a "did you mean"), missing required fields, values
//! outside an enum, bad durations and sizes.
//!
//! The schemas are the ones `agentmesh schema` prints, generated from the typed models, so the
//! models stay the single source of truth. Only the keywords those schemas use are understood.

use serde_json::Value;

use crate::model::common::{ByteSize, Duration};
use crate::suggest::{did_you_mean, did_you_mean_hint};
use crate::yaml::{Node, NodeValue, Pos};

/// One shape problem.
pub(crate) struct Problem {
    pub pos: Pos,
    pub message: String,
}

/// Checks `node` against `schema` (a root schema with its `$defs`). `what` names the document
/// in messages ("agent").
pub(crate) fn check(node: &Node, schema: &Value, what: &str) -> Vec<Problem> {
    let mut out = Vec::new();
    Walker { root: schema, what }.node(node, schema, &mut Vec::new(), &mut out);
    out
}

/// `schema` with its `$ref`s followed into `root`'s `$defs`.
pub(crate) fn follow_ref<'a>(root: &'a Value, mut schema: &'a Value) -> &'a Value {
    // `$ref`s only point into `$defs`; a chain longer than a few links would be a cycle.
    for _ in 0..8 {
        let Some(r) = schema.get("$ref").and_then(Value::as_str) else {
            break;
        };
        let name = r.trim_start_matches("#/$defs/");
        match root.get("$defs").and_then(|d| d.get(name)) {
            Some(s) => schema = s,
            None => break,
        }
    }
    schema
}

struct Walker<'a> {
    root: &'a Value,
    what: &'a str,
}

impl<'a> Walker<'a> {
    fn resolve(&self, schema: &'a Value) -> &'a Value {
        follow_ref(self.root, schema)
    }

    fn place(&self, path: &[String]) -> String {
        if path.is_empty() {
            self.what.to_owned()
        } else {
            format!("`{}`", join_path(path))
        }
    }

    fn node(&self, node: &Node, schema: &'a Value, path: &mut Vec<String>, out: &mut Vec<Problem>) {
        let schema = self.resolve(schema);
        if schema.as_bool() == Some(true) {
            return;
        }
        if let Some(branches) = schema
            .get("anyOf")
            .or_else(|| schema.get("oneOf"))
            .and_then(Value::as_array)
        {
            self.alternatives(node, branches, path, out);
            return;
        }
        if let Some(types) = schema.get("type")
            && !type_matches(node, types)
        {
            out.push(Problem {
                pos: node.pos,
                message: format!(
                    "{} must be {}, found {}",
                    self.place(path),
                    type_names(types),
                    node.kind_name()
                ),
            });
            return;
        }
        if let Some(allowed) = allowed_strings(schema) {
            self.enum_check(node, &allowed, path, out);
            return;
        }
        if let Some(format) = schema.get("format").and_then(Value::as_str) {
            self.format(node, format, path, out);
        }
        if let Some(min) = schema.get("minimum").and_then(Value::as_f64)
            && let NodeValue::Number(n) = &node.value
            && n.as_f64().is_some_and(|v| v < min)
        {
            out.push(Problem {
                pos: node.pos,
                message: format!("{} must be at least {min}", self.place(path)),
            });
        }
        match &node.value {
            NodeValue::Map(entries) => self.map(node, entries, schema, path, out),
            NodeValue::Seq(items) => {
                if let Some(item_schema) = schema.get("items") {
                    for (i, item) in items.iter().enumerate() {
                        path.push(format!("[{i}]"));
                        self.node(item, item_schema, path, out);
                        path.pop();
                    }
                }
            }
            _ => {}
        }
    }

    fn map(
        &self,
        node: &Node,
        entries: &[(Node, Node)],
        schema: &'a Value,
        path: &mut Vec<String>,
        out: &mut Vec<Problem>,
    ) {
        let props = schema.get("properties").and_then(Value::as_object);
        let additional = schema.get("additionalProperties");
        for (key, value) in entries {
            let Some(name) = key.as_str() else {
                out.push(Problem {
                    pos: key.pos,
                    message: format!("keys in {} must be strings", self.place(path)),
                });
                continue;
            };
            path.push(name.to_owned());
            if let Some(prop) = props.and_then(|p| p.get(name)) {
                self.node(value, prop, path, out);
            } else if additional.and_then(Value::as_bool) == Some(false) {
                path.pop();
                let known: Vec<&str> = props
                    .map(|p| p.keys().map(String::as_str).collect())
                    .unwrap_or_default();
                let hint = match did_you_mean(name, known.iter().copied()) {
                    Some(s) => format!("; did you mean `{s}`?"),
                    None => format!(" (expected one of: {})", known.join(", ")),
                };
                out.push(Problem {
                    pos: key.pos,
                    message: format!("unknown field `{name}` in {}{hint}", self.place(path)),
                });
                continue;
            } else if let Some(extra) = additional.filter(|a| a.is_object()) {
                self.node(value, extra, path, out);
            }
            path.pop();
        }
        if let Some(required) = schema.get("required").and_then(Value::as_array) {
            for name in required.iter().filter_map(Value::as_str) {
                if !entries.iter().any(|(k, _)| k.as_str() == Some(name)) {
                    out.push(Problem {
                        pos: node.pos,
                        message: format!("missing required field `{name}` in {}", self.place(path)),
                    });
                }
            }
        }
    }

    fn alternatives(
        &self,
        node: &Node,
        branches: &'a [Value],
        path: &mut Vec<String>,
        out: &mut Vec<Problem>,
    ) {
        let resolved: Vec<&Value> = branches.iter().map(|b| self.resolve(b)).collect();
        // All branches are string constants: an enum (e.g. unit variants with docs).
        let consts: Option<Vec<String>> = resolved
            .iter()
            .map(|b| self.string_consts(b))
            .collect::<Option<Vec<_>>>()
            .map(|v| v.concat());
        if let Some(allowed) = consts {
            self.enum_check(node, &allowed, path, out);
            return;
        }
        let compatible: Vec<&Value> = resolved
            .iter()
            .copied()
            .filter(|b| self.accepts_type(node, b, 0))
            .collect();
        let mut first_errors = None;
        for branch in &compatible {
            let mut errors = Vec::new();
            self.node(node, branch, path, &mut errors);
            if errors.is_empty() {
                return;
            }
            first_errors.get_or_insert(errors);
        }
        match first_errors {
            Some(errors) => out.extend(errors),
            None => {
                let expected: Vec<String> = resolved
                    .iter()
                    .map(|b| match self.string_consts(b) {
                        Some(v) => v
                            .iter()
                            .map(|s| format!("`{s}`"))
                            .collect::<Vec<_>>()
                            .join(" or "),
                        None => b.get("type").map_or("anything".into(), type_names),
                    })
                    .collect();
                out.push(Problem {
                    pos: node.pos,
                    message: format!(
                        "{} must be {}, found {}",
                        self.place(path),
                        expected.join(" or "),
                        node.kind_name()
                    ),
                });
            }
        }
    }

    /// The strings a schema allows when it is a constant, an enum, or alternatives of those.
    fn string_consts(&self, schema: &Value) -> Option<Vec<String>> {
        if let Some(v) = allowed_strings(schema) {
            return Some(v);
        }
        let branches = schema
            .get("oneOf")
            .or_else(|| schema.get("anyOf"))?
            .as_array()?;
        branches
            .iter()
            .map(|b| allowed_strings(self.resolve(b)))
            .collect::<Option<Vec<_>>>()
            .map(|v| v.concat())
    }

    /// Whether `schema` could accept a node of this type (nested alternatives included).
    fn accepts_type(&self, node: &Node, schema: &Value, depth: usize) -> bool {
        let schema = self.resolve(schema);
        if let Some(t) = schema.get("type") {
            return type_matches(node, t);
        }
        if let Some(branches) = schema
            .get("anyOf")
            .or_else(|| schema.get("oneOf"))
            .and_then(Value::as_array)
        {
            return depth > 4
                || branches
                    .iter()
                    .any(|b| self.accepts_type(node, b, depth + 1));
        }
        // An untyped enum of strings only ever accepts a string.
        allowed_strings(schema).is_none() || node.as_str().is_some()
    }

    fn enum_check(&self, node: &Node, allowed: &[String], path: &[String], out: &mut Vec<Problem>) {
        let text = match &node.value {
            NodeValue::Str(s, _) => s.clone(),
            NodeValue::Null if allowed.iter().any(|a| a == "null") => return,
            other => {
                let _ = other;
                out.push(Problem {
                    pos: node.pos,
                    message: format!(
                        "{} must be one of {}, found {}",
                        self.place(path),
                        quoted_list(allowed),
                        node.kind_name()
                    ),
                });
                return;
            }
        };
        if allowed.contains(&text) {
            return;
        }
        let hint = did_you_mean_hint(&text, allowed.iter().map(String::as_str));
        out.push(Problem {
            pos: node.pos,
            message: format!(
                "{}: `{text}` is not one of {}{hint}",
                self.place(path),
                quoted_list(allowed)
            ),
        });
    }

    fn format(&self, node: &Node, format: &str, path: &[String], out: &mut Vec<Problem>) {
        let Some(text) = node.as_str() else {
            return;
        };
        let result = match format {
            "duration" => Duration::parse(text).map(|_| ()).map_err(|e| e.0),
            "byte-size" => ByteSize::parse(text).map(|_| ()).map_err(|e| e.0),
            _ => Ok(()),
        };
        if let Err(e) = result {
            out.push(Problem {
                pos: node.pos,
                message: format!("{}: {e}", self.place(path)),
            });
        }
    }
}

/// `capabilities.github-pr.before[0]`.
pub(crate) fn join_path(path: &[String]) -> String {
    let mut s = String::new();
    for seg in path {
        if !seg.starts_with('[') && !s.is_empty() {
            s.push('.');
        }
        s.push_str(seg);
    }
    s
}

fn quoted_list(items: &[String]) -> String {
    items
        .iter()
        .map(|s| format!("`{s}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The strings a schema allows, when it is a `const` or an `enum` of strings.
fn allowed_strings(schema: &Value) -> Option<Vec<String>> {
    if let Some(c) = schema.get("const") {
        return c.as_str().map(|s| vec![s.to_owned()]);
    }
    let values = schema.get("enum")?.as_array()?;
    values
        .iter()
        .map(|v| v.as_str().map(str::to_owned))
        .collect()
}

fn type_matches(node: &Node, types: &Value) -> bool {
    let one = |t: &str| match (&node.value, t) {
        (NodeValue::Null, "null")
        | (NodeValue::Bool(_), "boolean")
        | (NodeValue::Str(..), "string")
        | (NodeValue::Seq(_), "array")
        | (NodeValue::Map(_), "object")
        | (NodeValue::Number(_), "number") => true,
        (NodeValue::Number(n), "integer") => !n.is_f64(),
        _ => false,
    };
    match types {
        Value::String(t) => one(t),
        Value::Array(ts) => ts.iter().filter_map(Value::as_str).any(one),
        _ => true,
    }
}

fn type_names(types: &Value) -> String {
    let name = |t: &str| match t {
        "null" => "null",
        "boolean" => "a boolean",
        "string" => "a string",
        "array" => "a list",
        "object" => "a map",
        "number" => "a number",
        "integer" => "an integer",
        _ => "a value",
    };
    match types {
        Value::String(t) => name(t).to_owned(),
        Value::Array(ts) => ts
            .iter()
            .filter_map(Value::as_str)
            .filter(|t| *t != "null")
            .map(name)
            .collect::<Vec<_>>()
            .join(" or "),
        _ => "a value".into(),
    }
}
