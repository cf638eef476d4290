//! Shared test fixtures: the guest components, a plugin host, the fake GitHub server, a
//! capture of the host's log.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use agentmesh_plugins::{LoadedComponent, MemoryKv, PluginConfig, PluginHost};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper::{Request, Response};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tracing_subscriber::layer::{Context, SubscriberExt};
use wasmtime_wasi_http::io::TokioIo;

/// The command that builds the guests.
pub const BUILD_GUESTS: &str =
    "cargo build --release --target wasm32-wasip2 --manifest-path guests/Cargo.toml";

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The built component of the guest crate whose package is `name` (`-` → `_`, as cargo names
/// the file). Fails with the build command when it is missing.
pub fn guest(name: &str) -> PathBuf {
    let path = repo_root()
        .join("guests/target/wasm32-wasip2/release")
        .join(format!("{}.wasm", name.replace('-', "_")));
    assert!(
        path.exists(),
        "guest component {} is missing: build the guests first, from the repository root:\n    {BUILD_GUESTS}",
        path.display()
    );
    path
}

/// A plugin host shared by the tests (compiling each component once), with its key-value store.
pub fn shared() -> &'static (PluginHost, Arc<MemoryKv>) {
    static HOST: OnceLock<(PluginHost, Arc<MemoryKv>)> = OnceLock::new();
    HOST.get_or_init(|| {
        let kv = Arc::new(MemoryKv::new());
        let config = PluginConfig {
            max_instances: 32,
            ..PluginConfig::default()
        };
        let host = PluginHost::new(config, kv.clone()).expect("plugin host");
        (host, kv)
    })
}

/// The guest `name` loaded in the shared host (loaded once per test binary).
pub fn load(name: &str) -> Arc<LoadedComponent> {
    static LOADED: OnceLock<Mutex<Vec<Arc<LoadedComponent>>>> = OnceLock::new();
    let loaded = LOADED.get_or_init(|| Mutex::new(Vec::new()));
    let mut loaded = loaded.lock().unwrap();
    if let Some(c) = loaded.iter().find(|c| c.name() == name) {
        return c.clone();
    }
    let component = shared().0.load_named(name, &guest(name)).expect("load");
    loaded.push(component.clone());
    component
}

/// One request the fake GitHub server received.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Value,
}

impl Recorded {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A fake GitHub API on 127.0.0.1 (a free port). It answers `pulls` and `comments` like
/// GitHub, records every request, and stops by itself: when the test's runtime ends, or after
/// a minute at the latest.
pub struct FakeGithub {
    pub addr: SocketAddr,
    pub requests: Arc<Mutex<VecDeque<Recorded>>>,
}

impl FakeGithub {
    pub async fn start() -> FakeGithub {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let requests = Arc::new(Mutex::new(VecDeque::new()));
        let recorded = requests.clone();
        tokio::spawn(async move {
            let serve = async {
                loop {
                    let Ok((stream, _)) = listener.accept().await else {
                        break;
                    };
                    let recorded = recorded.clone();
                    tokio::spawn(async move {
                        let service = service_fn(move |req| answer(req, recorded.clone()));
                        let _ = hyper::server::conn::http1::Builder::new()
                            .serve_connection(TokioIo::new(stream), service)
                            .await;
                    });
                }
            };
            let _ = tokio::time::timeout(Duration::from_secs(60), serve).await;
        });
        FakeGithub { addr, requests }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn received(&self) -> Vec<Recorded> {
        self.requests.lock().unwrap().iter().cloned().collect()
    }
}

async fn answer(
    req: Request<hyper::body::Incoming>,
    recorded: Arc<Mutex<VecDeque<Recorded>>>,
) -> Result<Response<Full<Bytes>>, hyper::Error> {
    let method = req.method().to_string();
    let path = req
        .uri()
        .path_and_query()
        .map(|p| p.to_string())
        .unwrap_or_default();
    let headers = req
        .headers()
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("").to_owned()))
        .collect();
    let bytes = req.into_body().collect().await?.to_bytes();
    let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    recorded.lock().unwrap().push_back(Recorded {
        method: method.clone(),
        path: path.clone(),
        headers,
        body: body.clone(),
    });
    if path == "/slow" {
        // Answers after the callers' timeouts (the connection task ends with the runtime).
        tokio::time::sleep(Duration::from_secs(30)).await;
    }
    let (status, reply) = match (method.as_str(), path.as_str()) {
        ("POST", "/repos/acme/web/pulls") => (
            201,
            json!({
                "number": 42,
                "state": "open",
                "title": body["title"],
                "body": body["body"],
                "head": {"ref": body["head"]},
                "base": {"ref": body["base"]},
                "html_url": "https://github.example/acme/web/pull/42",
            }),
        ),
        ("GET", "/repos/acme/web/pulls?state=open") => (
            200,
            json!([{"number": 42, "state": "open", "title": "Fix the login page"}]),
        ),
        ("POST", "/repos/acme/web/issues/42/comments") => {
            (201, json!({"id": 7, "body": body["body"]}))
        }
        ("GET", "/ping") => (200, json!({"pong": true})),
        _ => (404, json!({"message": "Not Found"})),
    };
    let response = Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(reply.to_string())))
        .unwrap();
    Ok(response)
}

/// One event of the host's log: the `component.name` it was tagged with, and its message.
#[derive(Debug, Clone, Default)]
pub struct Logged {
    pub component: Option<String>,
    pub message: String,
}

impl tracing::field::Visit for Logged {
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        if field.name() == "component.name" {
            self.component = Some(value.to_owned());
        }
    }

    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.message = format!("{value:?}");
        }
    }
}

/// Records every event into the shared list.
struct Capture(Arc<Mutex<Vec<Logged>>>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Capture {
    fn on_event(&self, event: &tracing::Event<'_>, _ctx: Context<'_, S>) {
        let mut logged = Logged::default();
        event.record(&mut logged);
        self.0.lock().unwrap().push(logged);
    }
}

/// Captures the host's log on this thread (every level) while the guard lives. Guest calls
/// log on the thread that polls them, so a test that captures runs on a current-thread
/// runtime.
pub fn capture_log() -> (tracing::subscriber::DefaultGuard, Arc<Mutex<Vec<Logged>>>) {
    let logged = Arc::new(Mutex::new(Vec::new()));
    let subscriber = tracing_subscriber::registry().with(Capture(logged.clone()));
    (tracing::subscriber::set_default(subscriber), logged)
}
