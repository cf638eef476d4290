//! What a component may do: [`Limits`] for every component, and a [`Sandbox`] (limits plus
//! outgoing HTTP and files) for tools.
//!
//! Whatever a sandbox does not grant is denied: a component gets no environment variables, no
//! arguments, no sockets, no stdin, no files except its mount, and its stdout/stderr go to the
//! host's log.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use agentmesh_manifest::model::tool::WasmRuntime;

use crate::error::{PluginError, Result};
use crate::http::Origin;

/// Where a tool's mount appears inside the component.
pub const MOUNT_GUEST_PATH: &str = "/mount";

/// The default memory limit (the manifest's `memory_limit`).
pub const DEFAULT_MEMORY_LIMIT: u64 = 64 * 1024 * 1024;
/// The default wall-clock limit per call (the manifest's `timeout`).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// The default output limit (the manifest's `max_output`).
pub const DEFAULT_MAX_OUTPUT: usize = 1024 * 1024;

/// Resource limits of one component instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Linear-memory limit in bytes (all of the instance's memories together).
    pub memory: u64,
    /// Wall-clock limit of one call (for a tool session, also of its constructor).
    pub timeout: Duration,
    /// Largest answer (observation, replacement JSON, deny reason) in bytes.
    pub max_output: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            memory: DEFAULT_MEMORY_LIMIT,
            timeout: DEFAULT_TIMEOUT,
            max_output: DEFAULT_MAX_OUTPUT,
        }
    }
}

/// The sandbox of a tool component: its limits, the origins it may call, and its mount.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sandbox {
    /// Memory, time and output limits.
    pub limits: Limits,
    /// The origins outgoing HTTP may reach; empty means no outgoing HTTP.
    pub allowed_hosts: Vec<Origin>,
    /// A host directory preopened at [`MOUNT_GUEST_PATH`] (the agent's mount prefix); `None`
    /// means the component sees no files at all.
    pub mount: Option<MountDir>,
}

/// A host directory given to a component as its mount, held open: the sandbox preopens this
/// very directory (through its handle's name under `/proc/self/fd`), whatever is put at its
/// path after it was opened — a symbolic link there leads the component nowhere else.
#[derive(Debug, Clone)]
pub struct MountDir {
    handle: Arc<OwnedFd>,
    /// The directory's path, for messages.
    shown: PathBuf,
}

impl MountDir {
    /// The directory `handle` refers to (a directory the caller opened as it sees fit), shown
    /// in messages as `shown`.
    pub fn new(handle: OwnedFd, shown: PathBuf) -> MountDir {
        MountDir {
            handle: Arc::new(handle),
            shown,
        }
    }

    /// Opens the directory at `path`, following links on the way: for a path the caller
    /// trusts whole.
    pub fn open(path: &Path) -> Result<MountDir> {
        let refused = |e: std::io::Error| {
            PluginError::Sandbox(format!("cannot open mount {}: {e}", path.display()))
        };
        let file = std::fs::File::open(path).map_err(refused)?;
        if !file.metadata().map_err(refused)?.is_dir() {
            return Err(PluginError::Sandbox(format!(
                "mount {} is not a directory",
                path.display()
            )));
        }
        Ok(MountDir::new(file.into(), path.to_path_buf()))
    }

    /// A path that names the opened directory itself.
    pub(crate) fn handle_path(&self) -> PathBuf {
        PathBuf::from(format!("/proc/self/fd/{}", self.handle.as_raw_fd()))
    }

    /// The directory's path, for messages.
    pub fn shown(&self) -> &Path {
        &self.shown
    }
}

/// Mounts are the same when they hold the same open directory.
impl PartialEq for MountDir {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.handle, &other.handle)
    }
}

impl Eq for MountDir {}

impl Sandbox {
    /// The sandbox a tool manifest's `wasm:` block describes, with the agent's mount prefix
    /// (a directory on the host), if the agent has a mount.
    pub fn from_runtime(runtime: &WasmRuntime, mount: Option<MountDir>) -> Result<Sandbox> {
        let allowed_hosts = runtime
            .allowed_hosts
            .iter()
            .flatten()
            .map(|h| {
                Origin::parse(h).map_err(|e| PluginError::Sandbox(format!("allowed_hosts: {e}")))
            })
            .collect::<Result<Vec<_>>>()?;
        let defaults = Limits::default();
        let max_output = match runtime.max_output {
            Some(size) => usize::try_from(size.0).map_err(|_| {
                PluginError::Sandbox(format!("max_output of {} bytes is too large", size.0))
            })?,
            None => defaults.max_output,
        };
        Ok(Sandbox {
            limits: Limits {
                memory: runtime.memory_limit.map_or(defaults.memory, |m| m.0),
                timeout: runtime.timeout.map_or(defaults.timeout, |t| t.0),
                max_output,
            },
            allowed_hosts,
            mount,
        })
    }

    /// A sandbox with `limits`, no outgoing HTTP and no files.
    pub fn new(limits: Limits) -> Self {
        Sandbox {
            limits,
            ..Sandbox::default()
        }
    }

    /// Allows outgoing HTTP to `origin` (`scheme://host[:port]`).
    pub fn allow(mut self, origin: &str) -> Result<Self> {
        let origin = Origin::parse(origin)
            .map_err(|e| PluginError::Sandbox(format!("allowed_hosts: {e}")))?;
        self.allowed_hosts.push(origin);
        Ok(self)
    }

    /// Preopens `dir` at [`MOUNT_GUEST_PATH`].
    pub fn with_mount(mut self, dir: MountDir) -> Self {
        self.mount = Some(dir);
        self
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use agentmesh_manifest::model::common::{ByteSize, Duration as ManifestDuration};

    #[test]
    fn manifest_values_override_defaults() {
        let runtime = WasmRuntime {
            component: Some("x.wasm".into()),
            allowed_hosts: Some(vec!["https://api.github.com".into()]),
            memory_limit: Some(ByteSize(32 * 1024 * 1024)),
            timeout: Some(ManifestDuration(Duration::from_secs(2))),
            max_output: None,
        };
        let sandbox = Sandbox::from_runtime(&runtime, None).unwrap();
        assert_eq!(sandbox.limits.memory, 32 * 1024 * 1024);
        assert_eq!(sandbox.limits.timeout, Duration::from_secs(2));
        assert_eq!(sandbox.limits.max_output, DEFAULT_MAX_OUTPUT);
        assert_eq!(
            sandbox.allowed_hosts[0].to_string(),
            "https://api.github.com:443"
        );
    }

    #[test]
    fn a_bad_origin_is_a_sandbox_error() {
        let runtime = WasmRuntime {
            component: Some("x.wasm".into()),
            allowed_hosts: Some(vec!["api.github.com".into()]),
            memory_limit: None,
            timeout: None,
            max_output: None,
        };
        let err = Sandbox::from_runtime(&runtime, None).unwrap_err();
        assert!(err.to_string().contains("allowed_hosts"), "{err}");
    }
}
