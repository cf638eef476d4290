//! What the PostgreSQL backend adds to the conformance suite: its schema migrations, the host
//! lock and the copy of a sled store, on a real server started for the test.

// Test code may panic: a panic is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use agentmesh_store::conformance::events;
use agentmesh_store::copy::{Copied, Item};
use agentmesh_store::{
    Dedupe, HostState, PgOptions, PgStore, PluginKv, Queues, RawWrite, SledStore, StoreError,
    TaskLogs, postgres,
};
use agentmesh_testkit::postgres::Postgres;

fn options(url: &str, exclusive: bool) -> PgOptions {
    PgOptions {
        url: url.to_owned(),
        pool: 2,
        exclusive,
    }
}

#[test]
fn hosts_opening_a_new_database_at_once_migrate_it_once() {
    let pg = Postgres::start();
    let url = pg.new_database();
    let schemas: Vec<(i32, i32)> = std::thread::scope(|s| {
        let opening: Vec<_> = (0..4)
            .map(|_| s.spawn(|| PgStore::open(&options(&url, false)).unwrap().schema()))
            .collect();
        opening.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let latest = postgres::latest_schema();
    assert!(schemas.iter().all(|&(_, now)| now == latest), "{schemas:?}");
    assert_eq!(
        schemas.iter().filter(|&&(before, _)| before == 0).count(),
        1,
        "not exactly one opener found the database new: {schemas:?}"
    );
    let db = url.rsplit('/').next().unwrap();
    assert_eq!(
        pg.psql(
            db,
            "SELECT string_agg(version::text, ',') FROM agentmesh_schema"
        ),
        (1..=latest)
            .map(|v| v.to_string())
            .collect::<Vec<_>>()
            .join(",")
    );
    // Migrating again changes nothing.
    assert_eq!(
        postgres::migrate(&options(&url, false)).unwrap(),
        (latest, latest)
    );
}

#[test]
fn a_database_with_a_newer_schema_is_refused_with_its_version() {
    let pg = Postgres::start();
    let url = pg.new_database();
    PgStore::open(&options(&url, false)).unwrap();
    let db = url.rsplit('/').next().unwrap();
    pg.psql(db, "INSERT INTO agentmesh_schema (version) VALUES (99)");
    let refused = PgStore::open(&options(&url, false))
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains("version 99") && refused.contains("newer"),
        "{refused}"
    );
}

#[test]
fn a_second_host_on_one_database_is_refused_until_the_first_closes() {
    let pg = Postgres::start();
    let url = pg.new_database();
    let first = PgStore::open(&options(&url, true)).unwrap();
    let refused = PgStore::open(&options(&url, true)).unwrap_err().to_string();
    assert!(refused.contains("another agentmesh host"), "{refused}");
    // A store that is not a host (a migration, a copy) is not refused.
    PgStore::open(&options(&url, false)).unwrap();
    drop(first);
    PgStore::open(&options(&url, true)).unwrap();
}

#[test]
fn an_unreachable_database_is_an_error_naming_it_without_its_password() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("postgres://u:s3cret@127.0.0.1:{port}/x");
    let refused = PgStore::open(&options(&url, false))
        .unwrap_err()
        .to_string();
    assert!(refused.contains(&format!("127.0.0.1:{port}")), "{refused}");
    assert!(!refused.contains("s3cret"), "{refused}");
}

#[test]
fn a_sled_store_copied_into_postgres_reads_back_the_same_and_only_once() {
    let dir = tempfile::tempdir().unwrap();
    let sled = SledStore::open(dir.path()).unwrap();
    let part = |head: &'static [u8], parts, new_part| RawWrite {
        head,
        parts,
        new_part,
    };
    sled.write_buffered(
        "t_1",
        part(b"{\"v\":1}", 1, Some(b"[1]")),
        &events(1, 2),
        None,
    )
    .unwrap();
    sled.write_buffered(
        "t_1",
        part(b"{\"v\":2}", 2, Some(b"[2]")),
        &events(3, 1),
        None,
    )
    .unwrap();
    sled.write_buffered("t_2", part(b"{}", 0, None), &[], None)
        .unwrap();
    let far = i64::MAX / 2;
    sled.queue_durably(
        Some(("d-1", far)),
        &[("t_1", 20, b"\"b\""), ("t_1", 10, b"\"a\"")],
    )
    .unwrap();
    sled.queue_durably(None, &[("t_2", -5, b"\"before 1970\"")])
        .unwrap();
    sled.put_state_buffered("wakeup", "wk_1", b"{\"at\":1}")
        .unwrap();
    sled.kv_put_buffered("notes/t_1", "k", b"v").unwrap();
    let last_id = sled.next_id().unwrap();

    let pg = Postgres::start();
    let store = PgStore::open(&options(&pg.new_database(), false)).unwrap();
    let copied = store.import(|visit| sled.export(visit)).unwrap();
    assert_eq!(
        copied,
        Copied {
            tasks: 2,
            events: 3,
            queued: 3,
            deliveries: 1,
            states: 1,
            kv: 1
        }
    );
    for task in ["t_1", "t_2"] {
        assert_eq!(
            store.record(task).unwrap(),
            sled.record(task).unwrap(),
            "{task}"
        );
        assert_eq!(
            store.events_between(task, 1, u64::MAX).unwrap().0,
            sled.events_between(task, 1, u64::MAX).unwrap().0,
            "{task}"
        );
    }
    assert_eq!(store.record_ids().unwrap(), ["t_1", "t_2"]);
    // The queue keeps its order, and the copy takes inputs as the original would.
    let (key, first) = store.first_queued("t_1").unwrap().unwrap();
    assert_eq!(first, b"\"a\"");
    store
        .write_buffered(
            "t_1",
            part(b"{\"v\":3}", 2, None),
            &events(4, 1),
            Some(&key),
        )
        .unwrap()
        .expect("the copied input could not be taken");
    assert_eq!(store.first_queued("t_1").unwrap().unwrap().1, b"\"b\"");
    assert_eq!(
        store.first_queued("t_2").unwrap().unwrap().1,
        b"\"before 1970\""
    );
    assert!(store.is_remembered("d-1").unwrap());
    assert_eq!(
        store.state_values("wakeup").unwrap(),
        [("wk_1".to_owned(), b"{\"at\":1}".to_vec())]
    );
    assert_eq!(
        store.kv_value("notes/t_1", "k").unwrap().as_deref(),
        Some(&b"v"[..])
    );
    assert!(store.next_id().unwrap() > last_id, "ids went back");

    // Again into the same database: refused, nothing added.
    let refused = store
        .import(|visit| sled.export(visit))
        .unwrap_err()
        .to_string();
    assert!(refused.contains("already holds"), "{refused}");
    assert_eq!(store.queued_count("t_1").unwrap(), 1);
}

#[test]
fn a_copy_whose_source_fails_midway_writes_nothing() {
    let pg = Postgres::start();
    let store = PgStore::open(&options(&pg.new_database(), false)).unwrap();
    let failed = store.import(|visit| {
        visit(Item::State {
            ns: "wakeup".into(),
            key: "wk_1".into(),
            value: b"{}".to_vec(),
        })?;
        Err(StoreError::Io("the source's disk went away".into()))
    });
    let failed = failed.unwrap_err().to_string();
    assert!(failed.contains("disk went away"), "{failed}");
    assert!(store.state_values("wakeup").unwrap().is_empty());
}
