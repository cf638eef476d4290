//! `cargo bench --bench schedule_ticks`: 10,000 schedules armed in the real binary, and how
//! late their ticks become tasks.
//!
//! The config dir holds one agent on the `scripted` model (it answers at once) and 10,000
//! schedule manifests: 9,000 `interval`s of 30–120 s, spread to the millisecond (an interval's
//! grid is anchored at the Unix epoch, so their ticks fall at spread-out instants, ~140 a
//! second), and 1,000 `at` schedules due at one instant — the burst — in the middle of a
//! `WINDOW` measured after a warm-up.
//!
//! Every tick due in the window must have exactly one task. A task is matched to its tick by
//! the user message's `metadata.trigger` (`schedule_id`, and `fired_at`: the tick is the grid
//! point at or before it for an interval, exact while a fire starts less than 30 s late; the
//! instant for an `at`). Three
//! latenesses are reported per tick, from its due time to: the fire starting (`fired_at`),
//! the task's input being queued (`metadata.queued_at`: its transaction; the fsync that makes
//! it durable follows at once, and the fire waits for it), and the task's turn taking the
//! input (the user message's `timestamp`, which comes only after the input is on disk).
//!
//! `AGENTMESH_BINARY=PATH` measures that build of the binary instead of the one Cargo built,
//! so that two builds can be compared in runs one after the other.
//!
//! Memory is the server's VmRSS with the agent alone and with the 10,000 schedules armed
//! (right after it listens), each a fresh server on an empty store.

// A bench is a program that reports; failing to set up is a crash worth seeing.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use agentmesh_testkit::client::Connection;
use agentmesh_testkit::fixtures::{self, scripted_agent};
use agentmesh_testkit::server::Server;
use common::{AGENTMESH, QUIET, load_average, machine, percentile};

const INTERVALS: u64 = 9_000;
const BURST: u64 = 1_000;
/// The shortest and longest interval, ms.
const INTERVAL_MS: (u64, u64) = (30_000, 120_000);
/// Manifests per file.
const PER_FILE: u64 = 1_000;
/// How long the server may take to start with every schedule (parse, create each status,
/// arm) before the warm-up begins.
const START_BUDGET: Duration = Duration::from_secs(60);
/// From the server listening to the window opening: the first ticks settle.
const WARM_UP: Duration = Duration::from_secs(10);
/// The measured window; the burst is due in its middle.
const WINDOW: Duration = Duration::from_secs(60);
/// After the window, for the last ticks' turns to take their inputs.
const DRAIN: Duration = Duration::from_secs(10);
const AGENT: &str = "bench/ticker";

/// The agent the schedules start tasks of, answering at once, and a host policy that lets
/// every tick be a trigger-fired turn of one owner (far more than the default 1,000 a day).
fn base_config(dir: &Path) {
    fixtures::write(
        dir,
        &[
            ("agent.yaml", &scripted_agent(AGENT, "")),
            (
                "host.yaml",
                "kind: agentmesh/v1/host\npolicy: {triggered_turns_per_user_per_day: 1000000000}\n",
            ),
            ("script.yaml", "responses:\n  - text: Done.\n"),
        ],
    );
}

/// When a schedule is due.
#[derive(Clone, Copy)]
enum Due {
    Every(i64),
    At(i64),
}

impl Due {
    /// The tick a fire started at `fired_at` belongs to.
    fn tick(self, fired_at: i64) -> i64 {
        match self {
            Due::Every(every) => fired_at - fired_at.rem_euclid(every),
            Due::At(at) => at,
        }
    }

    /// Every tick in `[from, to)`.
    fn ticks(self, from: i64, to: i64) -> Vec<i64> {
        match self {
            Due::Every(every) => {
                let first = from + (every - from.rem_euclid(every)) % every;
                (0..)
                    .map(|k| first + k * every)
                    .take_while(|&t| t < to)
                    .collect()
            }
            Due::At(at) => [at].into_iter().filter(|&t| from <= t && t < to).collect(),
        }
    }
}

/// Writes the schedules, `PER_FILE` to a file; returns each one's name and timing.
fn schedules(dir: &Path, burst_at: i64) -> HashMap<String, Due> {
    let mut out = HashMap::new();
    let mut file = String::new();
    for n in 0..INTERVALS + BURST {
        let (name, timing, due) = if n < INTERVALS {
            let every = INTERVAL_MS.0 + spread(n, INTERVAL_MS.1 - INTERVAL_MS.0 + 1);
            (
                format!("interval-{n:05}"),
                format!("interval: {every}ms"),
                Due::Every(every as i64),
            )
        } else {
            (
                format!("burst-{n:05}"),
                format!("at: \"{}\"", rfc3339(burst_at)),
                Due::At(burst_at),
            )
        };
        write!(
            file,
            "kind: commonagents.info/v1/schedule
namespace: bench
name: {name}
agent: ticker
owner: user:bench@example.com
{timing}
inputs:
  message: Tick.
---
"
        )
        .unwrap();
        out.insert(format!("bench/{name}"), due);
        if (n + 1) % PER_FILE == 0 {
            std::fs::write(
                dir.join(format!("schedules-{:02}.yaml", n / PER_FILE)),
                &file,
            )
            .unwrap();
            file.clear();
        }
    }
    out
}

/// A fired tick, as the bench found it.
struct Fired {
    schedule: String,
    fired_at: i64,
    queued_at: i64,
    taken_at: i64,
}

/// Every task of the agent created at or after `since`, with its first user message's trigger.
/// Waits (up to `DRAIN` more) for turns that have not taken their input yet.
fn fired_since(conn: &mut Connection, since: i64) -> Vec<Fired> {
    // Newest first, a page at a time, until the tasks are older than `since`.
    let mut pending: Vec<String> = Vec::new();
    let mut cursor = String::new();
    loop {
        let listed = conn.get_json(&format!("/v1/tasks?agent={AGENT}&limit=1000{cursor}"));
        let tasks = listed["tasks"].as_array().unwrap();
        let recent = tasks
            .iter()
            .filter(|t| parse_ms(t["created_at"].as_str().unwrap()) >= since);
        pending.extend(recent.map(|t| t["id"].as_str().unwrap().to_owned()));
        let older = tasks
            .last()
            .is_some_and(|t| parse_ms(t["created_at"].as_str().unwrap()) < since);
        match listed["next_cursor"].as_str() {
            Some(next) if !older => cursor = format!("&cursor={next}"),
            _ => break,
        }
    }
    let mut fired = Vec::new();
    let deadline = Instant::now() + DRAIN;
    while !pending.is_empty() {
        pending.retain(|id| {
            let events = conn.get_json(&format!("/v1/tasks/{id}/events"));
            let message = events["events"]
                .as_array()
                .unwrap()
                .iter()
                .find(|e| e["kind"] == "MessageEvent" && e["source"] == "user");
            let Some(m) = message else { return true };
            let trigger = &m["metadata"]["trigger"];
            fired.push(Fired {
                schedule: trigger["schedule_id"].as_str().unwrap().to_owned(),
                fired_at: trigger["fired_at"].as_i64().unwrap(),
                queued_at: m["metadata"]["queued_at"].as_i64().unwrap(),
                taken_at: parse_ms(m["timestamp"].as_str().unwrap()),
            });
            false
        });
        if pending.is_empty() || Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    assert!(
        pending.is_empty(),
        "{} tasks never took their input",
        pending.len()
    );
    fired
}

/// The lateness figures of one set of ticks.
#[derive(Default)]
struct Report {
    due: usize,
    fired: usize,
    twice: usize,
    started: Vec<Duration>,
    queued: Vec<Duration>,
    taken: Vec<Duration>,
}

impl Report {
    fn print(&mut self, what: &str) {
        println!(
            "{what}: {} ticks due, {} fired, {} missed, {} fired more than once",
            self.due,
            self.fired,
            self.due - self.fired,
            self.twice
        );
        for (name, lateness) in [
            ("fire started", &mut self.started),
            ("input queued", &mut self.queued),
            ("turn took the input", &mut self.taken),
        ] {
            lateness.sort();
            if lateness.is_empty() {
                continue;
            }
            println!(
                "  lateness to {name}: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
                ms(percentile(lateness, 0.50)),
                ms(percentile(lateness, 0.99)),
                ms(*lateness.last().unwrap()),
            );
        }
    }
}

fn main() {
    // Another build of the binary to measure, for comparisons run one after another.
    let binary = std::env::var("AGENTMESH_BINARY").unwrap_or_else(|_| AGENTMESH.to_owned());
    println!("binary: {binary}");
    let root = tempfile::tempdir().unwrap();

    let empty = root.path().join("empty");
    base_config(&empty);
    let server = Server::start(&binary, &empty, &root.path().join("empty-data"), &[QUIET]);
    std::thread::sleep(Duration::from_secs(3));
    let rss_empty = server.rss_kib();
    drop(server);

    let dir = root.path().join("config");
    base_config(&dir);
    let lead = START_BUDGET + WARM_UP + WINDOW / 2;
    let burst_at = (now_ms() + millis(lead)).div_euclid(1_000) * 1_000;
    let window = (burst_at - millis(WINDOW / 2), burst_at + millis(WINDOW / 2));
    let timings = schedules(&dir, burst_at);
    let spawned = Instant::now();
    let server = Server::start(&binary, &dir, &root.path().join("data"), &[QUIET]);
    let start_up = spawned.elapsed();
    let rss_armed = server.rss_kib();
    let warm_up_left = window.0 - now_ms();
    assert!(
        warm_up_left >= 0,
        "the server took {start_up:?} to start, past the window's opening: raise START_BUDGET"
    );

    let mut rss_peak = rss_armed;
    while now_ms() < window.1 {
        std::thread::sleep(Duration::from_secs(1));
        rss_peak = rss_peak.max(server.rss_kib());
    }
    let load = load_average();
    std::thread::sleep(DRAIN);
    let mut conn = Connection::open(server.addr);
    let fired = fired_since(&mut conn, window.0);
    let rss_end = server.rss_kib();
    drop(server);

    let mut by_tick: HashMap<(&str, i64), Vec<&Fired>> = HashMap::new();
    for f in &fired {
        let due = timings[&f.schedule].tick(f.fired_at);
        by_tick.entry((&f.schedule, due)).or_default().push(f);
    }
    let (mut steady, mut burst) = (Report::default(), Report::default());
    for (schedule, due) in &timings {
        let report = match due {
            Due::Every(_) => &mut steady,
            Due::At(_) => &mut burst,
        };
        for tick in due.ticks(window.0, window.1) {
            report.due += 1;
            let Some(tasks) = by_tick.get(&(schedule.as_str(), tick)) else {
                continue;
            };
            report.fired += 1;
            report.twice += usize::from(tasks.len() > 1);
            let f = tasks[0];
            report.started.push(since(tick, f.fired_at));
            report.queued.push(since(tick, f.queued_at));
            report.taken.push(since(tick, f.taken_at));
        }
    }

    println!("machine: {}", machine());
    println!(
        "schedules: {INTERVALS} intervals of {}–{} s (spread to the ms), {BURST} `at` due at {} (the burst); one agent on the scripted model; window {} s after a {} s warm-up",
        INTERVAL_MS.0 / 1_000,
        INTERVAL_MS.1 / 1_000,
        rfc3339(burst_at),
        WINDOW.as_secs(),
        WARM_UP.as_secs(),
    );
    println!(
        "start-up: listening {:.1} s after spawn (10,000 manifests loaded, their statuses created, armed)",
        start_up.as_secs_f64()
    );
    println!(
        "memory: VmRSS {rss_empty} KiB with the agent alone, {rss_armed} KiB with {} schedules armed = {:.0} bytes per schedule; peak in the window {rss_peak} KiB, {rss_end} KiB at the end",
        INTERVALS + BURST,
        (rss_armed as f64 - rss_empty as f64) * 1024.0 / (INTERVALS + BURST) as f64,
    );
    steady.print(&format!(
        "steady ({INTERVALS} intervals, {:.0} ticks/s)",
        steady.due as f64 / WINDOW.as_secs_f64()
    ));
    burst.print(&format!("burst ({BURST} `at` due at one instant)"));
    println!("load average at the window's end: {load}");
}

fn since(due: i64, at: i64) -> Duration {
    Duration::from_millis(u64::try_from(at - due).unwrap_or(0))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap()
}

fn now_ms() -> i64 {
    i64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

fn rfc3339(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .unwrap()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

fn parse_ms(text: &str) -> i64 {
    chrono::DateTime::parse_from_rfc3339(text)
        .unwrap()
        .timestamp_millis()
}

/// A deterministic spread of `n` over `0..range` (Fibonacci hashing): the bench needs spread,
/// not randomness.
fn spread(n: u64, range: u64) -> u64 {
    (n.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 16) % range
}
