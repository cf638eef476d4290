//! `cargo bench --bench webhooks`: signed webhooks per second through the real binary over
//! loopback, each answered only once its queue entry and dedupe record are on disk.
//!
//! The load generator is this bench's own HTTP/1.1 client: `CONNECTIONS` keep-alive
//! connections, one thread each, sending GitHub-signed deliveries with unique delivery ids
//! for `SECONDS` after a warm-up. The receiving task is parked in a `review()` nobody answers,
//! so what is measured is acknowledgement (verify, route, middleware, message, one
//! transaction, group-committed fsync), not the turns the inputs would start (see the `turn`
//! bench). The run ends by checking that the task's queue holds exactly the acknowledged
//! deliveries.
//!
//! Cases (name them after `--` to run some; all run by default): `sled`, the host on its
//! embedded store; `postgres`, the host on a PostgreSQL database (a real server started for
//! the bench); `two-hosts`, two hosts on one database, the connections split between them
//! (the task's lease is on the first: the second routes and queues, and wakes nothing).

// A bench is a program that reports; failing to set up is a crash worth seeing.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentmesh_routing::signature::sign_github;
use agentmesh_testkit::client::Connection;
use agentmesh_testkit::fixtures::{PAGER_HOST, dirs, pager_tool, scripted_agent};
use agentmesh_testkit::postgres::Postgres;
use agentmesh_testkit::server::Server;
use common::{AGENTMESH, QUIET, load_average, machine, percentile};
use serde_json::{Value, json};

const CONNECTIONS: usize = 16;
const WARM_UP: Duration = Duration::from_secs(2);
const SECONDS: u64 = 10;
const SECRET: &str = "bench secret";

/// The config: `ops/oncall` waits in a review nobody answers for anything but an event, and
/// every alert whose service is not `ignored` is queued for it; `store` is the host config's
/// `store` line, if any.
fn config(store: &str) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let oncall = scripted_agent(
        "ops/oncall",
        "capabilities:
  pager:
    before:
      - condition: \"!has(event)\"
        assert: \"review('user:ops')\"
",
    );
    let pager = pager_tool(
        "alert {event.payload.n} from {event.payload.service}",
        Some("event.payload.service != 'ignored'"),
    );
    dirs(&[
        ("pager.yaml", &pager),
        ("oncall.yaml", &oncall),
        ("host.yaml", &format!("{PAGER_HOST}{store}")),
        (
            "script.yaml",
            "responses:\n  - tool_calls: [{name: pager, arguments: {}}]\n",
        ),
    ])
}

fn main() {
    let asked: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let runs = |case: &str| asked.is_empty() || asked.iter().any(|a| a == case);
    println!("machine: {}", machine());
    println!(
        "load generator: this bench's HTTP/1.1 client, {CONNECTIONS} keep-alive connections, GitHub-signed ~600-byte payloads, unique delivery ids"
    );
    if runs("sled") {
        let (_root, dir, data) = config("");
        let server = Server::start(AGENTMESH, &dir, &data, &[QUIET, ("PAGER_SECRET", SECRET)]);
        measure("sled", &[&server]);
    }
    if runs("postgres") || runs("two-hosts") {
        let pg = Postgres::start();
        if runs("postgres") {
            let url = pg.new_database();
            let (_root, dir, data) = config(POSTGRES);
            let env = [QUIET, ("PAGER_SECRET", SECRET), ("DATABASE_URL", &url)];
            let server = Server::start(AGENTMESH, &dir, &data, &env);
            measure("postgres", &[&server]);
        }
        if runs("two-hosts") {
            let url = pg.new_database();
            let (root, dir, data) = config(POSTGRES);
            let env = [QUIET, ("PAGER_SECRET", SECRET), ("DATABASE_URL", &url)];
            let a = Server::start(AGENTMESH, &dir, &data, &env);
            let b = Server::start(AGENTMESH, &dir, &root.path().join("b"), &env);
            measure("two-hosts", &[&a, &b]);
        }
    }
}

/// The host config's store for the PostgreSQL cases.
const POSTGRES: &str = "store: {backend: postgres, url: {env: DATABASE_URL}, pool: 16}\n";

/// Runs the load against `servers` (the task on the first, the connections spread over all)
/// and prints the figures of case `case`.
fn measure(case: &str, servers: &[&Server]) {
    let server = servers[0];
    let addrs: Vec<_> = servers.iter().map(|s| s.addr).collect();
    let mut admin = Connection::open(server.addr);
    let (status, body) = admin.send(
        "POST",
        "/v1/tasks",
        &[],
        json!({"agent": "ops/oncall", "input": {"message": "stand by"}})
            .to_string()
            .as_bytes(),
    );
    assert_eq!(status, 201);
    let task: Value = serde_json::from_slice(&body).unwrap();
    let id = task["id"].as_str().unwrap().to_owned();
    // Wait until the task is parked in review().
    loop {
        let t = admin.get_json(&format!("/v1/tasks/{id}"));
        if t["status"] == "waiting" {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }

    let measuring = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let latencies = Arc::new(Mutex::new(Vec::new()));
    let acked = Arc::new(Mutex::new(0u64));
    let threads: Vec<_> = (0..CONNECTIONS)
        .map(|c| {
            let (measuring, stop) = (Arc::clone(&measuring), Arc::clone(&stop));
            let (latencies, acked) = (Arc::clone(&latencies), Arc::clone(&acked));
            let addr = addrs[c % addrs.len()];
            std::thread::spawn(move || {
                let mut conn = Connection::open(addr);
                let mut mine = Vec::new();
                let mut ok = 0;
                for n in 0.. {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let delivery = format!("{c}-{n}");
                    let body = json!({"n": delivery, "service": "api", "detail": "x".repeat(512)})
                        .to_string()
                        .into_bytes();
                    let signature = sign_github(SECRET, &body);
                    let started = Instant::now();
                    let (status, _) = conn.send(
                        "POST",
                        "/v1/webhooks/tools/ops/pager",
                        &[
                            ("X-GitHub-Delivery", &delivery),
                            ("X-GitHub-Event", "alert"),
                            ("X-Hub-Signature-256", &signature),
                        ],
                        &body,
                    );
                    assert_eq!(status, 202);
                    ok += 1;
                    if measuring.load(Ordering::Relaxed) {
                        mine.push(started.elapsed());
                    }
                }
                latencies.lock().unwrap().extend(mine);
                *acked.lock().unwrap() += ok;
            })
        })
        .collect();
    std::thread::sleep(WARM_UP);
    measuring.store(true, Ordering::SeqCst);
    let started = Instant::now();
    std::thread::sleep(Duration::from_secs(SECONDS));
    measuring.store(false, Ordering::SeqCst);
    let elapsed = started.elapsed();
    stop.store(true, Ordering::SeqCst);
    for t in threads {
        t.join().unwrap();
    }
    let mut lat = latencies.lock().unwrap().clone();
    lat.sort();
    let acked = *acked.lock().unwrap();
    let t = admin.get_json(&format!("/v1/tasks/{id}"));
    let rss = server.rss_kib();
    let load = load_average();

    println!(
        "{case}: {} acknowledged in {:.1} s (after {} s warm-up) = {:.0}/s; latency p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        lat.len(),
        elapsed.as_secs_f64(),
        WARM_UP.as_secs(),
        lat.len() as f64 / elapsed.as_secs_f64(),
        percentile(&lat, 0.50).as_secs_f64() * 1e3,
        percentile(&lat, 0.99).as_secs_f64() * 1e3,
        lat.last().copied().unwrap_or_default().as_secs_f64() * 1e3,
    );
    println!("  server: VmRSS {rss} KiB at the end; load average at the end {load}");
    println!(
        "  queue check: {} acknowledged in all, the task's queue holds {}",
        acked, t["queue_depth"]
    );
    assert_eq!(
        t["queue_depth"].as_u64(),
        Some(acked),
        "every acknowledged delivery is queued once"
    );
}
