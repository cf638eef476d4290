//! The `file` mount backend: the agent's prefix as a directory under the mount root.

use std::path::{Component, Path, PathBuf};

use agentmesh_expr::{MountError, MountIo};
use agentmesh_manifest::model::agent::MountScope;
use agentmesh_manifest::model::host::MountConfig;
use serde_json::{Value, json};

/// Largest file `mount.read` returns and `mount.write` accepts. Content goes into the LLM's
/// context and the event log; a larger file would only exhaust both.
pub const MAX_MOUNT_FILE: u64 = 8 * 1024 * 1024;

/// An agent's view of the mount: the root directory and its scoped prefix.
pub struct FileMount {
    root: PathBuf,
    prefix: String,
}

impl FileMount {
    /// The mount of `scope` for an agent's task, or `None` for `mount: none`.
    pub fn new(
        config: Option<&MountConfig>,
        default_root: &Path,
        scope: MountScope,
        namespace: &str,
        agent: &str,
        task: &str,
    ) -> Option<FileMount> {
        let prefixes = config.and_then(|c| c.path_prefixes.as_ref());
        let template = match scope {
            MountScope::None => return None,
            MountScope::Workspace => prefixes
                .and_then(|p| p.workspace.clone())
                .unwrap_or("/{namespace}/".into()),
            MountScope::Agent => prefixes
                .and_then(|p| p.agent.clone())
                .unwrap_or("/{namespace}/{agent}/".into()),
            MountScope::Task => prefixes
                .and_then(|p| p.task.clone())
                .unwrap_or("/{namespace}/{agent}/{task}/".into()),
        };
        let prefix = template
            .replace("{namespace}", namespace)
            .replace("{agent}", agent)
            .replace("{task}", task);
        let root = config
            .and_then(|c| c.root.as_ref())
            .map_or_else(|| default_root.to_path_buf(), PathBuf::from);
        Some(FileMount { root, prefix })
    }

    /// The `mount` variable: `{bucket, prefix, backend}`.
    pub fn variable(&self) -> Value {
        json!({"bucket": "", "prefix": self.prefix, "backend": "file"})
    }

    /// The directory of the prefix.
    pub fn dir(&self) -> PathBuf {
        self.root.join(self.prefix.trim_start_matches('/'))
    }

    /// Resolves `path` inside the prefix; absolute paths and `..` are refused, and so is a
    /// path through a symbolic link at any depth: one (made by a component with the mount, or
    /// by anything else with access to the directory) could lead outside the prefix.
    fn resolve(&self, path: &str) -> Result<PathBuf, String> {
        if path.is_empty() {
            return Err("empty path".into());
        }
        let mut full = self.dir();
        let mut exists = true;
        for c in Path::new(path).components() {
            match c {
                Component::Normal(name) => {
                    full.push(name);
                    // Below a missing directory nothing exists yet (`write` creates it).
                    if exists {
                        match std::fs::symlink_metadata(&full) {
                            Ok(m) if m.file_type().is_symlink() => {
                                return Err(format!("`{path}`: symbolic links are not followed"));
                            }
                            Ok(_) => {}
                            Err(_) => exists = false,
                        }
                    }
                }
                Component::CurDir => {}
                Component::ParentDir => {
                    return Err(format!("`{path}`: `..` is not allowed in mount paths"));
                }
                Component::RootDir | Component::Prefix(_) => {
                    return Err(format!("`{path}`: mount paths are relative to the prefix"));
                }
            }
        }
        Ok(full)
    }
}

impl MountIo for FileMount {
    fn read(&self, path: &str) -> Result<String, MountError> {
        self.read_file(path).map_err(MountError)
    }

    fn write(&self, path: &str, content: &str) -> Result<String, MountError> {
        self.write_file(path, content).map_err(MountError)
    }
}

impl FileMount {
    fn read_file(&self, path: &str) -> Result<String, String> {
        let full = self.resolve(path)?;
        let meta = std::fs::symlink_metadata(&full).map_err(|e| format!("`{path}`: {e}"))?;
        if meta.len() > MAX_MOUNT_FILE {
            return Err(format!("`{path}` is larger than {MAX_MOUNT_FILE} bytes"));
        }
        std::fs::read_to_string(&full).map_err(|e| format!("`{path}`: {e}"))
    }

    fn write_file(&self, path: &str, content: &str) -> Result<String, String> {
        if content.len() as u64 > MAX_MOUNT_FILE {
            return Err(format!("content is larger than {MAX_MOUNT_FILE} bytes"));
        }
        let full = self.resolve(path)?;
        if let Some(parent) = full.parent() {
            std::fs::create_dir_all(parent).map_err(|e| format!("`{path}`: {e}"))?;
        }
        std::fs::write(&full, content).map_err(|e| format!("`{path}`: {e}"))?;
        Ok(content.to_owned())
    }
}
