//! The hot-reload registry: the current version of each component, by name.
//!
//! `serve` loads a changed component aside ([`crate::PluginHost::load_named`]), and only when
//! that succeeded swaps it in here. Readers get an `Arc` of whatever version is current; calls
//! and sessions in flight keep the `Arc` they started with, so the old version lives until the
//! last of them ends. A failed load never reaches the registry: the last good version stays.

use std::collections::BTreeMap;
use std::sync::{Arc, PoisonError, RwLock};

use crate::component::LoadedComponent;

/// Components by name (see the module docs).
#[derive(Debug, Default)]
pub struct ComponentRegistry {
    components: RwLock<BTreeMap<String, Arc<LoadedComponent>>>,
}

impl ComponentRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// The current version of `name`.
    pub fn get(&self, name: &str) -> Option<Arc<LoadedComponent>> {
        self.read().get(name).cloned()
    }

    /// Makes `component` the current version of its name; returns the version it replaced.
    pub fn swap(&self, component: Arc<LoadedComponent>) -> Option<Arc<LoadedComponent>> {
        let mut map = self
            .components
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        map.insert(component.name().to_owned(), component)
    }

    /// Removes `name` (its manifest was deleted); returns the version it held.
    pub fn remove(&self, name: &str) -> Option<Arc<LoadedComponent>> {
        self.components
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(name)
    }

    /// Every component's name and content hash, for `GET /v1/status`.
    pub fn versions(&self) -> Vec<(String, String)> {
        self.read()
            .iter()
            .map(|(name, c)| (name.clone(), c.hash().to_owned()))
            .collect()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<String, Arc<LoadedComponent>>> {
        // The map is replaced entry by entry; a panic elsewhere cannot leave it inconsistent.
        self.components
            .read()
            .unwrap_or_else(PoisonError::into_inner)
    }
}
