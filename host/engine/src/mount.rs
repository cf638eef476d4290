//! The `file` mount backend: the agent's prefix as a directory under the mount root.

use std::ffi::OsStr;
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::path::{Component, Path, PathBuf};

use agentmesh_expr::{MountError, MountIo};
use agentmesh_manifest::model::agent::MountScope;
use agentmesh_manifest::model::host::MountConfig;
use agentmesh_plugins::MountDir;
use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;
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

    /// The prefix's directory for a component's sandbox, opened from the root one name at a
    /// time without following a symbolic link, created where missing, and held open, so that
    /// the component is given this directory whatever is put at its path afterwards.
    pub fn open_dir(&self) -> Result<MountDir, String> {
        Ok(MountDir::new(self.open_prefix(true)?, self.dir()))
    }

    /// Opens the prefix's directory from the root one name at a time, never following a
    /// symbolic link (one put there by a component of an agent with a wider mount, or by
    /// anything else with access to the root, could lead the prefix out of the mount), and
    /// creates what is missing when `create`.
    fn open_prefix(&self, create: bool) -> Result<OwnedFd, String> {
        // The root is the operator's: its path is followed as given, and made when missing.
        if create {
            std::fs::create_dir_all(&self.root).map_err(|e| format!("the mount root: {e}"))?;
        }
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let mut dir = rustix::fs::open(&self.root, flags, Mode::empty())
            .map_err(|e| format!("the mount root: {e}"))?;
        let shown = self.prefix.as_str();
        for c in Path::new(shown.trim_start_matches('/')).components() {
            match c {
                Component::Normal(name) => dir = open_dir_at(&dir, name, create, shown)?,
                Component::CurDir => {}
                Component::ParentDir | Component::RootDir | Component::Prefix(_) => {
                    return Err(format!(
                        "mount prefix `{shown}`: only names are allowed, not `..`"
                    ));
                }
            }
        }
        Ok(dir)
    }

    /// The directory that holds `path` inside the prefix, opened as [`FileMount::open_prefix`]
    /// opens the prefix (creating what is missing when `create`), and the file's name in it.
    /// Absolute paths and `..` are refused, and so is a path through a symbolic link at any
    /// depth.
    fn open_parent<'p>(&self, path: &'p str, create: bool) -> Result<(OwnedFd, &'p OsStr), String> {
        let mut names = Vec::new();
        for c in Path::new(path).components() {
            match c {
                Component::Normal(name) => names.push(name),
                Component::CurDir => {}
                Component::ParentDir => {
                    return Err(format!("`{path}`: `..` is not allowed in mount paths"));
                }
                Component::RootDir | Component::Prefix(_) => {
                    return Err(format!("`{path}`: mount paths are relative to the prefix"));
                }
            }
        }
        let Some(file) = names.pop() else {
            return Err(format!("`{path}`: names no file"));
        };
        let mut dir = self.open_prefix(create)?;
        for name in names {
            dir = open_dir_at(&dir, name, create, path)?;
        }
        Ok((dir, file))
    }
}

/// Directory `name` in `parent`, not followed if it is a symbolic link; created first when
/// missing and `create`. `shown` names the path in errors.
fn open_dir_at(
    parent: &OwnedFd,
    name: &OsStr,
    create: bool,
    shown: &str,
) -> Result<OwnedFd, String> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let opened = match rustix::fs::openat(parent, name, flags, Mode::empty()) {
        Err(Errno::NOENT) if create => {
            match rustix::fs::mkdirat(parent, name, Mode::from_raw_mode(0o777)) {
                Ok(()) | Err(Errno::EXIST) => {}
                Err(e) => return Err(format!("`{shown}`: {e}")),
            }
            rustix::fs::openat(parent, name, flags, Mode::empty())
        }
        other => other,
    };
    opened.map_err(|e| refusal(parent, name, shown, e))
}

/// The error of opening `name` in `parent`, saying so when it is a symbolic link.
fn refusal(parent: &OwnedFd, name: &OsStr, shown: &str, error: Errno) -> String {
    let link = rustix::fs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW)
        .is_ok_and(|s| FileType::from_raw_mode(s.st_mode) == FileType::Symlink);
    if link {
        format!("`{shown}`: symbolic links are not followed")
    } else {
        format!("`{shown}`: {}", std::io::Error::from(error))
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
        let (dir, name) = self.open_parent(path, false)?;
        // Not blocking: opening a FIFO put there would wait for a writer.
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
        let file = rustix::fs::openat(&dir, name, flags, Mode::empty())
            .map_err(|e| refusal(&dir, name, path, e))?;
        let mut file = std::fs::File::from(file);
        let meta = file.metadata().map_err(|e| format!("`{path}`: {e}"))?;
        if !meta.is_file() {
            return Err(format!("`{path}` is not a file"));
        }
        if meta.len() > MAX_MOUNT_FILE {
            return Err(format!("`{path}` is larger than {MAX_MOUNT_FILE} bytes"));
        }
        // The file may grow while it is read (a component of another task appending to it).
        read_at_most(&mut file, MAX_MOUNT_FILE).map_err(|e| format!("`{path}`: {e}"))
    }

    fn write_file(&self, path: &str, content: &str) -> Result<String, String> {
        if content.len() as u64 > MAX_MOUNT_FILE {
            return Err(format!("content is larger than {MAX_MOUNT_FILE} bytes"));
        }
        let (dir, name) = self.open_parent(path, true)?;
        let flags = OFlags::WRONLY
            | OFlags::CREATE
            | OFlags::TRUNC
            | OFlags::NOFOLLOW
            | OFlags::NONBLOCK
            | OFlags::CLOEXEC;
        let file = rustix::fs::openat(&dir, name, flags, Mode::from_raw_mode(0o666))
            .map_err(|e| refusal(&dir, name, path, e))?;
        let mut file = std::fs::File::from(file);
        if !file.metadata().is_ok_and(|m| m.is_file()) {
            return Err(format!("`{path}` is not a file"));
        }
        file.write_all(content.as_bytes())
            .map_err(|e| format!("`{path}`: {e}"))?;
        Ok(content.to_owned())
    }
}

/// What `reader` holds as text, if it is at most `limit` bytes: an error once it has given
/// more, without reading the rest.
fn read_at_most(reader: &mut impl Read, limit: u64) -> std::io::Result<String> {
    let mut text = String::new();
    reader.take(limit + 1).read_to_string(&mut text)?;
    if text.len() as u64 > limit {
        return Err(std::io::Error::other(format!(
            "it grew larger than {limit} bytes while it was read"
        )));
    }
    Ok(text)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // Tests fail loudly.
mod tests {
    use super::*;

    #[test]
    fn a_read_stops_at_the_limit_however_much_the_file_holds() {
        let endless = read_at_most(&mut std::io::repeat(b'a'), 1024);
        assert!(
            endless
                .unwrap_err()
                .to_string()
                .contains("larger than 1024")
        );
        let fits = read_at_most(&mut "a".repeat(1024).as_bytes(), 1024);
        assert_eq!(fits.unwrap().len(), 1024);
    }
}
