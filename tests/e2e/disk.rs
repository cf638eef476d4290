//! A disk that fills up: the host answers 503 with `Retry-After` instead of 500, `/healthz`
//! says the store cannot write, and the host exits (code 75) for a supervisor to restart it
//! instead of answering errors for ever; once there is room again, the restarted host has
//! every task it acknowledged.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use agentmesh_testkit::client::Request;
use agentmesh_testkit::fixtures::{self, scripted_agent};
use agentmesh_testkit::server::{Server, wait_for};
use serde_json::json;

use crate::AGENTMESH;

/// A tmpfs mounted on a directory for the test's lifetime.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Tmpfs {
        std::fs::create_dir_all(dir).unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .output()
            .expect("`mount` (util-linux) is needed to make a small disk");
        assert!(
            out.status.success(),
            "mounting a {size} tmpfs failed (the test needs root, as CI runs): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Tmpfs(dir.to_path_buf())
    }

    fn resize(&self, size: &str) {
        let out = Command::new("mount")
            .args(["-o", &format!("remount,size={size}")])
            .arg(&self.0)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Sends `method path` with `body` over a fresh connection: the status and header names, or
/// `None` when nothing answers within 2 s (the host is stuck or exited).
fn send(addr: SocketAddr, method: &str, path: &str, body: &[u8]) -> Option<(u16, Vec<String>)> {
    let head = Request::new(addr, method, path)
        .body(body.to_vec())
        .send_head(Duration::from_secs(2))?;
    Some((
        head.status,
        head.headers.into_iter().map(|(k, _)| k).collect(),
    ))
}

/// The status of `GET path`, or `None` when nothing answers.
fn status_of(addr: SocketAddr, path: &str) -> Option<u16> {
    send(addr, "GET", path, b"").map(|(status, _)| status)
}

/// The config dir of the tests, in `root`: `t/a` answers from its script.
fn config(root: &Path) -> PathBuf {
    let dir = root.join("config");
    fixtures::write(
        &dir,
        &[
            ("agent.yaml", &scripted_agent("t/a", "")),
            ("script.yaml", "responses:\n  - text: ok\n"),
        ],
    );
    dir
}

/// Every file and directory under `path` (itself included) made read-only, or writable again.
fn set_writable(path: &Path, writable: bool) {
    let mode = if writable { "u+w" } else { "a-w" };
    let ok = Command::new("chmod")
        .args(["-R", mode])
        .arg(path)
        .status()
        .unwrap();
    assert!(ok.success());
}

#[test]
fn a_data_dir_that_turns_read_only_is_a_503_then_an_exit_never_a_hang() {
    for tool in ["setpriv", "chown"] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .status();
        assert!(
            found.is_ok_and(|s| s.success()),
            "`{tool}` (util-linux, coreutils) is needed to run the host as a user without root"
        );
    }
    let root = tempfile::tempdir().unwrap();
    // The host runs as `nobody`, whose writes the file system refuses once the data dir is
    // read-only (root's would pass).
    let dir = config(root.path());
    let data = root.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let ok = Command::new("chown")
        .args(["-R", "nobody"])
        .arg(&data)
        .status()
        .unwrap();
    assert!(ok.success());
    let ok = Command::new("chmod")
        .args(["-R", "a+rX"])
        .arg(root.path())
        .status()
        .unwrap();
    assert!(ok.success());
    let nobody = [
        "setpriv",
        "--reuid=nobody",
        "--regid=nogroup",
        "--clear-groups",
    ];

    let mut server = Server::start_under(&nobody, AGENTMESH, &dir, &data, &[]);
    let addr = server.addr;
    let first = server.create_task(&json!({"agent": "t/a", "input": {"message": "hi"}}));
    set_writable(&data, false);
    let body = json!({"agent": "t/a", "input": {"message": "x".repeat(30_000)}}).to_string();
    // Requests in flight when the file system stops answering may wait until the host exits
    // (the client gives up on them after 2 s); once the store is known to fail, every request
    // is refused at once.
    let mut seen = Vec::new();
    let refused = wait_for(Duration::from_secs(30), || {
        let answer = send(addr, "POST", "/v1/tasks", body.as_bytes());
        seen.push(answer.as_ref().map(|(status, _)| *status));
        match answer {
            Some((503, headers)) => Some(headers),
            _ => None,
        }
    });
    let headers = refused.unwrap_or_else(|| panic!("no request was refused with 503: {seen:?}"));
    assert!(headers.iter().any(|k| k == "retry-after"), "{headers:?}");
    let unhealthy = wait_for(Duration::from_secs(20), || {
        (status_of(addr, "/healthz") != Some(200)).then_some(())
    });
    assert!(unhealthy.is_some(), "/healthz kept answering 200");
    assert_eq!(server.wait_exit(Duration::from_secs(30)), Some(75));

    set_writable(&data, true);
    let server = Server::start_under(&nobody, AGENTMESH, &dir, &data, &[]);
    let r = server.request("GET", &format!("/v1/tasks/{first}")).send();
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(server.request("GET", "/healthz").send().status, 200);
}

#[test]
fn a_full_disk_is_a_503_then_an_exit_and_a_restart_with_room_loses_nothing() {
    let root = tempfile::tempdir().unwrap();
    let dir = config(root.path());
    let disk = Tmpfs::mount(&root.path().join("disk"), "4m");
    let data = root.path().join("disk/data");

    let mut server = Server::start(AGENTMESH, &dir, &data, &[]);
    let message = "x".repeat(3000);
    let body = json!({"agent": "t/a", "input": {"message": message}});
    let mut acknowledged = Vec::new();
    let refused = (0..5000).find_map(|_| {
        let r = server.request("POST", "/v1/tasks").json(&body).send();
        if r.status == 201 {
            acknowledged.push(r.json()["id"].as_str().unwrap().to_owned());
            None
        } else {
            Some(r)
        }
    });
    let refused = refused.expect("4 MiB never filled up");
    assert_eq!(refused.status, 503, "{}", refused.text());
    assert_eq!(refused.json()["error"]["code"], "unavailable");
    assert!(
        refused.headers.iter().any(|(k, _)| k == "retry-after"),
        "{:?}",
        refused.headers
    );
    assert!(!acknowledged.is_empty());

    // `/healthz` says so while the host still runs, then the host exits for a restart.
    let addr = server.addr;
    let unhealthy = wait_for(Duration::from_secs(20), || {
        let health = status_of(addr, "/healthz");
        (health != Some(200)).then_some(health)
    });
    assert!(unhealthy.is_some(), "/healthz kept answering 200");
    assert_eq!(server.wait_exit(Duration::from_secs(30)), Some(75));

    // With room again, the restarted host has every task it acknowledged, and serves.
    disk.resize("64m");
    let server = Server::start(AGENTMESH, &dir, &data, &[]);
    for id in &acknowledged {
        let r = server.request("GET", &format!("/v1/tasks/{id}")).send();
        assert_eq!(
            r.status,
            200,
            "acknowledged task {id} is lost: {}",
            r.text()
        );
    }
    let id = server.create_task(&json!({"agent": "t/a", "input": {"message": "hi"}}));
    server.wait_for_event(&id, "MessageEvent");
    assert_eq!(server.request("GET", "/healthz").send().status, 200);
}
