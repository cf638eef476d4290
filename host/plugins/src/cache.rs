//! The compiled-component cache: `{dir}/{content hash}-{engine hash}.cwasm`.
//!
//! Compiling a component takes ~50 ms; loading a cached artifact (memory-mapped) ~0.1 ms. The
//! key is the SHA-256 of the component's bytes plus a hash of everything in the engine that
//! affects compiled code (wasmtime version, target, settings), so an upgraded host never loads
//! an artifact it did not compile.
//!
//! Loading an artifact is `unsafe`: wasmtime trusts its machine code. So the cache only loads
//! files it wrote itself, and makes that checkable: the directory is created private (0700),
//! artifacts are written to a temporary file (0600) and renamed into place (a reader never sees
//! half a file), and before loading, the file must be a regular file (not a symlink) owned by
//! the directory's owner and writable by nobody else. Anyone who can write there could already
//! replace the host's own binary's data directory, so this is the trust boundary.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

/// The extension of cached artifacts.
const EXTENSION: &str = "cwasm";

/// A directory of compiled components for one engine.
#[derive(Debug)]
pub(crate) struct Cache {
    dir: PathBuf,
    engine_hash: String,
}

/// Distinguishes temporary files of concurrent writers in one process.
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

impl Cache {
    /// Opens (creating it, private) the cache directory for `engine`.
    pub(crate) fn open(dir: &Path, engine: &Engine) -> std::io::Result<Cache> {
        fs::create_dir_all(dir)?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            fs::set_permissions(dir, fs::Permissions::from_mode(0o700))?;
        }
        Ok(Cache {
            dir: dir.to_owned(),
            engine_hash: engine_hash(engine),
        })
    }

    /// Where the artifact of the component with `content_hash` lives.
    fn path(&self, content_hash: &str) -> PathBuf {
        self.dir
            .join(format!("{content_hash}-{}.{EXTENSION}", self.engine_hash))
    }

    /// The cached component, if a trustworthy artifact exists and loads.
    pub(crate) fn load(&self, engine: &Engine, content_hash: &str) -> Option<Component> {
        let path = self.path(content_hash);
        if let Err(why) = self.trusted(&path) {
            if path.exists() {
                tracing::warn!(component.hash = content_hash, path = %path.display(), "ignoring cached artifact: {why}");
            }
            return None;
        }
        // SAFETY: `trusted` checked that this is a regular file in the host's private cache
        // directory, owned by its owner and writable only by it: a file this host wrote with
        // `Component::serialize` for an engine with the same compatibility hash (part of the
        // name). wasmtime additionally checks the header and engine compatibility.
        #[allow(unsafe_code)]
        let loaded = unsafe { Component::deserialize_file(engine, &path) };
        match loaded {
            Ok(component) => Some(component),
            Err(e) => {
                tracing::warn!(component.hash = content_hash, path = %path.display(), "cached artifact does not load, recompiling: {e:#}");
                None
            }
        }
    }

    /// Stores `component`'s compiled code. Failures are logged, never fatal: the cache only
    /// saves time.
    pub(crate) fn store(&self, content_hash: &str, component: &Component) {
        if let Err(e) = self.write(content_hash, component) {
            tracing::warn!(component.hash = content_hash, dir = %self.dir.display(), "cannot cache compiled component: {e}");
        }
    }

    fn write(&self, content_hash: &str, component: &Component) -> std::io::Result<()> {
        let bytes = component
            .serialize()
            .map_err(|e| std::io::Error::other(format!("{e:#}")))?;
        let final_path = self.path(content_hash);
        let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
        let temp = self
            .dir
            .join(format!(".{content_hash}.{}.{n}.tmp", std::process::id()));
        let mut options = fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            options.mode(0o600);
        }
        let result = (|| {
            let mut file = options.open(&temp)?;
            file.write_all(&bytes)?;
            file.sync_all()?;
            fs::rename(&temp, &final_path)
        })();
        if result.is_err() {
            // Best effort: a leftover temporary file is harmless (never loaded).
            let _ = fs::remove_file(&temp);
        }
        result
    }

    /// Whether the file at `path` is one this cache may load.
    fn trusted(&self, path: &Path) -> Result<(), String> {
        let meta = fs::symlink_metadata(path).map_err(|e| e.to_string())?;
        if !meta.file_type().is_file() {
            return Err("not a regular file".into());
        }
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt;
            let dir = fs::metadata(&self.dir).map_err(|e| e.to_string())?;
            if meta.uid() != dir.uid() {
                return Err("owned by another user than the cache directory".into());
            }
            if meta.mode() & 0o022 != 0 || dir.mode() & 0o022 != 0 {
                return Err("writable by other users".into());
            }
        }
        Ok(())
    }
}

/// The SHA-256 of `bytes`, in hex.
pub(crate) fn content_hash(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// A stable hash of the engine's compatibility-relevant settings (first 16 hex digits).
fn engine_hash(engine: &Engine) -> String {
    use std::hash::Hash;
    let mut hasher = ShaHasher(Sha256::new());
    engine.precompile_compatibility_hash().hash(&mut hasher);
    let mut text = hex(&hasher.0.finalize());
    text.truncate(16);
    text
}

/// Feeds `Hash` output into SHA-256, which (unlike `DefaultHasher`) is stable across runs.
struct ShaHasher(Sha256);

impl std::hash::Hasher for ShaHasher {
    fn finish(&self) -> u64 {
        // Only `write` is used: the digest is read from the inner hasher.
        0
    }

    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn content_hash_is_sha256_hex() {
        assert_eq!(
            content_hash(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn engine_hash_is_stable() {
        let engine = Engine::default();
        assert_eq!(engine_hash(&engine), engine_hash(&engine));
        assert_eq!(engine_hash(&engine).len(), 16);
    }

    #[test]
    fn untrusted_files_are_not_loaded() {
        let dir = tempfile::tempdir().unwrap();
        let engine = Engine::default();
        let cache = Cache::open(dir.path(), &engine).unwrap();
        let hash = content_hash(b"component");
        // Garbage in the right place, but writable by everyone: refused before deserializing.
        let path = cache.path(&hash);
        fs::write(&path, b"not an artifact").unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            fs::set_permissions(&path, fs::Permissions::from_mode(0o666)).unwrap();
            assert!(cache.trusted(&path).is_err());
            fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
        }
        // Trusted but not an artifact: wasmtime refuses it, the cache reports a miss.
        assert!(cache.load(&engine, &hash).is_none());
        // A symlink is never followed.
        #[cfg(unix)]
        {
            fs::remove_file(&path).unwrap();
            std::os::unix::fs::symlink("/etc/passwd", &path).unwrap();
            assert!(cache.trusted(&path).is_err());
        }
    }
}
