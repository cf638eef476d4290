//! The expression layer of agentmesh: CEL expressions and `{…}` templates.
//!
//! Manifests carry two kinds of expressions (see the spec's CEL reference):
//! - **expression fields** (`assert`, `transform`, `condition`, `bindings` values, `exposes`,
//!   `receive.filter`, a `cel` tool's `expression`): the whole value is CEL, compiled once into
//!   an [`Expression`];
//! - **templates** (prompts, messages, `error_message`, runtime strings such as URLs): text with
//!   `{…}` holes, each holding a CEL expression, parsed once into a [`Template`].
//!
//! Both are compiled at load time. Compilation does no type checking, so every expression also
//! lists the root names it references ([`Expression::roots`]); [`Scope`] says which roots a
//! place in a manifest may use, and [`Scope::check`] reports the others — an unknown root is an
//! error at `validate`, never at run time.
//!
//! The host's extensions to CEL (CONTRACT §5) live in [`env`]: `has(event)` (true exactly in event
//! activations), `map.put(key, value)`, and the string helpers `lowerAscii`, `split`, `join`,
//! `trim`, `replace`. Evaluation ([`Activation`], [`Expression::evaluate`]) takes JSON in and
//! gives JSON out, so callers never see the `cel` crate's types; in between, expressions read
//! the bound JSON in place and convert only what they touch.
//!
//! Modules: `expression` (compiling, roots, calls, the depth guard), `template` (`{…}`
//! templates), `members` (`auth.<provider>()` read as a field; which members of a root an
//! expression reads), [`env`] (the host's CEL environment and extensions), `eval`
//! (activations and evaluation), `json` (JSON in place as CEL values), `needs` (which fields
//! of the context an expression reads, so only those are built), `scope` (the roots each
//! place may use), [`budget`] (the evaluation budget).
//!
//! Hostile expressions are bounded twice: at compile time by length, bracket nesting and tree
//! depth ([`MAX_DEPTH`]: evaluation recurses per level), and while they run by a budget of
//! macro iterations, bytes built and time ([`budget`]); past one, the evaluation stops with an
//! error naming the limit.
//!
//! ```
//! use agentmesh_expr::{Activation, Expression};
//! use serde_json::json;
//!
//! let expr = Expression::compile("!has(event) || event.payload.user != 'bot'").unwrap();
//! let mut act = Activation::new();
//! act.set("event", json!({"payload": {"user": "alice"}}));
//! assert_eq!(expr.evaluate(&act).unwrap(), json!(true));
//! ```

pub mod budget;
mod env;
mod eval;
mod expression;
mod json;
mod members;
mod needs;
mod scope;
mod template;

pub use env::{MountError, MountIo};
pub use eval::{Activation, Bound, EvalError};
pub use expression::{
    CompileError, Expression, MAX_DEPTH, MAX_EXPRESSION_LEN, MAX_NESTING, RootRef,
};
pub use members::Member;
pub use needs::Needs;
pub use scope::{Scope, ScopeError};
pub use template::{Rendered, Segment, Template};
