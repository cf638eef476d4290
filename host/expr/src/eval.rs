//! Evaluating compiled expressions against JSON variables.

use std::collections::BTreeMap;
use std::fmt;

use cel::Value;
use serde_json::Value as Json;

use crate::Expression;
use crate::env::ROOT;

/// The variables one evaluation sees (`context`, `input`, `event`, …), converted to CEL once so
/// that every step and filter of an activation runs against the same values.
#[derive(Default, Clone)]
pub struct Activation {
    vars: BTreeMap<String, Value>,
}

/// Why an evaluation failed. A missing map key is such an error: callers that gate access
/// (filters, asserts) treat any error as "did not pass" — fail closed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvalError {
    /// What went wrong, in words a manifest author can act on.
    pub message: String,
}

impl fmt::Display for EvalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for EvalError {}

impl Activation {
    /// An activation with no variables.
    pub fn new() -> Self {
        Self::default()
    }

    /// Binds `name` to a JSON value, replacing any earlier binding.
    pub fn set(&mut self, name: &str, value: Json) -> &mut Self {
        let value = cel::to_value(value).unwrap_or(Value::Null);
        self.vars.insert(name.to_owned(), value);
        self
    }

    /// Binds `name` and its alias (`context` and `c`, `input` and `i`, …) to one value.
    pub fn set_aliased(&mut self, name: &str, alias: &str, value: Json) -> &mut Self {
        self.set(name, value);
        if let Some(v) = self.vars.get(name).cloned() {
            self.vars.insert(alias.to_owned(), v);
        }
        self
    }
}

impl Expression {
    /// Evaluates the expression and converts the result to JSON.
    pub fn evaluate(&self, activation: &Activation) -> Result<Json, EvalError> {
        let mut ctx = ROOT.new_inner_scope();
        for (name, value) in &activation.vars {
            ctx.add_variable_from_value(name.as_str(), value.clone());
        }
        let value = self.program().execute(&ctx).map_err(|e| EvalError {
            message: e.to_string(),
        })?;
        to_json(&value)
    }

    /// Evaluates the expression as a condition: true only for the boolean `true`.
    pub fn evaluate_bool(&self, activation: &Activation) -> Result<bool, EvalError> {
        match self.evaluate(activation)? {
            Json::Bool(b) => Ok(b),
            other => Err(EvalError {
                message: format!("expected a boolean, got {}", kind_of(&other)),
            }),
        }
    }
}

fn to_json(value: &Value) -> Result<Json, EvalError> {
    value.json().map_err(|e| EvalError {
        message: format!("the result is not JSON: {e}"),
    })
}

fn kind_of(v: &Json) -> &'static str {
    match v {
        Json::Null => "null",
        Json::Bool(_) => "a boolean",
        Json::Number(_) => "a number",
        Json::String(_) => "a string",
        Json::Array(_) => "a list",
        Json::Object(_) => "a map",
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn eval(src: &str, act: &Activation) -> Result<Json, EvalError> {
        Expression::compile(src).unwrap().evaluate(act)
    }

    #[test]
    fn has_event_is_false_outside_event_activations() {
        let mut act = Activation::new();
        act.set("event", Json::Null);
        assert_eq!(
            eval("!has(event) || event.author != 'bot'", &act).unwrap(),
            json!(true)
        );
        act.set("event", json!({"author": "bot"}));
        assert_eq!(
            eval("!has(event) || event.author != 'bot'", &act).unwrap(),
            json!(false)
        );
    }

    #[test]
    fn put_returns_a_new_map() {
        let mut act = Activation::new();
        act.set("output", json!({"a": 1}));
        assert_eq!(
            eval("[output.put('_note', 'x'), output]", &act).unwrap(),
            json!([{"a": 1, "_note": "x"}, {"a": 1}])
        );
    }

    #[test]
    fn string_helpers() {
        let act = Activation::new();
        assert_eq!(eval("'AbC'.lowerAscii()", &act).unwrap(), json!("abc"));
        assert_eq!(eval("'a,b'.split(',')", &act).unwrap(), json!(["a", "b"]));
        assert_eq!(eval("['a', 'b'].join('-')", &act).unwrap(), json!("a-b"));
        assert_eq!(eval("'  x '.trim()", &act).unwrap(), json!("x"));
        assert_eq!(eval("'aXa'.replace('a', 'b')", &act).unwrap(), json!("bXb"));
    }

    #[test]
    fn missing_key_is_an_error_not_false() {
        let mut act = Activation::new();
        act.set("event", json!({}));
        assert!(eval("event.payload.x == 1", &act).is_err());
    }

    #[test]
    fn aliases_share_a_value() {
        let mut act = Activation::new();
        act.set_aliased("context", "c", json!({"user": {"id": "u1"}}));
        assert_eq!(
            eval("c.user.id == context.user.id", &act).unwrap(),
            json!(true)
        );
    }

    #[test]
    fn optional_chaining_is_available() {
        let mut act = Activation::new();
        act.set("event", json!({}));
        assert_eq!(
            eval("event.?payload.orValue('none')", &act).unwrap(),
            json!("none")
        );
    }
}
