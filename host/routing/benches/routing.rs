//! Routing one webhook event through the subscription index versus evaluating every
//! subscription's filter, at 10k, 100k and 1M subscriptions.
//!
//! Every subscription has the github-pr style filter below and its own allow lists: owners
//! and repositories shared by many subscriptions (10 owners, 100 repositories) and an author
//! of its own, so an event for one author matches one subscription. A routed event is
//! measured from its JSON to the list of matches: binding the event, the index lookup and the
//! full filter on the candidates. The scan binds the event the same way, then calls
//! `Filter::matches` for every subscription.
//!
//! Run with `cargo bench -p agentmesh-routing --bench routing`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // A benchmark program: a failure should stop it loudly.

use std::sync::Arc;
use std::time::{Duration, Instant};

use agentmesh_routing::{AllowLists, Event, Filter, SubscriptionIndex};
use serde_json::{Value as Json, json};

const FILTER: &str = "event.payload.repository.owner.login == parameters.owner \
    && event.payload.repository.name == parameters.repo \
    && event.payload.comment.user.login == parameters.author";

const OWNERS: u64 = 10;
const REPOS: u64 = 100;
const TOOL: &str = "engineering/github-pr";
const EVENT: &str = "comment";

/// Samples of routed events per size, after `WARMUP` unmeasured ones.
const ROUTED_SAMPLES: usize = 2000;
const WARMUP: usize = 500;

fn main() {
    println!("agentmesh-routing: route one event, index vs scan");
    println!(
        "machine: {} CPUs (nproc), {}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        cpu_model()
    );
    println!("filter: {FILTER}");
    println!();
    println!(
        "{:>10} {:>9} {:>8} | {:>11} {:>11} | {:>12} {:>12} {:>7} | {:>9}",
        "subs",
        "build",
        "index",
        "index p50",
        "index p99",
        "scan p50",
        "scan p99",
        "samples",
        "scan/index"
    );
    let filter = Arc::new(Filter::compile(FILTER).unwrap());
    assert_eq!(
        filter.pins().len(),
        3,
        "the bench filter should be fully indexed"
    );
    let mut p99_at_10k = None;
    for (size, scan_samples) in [(10_000u64, 30usize), (100_000, 10), (1_000_000, 3)] {
        let lists: Vec<AllowLists> = (0..size).map(allow_lists).collect();
        let rss_before = rss_kib();
        let started = Instant::now();
        let mut index = SubscriptionIndex::new();
        for (id, l) in lists.iter().enumerate() {
            index.insert(id as u64, TOOL, EVENT, &filter, l);
        }
        let build = started.elapsed();
        let index_mib = rss_kib().saturating_sub(rss_before) as f64 / 1024.0;

        let mut rng = Lcg(size);
        let mut routed = Vec::with_capacity(ROUTED_SAMPLES);
        for sample in 0..WARMUP + ROUTED_SAMPLES {
            let target = rng.next() % size;
            let payload = payload(target);
            let started = Instant::now();
            let event = Event::new(payload);
            let matched = index.route(TOOL, EVENT, &event, |id| lists.get(*id as usize));
            let elapsed = started.elapsed();
            assert_eq!(matched, [target]);
            if sample >= WARMUP {
                routed.push(elapsed);
            }
        }

        let mut scanned = Vec::with_capacity(scan_samples);
        for _ in 0..scan_samples {
            let target = rng.next() % size;
            let payload = payload(target);
            let started = Instant::now();
            let event = Event::new(payload);
            let matched: Vec<u64> = lists
                .iter()
                .enumerate()
                .filter(|(_, l)| filter.matches(&event, l))
                .map(|(id, _)| id as u64)
                .collect();
            let elapsed = started.elapsed();
            assert_eq!(matched, [target]);
            scanned.push(elapsed);
        }

        let (index_p50, index_p99) = (percentile(&mut routed, 50), percentile(&mut routed, 99));
        let (scan_p50, scan_p99) = (percentile(&mut scanned, 50), percentile(&mut scanned, 99));
        println!(
            "{:>10} {:>8.2?} {:>5.0}MiB | {:>11.1?} {:>11.1?} | {:>12.1?} {:>12.1?} {:>7} | {:>8.0}x",
            size,
            build,
            index_mib,
            index_p50,
            index_p99,
            scan_p50,
            scan_p99,
            scan_samples,
            scan_p50.as_secs_f64() / index_p50.as_secs_f64()
        );
        if size == 10_000 {
            p99_at_10k = Some(index_p99);
        }
        if size == 1_000_000
            && let Some(base) = p99_at_10k
        {
            println!();
            println!(
                "1M: index p99 {index_p99:.1?} ({}), {:.2}x the 10k p99 (target <= 2x), scan {:.0}x slower at p50 (target >= 100x)",
                if index_p99 < Duration::from_millis(1) {
                    "under 1 ms"
                } else {
                    "OVER 1 ms"
                },
                index_p99.as_secs_f64() / base.as_secs_f64(),
                scan_p50.as_secs_f64() / index_p50.as_secs_f64(),
            );
        }
    }
    println!(
        "index: {ROUTED_SAMPLES} routed events per size (after {WARMUP} warm-up); scan: the 'samples' column \
         (fewer at 1M, where one scan takes seconds). 'index' is the growth of the resident set while \
         building the index."
    );
}

/// The allow lists of subscription `id`: a shared owner and repository, its own author.
fn allow_lists(id: u64) -> AllowLists {
    let mut lists = AllowLists::new();
    let (owner, repo, author) = names(id);
    for (name, value) in [("owner", owner), ("repo", repo), ("author", author)] {
        lists.entry(name.into()).or_default().insert(value);
    }
    lists
}

fn names(id: u64) -> (String, String, String) {
    (
        format!("org-{}", id % OWNERS),
        format!("repo-{}", id % REPOS),
        format!("user-{id}"),
    )
}

/// The CEL `event` of an `issue_comment` delivery for subscription `id`, shaped like
/// GitHub's (trimmed to ~50 fields).
fn payload(id: u64) -> Json {
    let (owner, repo, author) = names(id);
    let user = |login: &str, uid: u64| {
        json!({
            "login": login, "id": uid, "node_id": "MDQ6VXNlcjE=", "type": "User",
            "site_admin": false, "html_url": format!("https://github.com/{login}"),
            "avatar_url": "https://avatars.githubusercontent.com/u/1?v=4",
        })
    };
    json!({
        "name": EVENT,
        "delivery_id": format!("72d3162e-cc78-11e3-81ab-{id:012}"),
        "received_at": "2025-06-01T12:00:00Z",
        "headers": {"x-github-event": "issue_comment", "user-agent": "GitHub-Hookshot/044aadd"},
        "payload": {
            "action": "created",
            "issue": {
                "number": 1347, "title": "Found a bug", "state": "open", "locked": false,
                "user": user(&author, id), "labels": [{"name": "bug", "color": "f29513"}],
                "comments": 3, "created_at": "2025-05-30T09:00:00Z",
                "body": "I'm having a problem with this.",
                "pull_request": {"url": "https://api.github.com/repos/o/r/pulls/1347"},
            },
            "comment": {
                "id": 1_000_000 + id, "node_id": "MDEyOklzc3VlQ29tbWVudDE=",
                "user": user(&author, id), "created_at": "2025-06-01T11:59:58Z",
                "author_association": "CONTRIBUTOR",
                "body": "Could you also handle the empty case? ".repeat(8),
            },
            "repository": {
                "id": 1_296_269, "name": repo, "full_name": format!("{owner}/{repo}"),
                "private": false, "owner": user(&owner, 7), "default_branch": "main",
                "html_url": format!("https://github.com/{owner}/{repo}"),
                "topics": ["agents", "wasm"], "visibility": "public",
            },
            "sender": user(&author, id),
        },
    })
}

fn percentile(samples: &mut [Duration], p: usize) -> Duration {
    samples.sort_unstable();
    let rank = (samples.len() * p).div_ceil(100).max(1) - 1;
    samples[rank.min(samples.len() - 1)]
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, model)| model.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into())
}

/// The resident set size of this process, in KiB (0 where /proc is unavailable).
fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kib| kib.parse().ok())
        })
        .unwrap_or(0)
}

/// A small deterministic generator, so every run routes the same events.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }
}
