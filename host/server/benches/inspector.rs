//! `cargo bench -p agentmesh-server --bench inspector`: the inspector's pages, rendered
//! server-side, on a store of 100,000 tasks.
//!
//! The store (sled, in a temp dir) is filled directly: 100,000 tasks of 3 agents and 10
//! owners, each with a user message (every third one a schedule's) and an answer, and one task
//! of 5,000 events (tool calls with their arguments, observations, messages). The router is
//! called in-process (`tower::ServiceExt::oneshot`, no socket) with a logged-in admin
//! session, so the figures are the server's own work: the index, the store reads, the HTML.
//!
//! Cases: building the index from the store (the first view after a start); the first page
//! of the list; a page deep in the list (keyset cursor in the middle); a filter that matches
//! 1 task in 1,000 (a walk over half the index for 50 rows); two filters together; a filter
//! no task matches (a walk over the whole index); the 5,000-event task's page (the newest
//! page) and an early page of it. Each prints p50 and p99 of 200 requests and the answer's
//! size in bytes. Then the JSON API's lists, served from the same index: `GET /v1/tasks` (first
//! page, a page in the middle, a status filter) and `GET /v1/reviews` (100 tasks wait for a
//! review); and, for comparison, what those handlers did before the index served them (every
//! record read per call), called in-process 10 times.

// A bench is a program that reports; failing to set up is a crash worth seeing.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use agentmesh_engine::{Decider, PendingReview, Status, TaskRecord, UserRef};
use agentmesh_model::event::{
    ContentPart, EventKind, EventSource, MessageMetadata, ToolCall, TriggerEnvelope,
};
use agentmesh_server::{AppState, Auth, Limits, Serving, Token};
use agentmesh_store::Typed;
use axum::body::Body;
use http_body_util::BodyExt;
use serde_json::json;
use tower::ServiceExt;

/// The allocator of the `agentmesh` binary, so the figures are the shipped host's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const TASKS: usize = 100_000;
const BIG_TASK_EVENTS: usize = 5_000;
const SAMPLES: usize = 200;

fn record(id: &str, i: usize, ms: i64) -> TaskRecord {
    let mut record = TaskRecord::default();
    record.id = id.to_owned();
    record.agent = ["t/a", "t/b", "t/c"][i % 3].to_owned();
    record.user = UserRef {
        id: format!("user:{}", i % 10),
        email: None,
    };
    record.status = Some(match i % 1000 {
        7 => Status::Terminated,
        3 => Status::Waiting,
        _ => Status::Idle,
    });
    if i % 1000 == 3 {
        record.pending_review = Some(PendingReview {
            review_id: format!("rv_{i}"),
            reviewer: "user:ops".into(),
            call_id: None,
            requested_ms: ms + 100,
            triggered: false,
            step: json!({"action": "t/tool.act", "phase": "before", "expression": "review('user:ops')"}),
            subject: json!({"input": {"n": i}}),
        });
    }
    record.created_at = agentmesh_engine::task::rfc3339(ms);
    record.created_ms = ms;
    record.last_activity_ms = ms + 500;
    record
}

fn message(source: EventSource, text: &str, trigger: bool) -> (EventSource, EventKind) {
    let metadata = trigger.then(|| MessageMetadata {
        queued_at: Some(0),
        trigger: Some(TriggerEnvelope {
            source: "schedule".into(),
            fired_at: 0,
            schedule_id: Some("t/nightly".into()),
            ..TriggerEnvelope::default()
        }),
    });
    (
        source,
        EventKind::MessageEvent {
            content: vec![ContentPart::text(text)],
            metadata,
        },
    )
}

/// p50 and p99 of `samples`.
fn percentiles(mut samples: Vec<Duration>) -> (Duration, Duration) {
    samples.sort();
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    (at(0.50), at(0.99))
}

/// `GET path` with `credential`: a session cookie (`name=value`) or a bearer token.
async fn get(app: &axum::Router, path: &str, credential: &str) -> (u16, usize) {
    let (name, value) = match credential.strip_prefix("Bearer ") {
        Some(_) => ("authorization", credential),
        None => ("cookie", credential),
    };
    let request = http::Request::get(path)
        .header(name, value)
        .body(Body::empty())
        .unwrap();
    let response = app.clone().oneshot(request).await.unwrap();
    let status = response.status().as_u16();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, body.len())
}

async fn measure(app: &axum::Router, name: &str, path: &str, credential: &str) {
    measure_n(app, name, path, credential, SAMPLES).await;
}

async fn measure_n(app: &axum::Router, name: &str, path: &str, credential: &str, n: usize) {
    let (status, bytes) = get(app, path, credential).await;
    assert_eq!(status, 200, "{name}: {path}");
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let start = Instant::now();
        get(app, path, credential).await;
        samples.push(start.elapsed());
    }
    let (p50, p99) = percentiles(samples);
    println!(
        "{name:<42} p50 {:>8.2} ms  p99 {:>8.2} ms  {:>7} bytes",
        p50.as_secs_f64() * 1e3,
        p99.as_secs_f64() * 1e3,
        bytes
    );
}

fn main() {
    let dir = tempfile::tempdir().unwrap();
    let manifests = ["t/a", "t/b", "t/c"]
        .iter()
        .map(|id| agentmesh_testkit::fixtures::scripted_agent(id, ""))
        .collect::<Vec<_>>()
        .join("---\n");
    agentmesh_testkit::engine::write_config(
        dir.path(),
        &manifests,
        &[("script.yaml", "responses:\n  - text: Done.\n")],
    );
    let engine = agentmesh_testkit::engine::engine_at(dir.path(), None);
    let store = engine.store();

    let start = Instant::now();
    let base = agentmesh_store::now_ms() - 86_400_000;
    for i in 0..TASKS {
        let id = format!("t_{i:08}");
        let ms = base + i as i64 * 10;
        let events = vec![
            message(
                EventSource::User,
                &format!("Task number {i}, please."),
                i % 3 == 0,
            ),
            message(EventSource::Agent, "Done.", false),
        ];
        store
            .commit_buffered(&id, &record(&id, i, ms), events)
            .unwrap();
    }
    let big = "t_big";
    store
        .commit_buffered(big, &record(big, 1, base + TASKS as i64 * 10), Vec::new())
        .unwrap();
    for chunk in 0..BIG_TASK_EVENTS / 100 {
        let events: Vec<_> = (0..50)
            .flat_map(|k| {
                let n = chunk * 50 + k;
                [
                    (
                        EventSource::Agent,
                        EventKind::ActionEvent {
                            tool_call: ToolCall {
                                id: format!("call_{n}"),
                                name: "calc_add".into(),
                                arguments: json!({"a": n, "b": 2, "note": "<b>escaped</b>"}),
                            },
                            llm_response_id: format!("r_{n}"),
                            thought: String::new(),
                        },
                    ),
                    (
                        EventSource::Environment,
                        EventKind::ObservationEvent {
                            tool_call_id: format!("call_{n}"),
                            tool_name: "calc_add".into(),
                            result: json!({"result": n + 2}),
                        },
                    ),
                ]
            })
            .collect();
        store
            .commit_buffered(big, &record(big, 1, base + TASKS as i64 * 10), events)
            .unwrap();
    }
    store.flush().unwrap();
    println!(
        "filled the store with {TASKS} tasks and one of {BIG_TASK_EVENTS} events in {:.1} s",
        start.elapsed().as_secs_f64()
    );

    let runtime = agentmesh_testkit::engine::runtime();
    runtime.block_on(async {
        let router = agentmesh_routing::EventRouter::new(engine.clone()).unwrap();
        let triggers = agentmesh_triggers::Triggers::new(engine.clone()).unwrap();
        let state = Arc::new(AppState::new(
            router,
            triggers,
            Serving {
                auth: Auth::new(vec![Token {
                    secret: "bench-token".into(),
                    subject: "user:admin".into(),
                    role: agentmesh_server::Role::Admin,
                }]),
                config_dir: dir.path().to_owned(),
                max_body_bytes: 1 << 20,
                limits: Limits {
                    max_connections: 64,
                    header_timeout: Duration::from_secs(10),
                    body_timeout: Duration::from_secs(10),
                    idle_timeout: Duration::from_secs(10),
                },
                bound: "127.0.0.1:0".parse().unwrap(),
            },
        ));
        let app = agentmesh_server::router(Arc::clone(&state));
        let login = http::Request::post("/ui/login")
            .header("content-type", "application/x-www-form-urlencoded")
            .body(Body::from("token=bench-token"))
            .unwrap();
        let answer = app.clone().oneshot(login).await.unwrap();
        let cookie = answer.headers()["set-cookie"]
            .to_str()
            .unwrap()
            .split(';')
            .next()
            .unwrap()
            .to_owned();

        // The index was started at `AppState::new`; time a build of its own.
        let fresh = agentmesh_server::inspector::index::TaskIndex::default();
        let start = Instant::now();
        let indexed = fresh.current(engine.store()).unwrap().len();
        println!(
            "index of {indexed} tasks built from the store in {:.2} s",
            start.elapsed().as_secs_f64()
        );
        // The first view waits for the index the state builds.
        let start = Instant::now();
        get(&app, "/ui/", &cookie).await;
        println!(
            "first view after the start: {:.2} s",
            start.elapsed().as_secs_f64()
        );

        let middle = TASKS / 2;
        let middle_key = format!("{}:t_{middle:08}", base + middle as i64 * 10);
        measure(&app, "task list, first page (50 tasks)", "/ui/", &cookie).await;
        measure(
            &app,
            "task list, a page in the middle",
            &format!("/ui/?older={}", middle_key.replace(':', "%3A")),
            &cookie,
        )
        .await;
        measure(
            &app,
            "task list, status=terminated (1 in 1,000)",
            "/ui/?status=terminated",
            &cookie,
        )
        .await;
        measure(
            &app,
            "task list, agent and schedule-triggered",
            "/ui/?agent=t%2Fa&trigger=schedule",
            &cookie,
        )
        .await;
        measure(
            &app,
            "task list, a filter no task matches",
            "/ui/?agent=t%2Fb&trigger=schedule",
            &cookie,
        )
        .await;
        measure(
            &app,
            "task page, 5,000 events (the newest page)",
            &format!("/ui/tasks/{big}"),
            &cookie,
        )
        .await;
        measure(
            &app,
            "task page, 5,000 events (an early page)",
            &format!("/ui/tasks/{big}?to=1000"),
            &cookie,
        )
        .await;
        measure(&app, "reviews inbox", "/ui/reviews", &cookie).await;
        measure(&app, "triggers and schedules", "/ui/triggers", &cookie).await;
        measure(&app, "plugins and config", "/ui/plugins", &cookie).await;
        // The JSON API's lists, from the index too.
        let api = |name: &str| format!("API {name}");
        measure(
            &app,
            &api("GET /v1/tasks?limit=50"),
            "/v1/tasks?limit=50",
            "Bearer bench-token",
        )
        .await;
        measure(
            &app,
            &api("GET /v1/tasks, a page in the middle"),
            &format!(
                "/v1/tasks?limit=50&cursor={}",
                middle_key.replace(':', "%3A")
            ),
            "Bearer bench-token",
        )
        .await;
        measure(
            &app,
            &api("GET /v1/tasks?status=terminated&limit=50"),
            "/v1/tasks?status=terminated&limit=50",
            "Bearer bench-token",
        )
        .await;
        measure(
            &app,
            &api("GET /v1/reviews (100 waiting)"),
            "/v1/reviews",
            "Bearer bench-token",
        )
        .await;
        // Before: what the API's handlers did per call, called in-process (no HTTP, no JSON
        // encoding): every record read, filtered and sorted for a page of 50; every record
        // read for the waiting reviews.
        let store = engine.store();
        time_n(
            "before: GET /v1/tasks?limit=50 (every record read)",
            10,
            || {
                let mut tasks = engine.list_tasks(None, None, None).unwrap();
                tasks.sort_by(|a, b| (b.created_ms, &b.id).cmp(&(a.created_ms, &a.id)));
                let page: Vec<_> = tasks
                    .iter()
                    .take(50)
                    .map(|r| {
                        agentmesh_server::resources::task(r, store.queued_count(&r.id).unwrap())
                    })
                    .collect();
                assert_eq!(page.len(), 50);
            },
        );
        time_n("before: GET /v1/reviews (every record read)", 10, || {
            let reviews = engine
                .pending_reviews(Decider::Admin("user:admin"))
                .unwrap();
            assert_eq!(reviews.len(), 100);
        });
    });
}

/// Times `n` calls of `f` (after one not timed), printed as [`measure_n`] does.
fn time_n(name: &str, n: usize, mut f: impl FnMut()) {
    f();
    let samples = (0..n)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed()
        })
        .collect();
    let (p50, p99) = percentiles(samples);
    println!(
        "{name:<42} p50 {:>8.2} ms  p99 {:>8.2} ms",
        p50.as_secs_f64() * 1e3,
        p99.as_secs_f64() * 1e3,
    );
}
