//! The host's CEL environment: the standard library, the strings extension and the host's own
//! functions, built once per process and shared by every compile and evaluation.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

use cel::common::types::{
    CelBool, CelMap, CelMapKey, CelNull, CelString, DYN_TYPE, MAP_TYPE, STRING_TYPE,
};
use cel::common::value::{CowVal, Val};
use cel::{Env, ExecutionError};

use crate::budget;

/// The name `has(event)` is rewritten to before parsing (CEL's `has` macro only takes a field
/// selection). Same length as `has`, so every column in the source stays where it was.
pub(crate) const HAS_VALUE_FN: &str = "__h";

/// The shared environment: stdlib (with macros and optional syntax), the strings extension and
/// the host's functions. The functions are overloads of the environment rather than functions
/// of an evaluation's `Context`, so an evaluation registers nothing.
pub(crate) static ENV: LazyLock<Arc<Env>> = LazyLock::new(|| {
    let mut env = Env::stdlib();
    // Each call below only fails when its name is already declared, which cannot happen on a
    // fresh stdlib environment (the host's names are not CEL's); an error would only lose
    // the function, which the tests would notice.
    let _ = env.add_extension(cel::extensions::strings);
    let _ = env.add_member_overload("put", "map_put", MAP_TYPE, vec![DYN_TYPE, DYN_TYPE], put);
    let _ = env.add_overload(HAS_VALUE_FN, "has_value", vec![DYN_TYPE], has_value);
    let _ = env.add_overload("review", "review_string", vec![STRING_TYPE], review);
    let _ = env.add_overload(budget::STEP_FN, "budget_step", vec![DYN_TYPE], budget::step);
    let _ = env.add_overload(budget::SIZE_FN, "budget_size", vec![DYN_TYPE], budget::size);
    let _ = env.add_member_overload(
        "read",
        "mount_read",
        MAP_TYPE,
        vec![STRING_TYPE],
        mount_read,
    );
    let _ = env.add_member_overload(
        "write",
        "mount_write",
        MAP_TYPE,
        vec![STRING_TYPE, STRING_TYPE],
        mount_write,
    );
    Arc::new(env)
});

/// File access for `mount.read(path)` / `mount.write(path, content)` in `cel` tool expressions.
/// Why a mount read or write failed, as the expression's error shows it (the path and the
/// cause: a refused path, a missing file, a file too large, an I/O error).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct MountError(pub String);

/// The engine implements it over the agent's mount prefix; paths are relative to the prefix.
pub trait MountIo: Send + Sync {
    /// The content of `path`.
    fn read(&self, path: &str) -> Result<String, MountError>;
    /// Writes `content` to `path`; returns the content written.
    fn write(&self, path: &str, content: &str) -> Result<String, MountError>;
}

/// What host functions need from the evaluation that calls them. Evaluation is synchronous and
/// never re-entrant, so the hooks of the running evaluation live in a thread-local for its
/// duration.
#[derive(Default, Clone)]
pub(crate) struct Hooks {
    /// Decisions of `review(user)` calls, by reviewer.
    pub reviews: HashMap<String, bool>,
    /// The agent's mount, in `cel` tools of agents that have one.
    pub mount: Option<Arc<dyn MountIo>>,
    /// The first reviewer whose `review(user)` this evaluation reached with no decision.
    undecided: Option<String>,
}

thread_local! {
    static HOOKS: RefCell<Hooks> = RefCell::new(Hooks::default());
}

/// Runs `f` with `hooks` installed for the host functions.
pub(crate) fn with_hooks<T>(hooks: &Hooks, f: impl FnOnce() -> T) -> T {
    let outer = HOOKS.with(|h| h.replace(hooks.clone()));
    let out = f();
    HOOKS.with(|h| *h.borrow_mut() = outer);
    out
}

/// The first reviewer whose `review(user)` the running evaluation reached with no decision
/// (call inside [`with_hooks`]).
pub(crate) fn undecided_review() -> Option<String> {
    HOOKS.with(|h| h.borrow().undecided.clone())
}

/// The arguments of a call, which the environment declared `N` of.
fn arguments<'b, 'v, const N: usize>(
    args: Vec<CowVal<'b, 'v>>,
    function: &str,
) -> Result<[CowVal<'b, 'v>; N], ExecutionError> {
    args.try_into().map_err(|args: Vec<_>| {
        ExecutionError::function_error(function, format!("takes {N} arguments, got {}", args.len()))
    })
}

/// An argument the environment declared a string.
fn string_arg<'a>(value: &'a dyn Val, function: &str) -> Result<&'a str, ExecutionError> {
    value
        .downcast_ref::<CelString>()
        .map(CelString::inner)
        .ok_or_else(|| ExecutionError::function_error(function, "expects a string"))
}

/// `review(user)`: the decision the engine obtained for `user`; with none yet, the evaluation
/// stops here and names `user` ([`EvalError::needs_review`](crate::EvalError::needs_review)).
fn review<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [user] = arguments(args, "review")?;
    let user = string_arg(user.as_ref(), "review")?;
    HOOKS.with(|h| {
        let mut hooks = h.borrow_mut();
        match hooks.reviews.get(user) {
            Some(approved) => Ok(CowVal::owned(CelBool::from(*approved))),
            None => {
                hooks.undecided.get_or_insert_with(|| user.to_owned());
                Err(ExecutionError::function_error(
                    "review",
                    format!("no review decision for `{user}`"),
                ))
            }
        }
    })
}

/// The agent's mount, when `this` is the `mount` variable (a map with a `prefix`).
fn mount_of(this: &dyn Val, function: &str) -> Result<Arc<dyn MountIo>, ExecutionError> {
    let is_mount = this
        .as_container()
        .is_some_and(|m| m.contains(&CelString::from("prefix")) == Ok(true));
    let mount = HOOKS.with(|h| h.borrow().mount.clone());
    match (is_mount, mount) {
        (true, Some(m)) => Ok(m),
        _ => Err(ExecutionError::function_error(
            function,
            "mount functions need an agent with a mount (`mount.read(path)`)",
        )),
    }
}

/// `mount.read(path)`.
fn mount_read<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [this, path] = arguments(args, "read")?;
    let mount = mount_of(this.as_ref(), "read")?;
    mount
        .read(string_arg(path.as_ref(), "read")?)
        .map(|content| CowVal::owned(CelString::from(content)))
        .map_err(|e| ExecutionError::function_error("mount.read", e))
}

/// `mount.write(path, content)`.
fn mount_write<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [this, path, content] = arguments(args, "write")?;
    let mount = mount_of(this.as_ref(), "write")?;
    mount
        .write(
            string_arg(path.as_ref(), "write")?,
            string_arg(content.as_ref(), "write")?,
        )
        .map(|written| CowVal::owned(CelString::from(written)))
        .map_err(|e| ExecutionError::function_error("mount.write", e))
}

/// `map.put(key, value)`: a new map with `key` set to `value`; the receiver is left unchanged.
fn put<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [map, key, value] = arguments(args, "put")?;
    let map = map
        .downcast_ref::<CelMap>()
        .ok_or_else(|| ExecutionError::function_error("put", "put() is a method of maps"))?;
    let mut entries: HashMap<CelMapKey<'v>, Box<dyn Val + 'v>> = map.inner().clone();
    entries.insert(CelMapKey::try_from(key)?, value.into_owned());
    Ok(CowVal::owned(CelMap::from(entries)))
}

/// The rewritten `has(event)`: true when the variable is bound to anything but null.
fn has_value<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [value] = arguments(args, HAS_VALUE_FN)?;
    let is_set = value.downcast_ref::<CelNull>().is_none();
    Ok(CowVal::owned(CelBool::from(is_set)))
}
