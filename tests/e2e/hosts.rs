//! Several hosts on one PostgreSQL database (a real server started for each test): any host
//! takes any request for any task, a task's turns run on the host holding its lease, live
//! streams show what other hosts wrote, and a host that dies loses its tasks to the others,
//! which go on with them.

use std::collections::{BTreeMap, BTreeSet};
use std::io::BufRead;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentmesh_testkit::browser::Browser;
use agentmesh_testkit::fixtures::{
    API_TOKEN_ENV, API_TOKENS, PAGER_HOST, dirs, echo_tool, pager_tool, reviewed_agent,
    scripted_agent,
};
use agentmesh_testkit::postgres::Postgres;
use agentmesh_testkit::server::{Server, wait_for};
use serde_json::{Value, json};

use crate::AGENTMESH;
use crate::durability::{self, deliver};
use crate::util::{Env, run_in};

/// The lease the hosts of these tests keep their tasks by.
const LEASE: Duration = Duration::from_secs(2);

/// Agents `dev/helper` (answers `answer {n}` to its n-th input) and `dev/careful` (calls
/// `echo` once `user:ops` approves it in a review, then answers `Echoed.`), on the database of
/// `DATABASE_URL` with a lease of [`LEASE`], and the files `more`.
fn config_with(
    more: &[(&str, &str)],
) -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
    config_of_host("kind: agentmesh/v1/host\n", more)
}

/// [`config_with`], its host manifest `host` (`kind` and any more settings) with the store's.
fn config_of_host(
    host: &str,
    more: &[(&str, &str)],
) -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
    let script: String = (1..=6).map(|n| format!("  - text: answer {n}\n")).collect();
    let host = format!(
        "{host}store: {{backend: postgres, url: {{env: DATABASE_URL}}, pool: 4, lease: {}s}}\n",
        LEASE.as_secs()
    );
    let helper = scripted_agent("dev/helper", "");
    let script = format!("responses:\n{script}");
    let careful = format!(
        "{}---\n{}",
        reviewed_agent("dev/careful", "careful-script.yaml"),
        echo_tool("dev")
    );
    let mut files = vec![
        ("host.yaml", host.as_str()),
        ("helper.yaml", &helper),
        ("script.yaml", &script),
        ("careful.yaml", &careful),
        (
            "careful-script.yaml",
            "responses:\n  - tool_calls: [{name: echo, arguments: {text: hi}}]\n  - text: Echoed.\n",
        ),
    ];
    files.extend_from_slice(more);
    dirs(&files)
}

/// A schedule of `dev/helper` ticking every second.
const TICKS: &str = "kind: commonagents.info/v1/schedule
namespace: dev
name: tick
agent: helper
owner: user:ops
interval: 1s
inputs:
  message: Tick.
";

/// Task `task` as `server` reads it once `check` holds (at most `limit`).
fn task_once(
    server: &Server,
    task: &str,
    limit: Duration,
    check: impl Fn(&Value) -> bool,
) -> Value {
    let mut last = json!(null);
    wait_for(limit, || {
        last = server
            .request("GET", &format!("/v1/tasks/{task}"))
            .send()
            .json();
        check(&last).then(|| last.clone())
    })
    .unwrap_or_else(|| panic!("task {task} never got there on {}: {last}", server.addr))
}

/// Whether task object `t` is idle with `n` answers.
fn answered(n: usize) -> impl Fn(&Value) -> bool {
    move |t| t["status"] == "idle" && t["output"].as_array().is_some_and(|o| o.len() == n)
}

/// The owners of task leases in the database.
fn owner(pg: &Postgres, url: &str, task: &str) -> String {
    pg.psql(
        url.rsplit('/').next().unwrap(),
        &format!("SELECT owner FROM agentmesh_leases WHERE task_id = '{task}'"),
    )
}

/// The texts of the agent's messages in a live stream, read until `n` of them came.
fn streamed_answers(sse: &mut impl BufRead, n: usize) -> Vec<String> {
    let mut answers = Vec::new();
    let mut line = String::new();
    while answers.len() < n {
        line.clear();
        assert!(sse.read_line(&mut line).unwrap() > 0, "the stream ended");
        let Some(data) = line.strip_prefix("data: ") else {
            continue;
        };
        let event: Value = serde_json::from_str(data.trim()).unwrap();
        if event["kind"] == "MessageEvent" && event["source"] == "agent" {
            answers.push(event["content"][0]["text"].as_str().unwrap().to_owned());
        }
    }
    answers
}

/// A database, the config of [`config_with`] on it, and two hosts serving it, each with a data dir
/// of its own.
struct TwoHosts {
    pg: Postgres,
    url: String,
    root: tempfile::TempDir,
    dir: std::path::PathBuf,
    a: Server,
    b: Server,
}

fn two_hosts() -> TwoHosts {
    two_hosts_with(&[])
}

/// [`two_hosts`] with more files in the config dir.
fn two_hosts_with(more: &[(&str, &str)]) -> TwoHosts {
    let pg = Postgres::start();
    let url = pg.new_database();
    let (root, dir, data) = config_with(more);
    let env = [("DATABASE_URL", url.as_str())];
    let a = Server::start(AGENTMESH, &dir, &data, &env);
    let b = Server::start(AGENTMESH, &dir, &root.path().join("b"), &env);
    TwoHosts {
        pg,
        url,
        root,
        dir,
        a,
        b,
    }
}

#[test]
fn any_host_takes_any_request_and_the_holder_runs_the_turns() {
    let TwoHosts {
        pg,
        url,
        root,
        dir,
        a,
        b,
    } = two_hosts();
    let env = [("DATABASE_URL", url.as_str())];

    let task = a.create_task(&json!({
        "agent": "dev/helper",
        "input": {"message": [{"mimeType": "text/plain", "text": "first"}]}
    }));
    task_once(&a, &task, Duration::from_secs(30), answered(1));
    let holder = owner(&pg, &url, &task);
    assert!(!holder.is_empty(), "no lease for {task}");

    // Input given to B runs on A, which holds the task; B's live stream shows what A wrote.
    let (head, mut sse) = b.open_sse(&task);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    b.send_input(&task, "second");
    task_once(&b, &task, Duration::from_secs(30), answered(2));
    assert_eq!(streamed_answers(&mut sse, 2), ["answer 1", "answer 2"]);
    assert_eq!(owner(&pg, &url, &task), holder);
    assert_eq!(b.user_texts(&task), [json!("first"), json!("second")]);

    // A review requested on A is decided through B.
    let careful = a.create_task(&json!({"agent": "dev/careful", "input": {"message": "echo hi"}}));
    let review = b.wait_for_event(&careful, "ReviewRequestEvent")["review_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let listed = b.request("GET", "/v1/reviews").send().json();
    assert!(
        listed["reviews"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["review_id"] == review.as_str()),
        "B does not list A's review: {listed}"
    );
    let r = b
        .request("POST", &format!("/v1/tasks/{careful}/reviews/{review}"))
        .json(&json!({"approve": true}))
        .send();
    assert_eq!(r.status, 200, "{}", r.text());
    let t = task_once(&a, &careful, Duration::from_secs(30), answered(1));
    assert_eq!(t["output"][0]["message"][0]["text"], "Echoed.", "{t}");

    // An interrupt and a deletion through B are done by A.
    let r = b
        .request("POST", &format!("/v1/tasks/{task}/interrupt"))
        .send();
    assert_eq!(r.status, 202, "{}", r.text());
    a.wait_for_event(&task, "PauseEvent");
    let r = b.request("DELETE", &format!("/v1/tasks/{task}")).send();
    assert!(r.status < 300, "{} {}", r.status, r.text());
    task_once(&a, &task, Duration::from_secs(30), |t| {
        t["status"] == "terminated"
    });

    // `run` on the database is a host too: a task another live host holds is refused.
    let live = a.create_task(&json!({"agent": "dev/helper", "input": {"message": "hi"}}));
    task_once(&a, &live, Duration::from_secs(30), answered(1));
    let (code, _, stderr) = run_in(
        &Env {
            vars: &env,
            ..Env::default()
        },
        &dir,
        "dev/helper",
        "more",
        &root.path().join("c"),
        &["--task", &live],
    );
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("runs on host"), "{stderr}");
    // B's live stream, still open, does not hold its drain.
    assert_eq!(a.terminate(), Some(0));
    assert_eq!(b.terminate(), Some(0));
    drop(sse);
}

#[test]
fn input_given_to_one_host_for_a_task_another_holds_wakes_the_holder_once() {
    let TwoHosts { pg, url, a, b, .. } = two_hosts();
    let task = a.create_task(&json!({"agent": "dev/helper", "input": {"message": "first"}}));
    task_once(&a, &task, Duration::from_secs(30), answered(1));
    let holder = owner(&pg, &url, &task);

    let listening = pg.listen(url.rsplit('/').next().unwrap(), "agentmesh", 3);
    b.send_input(&task, "second");
    task_once(&b, &task, Duration::from_secs(30), answered(2));
    let heard = listening.heard();
    // The queuing tells the holder; B's runner does not wake to tell it again.
    let told = format!("q {holder} {task}");
    assert_eq!(
        heard.iter().filter(|p| **p == told).count(),
        1,
        "heard: {heard:?}"
    );
    assert!(
        !heard.iter().any(|p| p.ends_with(&format!("kick {task}"))),
        "the holder was told twice: {heard:?}"
    );
    assert_eq!(owner(&pg, &url, &task), holder);
    assert_eq!(a.user_texts(&task), [json!("first"), json!("second")]);
}

#[test]
fn a_review_decided_through_another_host_is_still_only_the_reviewers() {
    let pg = Postgres::start();
    let url = pg.new_database();
    let (root, dir, data) = config_of_host(API_TOKENS, &[]);
    let mut env = vec![("DATABASE_URL", url.as_str())];
    env.extend(API_TOKEN_ENV);
    let a = Server::start(AGENTMESH, &dir, &data, &env);
    let b = Server::start(AGENTMESH, &dir, &root.path().join("b"), &env);
    // Alice's task waits on A for `user:ops` to approve its call.
    let careful = a.create_task_as(
        "alice-token",
        &json!({"agent": "dev/careful", "input": {"message": "echo hi"}}),
    );
    let events = || {
        a.request("GET", &format!("/v1/tasks/{careful}/events"))
            .header("Authorization", "Bearer admin-token")
            .send()
            .json()["events"]
            .as_array()
            .unwrap()
            .clone()
    };
    let review = wait_for(Duration::from_secs(30), || {
        events()
            .into_iter()
            .find(|e| e["kind"] == "ReviewRequestEvent")
    })
    .expect("no review requested")["review_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let holder = owner(&pg, &url, &careful);
    // Through B, neither another user nor the task's owner may decide it, and nothing of it
    // reaches the task; the reviewer may.
    let decide = |token: &str, body: Value| {
        b.request("POST", &format!("/v1/tasks/{careful}/reviews/{review}"))
            .header("Authorization", &format!("Bearer {token}"))
            .json(&body)
            .send()
    };
    for token in ["alice-token", "audit-token"] {
        let r = decide(token, json!({"approve": true}));
        assert_eq!(r.status, 403, "{token}: {}", r.text());
        assert_eq!(r.json()["error"]["code"], "forbidden", "{token}");
    }
    // Bob may not see Alice's task at all.
    let r = decide("bob-token", json!({"approve": true}));
    assert_eq!(r.status, 404, "{}", r.text());
    // A name in the body is never taken for the caller.
    let r = decide("alice-token", json!({"approve": true, "user": "user:ops"}));
    assert_eq!(r.status, 403, "{}", r.text());
    let log = events();
    assert!(
        !log.iter().any(|e| e["kind"] == "ReviewDecisionEvent"),
        "a refused decision reached the log: {log:?}"
    );
    assert_eq!(owner(&pg, &url, &careful), holder, "the task moved");
    let r = decide("ops-token", json!({"approve": true}));
    assert_eq!(r.status, 200, "{}", r.text());
    let t = wait_for(Duration::from_secs(30), || {
        let t = a
            .request("GET", &format!("/v1/tasks/{careful}"))
            .header("Authorization", "Bearer admin-token")
            .send()
            .json();
        answered(1)(&t).then_some(t)
    })
    .expect("the approved task never went on");
    assert_eq!(t["output"][0]["message"][0]["text"], "Echoed.", "{t}");
    assert_eq!(a.terminate(), Some(0));
    assert_eq!(b.terminate(), Some(0));
}

#[test]
fn a_host_with_a_task_waiting_in_a_review_stops_at_once_and_another_takes_the_review() {
    let TwoHosts {
        pg: _pg,
        root: _root,
        a,
        b,
        ..
    } = two_hosts();
    let careful = a.create_task(&json!({"agent": "dev/careful", "input": {"message": "echo hi"}}));
    let review = a.wait_for_event(&careful, "ReviewRequestEvent")["review_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let started = Instant::now();
    let mut a = a;
    let code = a.stop_within(Duration::from_secs(10));
    assert_eq!(
        code,
        Some(0),
        "host A did not stop within {:?}",
        started.elapsed()
    );
    approve_on(&b, &careful, &review, LEASE + Duration::from_secs(10));
    assert_eq!(b.terminate(), Some(0));
}

/// Approves review `review` of task `careful` through `server` as soon as it may (within
/// `limit`: another host may have to take the review over first), and waits for the task to
/// go on to its answer.
fn approve_on(server: &Server, careful: &str, review: &str, limit: Duration) {
    let decided = wait_for(limit, || {
        let r = server
            .request("POST", &format!("/v1/tasks/{careful}/reviews/{review}"))
            .json(&json!({"approve": true}))
            .send();
        (r.status == 200).then_some(())
    });
    assert!(
        decided.is_some(),
        "{} never took the review over",
        server.addr
    );
    let t = task_once(server, careful, Duration::from_secs(30), answered(1));
    assert_eq!(t["output"][0]["message"][0]["text"], "Echoed.", "{t}");
}

#[test]
fn a_killed_hosts_tasks_go_on_on_another_host_soon_after_its_lease_expires() {
    let TwoHosts {
        pg,
        url,
        root: _root,
        a,
        b,
        ..
    } = two_hosts();
    let plain = a.create_task(&json!({"agent": "dev/helper", "input": {"message": "first"}}));
    task_once(&a, &plain, Duration::from_secs(30), answered(1));
    let careful = a.create_task(&json!({"agent": "dev/careful", "input": {"message": "echo hi"}}));
    let review = a.wait_for_event(&careful, "ReviewRequestEvent")["review_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let holder = owner(&pg, &url, &plain);

    a.kill();
    let killed = Instant::now();
    // Input for the dead host's task, acknowledged by B before it knows A is dead.
    b.send_input(&plain, "second");
    task_once(&b, &plain, LEASE + Duration::from_secs(15), answered(2));
    let took = killed.elapsed();
    assert_ne!(owner(&pg, &url, &plain), holder);
    // Within 10 s of the lease's expiry (a sweep every 2 s, and the turn).
    assert!(
        took < LEASE + Duration::from_secs(10),
        "taken over after {took:?}"
    );

    // The review A waited in is B's to wait in now, and deciding it goes on.
    let taken = wait_for(LEASE + Duration::from_secs(10), || {
        let events = b
            .request("GET", &format!("/v1/tasks/{careful}/events"))
            .send()
            .json();
        events["events"]
            .as_array()?
            .iter()
            .any(|e| {
                e["value"]["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("another took it over"))
            })
            .then_some(())
    });
    assert!(taken.is_some(), "B did not take the review over");
    approve_on(&b, &careful, &review, Duration::from_secs(15));
    let events = b
        .request("GET", &format!("/v1/tasks/{careful}/events"))
        .send()
        .json();
    let restarts = events["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| {
            e["value"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("another took it over"))
        })
        .count();
    assert_eq!(restarts, 1, "{events}");
    assert_eq!(b.terminate(), Some(0));
}

#[test]
fn a_schedule_fires_once_per_tick_across_hosts_and_goes_on_when_one_dies() {
    let Ticking {
        pg,
        db,
        a,
        b,
        _root,
    } = ticking_hosts();
    // Tasks, and ticks claimed, read together.
    let tasks_and_claims = || -> (i64, i64) {
        let both = pg.psql(
            &db,
            "SELECT (SELECT count(*) FROM agentmesh_tasks) || ',' || (SELECT count(*) FROM \
             agentmesh_deliveries WHERE id LIKE 'tick:dev/tick:%')",
        );
        let (tasks, claims) = both.split_once(',').unwrap();
        (tasks.parse().unwrap(), claims.parse().unwrap())
    };
    // Every claimed tick makes one task, whichever host fires it: two hosts arming the same
    // schedule do not fire it twice. A tick being fired has its claim and not yet its task
    // (for a moment; or, the one the killed host claimed in its last moment, until its lease
    // has passed and another host took it over).
    let settled = || {
        wait_for(LEASE + Duration::from_secs(5), || {
            let (tasks, claims) = tasks_and_claims();
            (claims == tasks).then_some((tasks, claims))
        })
    };
    std::thread::sleep(Duration::from_secs(4));
    a.kill();
    std::thread::sleep(LEASE + Duration::from_secs(2));
    let (before, _) = settled().expect("more tasks than claimed ticks");
    std::thread::sleep(Duration::from_secs(3));
    let (tasks, claims) = settled().expect("more tasks than claimed ticks, or a tick lost");
    assert!((9..=13).contains(&claims), "{claims} ticks in ~11 s");
    assert!(
        tasks >= before + 2,
        "the schedule stopped with host A: {before} → {tasks}"
    );
    let ticks: Vec<i64> = pg
        .psql(
            &db,
            "SELECT string_agg(split_part(id, ':', 3), ',' ORDER BY id) FROM agentmesh_deliveries \
             WHERE id LIKE 'tick:dev/tick:%'",
        )
        .split(',')
        .map(|t| t.parse().unwrap())
        .collect();
    let mut sorted = ticks.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), ticks.len(), "{ticks:?}");
    assert!(sorted.windows(2).all(|w| w[1] - w[0] == 1000), "{sorted:?}");
    assert_eq!(b.terminate(), Some(0));
}

/// Two hosts ticking schedule `dev/tick` every second ([`TICKS`]), and their database's name.
struct Ticking {
    pg: Postgres,
    db: String,
    a: Server,
    b: Server,
    /// Holds the config dir.
    _root: tempfile::TempDir,
}

fn ticking_hosts() -> Ticking {
    let TwoHosts {
        pg,
        url,
        root,
        a,
        b,
        ..
    } = two_hosts_with(&[("schedule.yaml", TICKS)]);
    let db = url.rsplit('/').next().unwrap().to_owned();
    Ticking {
        pg,
        db,
        a,
        b,
        _root: root,
    }
}

/// The ticks of schedule `dev/tick` claimed in database `db`, in order (epoch ms).
fn claimed_ticks(pg: &Postgres, db: &str) -> Vec<i64> {
    pg.psql(
        db,
        "SELECT coalesce(string_agg(split_part(id, ':', 3), ' ' ORDER BY id), '') \
         FROM agentmesh_deliveries WHERE id LIKE 'tick:dev/tick:%'",
    )
    .split_whitespace()
    .map(|t| t.parse().unwrap())
    .collect()
}

#[test]
fn a_schedule_goes_on_after_the_database_failed_its_ticks() {
    let Ticking {
        pg,
        db,
        a,
        b,
        _root,
    } = ticking_hosts();
    wait_for(Duration::from_secs(10), || {
        claimed_ticks(&pg, &db).first().copied()
    })
    .expect("the schedule fired");
    // Where the hosts record what their schedules fired is gone for a while: recording the
    // ticks due then fails on both hosts, and those ticks are not fired.
    pg.psql(
        &db,
        "ALTER TABLE agentmesh_state RENAME TO agentmesh_state_away",
    );
    std::thread::sleep(Duration::from_millis(2_500));
    pg.psql(
        &db,
        "ALTER TABLE agentmesh_state_away RENAME TO agentmesh_state",
    );
    let back = chrono::Utc::now().timestamp_millis();
    wait_for(Duration::from_secs(10), || {
        let ticks = claimed_ticks(&pg, &db);
        ticks
            .last()
            .is_some_and(|&last| last >= back + 2_000)
            .then_some(())
    })
    .expect("the schedule stopped when recording its ticks failed");
    assert_eq!(a.terminate(), Some(0));
    assert_eq!(b.terminate(), Some(0));
}

#[test]
fn hosts_that_stall_past_a_tick_fire_it_when_they_run_again() {
    let Ticking {
        pg,
        db,
        a,
        b,
        _root,
    } = ticking_hosts();
    let ticks = || claimed_ticks(&pg, &db);
    let now = || chrono::Utc::now().timestamp_millis();
    let sleep_until = |at: i64| {
        std::thread::sleep(Duration::from_millis(
            u64::try_from((at - now()).max(0)).unwrap(),
        ));
    };
    // Freeze both hosts (a machine stalled) from just after one tick was fired to just after
    // the second tick after it came due: on waking they are behind by one tick and a bit.
    let first =
        wait_for(Duration::from_secs(10), || ticks().first().copied()).expect("the schedule fired");
    let mut paused = None;
    for _ in 0..5 {
        let due = first + ((now() - first) / 1_000 + 1) * 1_000;
        let fired = wait_for(Duration::from_secs(5), || {
            ticks().contains(&due).then_some(())
        });
        // Fired late (this machine stalled by itself): try the next tick.
        if fired.is_some() && now() < due + 800 {
            a.pause();
            b.pause();
            paused = Some(due);
            break;
        }
    }
    let due = paused.expect("no tick was fired within 0.8 s of its time in 5 tries");
    sleep_until(due + 2_100);
    a.resume();
    b.resume();
    let ticks = wait_for(Duration::from_secs(10), || {
        let ticks = ticks();
        (ticks.last().is_some_and(|&last| last >= due + 3_000)).then_some(ticks)
    })
    .expect("the schedule went on after the stall");
    let since: Vec<i64> = ticks.iter().map(|t| t - due).collect();
    assert!(
        ticks.windows(2).all(|w| w[1] - w[0] == 1_000),
        "a tick was lost in the stall (or claimed twice): ticks at {since:?} ms from the last \
         before it"
    );
    assert_eq!(a.terminate(), Some(0));
    assert_eq!(b.terminate(), Some(0));
}

#[test]
fn a_tick_claimed_by_a_host_that_dies_before_its_task_is_written_still_fires() {
    let pg = Postgres::start();
    let url = pg.new_database();
    let db = url.rsplit('/').next().unwrap().to_owned();
    let (root, dir, data) = config_with(&[("schedule.yaml", TICKS)]);
    // B first: it applies the schema.
    let b = Server::start(
        AGENTMESH,
        &dir,
        &root.path().join("b"),
        &[("DATABASE_URL", &url)],
    );
    // Host A's sessions (and only its) stall at their first write of a task record: A dies in
    // the middle of firing the first tick it claims, before that tick's task is written.
    pg.psql(
        &db,
        "CREATE FUNCTION stall() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
           IF current_setting('agentmesh.stall', true) = 'on' THEN PERFORM pg_sleep(600); END IF; \
           RETURN NEW; END $$; \
         CREATE TRIGGER stall BEFORE INSERT ON agentmesh_tasks \
           FOR EACH ROW EXECUTE FUNCTION stall();",
    );
    let stalling = format!("{url}?options=-c%20agentmesh.stall%3Don");
    let a = Server::start(AGENTMESH, &dir, &data, &[("DATABASE_URL", &stalling)]);
    let stalled = "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'PgSleep'";
    wait_for(Duration::from_secs(30), || {
        (pg.psql(&db, stalled) == "1").then_some(())
    })
    .expect("host A never claimed a tick");
    a.kill();
    // Its connections go with it.
    pg.psql(
        &db,
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE wait_event = 'PgSleep'",
    );
    // Once A's lease has passed, every claimed tick has exactly one task, A's last one
    // included, and every task took its tick's input.
    let counts = "SELECT (SELECT count(*) FROM agentmesh_deliveries WHERE id LIKE 'tick:%') || \
                  ',' || (SELECT count(*) FROM agentmesh_tasks) || ',' || \
                  (SELECT count(*) FROM agentmesh_queue)";
    let mut last = String::new();
    wait_for(LEASE + Duration::from_secs(8), || {
        last = pg.psql(&db, counts);
        let n: Vec<&str> = last.split(',').collect();
        (n[0] == n[1] && n[2] == "0").then_some(())
    })
    .unwrap_or_else(|| panic!("claimed ticks, tasks, queued inputs: {last}"));
    let untold = pg.psql(
        &db,
        "SELECT count(*) FROM agentmesh_tasks t WHERE NOT EXISTS (SELECT 1 FROM agentmesh_events e \
           WHERE e.task_id = t.id AND convert_from(e.body, 'UTF8') LIKE '%Tick.%')",
    );
    assert_eq!(untold, "0", "tasks that never took their tick's message");
    assert_eq!(b.terminate(), Some(0));
}

/// Sends signed alerts from `threads` threads, each round-robin over the hosts at `addrs`
/// whose index is in `live`, until `stop`; returns what each acknowledged delivery's answer
/// said, and every delivery id sent.
struct Load {
    acked: Arc<Mutex<BTreeMap<String, String>>>,
    sent: Arc<Mutex<BTreeSet<String>>>,
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Load {
    fn start(addrs: &[SocketAddr], threads: usize) -> Load {
        let acked = Arc::new(Mutex::new(BTreeMap::new()));
        let sent = Arc::new(Mutex::new(BTreeSet::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..threads)
            .map(|t| {
                let (acked, sent, stop) =
                    (Arc::clone(&acked), Arc::clone(&sent), Arc::clone(&stop));
                let mut addrs = addrs.to_vec();
                std::thread::spawn(move || {
                    for n in 0.. {
                        if stop.load(Ordering::SeqCst) || addrs.is_empty() {
                            return;
                        }
                        let id = format!("d-{t}-{n}");
                        let at = (t + n) % addrs.len();
                        sent.lock().unwrap().insert(id.clone());
                        match deliver(addrs[at], &id) {
                            Some((status, said)) if (200..300).contains(&status) => {
                                acked.lock().unwrap().insert(id, said);
                            }
                            Some(_) => {}
                            // That host is gone: this delivery's fate is unknown; the others
                            // take the rest.
                            None => {
                                addrs.remove(at);
                            }
                        }
                    }
                })
            })
            .collect();
        Load {
            acked,
            sent,
            stop,
            threads,
        }
    }

    fn acked(&self) -> usize {
        self.acked.lock().unwrap().len()
    }

    fn stop(self) -> (BTreeMap<String, String>, BTreeSet<String>) {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.threads {
            t.join().unwrap();
        }
        let acked = self.acked.lock().unwrap().clone();
        let sent = self.sent.lock().unwrap().clone();
        (acked, sent)
    }
}

/// A new task of `ops/oncall` created through `server` (a host of database `url`), without
/// input: its id and the host holding it.
fn oncall_task(server: &Server, pg: &Postgres, url: &str) -> (String, String) {
    let task = durability::oncall_task(server);
    let holder = owner(pg, url, &task);
    assert!(!holder.is_empty(), "no lease for {task}");
    (task, holder)
}

#[test]
fn three_hosts_under_load_lose_nothing_acknowledged_when_one_is_killed() {
    let pg = Postgres::start();
    let url = pg.new_database();
    let db = url.rsplit('/').next().unwrap().to_owned();
    let (root, dir, _) = durability::config(&format!(
        "store: {{backend: postgres, url: {{env: DATABASE_URL}}, pool: 4, lease: {}s}}\n",
        LEASE.as_secs()
    ));
    std::fs::write(
        dir.join("schedule.yaml"),
        "kind: commonagents.info/v1/schedule
namespace: ops
name: tick
agent: oncall
owner: user:ops
interval: 1s
inputs:
  message: Tick.
",
    )
    .unwrap();
    let env = [
        ("PAGER_SECRET", durability::SECRET),
        ("DATABASE_URL", url.as_str()),
    ];
    let mut hosts: Vec<Server> = (0..3)
        .map(|n| {
            Server::start(
                AGENTMESH,
                &dir,
                &root.path().join(format!("data-{n}")),
                &env,
            )
        })
        .collect();
    let (task, holder) = oncall_task(&hosts[0], &pg, &url);

    // The other hosts route to the new task once they have heard of it (within a second, the
    // README says): until then its events go to the tasks they know (the schedule's). Each
    // host gets deliveries until one reaches the task's log, before the load starts.
    let addrs: Vec<SocketAddr> = hosts.iter().map(|h| h.addr).collect();
    let mut probes: Vec<String> = Vec::new();
    for (i, addr) in addrs.iter().enumerate() {
        let routed = wait_for(Duration::from_secs(20), || {
            let id = format!("probe-{i}-{}", probes.len());
            probes.push(id.clone());
            deliver(*addr, &id)?;
            wait_for(Duration::from_secs(2), || {
                let log = hosts[0]
                    .request("GET", &format!("/v1/tasks/{task}/events"))
                    .send()
                    .text();
                log.contains(&format!("\"{id}\"")).then_some(())
            })
        });
        assert!(routed.is_some(), "host {i} never routed to the new task");
    }
    let load = Load::start(&addrs, 6);
    wait_for(Duration::from_secs(60), || {
        (load.acked() >= 150).then_some(())
    })
    .expect("the hosts acknowledged deliveries");
    // Kill the host that holds the task, in the middle of the load.
    hosts.remove(0).kill();
    let killed_ms = chrono::Utc::now().timestamp_millis();
    let killed_at = load.acked();
    wait_for(Duration::from_secs(60), || {
        (load.acked() >= killed_at + 150).then_some(())
    })
    .expect("the other hosts acknowledged deliveries after the kill");
    let (acked, mut sent) = load.stop();
    // Every host routed to the task before the load: each delivery it acknowledged, it queued.
    let not_queued: Vec<_> = acked
        .iter()
        .filter(|(_, said)| *said != "accepted")
        .collect();
    assert!(
        not_queued.is_empty(),
        "acknowledged, not queued: {not_queued:?}"
    );
    sent.extend(probes);

    let settled = wait_for(Duration::from_secs(120), || {
        let t = hosts[0]
            .request("GET", &format!("/v1/tasks/{task}"))
            .send()
            .json();
        (t["queue_depth"] == 0 && t["status"] == "idle").then_some(t)
    });
    assert!(
        settled.is_some(),
        "the task never went on after its host died"
    );
    assert_ne!(
        owner(&pg, &url, &task),
        holder,
        "the task was not taken over"
    );
    let events = hosts[1]
        .request("GET", &format!("/v1/tasks/{task}/events"))
        .send()
        .json();
    let events = events["events"].as_array().unwrap();
    // One log, written by one host at a time: numbered without a gap or a repeat.
    assert!(
        events.iter().enumerate().all(|(i, e)| e["seq"] == i + 1),
        "the log is not one sequence"
    );
    let mut processed: BTreeMap<String, usize> = BTreeMap::new();
    for e in events {
        if e["kind"] == "MessageEvent" && e["metadata"]["trigger"]["source"] == "webhook" {
            let id = e["metadata"]["trigger"]["delivery_id"].as_str().unwrap();
            *processed.entry(id.to_owned()).or_default() += 1;
        }
    }
    let twice: Vec<_> = processed.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "processed more than once: {twice:?}");
    let lost: Vec<_> = acked
        .keys()
        .filter(|id| !processed.contains_key(*id))
        .collect();
    assert!(lost.is_empty(), "acknowledged but lost: {lost:?}");
    assert!(processed.keys().all(|id| sent.contains(id)));
    eprintln!(
        "sent {}, acknowledged {} ({killed_at} before the kill), processed {}",
        sent.len(),
        acked.len(),
        processed.len()
    );

    // The schedule fired once per tick, on whichever hosts lived, before and after the kill.
    // Ticks go on after the kill.
    std::thread::sleep(Duration::from_millis(
        u64::try_from((killed_ms + 3_000 - chrono::Utc::now().timestamp_millis()).max(0)).unwrap(),
    ));
    // Every claimed tick made exactly one task (the one the killed host claimed in its last
    // moment, if any, once another host took it over).
    // One snapshot: the ticks claimed (their times, in order) and the tasks they made.
    let (ticks, scheduled) = wait_for(LEASE + Duration::from_secs(5), || {
        let both = pg.psql(
            &db,
            "SELECT (SELECT coalesce(string_agg(split_part(id, ':', 3), ' ' \
             ORDER BY split_part(id, ':', 3)::bigint), '') \
             FROM agentmesh_deliveries WHERE id LIKE 'tick:ops/tick:%') \
             || ',' || (SELECT count(*) - 1 FROM agentmesh_tasks)",
        );
        let (ticks, scheduled) = both.split_once(',').unwrap();
        let ticks: Vec<i64> = ticks
            .split_whitespace()
            .map(|t| t.parse().unwrap())
            .collect();
        let scheduled: usize = scheduled.parse().unwrap();
        (ticks.len() == scheduled).then_some((ticks, scheduled))
    })
    .expect("a tick made more than one task, or a claimed tick made none");
    assert!(ticks.len() >= 3, "{ticks:?} ticks, {scheduled} tasks");
    let since_kill: Vec<i64> = ticks.iter().map(|t| t - killed_ms).collect();
    assert!(
        ticks.windows(2).all(|w| w[1] - w[0] == 1_000),
        "a tick was skipped or claimed twice: ticks at {since_kill:?} ms from the kill"
    );
    assert!(
        ticks.last().is_some_and(|last| *last >= killed_ms + 2_000),
        "no tick fired after the kill: ticks at {since_kill:?} ms from the kill"
    );
    for host in hosts {
        assert_eq!(host.terminate(), Some(0));
    }
}

#[test]
fn a_lock_task_step_routing_ran_on_one_host_locks_the_task_another_holds() {
    let pg = Postgres::start();
    let url = pg.new_database();
    let oncall = scripted_agent(
        "ops/oncall",
        "capabilities:
  pager:
    before:
      - assert: \"!has(event) || !event.payload.n.startsWith('bad')\"
        error_message: A bad alert.
        on_fail: lock_task
",
    );
    let host = format!(
        "{PAGER_HOST}store: {{backend: postgres, url: {{env: DATABASE_URL}}, pool: 4, lease: {}s}}\n",
        LEASE.as_secs()
    );
    let (root, dir, data) = dirs(&[
        ("pager.yaml", &pager_tool("alert {event.payload.n}", None)),
        ("oncall.yaml", &oncall),
        ("host.yaml", &host),
        ("script.yaml", "responses: []\n"),
    ]);
    let env = [
        ("PAGER_SECRET", durability::SECRET),
        ("DATABASE_URL", url.as_str()),
    ];
    let a = Server::start(AGENTMESH, &dir, &data, &env);
    let b = Server::start(AGENTMESH, &dir, &root.path().join("b"), &env);
    let (task, holder) = oncall_task(&a, &pg, &url);
    // B routes bad alerts (unmatched until it has heard of the task); its step locks the task,
    // which A holds and locks when asked.
    let mut sent = 0;
    let locked = wait_for(Duration::from_secs(30), || {
        sent += 1;
        let answer = deliver(b.addr, &format!("bad-{sent}"));
        assert_eq!(answer.as_ref().map(|a| a.0), Some(202), "{answer:?}");
        let t = a.request("GET", &format!("/v1/tasks/{task}")).send().json();
        (t["status"] == "terminated").then_some(t)
    })
    .expect("the task was never locked");
    assert_eq!(locked["reason"], "locked", "{locked}");
    assert_eq!(owner(&pg, &url, &task), holder, "A locked it, holding it");
    let log = b
        .request("GET", &format!("/v1/tasks/{task}/events"))
        .send()
        .text();
    assert!(log.contains("A bad alert."), "the log says why: {log}");
    assert!(
        !log.contains("alert bad-"),
        "no bad alert was queued: {log}"
    );
    assert_eq!(a.terminate(), Some(0));
    assert_eq!(b.terminate(), Some(0));
}

/// Opens the inspector of `server` (a loopback host without tokens) in `browser` at `path`.
fn inspect(browser: &Browser, server: &Server, path: &str) {
    browser.goto(&format!("http://{}{path}", server.addr));
    browser.click(&browser.find("form.login button[type=submit]"));
    let url = browser.wait_for_url(path, Duration::from_secs(10));
    assert!(url.ends_with(path), "after logging in: {url}");
}

#[test]
fn the_inspector_of_one_host_shows_tasks_and_events_another_host_wrote() {
    // The database and the config dir live as long as the hosts.
    let TwoHosts {
        pg: _pg,
        root: _root,
        a,
        b,
        ..
    } = two_hosts();
    let browser = Browser::start();
    inspect(&browser, &b, "/ui/");

    // A task A creates comes into B's list live, and is there on a reload.
    let task = a.create_task(&json!({"agent": "dev/helper", "input": {"message": "first"}}));
    task_once(&a, &task, Duration::from_secs(30), answered(1));
    assert!(
        browser.wait_for_text(&task, Duration::from_secs(10)),
        "B's list did not show A's task live: {}",
        browser.text_of_page()
    );
    browser.goto(&format!("http://{}/ui/?status=idle", b.addr));
    let listed = browser.text(&browser.find("table#tasks tbody"));
    assert!(listed.contains(&task), "{listed}");

    // Its page on B, and A's next answer arriving in it live.
    browser.goto(&format!("http://{}/ui/tasks/{task}", b.addr));
    assert!(
        browser.wait_for_text("answer 1", Duration::from_secs(5)),
        "{}",
        browser.text_of_page()
    );
    a.send_input(&task, "second");
    assert!(
        browser.wait_for_text("answer 2", Duration::from_secs(30)),
        "A's event did not arrive live on B: {}",
        browser.text_of_page()
    );
    browser.goto(&format!("http://{}/ui/tasks/{task}", b.addr));
    assert!(browser.text_of_page().contains("answer 2"));

    // A status A writes (waiting in a review) shows in B's list, its filter and its inbox.
    let careful = a.create_task(&json!({"agent": "dev/careful", "input": {"message": "echo hi"}}));
    let shown = wait_for(Duration::from_secs(30), || {
        browser.goto(&format!("http://{}/ui/?status=waiting", b.addr));
        let listed = browser.text(&browser.find("table#tasks tbody"));
        listed.contains(&careful).then_some(listed)
    });
    assert!(shown.is_some(), "B never listed A's task as waiting");
    browser.goto(&format!("http://{}/ui/reviews", b.addr));
    assert!(browser.text_of_page().contains(&careful));
    let mut a = a;
    assert_eq!(a.stop_within(Duration::from_secs(10)), Some(0));
    assert_eq!(b.terminate(), Some(0));
}

#[test]
fn a_host_stalled_until_the_others_forgot_it_lists_what_they_wrote_meanwhile() {
    let TwoHosts {
        pg,
        url,
        root: _root,
        a,
        b,
        ..
    } = two_hosts();
    let db = url.rsplit('/').next().unwrap();
    let registered = || pg.psql(db, "SELECT count(*) FROM agentmesh_hosts");
    assert_eq!(registered(), "2");
    // B stalls (its machine froze) until A forgot it: a lease after its registration expired.
    b.pause();
    let forgotten = wait_for(4 * LEASE + Duration::from_secs(10), || {
        (registered() == "1").then_some(())
    });
    if forgotten.is_none() {
        b.resume();
    }
    assert!(forgotten.is_some(), "A never forgot the stalled host B");
    // Written while B is forgotten: announced to nobody.
    let task = a.create_task(&json!({"agent": "dev/helper"}));
    b.resume();
    let listed = wait_for(Duration::from_secs(30), || {
        let tasks = b.request("GET", "/v1/tasks").send().json();
        tasks["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["id"] == task.as_str())
            .then_some(())
    });
    assert!(
        listed.is_some(),
        "B never lists the task A wrote while B was forgotten"
    );
    assert_eq!(registered(), "2", "B registered anew");
    assert_eq!(a.terminate(), Some(0));
    assert_eq!(b.terminate(), Some(0));
}

#[test]
fn a_host_whose_listening_session_was_lost_lists_what_others_wrote_meanwhile() {
    let TwoHosts {
        pg,
        url,
        root: _root,
        a,
        b,
        ..
    } = two_hosts();
    // Both hosts' sessions listening for the others end; each opens a new one a second later.
    let ended = pg.psql(
        url.rsplit('/').next().unwrap(),
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
         WHERE query LIKE 'LISTEN%' AND pid <> pg_backend_pid()",
    );
    assert_eq!(ended, "2", "the hosts' listening sessions");
    // Written while B hears nothing: a task without input, one write.
    let task = a.create_task(&json!({"agent": "dev/helper"}));
    let listed = wait_for(Duration::from_secs(30), || {
        let tasks = b.request("GET", "/v1/tasks").send().json();
        let ids: Vec<String> = tasks["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["id"].as_str().unwrap().to_owned())
            .collect();
        ids.contains(&task).then_some(ids)
    });
    assert!(
        listed.is_some(),
        "B never lists the task A wrote while B was not listening"
    );
    assert_eq!(a.terminate(), Some(0));
    assert_eq!(b.terminate(), Some(0));
}
