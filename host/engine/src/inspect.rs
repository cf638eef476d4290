//! Reads for the inspector that the task API does not need: the components in force with
//! their world and cache origin, and the compiled cache's hits and misses.

use std::path::PathBuf;

pub use agentmesh_plugins::CacheStats;

use crate::Engine;

/// A component in force, as the inspector shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadedDetail {
    /// The name it runs as: a tool's id, or a middleware step's or event filter's path.
    pub name: String,
    /// Its file.
    pub path: PathBuf,
    /// The SHA-256 of its bytes, in hex (its version).
    pub hash: String,
    /// The WIT world it implements (`tool-plugin`, `middleware-plugin`, `event-filter-plugin`).
    pub world: &'static str,
    /// Whether its compiled code came from the compiled cache.
    pub from_cache: bool,
}

impl Engine {
    /// The components in force, by name; empty until the first component is loaded.
    pub fn components_loaded(&self) -> Vec<LoadedDetail> {
        match self.inner.plugins.get() {
            Some(Ok(p)) => p.loaded(),
            _ => Vec::new(),
        }
    }

    /// Loads served from the compiled cache and loads that compiled, since the host started;
    /// `None` until the plugin host has started.
    pub fn component_cache_stats(&self) -> Option<CacheStats> {
        match self.inner.plugins.get() {
            Some(Ok(p)) => Some(p.cache_stats()),
            _ => None,
        }
    }
}
