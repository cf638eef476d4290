//! sled's store against the backend conformance suite (`agentmesh_store::conformance`).

// Test code may panic: a panic is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::sync::Arc;

use agentmesh_store::{Backend, SledStore, conformance};

fn open(dir: &Path) -> Arc<dyn Backend> {
    Arc::new(SledStore::open(dir).unwrap())
}

#[test]
fn sled_passes_every_check() {
    for (name, check) in conformance::ALL {
        let dir = tempfile::tempdir().unwrap();
        let outcome = std::panic::catch_unwind(|| check(dir.path(), &open));
        assert!(outcome.is_ok(), "conformance check `{name}` failed");
    }
}
