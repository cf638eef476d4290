//! The host's CEL environment: the standard library, the strings extension and the host's own
//! functions, built once per process and shared by every compile and evaluation.

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

/// The root evaluation context: the shared environment and the host's functions. Every
/// activation is an inner scope of it, so functions are registered once, not per evaluation.
pub(crate) static ROOT: LazyLock<Context<'static, 'static>> = LazyLock::new(|| {
    let mut ctx = Context::with_env(Arc::clone(&ENV));
    // Neither name is declared by the stdlib or the strings extension, so these cannot conflict.
    let _ = ctx.add_function("put", put);
    let _ = ctx.add_function(HAS_VALUE_FN, has_value);
    ctx
});

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
