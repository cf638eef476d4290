//! One module per subcommand.

pub mod events;
pub mod run;
pub mod schema;
pub mod validate;

use std::path::{Path, PathBuf};

use agentmesh_manifest::model::host::HostConfig;

/// The data dir: the flag, else the host config's `data_dir` (relative to the config dir),
/// else `.agentmesh` in the config dir.
pub fn data_dir(flag: Option<&Path>, config_dir: &Path, host: &HostConfig) -> PathBuf {
    match (flag, &host.data_dir) {
        (Some(d), _) => d.to_path_buf(),
        (None, Some(d)) => config_dir.join(d),
        (None, None) => config_dir.join(".agentmesh"),
    }
}
