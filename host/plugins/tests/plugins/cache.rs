//! The compiled-component cache: a second load of an unchanged component is a hit.

use std::sync::Arc;

use agentmesh_plugins::{CacheStats, MemoryKv, PluginConfig, PluginError, PluginHost, World};

use crate::util::guest;

fn host(dir: &std::path::Path) -> PluginHost {
    let config = PluginConfig {
        cache_dir: Some(dir.to_owned()),
        max_instances: 4,
        ..PluginConfig::default()
    };
    PluginHost::new(config, Arc::new(MemoryKv::new())).unwrap()
}

#[test]
fn a_second_load_of_an_unchanged_component_hits_the_cache() {
    let dir = tempfile::tempdir().unwrap();
    let first = host(dir.path());
    let loaded = first.load(&guest("notes")).unwrap();
    assert!(!loaded.from_cache());
    assert_eq!(loaded.world(), World::Tool);
    assert_eq!(loaded.hash().len(), 64);
    assert_eq!(first.cache_stats(), CacheStats { hits: 0, misses: 1 });

    let again = first.load(&guest("notes")).unwrap();
    assert!(again.from_cache());
    assert_eq!(again.hash(), loaded.hash());
    assert_eq!(first.cache_stats(), CacheStats { hits: 1, misses: 1 });

    // A restarted host finds the artifact too.
    let second = host(dir.path());
    assert!(second.load(&guest("notes")).unwrap().from_cache());
    assert_eq!(second.cache_stats(), CacheStats { hits: 1, misses: 0 });

    let artifacts: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(artifacts.len(), 1, "{artifacts:?}");
    assert!(artifacts[0].starts_with(loaded.hash()) && artifacts[0].ends_with(".cwasm"));
}

#[test]
fn a_changed_component_is_a_miss() {
    let dir = tempfile::tempdir().unwrap();
    let host = host(dir.path());
    host.load(&guest("notes")).unwrap();
    let other = host.load_named("notes", &guest("redact")).unwrap();
    assert!(!other.from_cache());
    assert_eq!(other.world(), World::Middleware);
    assert_eq!(host.cache_stats(), CacheStats { hits: 0, misses: 2 });
}

#[test]
fn files_that_are_not_plugins_are_refused_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let host = host(dir.path());
    let junk = dir.path().join("junk.wasm");
    std::fs::write(&junk, b"\0asm not really").unwrap();
    let err = host.load(&junk).unwrap_err();
    assert!(matches!(err, PluginError::Compile { .. }), "{err}");
    let err = host.load(&dir.path().join("missing.wasm")).unwrap_err();
    assert!(matches!(err, PluginError::Read { .. }), "{err}");
}
