//! Evaluation cost of the expression layer with realistic variables.
//!
//! `cargo bench -p agentmesh-expr --bench eval` prints, for a middleware assert over the task
//! context, an event filter over a webhook payload and a message template: the time to build
//! the activation from JSON the caller already has, and the time of one evaluation (p50 and
//! p99 over single, individually timed calls), plus the machine it ran on.

// A bench is a program that reports; failing to set up is a crash worth seeing.
#![allow(clippy::unwrap_used)]

use std::hint::black_box;
use std::time::{Duration, Instant};

use agentmesh_expr::{Activation, Expression, Template};
use serde_json::{Value, json};

/// Timed calls per measurement (after as many untimed ones to warm up).
const RUNS: usize = 20_000;

/// The task context of the engine's `context_for`: 10 inputs and outputs, a history of 40
/// turns, one capability with 10 recorded calls.
fn task_context() -> Value {
    let calls: Vec<Value> = (0..10).map(|i| json!({"a": i, "b": 2})).collect();
    let message = |kind: &str, i: usize| json!({"message": [{"mimeType": "text/plain", "text": format!("{kind} {i}")}]});
    let turns = ["input", "llm", "capability", "llm"].repeat(10);
    json!({
        "agent": {"name": "a", "namespace": "b", "started_at": "2026-11-22T10:00:00Z"},
        "user": {"id": "user:bench", "email": "bench@example.com"},
        "llm": {"model": "scripted/x", "tokens": {"total": 2200, "prompt": 2000, "completion": 200}},
        "_history": {"turns": turns, "turn_count": 40},
        "input": (0..10).map(|i| message("question", i)).collect::<Vec<_>>(),
        "output": (0..10).map(|i| message("answer", i)).collect::<Vec<_>>(),
        "capabilities": {
            "_meta": {"invocations": vec!["calc"; 10], "count": 10, "delegation_count": 0},
            "calc": {"count_successful": 10, "count_errored": 0, "count_restricted": 0,
                     "inputs": calls, "outputs": vec![json!({"result": 3}); 10],
                     "timestamps": vec!["2026-11-22T10:00:00Z"; 10],
                     "successful": vec![true; 10], "errored": vec![false; 10],
                     "restricted": vec![false; 10]},
        },
    })
}

/// The CEL `event` of a GitHub `issue_comment` webhook, payload trimmed to the usual fields.
fn comment_event() -> Value {
    let user = |login: &str, id: u64| {
        json!({"login": login, "id": id, "type": "User", "site_admin": false,
               "avatar_url": format!("https://avatars.example.com/u/{id}"),
               "html_url": format!("https://github.com/{login}")})
    };
    json!({
        "name": "issue_comment",
        "delivery_id": "72d3162e-cc78-11e3-81ab-4c9367dc0958",
        "received_at": "2026-11-22T10:00:00Z",
        "headers": {"x-github-event": "issue_comment", "content-type": "application/json"},
        "payload": {
            "action": "created",
            "issue": {"number": 1347, "title": "Found a bug", "state": "open", "locked": false,
                      "user": user("octocat", 1), "labels": [{"name": "bug"}, {"name": "p1"}],
                      "comments": 3, "body": "It does not work.".repeat(20)},
            "comment": {"id": 99262140, "body": "Me too: the fix is in #1348.",
                        "user": user("alice", 2), "created_at": "2026-11-22T09:59:58Z",
                        "author_association": "MEMBER"},
            "repository": {"id": 1296269, "name": "hello-world", "full_name": "octocat/hello-world",
                           "private": false, "owner": user("octocat", 1), "default_branch": "main"},
            "sender": user("alice", 2),
        },
    })
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i]
}

/// Times `f` `RUNS` times, one call at a time, after as many warm-up calls.
fn measure(mut f: impl FnMut()) -> (Duration, Duration) {
    measure_with(|| (), |()| f())
}

/// Like [`measure`], with a fresh input from `setup` for every call; making the input and
/// dropping it afterwards are not timed.
fn measure_with<S>(
    mut setup: impl FnMut() -> S,
    mut f: impl FnMut(&mut S),
) -> (Duration, Duration) {
    let mut time = || {
        let mut input = setup();
        let start = Instant::now();
        f(&mut input);
        let elapsed = start.elapsed();
        drop(input);
        elapsed
    };
    for _ in 0..RUNS {
        time();
    }
    let mut samples: Vec<Duration> = (0..RUNS).map(|_| time()).collect();
    samples.sort();
    (percentile(&samples, 0.5), percentile(&samples, 0.99))
}

/// Times binding JSON at hand with `bind`.
fn measure_build(value: &Value, bind: impl Fn(&mut Activation, Value)) -> (Duration, Duration) {
    measure_with(
        || (Activation::new(), Some(value.clone())),
        |(act, value)| bind(act, value.take().unwrap_or_default()),
    )
}

/// Times the first evaluation on a fresh activation, which converts what it reads of the
/// bound JSON (later evaluations on the activation find it converted).
fn measure_first(
    value: &Value,
    bind: impl Fn(&mut Activation, Value),
    eval: impl Fn(&Activation),
) -> (Duration, Duration) {
    measure_with(
        || {
            let mut act = Activation::new();
            bind(&mut act, value.clone());
            act
        },
        |act| eval(act),
    )
}

fn row(case: &str, (p50, p99): (Duration, Duration)) {
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    println!(
        "{case:<44} p50 {:>8.2} µs   p99 {:>8.2} µs",
        us(p50),
        us(p99)
    );
}

fn machine() -> String {
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown cpu".into());
    format!("{cpus} cpus, {model}")
}

fn main() {
    println!("machine: {}", machine());

    let context = task_context();
    let bind_context = |act: &mut Activation, v: Value| {
        act.set_aliased("context", "c", v);
    };
    let assert = Expression::compile(
        "context.capabilities.calc.count_successful < 1000 && context.user.id != ''",
    )
    .unwrap();
    let run_assert = |act: &Activation| assert!(assert.evaluate_bool(black_box(act)).unwrap());
    row(
        "assert: build activation (context)",
        measure_build(&context, bind_context),
    );
    row(
        "assert: first eval on a fresh activation",
        measure_first(&context, bind_context, run_assert),
    );
    let mut act = Activation::new();
    bind_context(&mut act, context);
    row("assert: eval", measure(|| run_assert(&act)));

    let event = comment_event();
    let bind_event = |act: &mut Activation, v: Value| {
        act.set("event", v).set("parameters", json!({}));
    };
    let filter =
        Expression::compile("event.payload.comment.user.login == 'alice' && !has(event) == false")
            .unwrap();
    let run_filter = |act: &Activation| assert!(filter.evaluate_bool(black_box(act)).unwrap());
    row(
        "filter: build activation (event)",
        measure_build(&event, bind_event),
    );
    row(
        "filter: first eval on a fresh activation",
        measure_first(&event, bind_event, run_filter),
    );
    let mut act = Activation::new();
    bind_event(&mut act, event.clone());
    row("filter: eval", measure(|| run_filter(&act)));

    let template = Template::parse(
        "#{event.payload.issue.number} {event.payload.issue.title}: {event.payload.comment.user.login} said {event.payload.comment.body}",
    )
    .unwrap();
    let render = |act: &Activation| {
        assert_eq!(
            template.render(black_box(act)).unwrap(),
            "#1347 Found a bug: alice said Me too: the fix is in #1348."
        );
    };
    row(
        "template: first render on a fresh activation",
        measure_first(&event, bind_event, render),
    );
    row("template: render (4 holes)", measure(|| render(&act)));
}
