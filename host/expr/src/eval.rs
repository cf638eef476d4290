//! Evaluating compiled expressions against JSON variables.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use cel::common::ast::Expr;
use cel::common::types::{CelBool, CelMap, CelMapKey, CelString};
use cel::common::value::{CowVal, Val};
use cel::context::VariableResolver;
use cel::{Context, ExecutionError, Value};
use serde_json::Value as Json;

use crate::Expression;
use crate::env::{ENV, Hooks, MountIo, with_hooks};
use crate::json::{AsJson, kind_of, take_json, to_json, to_val};

/// The variables one evaluation sees (`context`, `input`, `event`, …) and the decisions and
/// mount its host functions use. Binding a variable converts nothing: expressions convert
/// the parts of the JSON they reach, once for all the evaluations that share the binding.
#[derive(Default, Clone)]
pub struct Activation {
    vars: Vec<(&'static str, Bound)>,
    hooks: Hooks,
}

/// A JSON value to bind in several activations (the task context is bound in every step of a
/// middleware chain): what one evaluation converts of it, the others find converted. Clones
/// share the value: a delivery's event is one tree however many filters, steps and messages
/// read it.
#[derive(Clone, Debug)]
pub struct Bound(Arc<dyn Val>);

impl Bound {
    /// Takes `value` for binding.
    pub fn new(value: Json) -> Bound {
        Bound(Arc::from(to_val(value)))
    }

    /// An object of `entries`, each sharing its value with the `Bound` it came from.
    pub fn object<'k>(entries: impl IntoIterator<Item = (&'k str, Bound)>) -> Bound {
        let entries: HashMap<CelMapKey, Box<dyn Val>> = entries
            .into_iter()
            .map(|(k, v)| {
                let key = CelMapKey::String(CelString::from(k.to_owned()));
                (key, v.0.clone_as_boxed())
            })
            .collect();
        Bound(Arc::new(CelMap::from(entries)))
    }

    /// The value as compact JSON text, written from the value itself (no copy of it is made).
    /// An object keeps its keys' order until an expression reads it; a map an expression has
    /// read is written with its keys sorted.
    pub fn to_json_string(&self) -> String {
        // Serializing a `Val` fails only where `to_json` fails (a value JSON cannot hold),
        // which a value bound from JSON never holds; the text says so if it ever does.
        serde_json::to_string(&AsJson(self.value()))
            .unwrap_or_else(|e| format!("\"(not JSON: {e})\""))
    }

    /// The value as JSON, moved out of the binding where nothing else shares it: what no
    /// expression converted is not copied, so a value bound, read and then taken back is one
    /// tree throughout. What a clone of this `Bound` (or of a part of it) still holds is
    /// copied. `Err` only for a value JSON cannot hold, which a value bound from JSON never is.
    pub fn into_json(self) -> Result<Json, String> {
        let owned = Arc::strong_count(&self.0) == 1;
        take_json(self.value(), owned)
    }

    pub(crate) fn value(&self) -> &dyn Val {
        self.0.as_ref()
    }
}

/// Why an evaluation failed. A missing map key is such an error: callers that gate access
/// (filters, asserts) treat any error as "did not pass" — fail closed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvalError {
    /// What went wrong, in words a manifest author can act on.
    pub message: String,
    /// The reviewer of a `review(user)` the evaluation reached with no decision for `user`
    /// (see [`Activation::set_review`]): the evaluation stopped there, and can go on once
    /// that reviewer has decided.
    pub needs_review: Option<String>,
}

impl fmt::Display for EvalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for EvalError {}

impl EvalError {
    fn new(message: impl Into<String>) -> Self {
        EvalError {
            message: message.into(),
            needs_review: None,
        }
    }
}

impl Activation {
    /// An activation with no variables.
    pub fn new() -> Self {
        Self::default()
    }

    /// Binds `name` to a JSON value, replacing any earlier binding.
    pub fn set(&mut self, name: &'static str, value: Json) -> &mut Self {
        self.bind(name, Bound::new(value))
    }

    /// Binds `name` and its alias (`context` and `c`, `input` and `i`, …) to one value.
    pub fn set_aliased(
        &mut self,
        name: &'static str,
        alias: &'static str,
        value: Json,
    ) -> &mut Self {
        self.set_bound(name, alias, &Bound::new(value))
    }

    /// Binds `name` and `alias` to a value shared with other activations.
    pub fn set_bound(
        &mut self,
        name: &'static str,
        alias: &'static str,
        value: &Bound,
    ) -> &mut Self {
        self.bind(name, value.clone()).bind(alias, value.clone())
    }

    /// Binds `name` to a value shared with other activations.
    pub fn bind(&mut self, name: &'static str, value: Bound) -> &mut Self {
        match self.vars.iter_mut().find(|(n, _)| *n == name) {
            Some((_, slot)) => *slot = value,
            None => self.vars.push((name, value)),
        }
        self
    }

    /// Gives `mount.read`/`mount.write` the agent's mount.
    pub fn set_mount(&mut self, mount: Arc<dyn MountIo>) -> &mut Self {
        self.hooks.mount = Some(mount);
        self
    }

    /// Records the decision of `review(reviewer)` for the evaluations that follow.
    pub fn set_review(&mut self, reviewer: &str, approve: bool) -> &mut Self {
        self.hooks.reviews.insert(reviewer.to_owned(), approve);
        self
    }

    /// Evaluates `expr` against this activation and hands its value to `read`.
    pub(crate) fn eval<T>(
        &self,
        expr: &cel::IdedExpr,
        read: impl FnOnce(&dyn Val) -> Result<T, EvalError>,
    ) -> Result<T, EvalError> {
        with_hooks(&self.hooks, || {
            let mut ctx = Context::with_env(Arc::clone(&ENV));
            ctx.set_variable_resolver(self);
            crate::budget::metered(|| {
                let value =
                    Value::resolve_val(expr, &ctx).map_err(|e: ExecutionError| e.to_string())?;
                read(value.as_ref()).map_err(|e| e.message)
            })
            .map_err(|message| EvalError {
                message,
                needs_review: crate::env::undecided_review(),
            })
        })
    }
}

impl VariableResolver for Activation {
    fn resolve<'b>(&'b self, variable: &str) -> Option<CowVal<'b, 'b>> {
        self.vars
            .iter()
            .find(|(name, _)| *name == variable)
            .map(|(_, bound)| CowVal::Borrowed(bound.value()))
    }
}

/// A result as JSON.
pub(crate) fn result_json(value: &dyn Val) -> Result<Json, EvalError> {
    to_json(value).map_err(|e| EvalError::new(format!("the result is not JSON: {e}")))
}

impl Expression {
    /// Evaluates the expression and converts the result to JSON.
    pub fn evaluate(&self, activation: &Activation) -> Result<Json, EvalError> {
        crate::budget::offloaded(self.iterates(), || {
            activation.eval(self.metered(), result_json)
        })
    }

    /// Evaluates the expression as a condition: true only for the boolean `true`.
    pub fn evaluate_bool(&self, activation: &Activation) -> Result<bool, EvalError> {
        crate::budget::offloaded(self.iterates(), || {
            activation.eval(self.metered(), |value| {
                value
                    .downcast_ref::<CelBool>()
                    .map(|b| *b.inner())
                    .ok_or_else(|| {
                        EvalError::new(format!("expected a boolean, got {}", kind_of(value)))
                    })
            })
        })
    }

    /// Whether the expression reads the root variable `name`.
    pub fn uses(&self, name: &str) -> bool {
        self.roots().iter().any(|r| r.name == name)
    }

    /// Whether the expression calls `review(…)`.
    pub fn calls_review(&self) -> bool {
        self.calls().iter().any(|c| c.name == "review")
    }

    /// The reviewers the expression's `review(user)` calls name, evaluated in `activation`:
    /// the engine obtains their decisions (suspending the task) before evaluating the whole.
    pub fn reviewers(&self, activation: &Activation) -> Result<Vec<String>, EvalError> {
        let mut args = Vec::new();
        review_args(self.program().expression(), &mut args);
        let mut out = Vec::new();
        for arg in args {
            let user = activation.eval(arg, |value| match value.downcast_ref::<CelString>() {
                Some(user) => Ok(user.inner().to_owned()),
                None => Err(EvalError::new(format!(
                    "review() takes a user id string, got {}",
                    kind_of(value)
                ))),
            })?;
            out.push(user);
        }
        out.dedup();
        Ok(out)
    }
}

/// The argument of every `review(x)` call in the tree.
fn review_args<'a>(expr: &'a cel::IdedExpr, out: &mut Vec<&'a cel::IdedExpr>) {
    match &expr.expr {
        Expr::Call(call) => {
            if call.func_name == "review" && call.target.is_none() && call.args.len() == 1 {
                out.extend(call.args.first());
            }
            if let Some(t) = &call.target {
                review_args(t, out);
            }
            for a in &call.args {
                review_args(a, out);
            }
        }
        Expr::Select(s) => review_args(&s.operand, out),
        Expr::List(l) => l.elements.iter().for_each(|e| review_args(e, out)),
        Expr::Comprehension(c) => {
            review_args(&c.iter_range, out);
            review_args(&c.loop_step, out);
            review_args(&c.result, out);
        }
        _ => {}
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::env::MountError;
    use serde_json::json;
    use std::collections::BTreeMap;

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
    fn review_uses_the_decision_obtained_for_its_reviewer() {
        let e = Expression::compile("input.amount < 10 || review(context.owner)").unwrap();
        let mut act = Activation::new();
        act.set("input", json!({"amount": 50}));
        act.set("context", json!({"owner": "alice"}));
        assert_eq!(e.reviewers(&act).unwrap(), ["alice"]);
        assert!(e.evaluate(&act).is_err(), "no decision yet");
        act.set_review("alice", false);
        assert_eq!(e.evaluate(&act).unwrap(), json!(false));
        act.set_review("alice", true);
        assert_eq!(e.evaluate(&act).unwrap(), json!(true));
    }

    #[test]
    fn an_evaluation_names_the_reviewer_it_reached_undecided_and_only_that_one() {
        let e =
            Expression::compile("input.amount < 10 || review('alice') && review('bob')").unwrap();
        let mut act = Activation::new();
        act.set("input", json!({"amount": 5}));
        assert_eq!(e.evaluate_bool(&act), Ok(true), "no review is reached");
        act.set("input", json!({"amount": 50}));
        let stopped = e.evaluate_bool(&act).unwrap_err();
        assert_eq!(stopped.needs_review.as_deref(), Some("alice"));
        act.set_review("alice", true);
        let stopped = e.evaluate_bool(&act).unwrap_err();
        assert_eq!(stopped.needs_review.as_deref(), Some("bob"));
        act.set_review("bob", true);
        assert_eq!(e.evaluate_bool(&act), Ok(true));
        // An error of another kind names no reviewer.
        let broken = Expression::compile("input.missing").unwrap();
        let error = broken.evaluate_bool(&Activation::new()).unwrap_err();
        assert_eq!(error.needs_review, None, "{}", error.message);
    }

    struct Files(std::sync::Mutex<BTreeMap<String, String>>);

    impl MountIo for Files {
        fn read(&self, path: &str) -> Result<String, MountError> {
            self.0
                .lock()
                .unwrap()
                .get(path)
                .cloned()
                .ok_or_else(|| MountError(format!("{path}: not found")))
        }
        fn write(&self, path: &str, content: &str) -> Result<String, MountError> {
            self.0
                .lock()
                .unwrap()
                .insert(path.to_owned(), content.to_owned());
            Ok(content.to_owned())
        }
    }

    #[test]
    fn mount_functions_reach_the_hook() {
        let mut act = Activation::new();
        act.set(
            "mount",
            json!({"prefix": "/ns/agent/", "bucket": "", "backend": "file"}),
        );
        act.set_mount(Arc::new(Files(Default::default())));
        let w = Expression::compile("mount.write('a.txt', 'hi')").unwrap();
        assert_eq!(w.evaluate(&act).unwrap(), json!("hi"));
        let r = Expression::compile("mount.read('a.txt') + '!'").unwrap();
        assert_eq!(r.evaluate(&act).unwrap(), json!("hi!"));
        let without = Activation::new();
        assert!(r.evaluate(&without).is_err());
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
