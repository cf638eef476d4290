//! The host on a PostgreSQL store (a real server started for each test): `run` and `serve`
//! keep everything in the database, and `store migrate` applies the schema without serving
//! (several hosts on one database: `hosts`). The SIGKILL test of acknowledged webhooks runs on
//! PostgreSQL too (`durability`).

use agentmesh_testkit::fixtures::{dirs, scripted_agent};
use agentmesh_testkit::postgres::Postgres;
use agentmesh_testkit::server::{Server, wait_for};
use serde_json::json;

use crate::AGENTMESH;
use crate::util::{Env, agentmesh_in};

const STORE: &str = "kind: agentmesh/v1/host
store: {backend: postgres, url: {env: DATABASE_URL}, pool: 4}
";

/// A config on the database of `DATABASE_URL`: agent `dev/helper` answering `answer {n}` to
/// its n-th input.
fn config() -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
    let script: String = (1..=4).map(|n| format!("  - text: answer {n}\n")).collect();
    dirs(&[
        ("host.yaml", STORE),
        ("helper.yaml", &scripted_agent("dev/helper", "")),
        ("script.yaml", &format!("responses:\n{script}")),
    ])
}

/// Task `task` once it is idle with `outputs` answers (at most 30 s).
fn answered(server: &Server, task: &str, outputs: usize) -> serde_json::Value {
    let mut last = json!(null);
    wait_for(std::time::Duration::from_secs(30), || {
        last = server
            .request("GET", &format!("/v1/tasks/{task}"))
            .send()
            .json();
        let answers = last["output"].as_array()?.len();
        (last["status"] == "idle" && answers == outputs).then(|| last.clone())
    })
    .unwrap_or_else(|| panic!("task {task} did not answer {outputs} time(s): {last}"))
}

fn database(url: &str) -> &str {
    url.rsplit('/').next().unwrap()
}

#[test]
fn a_host_on_postgres_keeps_its_tasks_in_the_database_across_a_restart() {
    let pg = Postgres::start();
    let url = pg.new_database();
    let (root, dir, data) = config();
    let env = [("DATABASE_URL", url.as_str())];
    let server = Server::start(AGENTMESH, &dir, &data, &env);
    let task = server.create_task(&json!({
        "agent": "dev/helper",
        "input": {"message": [{"mimeType": "text/plain", "text": "first"}]}
    }));
    answered(&server, &task, 1);
    assert_eq!(server.terminate(), Some(0));
    assert_eq!(
        pg.psql(
            database(&url),
            &format!("SELECT count(*) FROM agentmesh_tasks WHERE id = '{task}'")
        ),
        "1"
    );

    // Another data dir, empty: the task, its log and its conversation come from the database.
    let server = Server::start(AGENTMESH, &dir, &root.path().join("elsewhere"), &env);
    server.send_input(&task, "second");
    let t = answered(&server, &task, 2);
    assert_eq!(
        t["output"][1]["message"][0]["text"], "answer 2",
        "the second turn did not continue the conversation: {t}"
    );
    assert_eq!(server.user_texts(&task), [json!("first"), json!("second")]);
}

#[test]
fn store_migrate_applies_the_schema_once_and_names_what_it_did() {
    let pg = Postgres::start();
    let url = pg.new_database();
    let (_root, dir, _data) = config();
    let (code, stdout, stderr) =
        agentmesh_in(&Env::default(), &["store", "migrate", "--url", &url]);
    assert_eq!(code, Some(0), "{stderr}");
    let latest = agentmesh_store::postgres::latest_schema();
    assert_eq!(stdout.trim(), format!("ok: schema version 0 → {latest}"));
    // Again, the database named by the config dir's host config: nothing to apply.
    let env = [("DATABASE_URL", url.as_str())];
    let (code, stdout, stderr) = agentmesh_in(
        &Env {
            vars: &env,
            ..Env::default()
        },
        &["store", "migrate", dir.to_str().unwrap()],
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        stdout.trim(),
        format!("ok: schema version {latest}, nothing to apply")
    );
    // No database named anywhere: an error that says where one can be named.
    let (code, _, stderr) = agentmesh_in(
        &Env {
            vars: &[("DATABASE_URL", "")],
            ..Env::default()
        },
        &["store", "migrate"],
    );
    assert_eq!(code, Some(1));
    assert!(stderr.contains("--url"), "{stderr}");
}

/// Connection strings of a database nobody answers (port 1), each holding its password in
/// one of the forms libpq reads: the URL's user info, its `password` parameter, a `key=value`
/// string's bare or quoted value.
const UNREACHABLE: [(&str, &str); 4] = [
    (
        "postgres://ann:pw-userinfo-41a7@127.0.0.1:1/db",
        "pw-userinfo",
    ),
    (
        "postgresql://ann@127.0.0.1:1/db?connect_timeout=5&password=pw-query-41a7",
        "pw-query",
    ),
    (
        "host=127.0.0.1 port=1 user=ann password=pw-bare-41a7 dbname=db",
        "pw-bare",
    ),
    (
        r"host=127.0.0.1 port=1 password = 'pw quoted \' 41a7' dbname=db",
        "pw quoted",
    ),
];

/// Neither `serve` nor `store migrate` shows the database's password when the database does
/// not answer, whichever form of connection string holds it: `***` stands for it.
#[test]
fn store_errors_show_no_database_password() {
    let (_root, dir, data) = config();
    for (url, password) in UNREACHABLE {
        let env = [("DATABASE_URL", url)];
        let env = Env {
            vars: &env,
            ..Env::default()
        };
        let serve = [
            "serve",
            dir.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
            "--data",
            data.to_str().unwrap(),
        ];
        for args in [&["store", "migrate", "--url", url][..], &serve] {
            let (code, stdout, stderr) = agentmesh_in(&env, args);
            assert_eq!(code, Some(1), "{args:?}: {stdout}{stderr}");
            assert!(!stderr.contains(password), "{args:?}: {stderr}");
            assert!(stderr.contains("***"), "{args:?}: {stderr}");
            assert!(stderr.contains("127.0.0.1"), "{args:?}: {stderr}");
        }
    }
}

#[test]
fn validate_reports_a_postgres_store_without_a_url_and_sled_options_at_their_keys() {
    let (_root, dir, _data) = dirs(&[(
        "host.yaml",
        "kind: agentmesh/v1/host\nstore:\n  backend: postgres\n",
    )]);
    let (code, stdout, _) = agentmesh_in(&Env::default(), &["validate", dir.to_str().unwrap()]);
    assert_eq!(code, Some(1), "{stdout}");
    assert!(
        stdout.contains("host.yaml:3:3: error: a `postgres` store needs `url`"),
        "{stdout}"
    );
    let (_root, dir, _data) = dirs(&[(
        "host.yaml",
        "kind: agentmesh/v1/host\nstore: {backend: sled, pool: 3}\n",
    )]);
    let (code, stdout, _) = agentmesh_in(&Env::default(), &["validate", dir.to_str().unwrap()]);
    assert_eq!(code, Some(1));
    assert!(
        stdout.contains("host.yaml:2:30: error: `pool` is for a `postgres` store"),
        "{stdout}"
    );
}

#[test]
fn store_copy_moves_a_hosts_sled_store_into_a_database_where_its_tasks_go_on() {
    let (root, dir, data) = config();
    // First on sled: the same config without its `store` block.
    std::fs::write(dir.join("host.yaml"), "kind: agentmesh/v1/host\n").unwrap();
    let server = Server::start(AGENTMESH, &dir, &data, &[]);
    let task = server.create_task(&json!({
        "agent": "dev/helper",
        "input": {"message": [{"mimeType": "text/plain", "text": "first"}]}
    }));
    answered(&server, &task, 1);
    assert_eq!(server.terminate(), Some(0));

    let pg = Postgres::start();
    let url = pg.new_database();
    let copy = |from: &std::path::Path| {
        agentmesh_in(
            &Env::default(),
            &[
                "store",
                "copy",
                "--from",
                from.to_str().unwrap(),
                "--to",
                &url,
            ],
        )
    };
    let (code, stdout, stderr) = copy(&data);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.starts_with("ok: copied 1 task(s) with "), "{stdout}");
    // Twice: refused, the database already holds the task.
    let (code, _, stderr) = copy(&data);
    assert_eq!(code, Some(1));
    assert!(stderr.contains("already holds"), "{stderr}");
    // A data dir without a store: an error, not an empty copy.
    let (code, _, stderr) = copy(&root.path().join("nothing-here"));
    assert_eq!(code, Some(1));
    assert!(stderr.contains("no store in"), "{stderr}");

    // On the database, with a new data dir, the task goes on where it was.
    std::fs::write(dir.join("host.yaml"), STORE).unwrap();
    let env = [("DATABASE_URL", url.as_str())];
    let server = Server::start(AGENTMESH, &dir, &root.path().join("data-pg"), &env);
    server.send_input(&task, "second");
    let done = answered(&server, &task, 2);
    assert_eq!(
        done["output"][1]["message"][0]["text"], "answer 2",
        "{done}"
    );
    assert_eq!(server.user_texts(&task), [json!("first"), json!("second")]);
}
