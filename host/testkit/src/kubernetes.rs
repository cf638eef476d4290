//! A stand-in for the Kubernetes API server: the few endpoints the `kubernetes_job` runtime
//! uses (create, read and delete a Job; list its pods; read a pod's log), over plain HTTP on
//! loopback, with a bearer token. Jobs do not run anything: the test says, per Job, what its
//! one pod prints, how it exits and how long it takes.
//!
//! ```no_run
//! use std::time::Duration;
//! use agentmesh_testkit::kubernetes::{Cluster, Run};
//! let cluster = Cluster::start("k8s-token", |_job| Run::exits(0, "done\n", Duration::ZERO));
//! let url = cluster.url(); // the `api_server` a tool's settings name
//! ```

use std::collections::BTreeMap;
use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::remote::read_request;

/// How long a cluster serves before it stops by itself (a test that forgets it ends anyway).
const SERVE_FOR: Duration = Duration::from_secs(120);

/// What a Job's pod does.
#[derive(Debug, Clone)]
pub struct Run {
    /// The pod's exit code; `None`: it never ends.
    pub exit_code: Option<i32>,
    /// What it prints.
    pub log: String,
    /// How long it runs.
    pub takes: Duration,
}

impl Run {
    /// A pod that prints `log` and exits with `code` after `takes`.
    pub fn exits(code: i32, log: &str, takes: Duration) -> Run {
        Run {
            exit_code: Some(code),
            log: log.to_owned(),
            takes,
        }
    }

    /// A pod that runs for ever.
    pub fn forever() -> Run {
        Run {
            exit_code: None,
            log: String::new(),
            takes: Duration::MAX,
        }
    }
}

/// A Job the cluster holds.
#[derive(Debug, Clone)]
pub struct Job {
    /// `metadata.name`.
    pub name: String,
    /// The namespace it was created in.
    pub namespace: String,
    /// The object as the client sent it.
    pub sent: Value,
    /// Whether it was deleted, and the `propagationPolicy` of the deletion.
    pub deleted: Option<String>,
    run: Run,
    created: Instant,
}

impl Job {
    fn finished(&self) -> bool {
        self.run.exit_code.is_some() && self.created.elapsed() >= self.run.takes
    }

    fn pod(&self) -> String {
        format!("{}-p0d", self.name)
    }

    fn object(&self) -> Value {
        let mut status = json!({"active": 1});
        if self.finished() {
            let ok = self.run.exit_code == Some(0);
            let (kind, count) = if ok {
                ("Complete", "succeeded")
            } else {
                ("Failed", "failed")
            };
            status = json!({count: 1, "conditions": [{"type": kind, "status": "True"}]});
        }
        json!({
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": self.name, "namespace": self.namespace, "uid": format!("uid-{}", self.name)},
            "spec": self.sent.get("spec").cloned().unwrap_or(Value::Null),
            "status": status,
        })
    }

    fn pod_object(&self) -> Value {
        let container = self
            .sent
            .pointer("/spec/template/spec/containers/0/name")
            .cloned()
            .unwrap_or(json!("main"));
        let state = match self.run.exit_code {
            Some(code) if self.finished() => json!({"terminated": {"exitCode": code}}),
            _ => json!({"running": {}}),
        };
        json!({
            "metadata": {"name": self.pod(), "namespace": self.namespace,
                         "labels": {"job-name": self.name},
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "status": {"containerStatuses": [{"name": container, "state": state}]},
        })
    }
}

/// What the cluster saw and holds.
#[derive(Default)]
struct State {
    jobs: BTreeMap<String, Job>,
    requests: Vec<String>,
}

/// The stand-in, serving on a thread until dropped (or for two minutes).
pub struct Cluster {
    port: u16,
    state: Arc<Mutex<State>>,
    stop: Arc<AtomicBool>,
}

impl Cluster {
    /// Serves on a free loopback port; requests must carry `Authorization: Bearer {token}`
    /// (else 401); each Job created runs as `run(job)` says.
    pub fn start(token: &str, run: impl Fn(&Value) -> Run + Send + 'static) -> Cluster {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        listener
            .set_nonblocking(true)
            .expect("non-blocking listener");
        let port = listener.local_addr().map(|a| a.port()).unwrap_or_default();
        let state = Arc::new(Mutex::new(State::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let (shared, stopped, bearer) = (
            Arc::clone(&state),
            Arc::clone(&stop),
            format!("Bearer {token}"),
        );
        std::thread::spawn(move || {
            let deadline = Instant::now() + SERVE_FOR;
            let mut created = 0;
            while !stopped.load(Ordering::Relaxed) && Instant::now() < deadline {
                match listener.accept() {
                    Ok((stream, _)) => {
                        let _ = exchange(stream, &shared, &bearer, &run, &mut created);
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Cluster { port, state, stop }
    }

    /// The API server's URL.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The Jobs created so far, in order of creation.
    pub fn jobs(&self) -> Vec<Job> {
        let state = self.state.lock().unwrap();
        let mut jobs: Vec<Job> = state.jobs.values().cloned().collect();
        jobs.sort_by_key(|j| j.created);
        jobs
    }

    /// Every request line received, in order.
    pub fn requests(&self) -> Vec<String> {
        self.state.lock().unwrap().requests.clone()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Reads one request from `stream` and answers it.
fn exchange(
    stream: TcpStream,
    state: &Mutex<State>,
    bearer: &str,
    run: &impl Fn(&Value) -> Run,
    created: &mut usize,
) -> std::io::Result<()> {
    let (request, mut stream) = read_request(stream)?;
    let (line, headers, body) = (request.request_line, request.headers, request.body);
    let authorized = headers
        .iter()
        .any(|(k, v)| k == "authorization" && v == bearer);
    let (status, content_type, text) = if authorized {
        let mut state = state.lock().unwrap();
        state.requests.push(line.clone());
        answer(&mut state, &line, body.as_bytes(), run, created)
    } else {
        state.lock().unwrap().requests.push(line.clone());
        (
            "401 Unauthorized",
            "application/json",
            status_object(401, "Unauthorized"),
        )
    };
    write!(
        stream,
        "HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{text}",
        text.len()
    )
}

fn status_object(code: u16, reason: &str) -> String {
    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason, "code": code})
        .to_string()
}

/// The answer to request `line` with `body`: status, content type, body.
fn answer(
    state: &mut State,
    line: &str,
    body: &[u8],
    run: &impl Fn(&Value) -> Run,
    created: &mut usize,
) -> (&'static str, &'static str, String) {
    let mut parts = line.split(' ');
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let not_found = (
        "404 Not Found",
        "application/json",
        status_object(404, "NotFound"),
    );
    match (method, segments.as_slice()) {
        ("POST", ["apis", "batch", "v1", "namespaces", ns, "jobs"]) => {
            let Ok(sent) = serde_json::from_slice::<Value>(body) else {
                return (
                    "400 Bad Request",
                    "application/json",
                    status_object(400, "BadRequest"),
                );
            };
            if sent["kind"] != "Job" || sent["apiVersion"] != "batch/v1" {
                return (
                    "400 Bad Request",
                    "application/json",
                    status_object(400, "BadRequest"),
                );
            }
            *created += 1;
            let prefix = sent
                .pointer("/metadata/generateName")
                .and_then(Value::as_str)
                .unwrap_or("job-");
            let name = format!("{prefix}{:05}", *created);
            let job = Job {
                name: name.clone(),
                namespace: (*ns).to_owned(),
                run: run(&sent),
                sent,
                deleted: None,
                created: Instant::now(),
            };
            let object = job.object().to_string();
            state.jobs.insert(name, job);
            ("201 Created", "application/json", object)
        }
        ("GET", ["apis", "batch", "v1", "namespaces", ns, "jobs", name]) => {
            match state.jobs.get(*name) {
                Some(job) if job.namespace == *ns && job.deleted.is_none() => {
                    ("200 OK", "application/json", job.object().to_string())
                }
                _ => not_found,
            }
        }
        ("DELETE", ["apis", "batch", "v1", "namespaces", ns, "jobs", name]) => {
            match state.jobs.get_mut(*name) {
                Some(job) if job.namespace == *ns && job.deleted.is_none() => {
                    let policy = query
                        .split('&')
                        .find_map(|kv| kv.strip_prefix("propagationPolicy="))
                        .unwrap_or("")
                        .to_owned();
                    job.deleted = Some(policy);
                    (
                        "200 OK",
                        "application/json",
                        json!({"kind": "Status", "status": "Success"}).to_string(),
                    )
                }
                _ => not_found,
            }
        }
        ("GET", ["api", "v1", "namespaces", ns, "pods"]) => {
            let selector = query
                .split('&')
                .find_map(|kv| kv.strip_prefix("labelSelector="))
                .unwrap_or("")
                .replace("%3D", "=");
            let items: Vec<Value> = state
                .jobs
                .values()
                .filter(|j| j.namespace == *ns && j.deleted.is_none())
                .filter(|j| selector == format!("job-name={}", j.name))
                .map(Job::pod_object)
                .collect();
            (
                "200 OK",
                "application/json",
                json!({"kind": "PodList", "items": items}).to_string(),
            )
        }
        ("GET", ["api", "v1", "namespaces", ns, "pods", pod, "log"]) => {
            let Some(job) = state
                .jobs
                .values()
                .find(|j| j.namespace == *ns && j.pod() == *pod && j.deleted.is_none())
            else {
                return not_found;
            };
            let limit = query
                .split('&')
                .find_map(|kv| kv.strip_prefix("limitBytes="))
                .and_then(|v| v.parse::<usize>().ok())
                .unwrap_or(usize::MAX);
            let log = &job.run.log.as_bytes()[..job.run.log.len().min(limit)];
            (
                "200 OK",
                "text/plain",
                String::from_utf8_lossy(log).into_owned(),
            )
        }
        _ => not_found,
    }
}
