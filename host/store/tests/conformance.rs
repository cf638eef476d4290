//! The store's backends against the backend conformance suite (`agentmesh_store::conformance`):
//! sled in a temp dir, and PostgreSQL on a real server started for the test.

// Test code may panic: a panic is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use agentmesh_store::{Backend, PgOptions, PgStore, SledStore, conformance};
use agentmesh_testkit::postgres::Postgres;

fn open(dir: &Path) -> Arc<dyn Backend> {
    Arc::new(SledStore::open(dir).unwrap())
}

/// Runs every check with `open`, each in a directory of its own, and names the ones that fail.
fn passes_every_check(open: &(dyn Fn(&Path) -> Arc<dyn Backend> + Sync)) {
    let mut failed = Vec::new();
    for (name, check) in conformance::ALL {
        let dir = tempfile::tempdir().unwrap();
        let outcome =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(dir.path(), open)));
        if outcome.is_err() {
            failed.push(name);
        }
    }
    assert!(failed.is_empty(), "conformance checks failed: {failed:?}");
}

#[test]
fn sled_passes_every_check() {
    passes_every_check(&open);
}

#[test]
fn postgres_passes_every_check() {
    postgres_conformance();
}

/// The same on sessions the calling thread drives (a turn's; see
/// `agentmesh_store::postgres::drive_sessions_here`), as far as the checks call from it.
#[test]
fn postgres_passes_every_check_on_sessions_its_callers_drive() {
    agentmesh_store::postgres::drive_sessions_here();
    postgres_conformance();
}

fn postgres_conformance() {
    let pg = Postgres::start();
    // Each check's directory stands for a database of its own; opening it again reopens it.
    let databases: Mutex<HashMap<PathBuf, String>> = Mutex::new(HashMap::new());
    let open = |dir: &Path| -> Arc<dyn Backend> {
        let url = databases
            .lock()
            .unwrap()
            .entry(dir.to_owned())
            .or_insert_with(|| pg.new_database())
            .clone();
        Arc::new(
            PgStore::open(&PgOptions {
                url,
                pool: 4,
                lease: agentmesh_store::postgres::DEFAULT_LEASE,
            })
            .unwrap(),
        )
    };
    passes_every_check(&open);
}
