//! `interface host`: what tool and middleware components import — logging and the
//! (component, task) key-value store. Thin adapters over [`crate::kv`] and `tracing`.

use wasmtime::component::HasSelf;

use crate::bindings::tool::agentmesh::plugin::host::{self, Level};
use crate::kv::{KvError, KvScope, KvStore, MAX_KEY_BYTES, MAX_VALUE_BYTES, MAX_WRITES_PER_CALL};
use crate::state::PluginState;

/// The longest log message kept; the rest is cut.
///
/// Guests choose what they log; one unbounded message could be megabytes in every log sink.
const MAX_LOG_MESSAGE: usize = 4096;
/// Adds `interface host` to `linker`.
pub(crate) fn add_to_linker(
    linker: &mut wasmtime::component::Linker<PluginState>,
) -> wasmtime::Result<()> {
    host::add_to_linker::<PluginState, HasSelf<PluginState>>(linker, |state| state)
}

impl PluginState {
    /// Logs what the current call's `log` calls dropped since the last report, if anything: at
    /// the end of every guest call.
    pub(crate) fn report_dropped_log(&mut self) {
        if let Some(line) = self.log.take_dropped() {
            tracing::warn!(component.name = &*self.component, "{line}");
        }
    }

    /// Stops the call: the guest broke a host bound.
    fn refuse(&mut self, message: String) -> wasmtime::Error {
        let error = wasmtime::format_err!("{message}");
        self.refusal = Some(message);
        error
    }

    fn check_key(&mut self, key: &str) -> wasmtime::Result<()> {
        if key.len() > MAX_KEY_BYTES {
            return Err(self.refuse(format!(
                "a key-value key of {} bytes is longer than the limit of {MAX_KEY_BYTES} bytes",
                key.len()
            )));
        }
        Ok(())
    }

    fn count_write(&mut self) -> wasmtime::Result<()> {
        self.kv_writes += 1;
        if self.kv_writes > MAX_WRITES_PER_CALL {
            return Err(self.refuse(format!(
                "more than {MAX_WRITES_PER_CALL} key-value writes in one call"
            )));
        }
        Ok(())
    }

    /// Runs `op` on the key-value store in this store's scope: a store without one refuses, and
    /// a failure of the store stops the call.
    fn with_kv<T>(
        &mut self,
        op: impl FnOnce(&dyn KvStore, &KvScope) -> Result<T, KvError>,
    ) -> wasmtime::Result<T> {
        let result = match &self.kv {
            Some((kv, scope)) => op(kv.as_ref(), scope),
            None => return Err(self.refuse("this component has no key-value store".to_owned())),
        };
        result.map_err(|e| self.kv_failed(e))
    }

    /// Records a store failure and stops the call.
    fn kv_failed(&mut self, error: KvError) -> wasmtime::Error {
        let trap = wasmtime::format_err!("key-value store failed: {error}");
        self.kv_failure = Some(error);
        trap
    }
}

impl host::Host for PluginState {
    fn log(&mut self, level: Level, message: String) -> wasmtime::Result<()> {
        // Scrubbed before it is cut, so that a secret across the cut is hidden whole (the
        // host's log writer would not know the start of one).
        let secrets = self.secrets.get();
        let (kept, cut) = secrets.scrub_prefix(&message, MAX_LOG_MESSAGE);
        let message = if cut {
            format!("{kept}… (truncated)")
        } else {
            kept.into_owned()
        };
        if !self.log.admit(message.len()) {
            return Ok(());
        }
        let component = &*self.component;
        match level {
            Level::Trace => tracing::trace!(component.name = component, "{message}"),
            Level::Debug => tracing::debug!(component.name = component, "{message}"),
            Level::Info => tracing::info!(component.name = component, "{message}"),
            Level::Warn => tracing::warn!(component.name = component, "{message}"),
            Level::Error => tracing::error!(component.name = component, "{message}"),
        }
        Ok(())
    }

    fn kv_get(&mut self, key: String) -> wasmtime::Result<Option<Vec<u8>>> {
        self.check_key(&key)?;
        self.with_kv(|kv, scope| kv.get(scope, &key))
    }

    fn kv_set(&mut self, key: String, value: Vec<u8>) -> wasmtime::Result<()> {
        self.check_key(&key)?;
        if value.len() > MAX_VALUE_BYTES {
            return Err(self.refuse(format!(
                "a key-value value of {} bytes is larger than the limit of {MAX_VALUE_BYTES} bytes",
                value.len()
            )));
        }
        self.count_write()?;
        self.with_kv(|kv, scope| kv.set(scope, &key, &value))
    }

    fn kv_delete(&mut self, key: String) -> wasmtime::Result<()> {
        self.check_key(&key)?;
        self.count_write()?;
        self.with_kv(|kv, scope| kv.delete(scope, &key))
    }
}
