//! The host's CEL environment: the standard library, the strings extension and the host's own
//! functions, built once per process and shared by every compile and evaluation.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

use cel::extractors::This;
use cel::objects::{Key, Map};
use cel::{Context, Env, ExecutionError, Value};

/// The name `has(event)` is rewritten to before parsing (CEL's `has` macro only takes a field
/// selection). Same length as `has`, so every column in the source stays where it was.
pub(crate) const HAS_VALUE_FN: &str = "__h";

/// The shared environment: stdlib (with macros and optional syntax) plus the strings extension.
pub(crate) static ENV: LazyLock<Arc<Env>> = LazyLock::new(|| {
    let mut env = Env::stdlib();
    // The strings extension only fails when one of its overloads is already declared, which
    // cannot happen on a fresh stdlib environment; an error would only lose the helpers.
    let _ = env.add_extension(cel::extensions::strings);
    Arc::new(env)
});

/// An evaluation context: the shared environment and the host's functions. Variables come
/// from the activation through a resolver, so nothing is converted per evaluation.
pub(crate) fn host_context<'p, 'v>() -> Context<'p, 'v> {
    let mut ctx = Context::with_env(Arc::clone(&ENV));
    // Neither name is declared by the stdlib or the strings extension, so these cannot conflict.
    let _ = ctx.add_function("put", put);
    let _ = ctx.add_function(HAS_VALUE_FN, has_value);
    let _ = ctx.add_function("review", review);
    let _ = ctx.add_function("read", mount_read);
    let _ = ctx.add_function("write", mount_write);
    ctx
}

/// File access for `mount.read(path)` / `mount.write(path, content)` in `cel` tool expressions.
/// The engine implements it over the agent's mount prefix; paths are relative to the prefix.
pub trait MountIo: Send + Sync {
    /// The content of `path`.
    fn read(&self, path: &str) -> Result<String, String>;
    /// Writes `content` to `path`; returns the content written.
    fn write(&self, path: &str, content: &str) -> Result<String, String>;
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
}

thread_local! {
    static HOOKS: RefCell<Hooks> = RefCell::new(Hooks::default());
}

/// Runs `f` with `hooks` installed for the host functions.
pub(crate) fn with_hooks<T>(hooks: &Hooks, f: impl FnOnce() -> T) -> T {
    HOOKS.with(|h| *h.borrow_mut() = hooks.clone());
    let out = f();
    HOOKS.with(|h| *h.borrow_mut() = Hooks::default());
    out
}

/// `review(user)`: the decision the engine obtained for `user` before evaluating.
#[allow(clippy::needless_pass_by_value)]
fn review(user: Arc<String>) -> Result<bool, ExecutionError> {
    HOOKS
        .with(|h| h.borrow().reviews.get(user.as_str()).copied())
        .ok_or_else(|| {
            ExecutionError::function_error("review", format!("no review decision for `{user}`"))
        })
}

fn mount_of(this: &Value, function: &str) -> Result<Arc<dyn MountIo>, ExecutionError> {
    let is_mount = matches!(this, Value::Map(m) if m.map.contains_key(&Key::from("prefix")));
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
#[allow(clippy::needless_pass_by_value)]
fn mount_read(This(this): This<Value>, path: Arc<String>) -> Result<Value, ExecutionError> {
    let mount = mount_of(&this, "read")?;
    mount
        .read(&path)
        .map(Value::from)
        .map_err(|e| ExecutionError::function_error("mount.read", e))
}

/// `mount.write(path, content)`.
#[allow(clippy::needless_pass_by_value)]
fn mount_write(
    This(this): This<Value>,
    path: Arc<String>,
    content: Arc<String>,
) -> Result<Value, ExecutionError> {
    let mount = mount_of(&this, "write")?;
    mount
        .write(&path, &content)
        .map(Value::from)
        .map_err(|e| ExecutionError::function_error("mount.write", e))
}

/// `map.put(key, value)`: a new map with `key` set to `value`; the receiver is left unchanged.
fn put(This(this): This<Value>, key: Value, value: Value) -> Result<Value, ExecutionError> {
    let Value::Map(map) = this else {
        return Err(ExecutionError::function_error(
            "put",
            "put() is a method of maps",
        ));
    };
    let key: Key = key.try_into().map_err(ExecutionError::UnsupportedKeyType)?;
    let mut entries = (*map.map).clone();
    entries.insert(key, value);
    Ok(Value::Map(Map {
        map: Arc::new(entries),
    }))
}

/// The rewritten `has(event)`: true when the variable is bound to anything but null.
// The `cel` crate hands host functions their arguments by value.
#[allow(clippy::needless_pass_by_value)]
fn has_value(value: Value) -> bool {
    !matches!(value, Value::Null)
}
