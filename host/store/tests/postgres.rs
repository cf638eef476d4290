//! What the PostgreSQL backend adds to the conformance suite: its schema migrations, leases and
//! notices among several hosts, and the copy of a sled store, on a real server started for the
//! test.

// Test code may panic: a panic is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use agentmesh_store::conformance::events;
use agentmesh_store::copy::{Copied, Item};
use std::sync::mpsc;
use std::time::Duration;

use agentmesh_store::{
    Dedupe, Delivery, HostState, Lease, Leases, Notice, PgOptions, PgStore, PluginKv, Queues,
    RawWrite, SledStore, StoreError, TaskLogs, postgres,
};
use agentmesh_testkit::postgres::Postgres;

fn options(url: &str) -> PgOptions {
    options_leasing(url, postgres::DEFAULT_LEASE)
}

/// [`options`] with a lease of `lease` (a host not renewed lapses after it).
fn options_leasing(url: &str, lease: Duration) -> PgOptions {
    PgOptions {
        url: url.to_owned(),
        pool: 2,
        lease,
    }
}

#[test]
fn hosts_opening_a_new_database_at_once_migrate_it_once() {
    let pg = Postgres::start();
    let url = pg.new_database();
    let schemas: Vec<(i32, i32)> = std::thread::scope(|s| {
        let opening: Vec<_> = (0..4)
            .map(|_| s.spawn(|| PgStore::open(&options(&url)).unwrap().schema()))
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
    assert_eq!(postgres::migrate(&options(&url)).unwrap(), (latest, latest));
}

/// The text of every `agentmesh_` function of database `db`, in order of their signatures.
fn functions(pg: &Postgres, db: &str) -> String {
    pg.psql(
        db,
        "SELECT string_agg(pg_get_functiondef(p.oid), E'\\n' ORDER BY p.oid::regprocedure::text) \
         FROM pg_proc p WHERE p.proname LIKE 'agentmesh\\_%'",
    )
}

/// Database `url` as it was at schema `version`: the versions after it unrecorded, and the
/// functions of an older version in place of today's (a write with other arguments, and a
/// function today's schema no longer has).
fn back_at(pg: &Postgres, url: &str, version: i32) -> String {
    postgres::migrate(&options(url)).unwrap();
    let db = url.rsplit('/').next().unwrap().to_owned();
    pg.psql(
        &db,
        &format!(
            "DELETE FROM agentmesh_schema WHERE version > {version}; \
             DROP FUNCTION agentmesh_write(text, bytea, bigint, bytea, bigint, bigint, bytea, \
                                           bigint, text, boolean); \
             CREATE FUNCTION agentmesh_write(p_task text) RETURNS integer \
                 LANGUAGE sql AS 'SELECT 1'; \
             CREATE FUNCTION agentmesh_gone() RETURNS integer LANGUAGE sql AS 'SELECT 1'"
        ),
    );
    db
}

#[test]
fn a_database_at_an_older_version_ends_with_the_newest_functions_and_no_other() {
    let pg = Postgres::start();
    let new = pg.new_database();
    postgres::migrate(&options(&new)).unwrap();
    let older = pg.new_database();
    let db = back_at(&pg, &older, 5);
    assert_ne!(
        functions(&pg, &db),
        functions(&pg, &new[new.rfind('/').unwrap() + 1..])
    );
    let latest = postgres::latest_schema();
    assert_eq!(postgres::migrate(&options(&older)).unwrap(), (5, latest));
    assert_eq!(
        functions(&pg, &db),
        functions(&pg, &new[new.rfind('/').unwrap() + 1..])
    );
    assert_eq!(
        pg.psql(
            &db,
            "SELECT string_agg(version::text, ',') FROM agentmesh_schema"
        ),
        (1..=latest)
            .map(|v| v.to_string())
            .collect::<Vec<_>>()
            .join(",")
    );
}

#[test]
fn a_migration_that_fails_leaves_the_database_at_its_version_and_says_why() {
    let pg = Postgres::start();
    let url = pg.new_database();
    let db = back_at(&pg, &url, 5);
    // A view of the user's own on a function of the schema keeps it from being replaced.
    pg.psql(&db, "CREATE VIEW in_the_way AS SELECT agentmesh_gone()");
    let before = functions(&pg, &db);
    let refused = postgres::migrate(&options(&url)).unwrap_err().to_string();
    assert!(
        refused.contains("functions")
            && refused.contains("in_the_way")
            && refused.contains("left at version 5"),
        "{refused}"
    );
    assert_eq!(
        pg.psql(&db, "SELECT max(version) FROM agentmesh_schema"),
        "5"
    );
    assert_eq!(functions(&pg, &db), before);
}

#[test]
fn a_database_with_a_newer_schema_is_refused_with_its_version() {
    let pg = Postgres::start();
    let url = pg.new_database();
    PgStore::open(&options(&url)).unwrap();
    let db = url.rsplit('/').next().unwrap();
    pg.psql(db, "INSERT INTO agentmesh_schema (version) VALUES (99)");
    let refused = PgStore::open(&options(&url)).unwrap_err().to_string();
    assert!(
        refused.contains("version 99") && refused.contains("newer"),
        "{refused}"
    );
}

#[test]
fn a_session_the_server_ended_while_it_waited_is_replaced_not_failed() {
    // A session this thread drives (a turn's thread does).
    postgres::drive_sessions_here();
    let pg = Postgres::start();
    let url = pg.new_database();
    let store = PgStore::open(&options(&url)).unwrap();
    store.put_state_buffered("ns", "k", b"1").unwrap();
    let db = url.rsplit('/').next().unwrap();
    let ended = pg.psql(
        db,
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
         WHERE datname = current_database() AND pid <> pg_backend_pid() \
         AND application_name = 'agentmesh'",
    );
    assert_ne!(ended, "0", "no session of the store was ended");
    // The server's goodbye reaches the idle session's socket; the next call opens another.
    std::thread::sleep(Duration::from_millis(200));
    for _ in 0..3 {
        assert_eq!(
            store.state_value("ns", "k").unwrap().as_deref(),
            Some(&b"1"[..])
        );
    }
}

/// Stops (`SIGSTOP`) or resumes (`SIGCONT`) every server process serving the store's sessions
/// in database `db`; returns how many.
fn signal_sessions(pg: &Postgres, db: &str, signal: &str) -> usize {
    let pids = pg.psql(
        db,
        "SELECT string_agg(pid::text, ' ') FROM pg_stat_activity \
         WHERE datname = current_database() AND application_name = 'agentmesh'",
    );
    let pids: Vec<&str> = pids.split_whitespace().collect();
    for pid in &pids {
        let killed = std::process::Command::new("kill")
            .args([signal, pid])
            .status()
            .expect("kill(1) runs");
        assert!(killed.success(), "kill {signal} {pid} failed");
    }
    pids.len()
}

#[test]
fn a_call_the_database_does_not_answer_fails_within_the_lease_and_the_next_one_works() {
    let pg = Postgres::start();
    let url = pg.new_database();
    let db = url.rsplit('/').next().unwrap().to_owned();
    let lease = Duration::from_secs(2);
    let store = std::sync::Arc::new(PgStore::open(&options_leasing(&url, lease)).unwrap());
    // A call from a thread that drives its own session (a turn's) and one from a thread
    // that uses the pool, each made once before (so that its session is open), then again
    // while the server's processes for the store are stopped.
    let call = |drives: bool, key: &'static str| {
        let store = std::sync::Arc::clone(&store);
        let (tx, rx) = mpsc::channel();
        let (go, wait) = mpsc::channel::<()>();
        std::thread::spawn(move || {
            if drives {
                postgres::drive_sessions_here();
            }
            store.put_state_buffered("ns", key, b"1").unwrap();
            tx.send(None).unwrap();
            wait.recv().unwrap();
            let started = std::time::Instant::now();
            let outcome = store.put_state_buffered("ns", key, b"2");
            tx.send(Some((outcome, started.elapsed()))).unwrap();
        });
        assert!(rx.recv_timeout(Duration::from_secs(30)).unwrap().is_none());
        (go, rx)
    };
    let driven = call(true, "driven");
    let pooled = call(false, "pooled");
    assert!(signal_sessions(&pg, &db, "-STOP") > 0, "no session found");
    driven.0.send(()).unwrap();
    pooled.0.send(()).unwrap();
    let outcomes: Vec<_> = [driven.1, pooled.1]
        .iter()
        .map(|rx| rx.recv_timeout(Duration::from_secs(20)))
        .collect();
    signal_sessions(&pg, &db, "-CONT");
    for (outcome, kind) in outcomes.into_iter().zip(["driven", "pooled"]) {
        let Ok(Some((outcome, took))) = outcome else {
            panic!("a call on a {kind} session the database did not answer hung");
        };
        let error = outcome.expect_err("a call the database did not answer succeeded");
        assert!(
            error.to_string().contains("did not answer"),
            "{kind}: {error}"
        );
        assert!(
            took >= lease && took < lease * 4,
            "{kind}: gave up after {took:?} with a lease of {lease:?}"
        );
    }
    // The database answers again: so does the store, on sessions of both kinds.
    let again = std::thread::spawn({
        let store = std::sync::Arc::clone(&store);
        move || {
            postgres::drive_sessions_here();
            store.put_state_buffered("ns", "driven", b"3")
        }
    });
    again.join().unwrap().unwrap();
    store.put_state_buffered("ns", "pooled", b"3").unwrap();
    assert_eq!(
        store.state_value("ns", "driven").unwrap().as_deref(),
        Some(&b"3"[..])
    );
}

/// A write of task `task` appending event `seq` by `store`.
fn write(store: &PgStore, task: &str, seq: u64, active: bool) -> agentmesh_store::Result<()> {
    store
        .write_buffered(
            task,
            RawWrite {
                head: b"{}",
                parts: 0,
                new_part: None,
                active,
            },
            &events(seq, seq),
            None,
        )
        .map(drop)
}

#[test]
fn a_task_is_written_by_one_live_host_at_a_time_and_taken_over_once_its_holder_goes_quiet() {
    let pg = Postgres::start();
    let url = pg.new_database();
    let short = options_leasing(&url, Duration::from_secs(1));
    let a = PgStore::open(&short).unwrap();
    let b = PgStore::open(&short).unwrap();
    assert_ne!(a.host_id(), b.host_id());
    assert_eq!(
        a.take_lease("t_1").unwrap(),
        Lease::Held {
            taken_from: None,
            was_active: false
        }
    );
    assert_eq!(
        b.take_lease("t_1").unwrap(),
        Lease::HeldBy(a.host_id().to_owned())
    );
    write(&a, "t_1", 1, true).unwrap();
    // A host without the lease writes nothing.
    let fenced = write(&b, "t_1", 2, false).unwrap_err();
    assert!(matches!(fenced, StoreError::LeaseLost(_)), "{fenced}");
    assert_eq!(b.last_event_seq("t_1").unwrap(), 1);
    // A free task's first write takes its lease.
    write(&b, "t_2", 1, false).unwrap();
    assert_eq!(
        a.take_lease("t_2").unwrap(),
        Lease::HeldBy(b.host_id().to_owned())
    );
    // `a` goes quiet (no renewal) while `b` renews: past the lease, `b` takes `a`'s task over,
    // learning that it was mid-turn, and `a` can no longer write it.
    std::thread::sleep(Duration::from_millis(600));
    b.renew_host().unwrap();
    std::thread::sleep(Duration::from_millis(600));
    b.renew_host().unwrap();
    assert_eq!(b.orphaned_tasks(10).unwrap(), vec!["t_1".to_owned()]);
    assert_eq!(
        b.take_lease("t_1").unwrap(),
        Lease::Held {
            taken_from: Some(a.host_id().to_owned()),
            was_active: true
        }
    );
    assert!(b.orphaned_tasks(10).unwrap().is_empty());
    let fenced = write(&a, "t_1", 2, false).unwrap_err();
    assert!(matches!(fenced, StoreError::LeaseLost(_)), "{fenced}");
    write(&b, "t_1", 2, false).unwrap();
    // A host whose own lease ran out takes nothing until it renews.
    let refused = a.take_lease("t_3").unwrap_err();
    assert!(matches!(refused, StoreError::LeaseLost(_)), "{refused}");
    a.renew_host().unwrap();
    assert!(matches!(a.take_lease("t_3").unwrap(), Lease::Held { .. }));
}

#[test]
fn queued_input_of_a_task_no_live_host_holds_is_an_orphan_and_a_clean_stop_hands_on_only_busy_tasks()
 {
    let pg = Postgres::start();
    let url = pg.new_database();
    let a = PgStore::open(&options(&url)).unwrap();
    let b = PgStore::open(&options(&url)).unwrap();
    a.queue_durably(None, &[("t_new", 1, b"{}")]).unwrap();
    assert_eq!(b.orphaned_tasks(10).unwrap(), vec!["t_new".to_owned()]);
    write(&a, "t_new", 1, false).unwrap();
    // Held by a live host: not an orphan, queued input or not.
    assert!(b.orphaned_tasks(10).unwrap().is_empty());
    write(&a, "t_busy", 1, true).unwrap();
    write(&a, "t_idle", 1, false).unwrap();
    a.end_host().unwrap();
    // At once: the busy task and the one with queued input pass on; the idle one is free.
    let mut orphans = b.orphaned_tasks(10).unwrap();
    orphans.sort();
    assert_eq!(orphans, vec!["t_busy".to_owned(), "t_new".to_owned()]);
    assert_eq!(
        b.take_lease("t_idle").unwrap(),
        Lease::Held {
            taken_from: None,
            was_active: false
        }
    );
}

#[test]
fn a_host_hears_the_writes_of_others_and_the_messages_sent_to_it() {
    let pg = Postgres::start();
    let url = pg.new_database();
    let a = PgStore::open(&options(&url)).unwrap();
    let b = PgStore::open(&options(&url)).unwrap();
    let (tx, rx) = mpsc::channel();
    let heard = std::sync::Mutex::new(tx);
    b.set_notice_hook(Box::new(move |notice| {
        let said = match notice {
            Notice::Written(task) => format!("written {task}"),
            Notice::Message(body) => format!("message {body}"),
            Notice::Queued(task) => format!("queued {task}"),
            Notice::Missed => "missed".to_owned(),
        };
        heard.lock().unwrap().send(said).unwrap();
    }));
    let (appended_tx, appended) = mpsc::channel();
    let appended_tx = std::sync::Mutex::new(appended_tx);
    b.set_append_hook(Box::new(move |task| {
        appended_tx.lock().unwrap().send(task.to_owned()).unwrap();
    }));
    write(&a, "t_1", 1, false).unwrap();
    let wait = Duration::from_secs(10);
    assert_eq!(rx.recv_timeout(wait).unwrap(), "written t_1");
    assert_eq!(appended.recv_timeout(wait).unwrap(), "t_1");
    // Its own writes are not news to a host; a message to another host is not for it.
    write(&b, "t_2", 1, false).unwrap();
    a.tell(a.host_id(), "not for b").unwrap();
    b.tell(b.host_id(), "kick t_2").unwrap();
    assert_eq!(rx.recv_timeout(wait).unwrap(), "message kick t_2");
    assert!(rx.recv_timeout(Duration::from_millis(300)).is_err());
}

/// Input queued for a task another host holds reaches that host by the queuing itself: a
/// host that goes down right after queuing, before it could tell the holder anything, leaves
/// no input the holder does not hear of. Input for a task the queuing host holds, or nobody
/// holds, is announced to nobody.
#[test]
fn input_queued_for_a_task_another_host_holds_is_announced_to_that_host_alone() {
    let pg = Postgres::start();
    let url = pg.new_database();
    let a = PgStore::open(&options(&url)).unwrap();
    let b = PgStore::open(&options(&url)).unwrap();
    let (rx_a, rx) = (queued_notices(&a), queued_notices(&b));
    write(&b, "t_b", 1, false).unwrap();
    write(&a, "t_a", 1, false).unwrap();
    let input: &[u8] = b"{}";
    let queued = a
        .queue_durably(
            None,
            &[("t_b", 1, input), ("t_a", 1, input), ("t_free", 1, input)],
        )
        .unwrap();
    assert!(
        matches!(&queued, Delivery::Queued { told, .. } if told == &["t_b"]),
        "{queued:?}"
    );
    let wait = Duration::from_secs(10);
    assert_eq!(rx.recv_timeout(wait).unwrap(), "t_b");
    let queued = b
        .queue_durably(Some(("d-1", i64::MAX)), &[("t_a", 2, input)])
        .unwrap();
    assert!(
        matches!(&queued, Delivery::Queued { told, .. } if told == &["t_a"]),
        "{queued:?}"
    );
    assert_eq!(rx_a.recv_timeout(wait).unwrap(), "t_a");
    assert!(
        rx.recv_timeout(Duration::from_millis(300)).is_err(),
        "b heard more"
    );
    assert!(
        rx_a.recv_timeout(Duration::from_millis(300)).is_err(),
        "a heard more"
    );
}

/// Input queued for a task whose holder lapsed is announced to nobody, and the queuing host
/// is not told that anyone heard of it: its own runner takes the task over.
#[test]
fn input_queued_for_a_task_whose_holder_lapsed_is_left_to_the_queuing_host() {
    let pg = Postgres::start();
    let url = pg.new_database();
    let lease = Duration::from_secs(1);
    let gone = PgStore::open(&options_leasing(&url, lease)).unwrap();
    let rx = queued_notices(&gone);
    write(&gone, "t_1", 1, false).unwrap();
    std::thread::sleep(lease + Duration::from_millis(300));
    let a = PgStore::open(&options(&url)).unwrap();
    let queued = a.queue_durably(None, &[("t_1", 1, b"{}")]).unwrap();
    // Nobody would run it on the word of a host that is not live: the queuing host's runner
    // takes the task over.
    assert!(
        matches!(&queued, Delivery::Queued { told, .. } if told.is_empty()),
        "{queued:?}"
    );
    assert!(
        rx.recv_timeout(Duration::from_millis(500)).is_err(),
        "a lapsed host was told"
    );
    assert!(matches!(a.take_lease("t_1"), Ok(Lease::Held { .. })));
}

/// The tasks `store` hears of as [`Notice::Queued`], as it hears them.
fn queued_notices(store: &PgStore) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    let tx = std::sync::Mutex::new(tx);
    store.set_notice_hook(Box::new(move |notice| {
        if let Notice::Queued(task) = notice {
            tx.lock().unwrap().send(task.to_owned()).unwrap();
        }
    }));
    rx
}

/// Every notice on the channel the hosts use, heard by a session of its own (its payload);
/// the runtime it runs on goes with it.
fn notices_on_the_channel(url: &str) -> (tokio::runtime::Runtime, mpsc::Receiver<String>) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (heard, notices) = mpsc::channel();
    let (ready, listening) = mpsc::channel();
    let url = url.to_owned();
    runtime.spawn(async move {
        let (client, mut connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .unwrap();
        let pump = tokio::spawn(async move {
            while let Some(Ok(message)) =
                std::future::poll_fn(|cx| connection.poll_message(cx)).await
            {
                if let tokio_postgres::AsyncMessage::Notification(n) = message {
                    let _ = heard.send(n.payload().to_owned());
                }
            }
        });
        client.batch_execute("LISTEN agentmesh").await.unwrap();
        ready.send(()).unwrap();
        let _ = pump.await;
        drop(client);
    });
    listening.recv_timeout(Duration::from_secs(30)).unwrap();
    (runtime, notices)
}

#[test]
fn a_write_is_announced_only_while_another_host_is_registered() {
    let pg = Postgres::start();
    let url = pg.new_database();
    let a = PgStore::open(&options(&url)).unwrap();
    let (_listening, notices) = notices_on_the_channel(&url);
    let quiet = Duration::from_millis(500);
    write(&a, "t_1", 1, false).unwrap();
    let heard = notices.recv_timeout(quiet);
    assert!(
        heard.is_err(),
        "a host alone announced its write: {heard:?}"
    );
    let b = PgStore::open(&options(&url)).unwrap();
    write(&a, "t_1", 2, false).unwrap();
    assert_eq!(
        notices.recv_timeout(Duration::from_secs(10)).unwrap(),
        format!("w {} t_1", a.host_id())
    );
    // The other host stops cleanly: this one is alone again.
    b.end_host().unwrap();
    write(&a, "t_1", 4, false).unwrap();
    let heard = notices.recv_timeout(quiet);
    assert!(
        heard.is_err(),
        "a host alone announced its write: {heard:?}"
    );
}

/// Hosts A and B on database `url` with a 1 s lease, once A took task `t`, wrote its first
/// event mid-turn and stalled past its lease, and B took the task over.
fn taken_over_from_a_lapsed_host(url: &str) -> (PgStore, PgStore, Duration) {
    let lease = Duration::from_secs(1);
    let short = options_leasing(url, lease);
    let a = PgStore::open(&short).unwrap();
    let b = PgStore::open(&short).unwrap();
    assert!(matches!(a.take_lease("t"), Ok(Lease::Held { .. })));
    write(&a, "t", 1, true).unwrap();
    std::thread::sleep(lease + Duration::from_millis(300));
    b.renew_host().unwrap();
    assert!(matches!(b.take_lease("t"), Ok(Lease::Held { .. })));
    (a, b, lease)
}

/// Lapsed host `a`'s next write of task `t`, whose log `ends` at that event, lands nowhere.
fn assert_refused_after(a: &PgStore, ends: u64, taken: &str) {
    let late = write(a, "t", ends + 1, false);
    assert!(
        matches!(late, Err(StoreError::LeaseLost(_))),
        "a lapsed host wrote into a task another host had {taken}: {late:?}"
    );
    assert_eq!(a.last_event_seq("t").unwrap(), ends);
}

#[test]
fn a_host_that_lapsed_cannot_write_a_task_taken_over_by_another_that_lapsed_too() {
    let pg = Postgres::start();
    let (a, b, lease) = taken_over_from_a_lapsed_host(&pg.new_database());
    // B starts a turn, then stalls as well.
    write(&b, "t", b.last_event_seq("t").unwrap() + 1, true).unwrap();
    let ends = b.last_event_seq("t").unwrap();
    std::thread::sleep(lease + Duration::from_millis(300));
    // A wakes, still lapsed: its turn's write must not land in B's turn.
    assert_refused_after(&a, ends, "taken over");
}

#[test]
fn a_host_that_lapsed_cannot_write_a_task_another_host_took_over_and_let_go() {
    let pg = Postgres::start();
    let (a, b, _) = taken_over_from_a_lapsed_host(&pg.new_database());
    // B runs a turn to its end and stops, which lets the idle task's lease go.
    write(&b, "t", b.last_event_seq("t").unwrap() + 1, false).unwrap();
    let ends = b.last_event_seq("t").unwrap();
    b.end_host().unwrap();
    // A wakes, still lapsed: a lease nobody holds is not its to take.
    assert_refused_after(&a, ends, "taken over and let go");
}

#[test]
fn a_host_registering_waits_for_a_write_that_looked_before_it_then_reads_it() {
    let pg = Postgres::start();
    let url = pg.new_database();
    let db = url.rsplit('/').next().unwrap();
    let a = PgStore::open(&options(&url)).unwrap();
    // A write held at its commit, after it looked for other hosts and found none: a deferred
    // trigger (this test's, not the schema's) waits there for a lock the test holds.
    pg.psql(
        db,
        "CREATE FUNCTION held_at_commit() RETURNS trigger LANGUAGE plpgsql AS \
         $$ BEGIN PERFORM pg_advisory_xact_lock(42); RETURN NULL; END $$; \
         CREATE CONSTRAINT TRIGGER held_at_commit AFTER INSERT OR UPDATE ON agentmesh_tasks \
         DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION held_at_commit()",
    );
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (holder, connection) = runtime
        .block_on(tokio_postgres::connect(&url, tokio_postgres::NoTls))
        .unwrap();
    runtime.spawn(connection);
    runtime
        .block_on(holder.query("SELECT pg_advisory_lock(42)", &[]))
        .unwrap();
    let held = || {
        pg.psql(
            db,
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = 42 \
             AND NOT granted",
        ) == "1"
    };
    std::thread::scope(|s| {
        let writing = s.spawn(|| write(&a, "t_1", 1, false));
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while !held() {
            assert!(
                std::time::Instant::now() < deadline,
                "the write never reached its commit"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        // Another host starts now: registering, it waits for the write that did not see it.
        let joining = s.spawn(|| PgStore::open(&options(&url)));
        std::thread::sleep(Duration::from_millis(1500));
        let early = joining.is_finished();
        runtime
            .block_on(holder.query("SELECT pg_advisory_unlock(42)", &[]))
            .unwrap();
        writing.join().unwrap().unwrap();
        let b = joining.join().unwrap().unwrap();
        assert!(
            !early,
            "a host registered while a write that did not announce itself to it was uncommitted"
        );
        // What it reads once registered holds that write.
        assert_eq!(b.last_event_seq("t_1").unwrap(), 1);
    });
}

#[test]
fn a_host_gone_for_a_lease_past_its_expiry_is_forgotten_and_told_so_when_it_is_back() {
    let pg = Postgres::start();
    let url = pg.new_database();
    let lease = Duration::from_secs(1);
    let short = options_leasing(&url, lease);
    let a = PgStore::open(&short).unwrap();
    let b = PgStore::open(&short).unwrap();
    let (told, b_heard) = mpsc::channel();
    b.set_notice_hook(Box::new(move |notice| {
        let _ = told.send(format!("{notice:?}"));
    }));
    let (_listening, notices) = notices_on_the_channel(&url);
    // `b` goes quiet, as a host that was killed does: no clean stop, no more renewals. Its
    // registration expires after a lease, and a lease later `a` forgets it.
    std::thread::sleep(2 * lease + Duration::from_millis(500));
    a.renew_host().unwrap();
    write(&a, "t_1", 1, false).unwrap();
    let heard = notices.recv_timeout(Duration::from_millis(500));
    assert!(
        heard.is_err(),
        "a write was announced to a host gone for two leases: {heard:?}"
    );
    // `b` was only stalled: back, it registers anew and learns that it may have missed
    // writes (it did: `a`'s above), so that it reads again what it keeps of other hosts' tasks.
    b.renew_host().unwrap();
    assert_eq!(
        b_heard.recv_timeout(Duration::from_secs(10)).unwrap(),
        "Missed"
    );
    write(&a, "t_1", 2, false).unwrap();
    assert_eq!(
        notices.recv_timeout(Duration::from_secs(10)).unwrap(),
        format!("w {} t_1", a.host_id())
    );
    assert_eq!(
        b_heard.recv_timeout(Duration::from_secs(10)).unwrap(),
        "Written(\"t_1\")"
    );
    // A renewal in time is no new registration.
    b.renew_host().unwrap();
    let heard = b_heard.recv_timeout(Duration::from_millis(500));
    assert!(heard.is_err(), "a renewal in time was told {heard:?}");
}

#[test]
fn events_stored_one_a_row_before_schema_4_read_back_and_the_log_goes_on() {
    let pg = Postgres::start();
    let url = pg.new_database();
    let db = url.rsplit('/').next().unwrap();
    let store = PgStore::open(&options(&url)).unwrap();
    // As schema 3 wrote them: a row an event, its body the event's JSON object.
    for event in events(1, 3) {
        let json = serde_json::to_string(&event).unwrap().replace('\'', "''");
        pg.psql(
            db,
            &format!(
                "INSERT INTO agentmesh_events (task_id, seq, body) \
                 VALUES ('t_old', {}, convert_to('{json}', 'UTF8'))",
                event.seq
            ),
        );
    }
    pg.psql(
        db,
        "INSERT INTO agentmesh_tasks (id, head, parts) VALUES ('t_old', convert_to('{}', 'UTF8'), 0)",
    );
    assert_eq!(store.last_event_seq("t_old").unwrap(), 3);
    write(&store, "t_old", 4, false).unwrap();
    let seqs = |from, to| -> Vec<u64> {
        let (log, _) = store.events_between("t_old", from, to).unwrap();
        log.iter().map(|e| e.seq).collect()
    };
    assert_eq!(seqs(1, u64::MAX), (1..=7).collect::<Vec<_>>());
    assert_eq!(seqs(2, 5), [2, 3, 4, 5]);
    assert_eq!(seqs(3, 3), [3]);
    assert_eq!(store.last_event_seq("t_old").unwrap(), 7);
}

#[test]
fn an_unreachable_database_is_an_error_naming_it_without_its_password() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("postgres://u:s3cret@127.0.0.1:{port}/x");
    let refused = PgStore::open(&options(&url)).unwrap_err().to_string();
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
        active: false,
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
    let store = PgStore::open(&options(&pg.new_database())).unwrap();
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
    let store = PgStore::open(&options(&pg.new_database())).unwrap();
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

/// An event of host `host`'s turn `turn`: `start` or `end`, numbered `seq`.
fn turn_event(host: usize, turn: u64, what: &str, seq: u64) -> agentmesh_model::event::Event {
    agentmesh_model::event::Event {
        seq,
        id: format!("{host}:{turn}:{what}"),
        timestamp: "2026-01-01T00:00:00.000Z".into(),
        source: agentmesh_model::event::EventSource::Environment,
        kind: agentmesh_model::event::EventKind::PauseEvent {},
    }
}

/// A small generator of pseudo-random numbers (xorshift), seeded per run and printed, so that
/// a failing run can be replayed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

#[test]
fn turns_of_one_task_never_overlap_across_hosts_that_stall_past_their_lease() {
    let pg = Postgres::start();
    let url = pg.new_database();
    let lease = Duration::from_secs(1);
    let seed = std::env::var("AGENTMESH_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        });
    eprintln!("seed {seed} (AGENTMESH_TEST_SEED replays it)");
    let short = options_leasing(&url, lease);
    // Each host runs turns of task `t` while it holds its lease: a turn writes `start`, works,
    // then writes `end`. Now and then a host stalls past its lease without renewing it (a
    // long pause), so another takes the task over meanwhile.
    std::thread::scope(|s| {
        for host in 0..3usize {
            let short = short.clone();
            s.spawn(move || {
                let store = PgStore::open(&short).unwrap();
                let mut rng = Rng(seed.wrapping_mul(host as u64 + 1) | 1);
                let deadline = std::time::Instant::now() + Duration::from_secs(8);
                let mut renewed = std::time::Instant::now();
                let mut turn = 0;
                while std::time::Instant::now() < deadline {
                    if renewed.elapsed() > lease / 4 {
                        store.renew_host().unwrap();
                        renewed = std::time::Instant::now();
                    }
                    if !matches!(store.take_lease("t"), Ok(Lease::Held { .. })) {
                        std::thread::sleep(Duration::from_millis(rng.below(20)));
                        continue;
                    }
                    turn += 1;
                    let end = store.last_event_seq("t").unwrap();
                    let write = |what, seq| {
                        store.write_buffered(
                            "t",
                            RawWrite {
                                head: b"{}",
                                parts: 0,
                                new_part: None,
                                active: what == "start",
                            },
                            &[turn_event(host, turn, what, seq)],
                            None,
                        )
                    };
                    if write("start", end + 1).is_err() {
                        continue;
                    }
                    let work = if rng.below(8) == 0 {
                        lease + Duration::from_millis(500)
                    } else {
                        Duration::from_millis(rng.below(15))
                    };
                    std::thread::sleep(work);
                    // Appended where the log ends now, so that only the lease (not the log's
                    // numbering) keeps a stalled host out: fenced, writing nothing, when the
                    // task was taken over meanwhile.
                    if let Ok(now_ends) = store.last_event_seq("t") {
                        let _ = write("end", now_ends + 1);
                    }
                }
            });
        }
    });
    let reader = PgStore::open(&options(&url)).unwrap();
    let last = reader.last_event_seq("t").unwrap();
    let (events, _) = reader.events_between("t", 1, last).unwrap();
    let mut ended = 0;
    let mut cut_short = 0;
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e.seq, i as u64 + 1, "the log has a gap");
        if let Some(turn) = e.id.strip_suffix(":end") {
            // A turn's end follows its own start: no other host's turn came between.
            let start = &events[i - 1].id;
            assert_eq!(
                start,
                &format!("{turn}:start"),
                "turns overlapped (seed {seed})"
            );
            ended += 1;
        } else if events
            .get(i + 1)
            .is_none_or(|next| !next.id.ends_with(":end"))
        {
            cut_short += 1;
        }
    }
    let hosts: std::collections::BTreeSet<&str> = events
        .iter()
        .filter_map(|e| e.id.split(':').next())
        .collect();
    eprintln!(
        "{} events: {ended} turns ended, {cut_short} cut short by a takeover, on hosts {hosts:?}",
        events.len()
    );
    assert!(
        ended > 10,
        "too few turns ran to say anything (seed {seed})"
    );
    assert!(
        hosts.len() > 1,
        "the task never changed hosts: no takeover was tested (seed {seed})"
    );
}
