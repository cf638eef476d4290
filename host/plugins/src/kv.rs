//! The plugins' key-value store: the extension point behind `kv-get`, `kv-set` and `kv-delete`
//! of `interface host`.
//!
//! Every entry belongs to a [`KvScope`] — one component in one task — so a component never sees
//! another component's entries, nor its own entries of another task. The host calls a
//! [`KvStore`] from inside a guest call, synchronously, with keys and values already checked
//! against [`MAX_KEY_BYTES`] and [`MAX_VALUE_BYTES`]. [`MemoryKv`] is the in-memory
//! implementation for tests and `run`; the engine provides a durable one.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

/// The longest key a guest may use, in bytes.
///
/// Keys are guest-controlled and end up as (part of) keys in the host's store, where long keys
/// cost index space on every write and every lookup: a guest looping over megabyte-long keys
/// would bloat the store's index and slow every other task's lookups. Real keys are short.
pub const MAX_KEY_BYTES: usize = 512;

/// The largest value a guest may store under one key, in bytes.
///
/// Values are copied out of guest memory into the host's store (and, durable, onto disk). An
/// untrusted guest allowed arbitrary sizes could make the host allocate and persist as much as
/// its whole memory limit per call, filling the disk and stalling the store's writer for every
/// other task. One MiB is plenty for state a tool keeps between calls.
pub const MAX_VALUE_BYTES: usize = 1024 * 1024;

/// The most `kv-set` and `kv-delete` calls one guest call may make.
///
/// Each write is a store transaction (with a durable store, an fsync'd one eventually); a guest
/// writing in a loop could otherwise monopolize the store. Together with [`MAX_VALUE_BYTES`]
/// this bounds what one call can write.
pub const MAX_WRITES_PER_CALL: u32 = 1000;

/// Whose entries these are: one component in one task.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KvScope {
    /// The component's name (stable across versions of the component, so a hot-swapped
    /// component keeps its task's state).
    pub component: String,
    /// The task's id.
    pub task: String,
}

impl KvScope {
    /// The scope of `component` in `task`.
    pub fn new(component: impl Into<String>, task: impl Into<String>) -> Self {
        KvScope {
            component: component.into(),
            task: task.into(),
        }
    }
}

/// A failure of the store itself (not of the guest).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct KvError(pub String);

/// Where plugin entries live.
///
/// Lifecycle: the host calls these methods during a guest call, on the thread running the call,
/// one at a time per scope (a scope belongs to one task, and a task's calls do not overlap), so
/// implementations need no per-scope locking of their own but must be `Send + Sync`. Keys and
/// values arrive within [`MAX_KEY_BYTES`] and [`MAX_VALUE_BYTES`]. An `Err` is a host fault: the
/// guest call is stopped and reported as [`crate::PluginError::Kv`]. The entries of a deleted task
/// are removed by whoever keeps them (the engine's store removes every scope of the task).
///
/// A durable implementation (sled) maps a scope and key to one store key, e.g.
/// `plugin_kv/{component}\0{task}\0{key}`, and should make `set` durable with the task's next
/// flush rather than flushing itself.
pub trait KvStore: Send + Sync {
    /// The value under `key` in `scope`, if any.
    fn get(&self, scope: &KvScope, key: &str) -> Result<Option<Vec<u8>>, KvError>;
    /// Stores `value` under `key` in `scope`, replacing any previous value.
    fn set(&self, scope: &KvScope, key: &str, value: &[u8]) -> Result<(), KvError>;
    /// Removes `key` from `scope`; a missing key is not an error.
    fn delete(&self, scope: &KvScope, key: &str) -> Result<(), KvError>;
}

/// A [`KvStore`] in memory, lost when the process ends.
#[derive(Debug, Default)]
pub struct MemoryKv {
    entries: Mutex<HashMap<KvScope, HashMap<String, Vec<u8>>>>,
}

impl MemoryKv {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many entries `scope` holds.
    pub fn len(&self, scope: &KvScope) -> usize {
        self.lock().get(scope).map_or(0, HashMap::len)
    }

    /// Whether `scope` holds no entries.
    pub fn is_empty(&self, scope: &KvScope) -> bool {
        self.len(scope) == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<KvScope, HashMap<String, Vec<u8>>>> {
        // A panic while holding the lock cannot leave a HashMap half-updated in a way that
        // matters here, so a poisoned lock is still usable.
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl KvStore for MemoryKv {
    fn get(&self, scope: &KvScope, key: &str) -> Result<Option<Vec<u8>>, KvError> {
        Ok(self.lock().get(scope).and_then(|m| m.get(key)).cloned())
    }

    fn set(&self, scope: &KvScope, key: &str, value: &[u8]) -> Result<(), KvError> {
        self.lock()
            .entry(scope.clone())
            .or_default()
            .insert(key.to_owned(), value.to_vec());
        Ok(())
    }

    fn delete(&self, scope: &KvScope, key: &str) -> Result<(), KvError> {
        if let Some(m) = self.lock().get_mut(scope) {
            m.remove(key);
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn scopes_do_not_see_each_other() {
        let kv = MemoryKv::new();
        let a = KvScope::new("notes", "t1");
        let b = KvScope::new("notes", "t2");
        let c = KvScope::new("other", "t1");
        kv.set(&a, "k", b"v").unwrap();
        assert_eq!(kv.get(&a, "k").unwrap(), Some(b"v".to_vec()));
        assert_eq!(kv.get(&b, "k").unwrap(), None);
        assert_eq!(kv.get(&c, "k").unwrap(), None);
    }

    #[test]
    fn delete_removes_an_entry() {
        let kv = MemoryKv::new();
        let a = KvScope::new("notes", "t1");
        kv.set(&a, "k", b"v").unwrap();
        kv.set(&a, "j", b"w").unwrap();
        kv.delete(&a, "k").unwrap();
        kv.delete(&a, "missing").unwrap();
        assert_eq!(kv.len(&a), 1);
        kv.delete(&a, "j").unwrap();
        assert!(kv.is_empty(&a));
    }
}
