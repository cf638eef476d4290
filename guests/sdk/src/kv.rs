//! The host's key-value store: keys are private to (component, task) — another component, or
//! this one in another task, never sees them — and values outlive calls, host restarts and new
//! versions of the component.

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::Error;
use crate::bindings::agentmesh::plugin::host;

/// The value stored under `key`, if any.
pub fn get(key: &str) -> Option<Vec<u8>> {
    host::kv_get(key)
}

/// Stores `value` under `key`, replacing any previous value. The host bounds key and value
/// sizes; exceeding a bound fails the call.
pub fn set(key: &str, value: &[u8]) {
    host::kv_set(key, value);
}

/// Removes `key`; removing a missing key does nothing.
pub fn delete(key: &str) {
    host::kv_delete(key);
}

/// The JSON value stored under `key` with [`set_json`], parsed as `T`; a value that does not
/// parse as `T` is a fatal error naming the key.
pub fn get_json<T: DeserializeOwned>(key: &str) -> Result<Option<T>, Error> {
    get(key)
        .map(|bytes| serde_json::from_slice(&bytes))
        .transpose()
        .map_err(|e| Error::fatal(format!("the stored value of `{key}`: {e}")))
}

/// Stores `value` as JSON under `key`.
pub fn set_json<T: Serialize + ?Sized>(key: &str, value: &T) -> Result<(), Error> {
    let bytes = serde_json::to_vec(value)
        .map_err(|e| Error::fatal(format!("the value for `{key}`: {e}")))?;
    set(key, &bytes);
    Ok(())
}
