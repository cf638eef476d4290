//! The `mcp` runtime: tools of MCP servers, each task with its own session of a tool's server.
//!
//! A session is opened (Initialize: the stdio server started, or the HTTP session
//! initialized) on a task's first call of the tool, reused by the task's later calls, and
//! closed (Teardown) when the task ends, as a Wasm tool session is (`wasm.rs`). MCP gives a
//! server no way to say that it can serve several tasks at once, so an stdio server runs as one
//! process per task. Sessions are pooled ([`McpSessions`]): at most `policy.max_mcp_sessions`
//! are open at once.
//!
//! Whatever a server does is an observation the LLM sees, and the task goes on: a server that
//! does not start, exits, answers late (every wait on a server is bounded by the action's
//! `timeout`), sends more than `max_output`, or answers a JSON-RPC error or a tool error. A
//! session that broke (the server stopped, timed out or flooded) is closed, and the task's next
//! call opens a new one. Only faults of the configuration itself end the task: a setting that
//! does not render, a header that is not one, a `url` whose origin is not allowed.
//!
//! [`probe`] (`agentmesh validate --probe`) opens one session with each server, without a
//! task, to list its tools and compare them with the actions that call them.

use std::collections::{BTreeMap, HashMap};
use std::pin::Pin;
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use agentmesh_expr::{Activation, Template};
use agentmesh_manifest::check::mcp_program;
use agentmesh_manifest::suggest::did_you_mean;
use agentmesh_secrets::{Secrets, SharedSecrets};
use process_wrap::tokio::{ChildWrapper, CommandWrap, ProcessGroup};
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, Implementation,
    PaginatedRequestParams, ProtocolVersion,
};
use rmcp::service::{RunningService, ServiceError};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Map, Value};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncRead, BufReader, ReadBuf};
use tokio::process::ChildStderr;
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::{Instant, timeout};

use crate::lock;
use crate::plan::mcp::{HttpServer, McpPlan, McpServer, StdioServer, origin_of};
use crate::plan::{Runtime, ToolPlan};
use crate::pool::{Pool, SessionKey, State};
use crate::runtime::ActionResult;

/// How many sessions may be open at once when the host config does not say.
const DEFAULT_MAX_SESSIONS: usize = 64;

/// How long a closing stdio server is given to exit by itself once its stdin is closed (the
/// MCP stdio shutdown), and the closing session to end; then its process group is killed.
const EXIT_GRACE: Duration = Duration::from_secs(2);

/// How long reaping a killed server may take. Reaping a process killed with SIGKILL is
/// immediate; the bound is there so that no teardown can wait forever.
const REAP_WAIT: Duration = Duration::from_secs(5);

/// The longest stderr line logged; the rest of a longer line is dropped. A server controls
/// what it prints: without a bound, one endless line would be held in memory and become one
/// giant log record.
const MAX_STDERR_LINE: usize = 4096;

/// How much of its stderr a session logs over its life before the rest is read and dropped
/// (with one warning): a server printing in a loop cannot flood the host's log and disk.
const MAX_STDERR_TOTAL: usize = 1024 * 1024;

/// How much of the end of stderr is kept, to say why a server did not start.
const STDERR_TAIL: usize = 1024;

/// The open MCP sessions of every task, bounded in number.
pub(crate) struct McpSessions {
    /// Every task's sessions (see `pool.rs`).
    pool: Pool<Session>,
    /// The client of streamable-HTTP servers (`Err`: why it could not be made).
    http: Result<reqwest::Client, String>,
    /// The secrets in force, hidden in a server's stderr before its end is kept.
    secrets: SharedSecrets,
}

/// An open MCP session.
pub(crate) struct Session {
    /// The MCP client.
    pub(crate) client: RunningService<RoleClient, McpClient>,
    /// The server process, for stdio.
    pub(crate) process: Option<ServerProcess>,
    /// Set when the server sent a message over `max_output` (the session then ends).
    oversized: Arc<AtomicBool>,
    /// The tool's settings it was opened with (its `env`, `url` and `headers` rendered from
    /// them): a call after a reload changed them opens the session anew.
    settings: Map<String, Value>,
}

/// This host as an MCP client: how it introduces itself, and where the resource updates the
/// server sends go (a session opened for the tool's events; other sessions subscribe to
/// nothing and drop any).
pub(crate) struct McpClient {
    updates: Option<tokio::sync::mpsc::Sender<String>>,
    /// Set once an update was dropped because the receiver fell behind.
    dropped: AtomicBool,
}

impl McpClient {
    fn new(updates: Option<tokio::sync::mpsc::Sender<String>>) -> McpClient {
        McpClient {
            updates,
            dropped: AtomicBool::new(false),
        }
    }
}

impl rmcp::ClientHandler for McpClient {
    fn get_info(&self) -> ClientConfig {
        client_config()
    }

    async fn on_resource_updated(
        &self,
        params: rmcp::model::ResourceUpdatedNotificationParam,
        _: rmcp::service::NotificationContext<RoleClient>,
    ) {
        let Some(updates) = &self.updates else { return };
        // Bounded: a server that floods updates loses some rather than filling the host's
        // memory.
        if updates.try_send(params.uri).is_err() && !self.dropped.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                "MCP resource updates arrive faster than they are routed: some were dropped"
            );
        }
    }
}

/// A task's session of one MCP server, as the inspector shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpSessionView {
    /// The tool (`namespace/name`) whose server it is.
    pub tool: String,
    /// The server block its actions share (the name of the `mcp:` session).
    pub session: String,
    /// What it does now.
    pub state: McpSessionState,
    /// The process id of an open stdio server.
    pub pid: Option<u32>,
}

/// What a session does, as far as a look that never waits can tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum McpSessionState {
    /// Open and idle.
    Open,
    /// In a call (or being opened for one).
    Busy,
    /// Not open: the last one broke, or it was not opened yet; the next call opens one.
    Closed,
}

/// Why a session did not open.
enum OpenError {
    /// The configuration's fault: the task ends.
    Config(String),
    /// The server's: an observation.
    Server(String),
}

impl McpSessions {
    /// An empty pool.
    pub(crate) fn new(secrets: SharedSecrets) -> McpSessions {
        // No redirects: one would take the session, and its headers, to a place the manifest
        // did not allow. No idle connections kept, as rmcp's own client does: reusing one whose
        // last response was not read to its end stalls on delayed ACKs.
        let http = agentmesh_llm::http_client()
            .redirect(reqwest::redirect::Policy::none())
            .pool_max_idle_per_host(0)
            .build()
            .map_err(|e| format!("the HTTP client for MCP servers could not start: {e}"));
        McpSessions {
            pool: Pool::new(),
            http,
            secrets,
        }
    }

    /// Calls the MCP tool of action `plan` of `tool` with `input` as its arguments, in task
    /// `task`'s session of the server (opened first if need be); `max_sessions`
    /// (`policy.max_mcp_sessions`, at least 1) bounds the pool.
    pub(crate) async fn call(
        &self,
        task: &str,
        tool: &ToolPlan,
        plan: &McpPlan,
        max_sessions: Option<u32>,
        input: &Value,
    ) -> ActionResult {
        let max_sessions = max_sessions.map_or(DEFAULT_MAX_SESSIONS, |n| n.max(1) as usize);
        let key = (task.to_owned(), format!("{} {}", tool.id(), plan.session));
        let deadline = Instant::now() + plan.timeout;
        loop {
            let Ok(mut held) = self
                .pool
                .reserve(&key, max_sessions, deadline, close_evicted)
                .await
            else {
                return ActionResult::Recoverable(format!(
                    "no MCP session could be opened: all {max_sessions} sessions of the pool \
                     (policy.max_mcp_sessions) are in calls"
                ));
            };
            match *held {
                State::Evicted => continue,
                State::Ended => {
                    return ActionResult::Recoverable(format!(
                        "the task's session of MCP tool `{}` was closed",
                        tool.id()
                    ));
                }
                State::Closed | State::Open(_) => {}
            }
            return self.call_in(&mut held, task, tool, plan, input).await;
        }
    }

    /// One call in a held slot: opens the session if it has none, calls, and closes a session
    /// that broke.
    async fn call_in(
        &self,
        state: &mut State<Session>,
        task: &str,
        tool: &ToolPlan,
        plan: &McpPlan,
        input: &Value,
    ) -> ActionResult {
        let name = &plan.tool_name;
        if let State::Open(open) = state
            && open.settings != tool.settings
            && let State::Open(stale) = std::mem::replace(state, State::Closed)
        {
            // A reload changed the tool's settings: the server was given the old ones (and
            // its output would show an old secret the scrubbing no longer knows).
            tracing::info!(task.id = task, tool.name = %tool.id(), "the tool's settings changed: its MCP session is opened anew");
            close(stale).await;
        }
        if matches!(state, State::Closed) {
            match timeout(plan.timeout, self.open(task, tool, plan)).await {
                Ok(Ok(session)) => *state = State::Open(session),
                Ok(Err(OpenError::Config(e))) => return ActionResult::Fatal(e),
                Ok(Err(OpenError::Server(e))) => return ActionResult::Recoverable(e),
                Err(_) => {
                    return ActionResult::Recoverable(format!(
                        "the MCP server of tool `{}` did not start within {:?} (its timeout)",
                        tool.id(),
                        plan.timeout
                    ));
                }
            }
        }
        let State::Open(session) = state else {
            return ActionResult::Fatal(format!("MCP session of tool `{}` lost", tool.id()));
        };
        let mut params = CallToolRequestParams::new(name.clone());
        params.arguments = match input {
            Value::Object(arguments) => Some(arguments.clone()),
            Value::Null => None,
            other => {
                return ActionResult::Recoverable(format!(
                    "the arguments of MCP tool `{name}` must be an object, not {other}"
                ));
            }
        };
        let answer = timeout(plan.timeout, session.client.call_tool(params)).await;
        let broken = match answer {
            Ok(Ok(result)) => return observation(name, result),
            Ok(Err(ServiceError::McpError(e))) => {
                return ActionResult::Recoverable(format!(
                    "the MCP server refused the call of `{name}`: {} (JSON-RPC error {})",
                    e.message, e.code.0
                ));
            }
            Ok(Err(e)) => Broken::Failed(e.to_string()),
            Err(_) => Broken::TimedOut,
        };
        let State::Open(session) = std::mem::replace(state, State::Closed) else {
            return ActionResult::Fatal(format!("MCP session of tool `{}` lost", tool.id()));
        };
        let oversized = session.oversized.load(Ordering::Relaxed);
        let status = session.close().await;
        ActionResult::Recoverable(broken.describe(name, plan, oversized, status))
    }

    /// Opens a session of `plan`'s server for task `task` (Initialize), with `tool`'s settings.
    async fn open(
        &self,
        task: &str,
        tool: &ToolPlan,
        plan: &McpPlan,
    ) -> Result<Session, OpenError> {
        self.open_with(task, tool, plan, None).await
    }

    /// Opens a session of `tool`'s server for its events (outside the pool): the resource
    /// updates it sends go to `updates`. Why it did not open, in words.
    pub(crate) async fn open_for_events(
        &self,
        tool: &ToolPlan,
        plan: &McpPlan,
        updates: tokio::sync::mpsc::Sender<String>,
    ) -> Result<Session, String> {
        match timeout(
            plan.timeout,
            self.open_with("(events)", tool, plan, Some(updates)),
        )
        .await
        {
            Ok(Ok(session)) => Ok(session),
            Ok(Err(OpenError::Config(why) | OpenError::Server(why))) => Err(why),
            Err(_) => Err(format!(
                "the MCP server did not start within {:?} (its timeout)",
                plan.timeout
            )),
        }
    }

    async fn open_with(
        &self,
        task: &str,
        tool: &ToolPlan,
        plan: &McpPlan,
        updates: Option<tokio::sync::mpsc::Sender<String>>,
    ) -> Result<Session, OpenError> {
        let settings = tool.settings_activation();
        let id = tool.id();
        let client = McpClient::new(updates);
        let mut session = match &*plan.server {
            McpServer::Stdio(server) => {
                let secrets = self.secrets.get();
                open_stdio((task, &id, secrets), server, plan, &settings, client).await?
            }
            McpServer::Http(server) => {
                let http = self
                    .http
                    .as_ref()
                    .map_err(|e| OpenError::Config(e.clone()))?;
                open_http(&id, server, plan, &settings, (http, client)).await?
            }
        };
        session.settings = tool.settings.clone();
        Ok(session)
    }

    /// Task `task`'s sessions in the pool, by tool, without waiting for any (one in a call is
    /// [`McpSessionState::Busy`]).
    pub(crate) fn of_task(&self, task: &str) -> Vec<McpSessionView> {
        let mut views = self.pool.of_task(task, |key, state| {
            let (tool, session) = key.split_once(' ').unwrap_or((key, ""));
            let (state, pid) = match state {
                None => (McpSessionState::Busy, None),
                Some(State::Open(open)) => (
                    McpSessionState::Open,
                    open.process.as_ref().and_then(ServerProcess::pid),
                ),
                Some(State::Closed | State::Evicted | State::Ended) => {
                    (McpSessionState::Closed, None)
                }
            };
            McpSessionView {
                tool: tool.to_owned(),
                session: session.to_owned(),
                state,
                pid,
            }
        });
        views.sort_by(|a, b| (&a.tool, &a.session).cmp(&(&b.tool, &b.session)));
        views
    }

    /// Tears down every session of `task` (when it ends).
    pub(crate) async fn close_task(&self, task: &str) {
        self.pool
            .close_task(task, |_, session| close(session))
            .await;
    }

    /// Tears down every open session (the host stops).
    pub(crate) async fn close_all(&self) {
        self.pool.close_all(|_, session| close(session)).await;
    }
}

/// Closes a session taken out of the pool (each after the call it may have been in).
async fn close(session: Session) {
    session.close().await;
}

/// Closes the least recently used idle session `key` to make room in the pool.
async fn close_evicted((task, _): SessionKey, session: Session) {
    tracing::info!(
        task.id = task,
        "MCP session pool full: closing the least recently used idle session"
    );
    session.close().await;
}

impl Session {
    /// Teardown: ends the MCP session (closing an stdio server's stdin, the MCP way to ask it
    /// to exit), then stops the server's process group. The server's exit status, when it had
    /// a process that could be reaped.
    async fn close(self) -> Option<ExitStatus> {
        let Session {
            client, process, ..
        } = self;
        let _ = timeout(EXIT_GRACE, client.cancel()).await;
        match process {
            Some(process) => process.stop().await,
            None => None,
        }
    }
}

/// How a call broke its session.
enum Broken {
    /// The connection failed (the server exited, closed its output, or sent too much).
    Failed(String),
    /// No answer within the timeout.
    TimedOut,
}

impl Broken {
    /// What the LLM is told: what happened, and that the next call starts the server again.
    fn describe(
        &self,
        name: &str,
        plan: &McpPlan,
        oversized: bool,
        status: Option<ExitStatus>,
    ) -> String {
        let what = match self {
            _ if oversized => format!(
                "the MCP server sent a message larger than {} bytes (max_output) in answer to `{name}`",
                plan.max_output
            ),
            Broken::TimedOut => format!(
                "the MCP server did not answer `{name}` within {:?} (its timeout)",
                plan.timeout
            ),
            Broken::Failed(_) if status.is_some_and(|s| s.code().is_some()) => {
                format!(
                    "the MCP server stopped during the call of `{name}` ({})",
                    exit(status)
                )
            }
            Broken::Failed(e) => {
                format!("the connection to the MCP server failed during the call of `{name}`: {e}")
            }
        };
        format!("{what}; the session is closed, and the next call starts a new one")
    }
}

/// `status` in words.
fn exit(status: Option<ExitStatus>) -> String {
    match status.map(|s| (s.code(), std::os::unix::process::ExitStatusExt::signal(&s))) {
        Some((Some(code), _)) => format!("it exited with code {code}"),
        Some((None, Some(signal))) => format!("it was ended by signal {signal}"),
        _ => "it did not exit".to_owned(),
    }
}

/// The observation of a call's result: its structured content when it has one, else its
/// content (text parts joined by line breaks; other parts as their MCP JSON). A tool error
/// (`isError: true`) is a recoverable error carrying the content.
fn observation(name: &str, result: CallToolResult) -> ActionResult {
    let content = content(&result);
    if result.is_error == Some(true) {
        let text = match &content {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        return ActionResult::Recoverable(format!("MCP tool `{name}` failed: {text}"));
    }
    ActionResult::Ok(result.structured_content.unwrap_or(content))
}

/// A result's content parts as one value: `null` for none, a string when every part is text,
/// else the list of parts.
fn content(result: &CallToolResult) -> Value {
    let texts: Option<Vec<&str>> = result
        .content
        .iter()
        .map(|part| part.as_text().map(|t| t.text.as_str()))
        .collect();
    match texts {
        _ if result.content.is_empty() => Value::Null,
        Some(texts) => Value::String(texts.join("\n")),
        None => serde_json::to_value(&result.content).unwrap_or(Value::Null),
    }
}

/// How this host introduces itself to MCP servers.
fn client_config() -> ClientConfig {
    ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("agentmesh", env!("CARGO_PKG_VERSION")),
    )
    .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
}

/// Renders each `(name, template)` of `pairs` with `settings`; `what` names the field for an
/// error (a configuration fault).
fn render_all(
    pairs: &[(String, Template)],
    settings: &Activation,
    tool: &str,
    what: &str,
) -> Result<Vec<(String, String)>, OpenError> {
    pairs
        .iter()
        .map(|(name, template)| {
            let value = template.render(settings).map_err(|e| {
                OpenError::Config(format!("`{what}.{name}` of tool `{tool}`: {}", e.message))
            })?;
            Ok((name.clone(), value))
        })
        .collect()
}

/// Starts an stdio server for task `task` and initializes its session. Its environment is
/// exactly the rendered `env`; the program is found through the host's `PATH`.
async fn open_stdio(
    (task, tool, secrets): (&str, &str, Arc<Secrets>),
    server: &StdioServer,
    plan: &McpPlan,
    settings: &Activation,
    client: McpClient,
) -> Result<Session, OpenError> {
    let env = render_all(&server.env, settings, tool, "env")?;
    let command = &server.command;
    let cannot = |why: String| OpenError::Server(format!("cannot start the MCP server: {why}"));
    let path = std::env::var_os("PATH").unwrap_or_default();
    let program = mcp_program(command, &server.dir, &path)
        .map_err(|why| cannot(format!("`{command}` {why}")))?;
    let mut spawn = tokio::process::Command::new(&program);
    spawn
        .args(&server.args)
        .env_clear()
        .envs(env)
        .current_dir(&server.dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut spawn = CommandWrap::from(spawn);
    spawn.wrap(ProcessGroup::leader());
    let mut child = spawn
        .spawn()
        .map_err(|e| cannot(format!("`{command}`: {e}")))?;
    let (stdin, stdout, stderr) = (
        child.stdin().take(),
        child.stdout().take(),
        child.stderr().take(),
    );
    let process = ServerProcess::new(child, stderr, (task, tool), secrets);
    let (Some(stdin), Some(stdout)) = (stdin, stdout) else {
        return Err(cannot(format!(
            "`{command}`: its stdin or stdout is missing"
        )));
    };
    let oversized = Arc::new(AtomicBool::new(false));
    let stdout = LineCap::new(stdout, plan.max_output, Arc::clone(&oversized));
    // `LineCap` bounds every line, so rmcp's own bound (which drops a long line silently
    // and leaves the call waiting) never applies.
    let transport = AsyncRwTransport::new_client(stdout, stdin).with_max_line_length(usize::MAX);
    match client.serve(transport).await {
        Ok(client) => Ok(Session {
            client,
            process: Some(process),
            oversized,
            settings: Map::new(),
        }),
        Err(e) => {
            let (status, tail) = process.stop_with_stderr().await;
            let tail = match tail.trim() {
                "" => String::new(),
                t => format!("; its stderr ended with: {t}"),
            };
            let what = match status {
                _ if oversized.load(Ordering::Relaxed) => format!(
                    "it sent a message larger than {} bytes (max_output)",
                    plan.max_output
                ),
                Some(s) if s.code().is_some() => format!("{} at start", exit(status)),
                _ => format!("its initialization failed: {e}"),
            };
            Err(OpenError::Server(format!(
                "the MCP server `{command}` did not start: {what}{tail}"
            )))
        }
    }
}

/// Opens a streamable-HTTP session with `server`, whose rendered URL must have an allowed
/// origin.
async fn open_http(
    tool: &str,
    server: &HttpServer,
    plan: &McpPlan,
    settings: &Activation,
    (http, client): (&reqwest::Client, McpClient),
) -> Result<Session, OpenError> {
    let url = server
        .url
        .render(settings)
        .map_err(|e| OpenError::Config(format!("the `mcp` url of tool `{tool}`: {}", e.message)))?;
    let origin = origin_of(&url)
        .map_err(|e| OpenError::Config(format!("the `mcp` url `{url}` of tool `{tool}`: {e}")))?;
    if !server.allowed.contains(&origin) {
        let allowed: Vec<String> = server.allowed.iter().map(ToString::to_string).collect();
        return Err(OpenError::Config(format!(
            "the `mcp` url `{url}` of tool `{tool}` is refused: its origin {origin} is not in allowed_hosts ({})",
            allowed.join(", ")
        )));
    }
    let mut headers = HashMap::new();
    for (name, value) in render_all(&server.headers, settings, tool, "headers")? {
        let bad = |what: &str| {
            OpenError::Config(format!(
                "header `{name}` of tool `{tool}`: not a valid header {what}"
            ))
        };
        let header =
            reqwest::header::HeaderName::try_from(name.as_str()).map_err(|_| bad("name"))?;
        let value =
            reqwest::header::HeaderValue::try_from(value.as_str()).map_err(|_| bad("value"))?;
        headers.insert(header, value);
    }
    if server.legacy_sse {
        let headers: reqwest::header::HeaderMap = headers.into_iter().collect();
        let oversized = Arc::new(AtomicBool::new(false));
        let transport =
            crate::mcp_sse::connect(http, &url, headers, plan.max_output, Arc::clone(&oversized))
                .await
                .map_err(OpenError::Server)?;
        return initialize(client, transport, &url, oversized).await;
    }
    let config = StreamableHttpClientTransportConfig::with_uri(url.clone())
        .custom_headers(headers)
        .max_json_response_size(plan.max_output)
        .max_sse_event_size(plan.max_output);
    let transport = StreamableHttpClientTransport::with_client(http.clone(), config);
    initialize(client, transport, &url, Arc::new(AtomicBool::new(false))).await
}

/// Initializes a session with the HTTP server at `url` over `transport` (streamable HTTP or
/// the legacy SSE transport).
async fn initialize<T, E, A>(
    client: McpClient,
    transport: T,
    url: &str,
    oversized: Arc<AtomicBool>,
) -> Result<Session, OpenError>
where
    T: rmcp::transport::IntoTransport<RoleClient, E, A>,
    E: std::error::Error + Send + Sync + 'static,
{
    let client = client.serve(transport).await.map_err(|e| {
        OpenError::Server(format!(
            "cannot open a session with the MCP server at `{url}`: {e}"
        ))
    })?;
    Ok(Session {
        client,
        process: None,
        oversized,
        settings: Map::new(),
    })
}

/// An stdio server's process: the leader of a process group of its own, so that teardown
/// stops whatever it started too. Dropped without [`ServerProcess::stop`] (a call or an
/// opening abandoned at its timeout), its group is killed and the leader is reaped by tokio.
pub(crate) struct ServerProcess {
    child: Option<Box<dyn ChildWrapper>>,
    /// The task logging its stderr.
    stderr: Option<JoinHandle<()>>,
    /// The end of its stderr.
    tail: Arc<Mutex<String>>,
}

impl ServerProcess {
    /// Takes charge of `child`, logging its `stderr` line by line (tagged with `task` and
    /// `tool`) and keeping its end with the values of `secrets` hidden.
    fn new(
        child: Box<dyn ChildWrapper>,
        stderr: Option<ChildStderr>,
        (task, tool): (&str, &str),
        secrets: Arc<Secrets>,
    ) -> ServerProcess {
        let tail = Arc::new(Mutex::new(String::new()));
        let stderr = stderr.map(|stderr| {
            let log = StderrLog {
                task: task.to_owned(),
                tool: tool.to_owned(),
                tail: Arc::clone(&tail),
                secrets,
            };
            tokio::spawn(log.run(BufReader::new(stderr)))
        });
        ServerProcess {
            child: Some(child),
            stderr,
            tail,
        }
    }

    /// The server's process id, while it runs.
    fn pid(&self) -> Option<u32> {
        self.child.as_ref()?.id()
    }

    /// Waits up to [`EXIT_GRACE`] for the server to exit, then kills its process group and
    /// reaps it: its exit status, unless it could not be reaped within [`REAP_WAIT`].
    pub(crate) async fn stop(mut self) -> Option<ExitStatus> {
        let mut child = self.child.take()?;
        let exited = match timeout(EXIT_GRACE, child.wait()).await {
            Ok(Ok(status)) => Some(status),
            _ => None,
        };
        // Whatever the server left running in its group goes with it.
        let _ = child.start_kill();
        match exited {
            Some(status) => Some(status),
            None => match timeout(REAP_WAIT, child.wait()).await {
                Ok(Ok(status)) => Some(status),
                _ => None,
            },
        }
    }

    /// [`ServerProcess::stop`], and the end of what it wrote to stderr.
    async fn stop_with_stderr(mut self) -> (Option<ExitStatus>, String) {
        let stderr = self.stderr.take();
        let tail = Arc::clone(&self.tail);
        let status = self.stop().await;
        // Stopped, its stderr is at its end, unless a process it detached still holds it.
        if let Some(stderr) = stderr {
            let _ = timeout(EXIT_GRACE, stderr).await;
        }
        let tail = lock(&tail).clone();
        (status, tail)
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = child.start_kill();
        }
    }
}

/// Logs a server's stderr.
struct StderrLog {
    task: String,
    tool: String,
    tail: Arc<Mutex<String>>,
    /// Hidden in each line before it is kept: the tail is cut at its start, and a secret
    /// cut there would not be recognised in what is left of it.
    secrets: Arc<Secrets>,
}

impl StderrLog {
    /// Logs each line of `stderr` (at most [`MAX_STDERR_LINE`] bytes of it, and
    /// [`MAX_STDERR_TOTAL`] bytes in all), its secrets hidden, until its end, keeping its last
    /// [`STDERR_TAIL`] bytes. A line is read with as much more as the longest secret, so that
    /// a secret across its cut is hidden whole rather than its start shown.
    async fn run(self, mut stderr: impl AsyncBufRead + Unpin) {
        let mut line = Vec::new();
        let mut total = 0;
        let mut warned = false;
        let read = MAX_STDERR_LINE.saturating_add(self.secrets.longest());
        loop {
            line.clear();
            match read_line_capped(&mut stderr, &mut line, read).await {
                Ok(true) => {}
                Ok(false) | Err(_) => return,
            }
            let text = String::from_utf8_lossy(&line);
            let (text, _) = self.secrets.scrub_prefix(&text, MAX_STDERR_LINE);
            let text = text.trim_end_matches('\r');
            self.keep(text);
            if total < MAX_STDERR_TOTAL {
                tracing::warn!(
                    task.id = self.task,
                    tool.name = self.tool,
                    stream = "stderr",
                    "MCP server: {text}"
                );
            } else if !warned {
                warned = true;
                tracing::warn!(
                    task.id = self.task,
                    tool.name = self.tool,
                    "MCP server stderr exceeds {MAX_STDERR_TOTAL} bytes; dropping the rest"
                );
            }
            total += line.len() + 1;
        }
    }

    /// Keeps `text` at the end of the tail.
    fn keep(&self, text: &str) {
        let mut tail = lock(&self.tail);
        tail.push_str(text);
        tail.push('\n');
        let excess = tail.len().saturating_sub(STDERR_TAIL);
        if excess > 0 {
            let cut = (excess..=tail.len())
                .find(|&i| tail.is_char_boundary(i))
                .unwrap_or(tail.len());
            tail.drain(..cut);
        }
    }
}

/// Reads one line into `line` (without its `\n`), keeping at most `cap` bytes of it and
/// dropping the rest: `false` at the end of the stream.
async fn read_line_capped(
    reader: &mut (impl AsyncBufRead + Unpin),
    line: &mut Vec<u8>,
    cap: usize,
) -> std::io::Result<bool> {
    let mut read_any = false;
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            return Ok(read_any);
        }
        read_any = true;
        let end = available.iter().position(|&b| b == b'\n');
        let text = end.unwrap_or(available.len());
        let room = cap.saturating_sub(line.len());
        line.extend_from_slice(&available[..text.min(room)]);
        reader.consume(end.map_or(text, |e| e + 1));
        if end.is_some() {
            return Ok(true);
        }
    }
}

/// An stdio server's stdout, ended (read as end of file) once a line passes `max` bytes: each
/// JSON-RPC message is one line, which the transport buffers whole, so this bounds what a
/// server can make the host hold — a line that never ends included. `oversized` records why
/// it ended.
struct LineCap<R> {
    inner: R,
    /// Bytes of the current line so far.
    line: usize,
    max: usize,
    oversized: Arc<AtomicBool>,
}

impl<R> LineCap<R> {
    fn new(inner: R, max: usize, oversized: Arc<AtomicBool>) -> LineCap<R> {
        LineCap {
            inner,
            line: 0,
            max,
            oversized,
        }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for LineCap<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if self.oversized.load(Ordering::Relaxed) {
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        let this = &mut *self;
        let polled = Pin::new(&mut this.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = polled {
            for &b in &buf.filled()[before..] {
                this.line = if b == b'\n' { 0 } else { this.line + 1 };
                if this.line > this.max {
                    this.oversized.store(true, Ordering::Relaxed);
                    buf.set_filled(before);
                    break;
                }
            }
        }
        polled
    }
}

/// The most pages of `tools/list` a probe reads: a server whose cursor never ends cannot keep
/// `validate --probe` listing forever.
const MAX_LIST_PAGES: usize = 100;

/// The most offered tool names a finding lists; the rest are counted.
const MAX_NAMES_SHOWN: usize = 20;

/// What [`probe`] did and found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Probe {
    /// The distinct servers probed (one session each).
    pub servers: usize,
    /// The `mcp` actions checked.
    pub actions: usize,
    /// What disagrees, by tool and action.
    pub findings: Vec<Finding>,
}

/// An `mcp` action that disagrees with its server, or whose server could not be probed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// The tool, `namespace/name`.
    pub tool: String,
    /// The action's index in the tool's `actions`.
    pub action: usize,
    /// The action's name.
    pub action_name: String,
    /// What of the action the finding is about, to place it in the manifest.
    pub about: About,
    /// What is wrong.
    pub message: String,
}

/// What part of an action a [`Finding`] is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum About {
    /// Its server (which could not be probed).
    Server,
    /// The MCP tool it names (`tool_name`, else its own name).
    ToolName,
    /// Its declared parameter of this name.
    Parameter(String),
    /// Its parameters as a whole (one the server requires is missing).
    Parameters,
}

/// `validate --probe`: opens one session with each distinct server of the plan's `mcp` actions
/// (settings rendered as when a task runs; every wait bounded by the action's `timeout`),
/// lists its tools, closes it (an stdio server is stopped), and reports each action naming a
/// tool the server does not offer, or whose declared parameters disagree with the tool's input
/// schema (top-level properties: one the schema lacks, one it requires that is not declared,
/// a `type` that differs). A server that cannot be started or reached is a finding too.
pub async fn probe(plan: &crate::Plan) -> Probe {
    // One session per server: the actions of a tool whose blocks differ only in `tool_name`
    // share it, as at run time.
    let mut servers: BTreeMap<(String, String), (Arc<ToolPlan>, Vec<usize>)> = BTreeMap::new();
    for tool in plan.tools.values() {
        for (i, action) in tool.actions.iter().enumerate() {
            if let Runtime::Mcp(mcp) = &action.runtime {
                servers
                    .entry((tool.id(), mcp.session.clone()))
                    .or_insert_with(|| (Arc::clone(tool), Vec::new()))
                    .1
                    .push(i);
            }
        }
    }
    let mut probe = Probe {
        servers: servers.len(),
        actions: servers.values().map(|(_, actions)| actions.len()).sum(),
        findings: Vec::new(),
    };
    let secrets = SharedSecrets::default();
    secrets.set(Arc::clone(&plan.secrets));
    let sessions = Arc::new(McpSessions::new(secrets));
    let mut probing = JoinSet::new();
    for (tool, actions) in servers.into_values() {
        let sessions = Arc::clone(&sessions);
        probing.spawn(async move { probe_server(&sessions, &tool, &actions).await });
    }
    while let Some(found) = probing.join_next().await {
        match found {
            Ok(found) => probe.findings.extend(found),
            Err(e) => tracing::error!("an MCP probe failed: {e}"),
        }
    }
    probe
        .findings
        .sort_by(|a, b| (&a.tool, a.action).cmp(&(&b.tool, b.action)));
    probe
}

/// Probes the server that actions `actions` (indexes) of `tool` share.
async fn probe_server(sessions: &McpSessions, tool: &ToolPlan, actions: &[usize]) -> Vec<Finding> {
    let mcp: Vec<(usize, &str, &McpPlan)> = actions
        .iter()
        .filter_map(|&i| match &tool.actions.get(i)?.runtime {
            Runtime::Mcp(plan) => Some((i, tool.actions[i].name.as_str(), plan)),
            _ => None,
        })
        .collect();
    let Some(&(first, first_name, plan)) = mcp.first() else {
        return Vec::new();
    };
    let listed = match timeout(plan.timeout, sessions.open("probe", tool, plan)).await {
        Ok(Ok(session)) => {
            let listed = list_tools(&session, plan).await;
            session.close().await;
            listed
        }
        Ok(Err(OpenError::Config(e) | OpenError::Server(e))) => Err(e),
        Err(_) => Err(format!(
            "the MCP server did not start within {:?} (its timeout)",
            plan.timeout
        )),
    };
    let offered = match listed {
        Ok(offered) => offered,
        Err(why) => {
            let names: Vec<String> = mcp.iter().map(|(_, n, _)| format!("`{n}`")).collect();
            return vec![Finding {
                tool: tool.id(),
                action: first,
                action_name: first_name.to_owned(),
                about: About::Server,
                message: format!(
                    "cannot probe the MCP server of action{} {}: {why}",
                    if names.len() == 1 { "" } else { "s" },
                    names.join(", ")
                ),
            }];
        }
    };
    mcp.iter()
        .flat_map(|&(i, name, plan)| check_action(tool, i, name, plan, &offered))
        .collect()
}

/// Every tool `session`'s server offers (`tools/list`, page by page, each bounded by the
/// action's timeout, at most [`MAX_LIST_PAGES`] pages).
async fn list_tools(session: &Session, plan: &McpPlan) -> Result<Vec<rmcp::model::Tool>, String> {
    let mut tools = Vec::new();
    let mut cursor = None;
    for _ in 0..MAX_LIST_PAGES {
        let params = PaginatedRequestParams::default().with_cursor(cursor.take());
        let page = match timeout(plan.timeout, session.client.list_tools(Some(params))).await {
            Ok(Ok(page)) => page,
            Ok(Err(_)) if session.oversized.load(Ordering::Relaxed) => {
                return Err(format!(
                    "the MCP server sent a message larger than {} bytes (max_output) in answer to tools/list",
                    plan.max_output
                ));
            }
            Ok(Err(e)) => return Err(format!("tools/list failed: {e}")),
            Err(_) => {
                return Err(format!(
                    "the MCP server did not answer tools/list within {:?} (its timeout)",
                    plan.timeout
                ));
            }
        };
        tools.extend(page.tools);
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => return Ok(tools),
        }
    }
    Err(format!(
        "the MCP server's tools/list goes on past {MAX_LIST_PAGES} pages"
    ))
}

/// What disagrees between action `name` (index `index` of `tool`, compiled as `plan`) and the
/// tools its server offers.
fn check_action(
    tool: &ToolPlan,
    index: usize,
    name: &str,
    plan: &McpPlan,
    offered: &[rmcp::model::Tool],
) -> Vec<Finding> {
    let finding = |about: About, message: String| Finding {
        tool: tool.id(),
        action: index,
        action_name: name.to_owned(),
        about,
        message,
    };
    let wanted = &plan.tool_name;
    let Some(found) = offered.iter().find(|t| t.name == *wanted) else {
        let names: Vec<&str> = offered.iter().map(|t| t.name.as_ref()).collect();
        let hint = did_you_mean(wanted, names.iter().copied())
            .map(|n| format!(" (did you mean `{n}`?)"))
            .unwrap_or_default();
        let mut shown: Vec<String> = names
            .iter()
            .take(MAX_NAMES_SHOWN)
            .map(|n| format!("`{n}`"))
            .collect();
        if names.len() > MAX_NAMES_SHOWN {
            shown.push(format!("and {} more", names.len() - MAX_NAMES_SHOWN));
        }
        let offers = match shown.is_empty() {
            true => "it offers none".to_owned(),
            false => format!("it offers {}", shown.join(", ")),
        };
        return vec![finding(
            About::ToolName,
            format!("action `{name}`: the MCP server offers no tool `{wanted}`{hint}; {offers}"),
        )];
    };
    let declares = tool.manifest.parameters.is_some()
        || tool
            .manifest
            .actions
            .get(index)
            .is_some_and(|a| a.parameters.is_some());
    let Some(action) = tool.actions.get(index).filter(|_| declares) else {
        return Vec::new();
    };
    let schema = &found.input_schema;
    let empty = serde_json::Map::new();
    let properties = schema
        .get("properties")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let listed = || {
        let names: Vec<String> = properties.keys().map(|k| format!("`{k}`")).collect();
        match names.is_empty() {
            true => "it has none".to_owned(),
            false => format!("its properties are {}", names.join(", ")),
        }
    };
    let mut findings = Vec::new();
    for (param, declared) in &action.parameters {
        let Some(theirs) = properties.get(param) else {
            findings.push(finding(
                About::Parameter(param.clone()),
                format!(
                    "action `{name}`: parameter `{param}` is not in the input schema of MCP tool `{wanted}`; {}",
                    listed()
                ),
            ));
            continue;
        };
        let ours = declared
            .schema_type
            .and_then(|t| serde_json::to_value(t).ok())
            .and_then(|t| t.as_str().map(str::to_owned));
        if let (Some(ours), Some(types)) = (ours, schema_types(theirs))
            && !types.iter().any(|t| accepts(t, &ours))
        {
            findings.push(finding(
                About::Parameter(param.clone()),
                format!(
                    "action `{name}`: parameter `{param}` is of type `{ours}`, but MCP tool `{wanted}` takes {}",
                    types.iter().map(|t| format!("`{t}`")).collect::<Vec<_>>().join(" or ")
                ),
            ));
        }
    }
    let required = schema.get("required").and_then(Value::as_array);
    for needed in required.into_iter().flatten().filter_map(Value::as_str) {
        if !action.parameters.contains_key(needed) {
            findings.push(finding(
                About::Parameters,
                format!(
                    "action `{name}`: MCP tool `{wanted}` requires `{needed}`, which the action's parameters do not declare"
                ),
            ));
        }
    }
    findings
}

/// The `type` of a property of an input schema: one name or a list of them; `None` when it
/// says none (any type).
fn schema_types(property: &Value) -> Option<Vec<&str>> {
    match property.get("type")? {
        Value::String(t) => Some(vec![t.as_str()]),
        Value::Array(ts) => Some(ts.iter().filter_map(Value::as_str).collect()),
        _ => None,
    }
}

/// Whether a server's type `theirs` accepts every value of a parameter of type `ours`: the
/// same, or a `number` for an `integer` (every integer is a JSON Schema number).
fn accepts(theirs: &str, ours: &str) -> bool {
    theirs == ours || (theirs == "number" && ours == "integer")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use tokio::io::AsyncReadExt;

    use super::*;

    #[tokio::test]
    async fn line_cap_ends_the_stream_at_a_line_over_the_bound() {
        let oversized = Arc::new(AtomicBool::new(false));
        let text: &[u8] = b"short\nabcdefghij\nnever read\n";
        let mut capped = LineCap::new(text, 8, Arc::clone(&oversized));
        let mut out = Vec::new();
        capped.read_to_end(&mut out).await.unwrap();
        assert!(oversized.load(Ordering::Relaxed));
        assert!(!out.windows(10).any(|w| w == b"never read"), "{out:?}");
        assert!(out.len() <= text.len());

        let fine = Arc::new(AtomicBool::new(false));
        let mut capped = LineCap::new(&b"12345678\n12345678\n"[..], 8, Arc::clone(&fine));
        let mut out = Vec::new();
        capped.read_to_end(&mut out).await.unwrap();
        assert!(!fine.load(Ordering::Relaxed));
        assert_eq!(out, b"12345678\n12345678\n");
    }

    #[tokio::test]
    async fn stderr_lines_are_cut_at_the_bound() {
        let mut reader = BufReader::new(&b"0123456789\nab\nlast"[..]);
        let mut line = Vec::new();
        assert!(read_line_capped(&mut reader, &mut line, 4).await.unwrap());
        assert_eq!(line, b"0123");
        line.clear();
        assert!(read_line_capped(&mut reader, &mut line, 4).await.unwrap());
        assert_eq!(line, b"ab");
        line.clear();
        assert!(read_line_capped(&mut reader, &mut line, 4).await.unwrap());
        assert_eq!(line, b"last");
        line.clear();
        assert!(!read_line_capped(&mut reader, &mut line, 4).await.unwrap());
    }

    #[tokio::test]
    async fn a_secret_across_a_stderr_lines_cut_is_hidden_whole() {
        let secret = "sk-live-0123456789abcdef";
        let line = format!("{}{secret} and more\n", "x".repeat(MAX_STDERR_LINE - 5));
        let tail = Arc::new(Mutex::new(String::new()));
        let log = StderrLog {
            task: "t".into(),
            tool: "ns/tool".into(),
            tail: Arc::clone(&tail),
            secrets: Arc::new(Secrets::new([secret]).unwrap()),
        };
        log.run(BufReader::new(line.as_bytes())).await;
        let tail = lock(&tail).clone();
        assert!(tail.ends_with("xxxxx***\n"), "{tail}");
        assert!(!tail.contains("sk-li"), "{tail}");
    }

    #[test]
    fn a_probe_compares_types_by_name_and_takes_an_integer_for_a_number() {
        let types = |p: Value| schema_types(&p).map(|t| t.join(","));
        assert_eq!(
            types(serde_json::json!({"type": "number"})).as_deref(),
            Some("number")
        );
        assert_eq!(
            types(serde_json::json!({"type": ["string", "null"]})).as_deref(),
            Some("string,null")
        );
        assert_eq!(types(serde_json::json!({"anyOf": []})), None);
        assert!(accepts("number", "integer") && accepts("string", "string"));
        assert!(!accepts("integer", "number") && !accepts("number", "string"));
    }

    #[test]
    fn content_is_text_joined_or_the_parts() {
        let text = |t: &str| rmcp::model::ContentBlock::text(t);
        let mut result = CallToolResult::success(vec![text("a"), text("b")]);
        assert_eq!(content(&result), Value::String("a\nb".into()));
        result
            .content
            .push(rmcp::model::ContentBlock::image("AAAA", "image/png"));
        assert!(content(&result).is_array());
        result.content.clear();
        assert_eq!(content(&result), Value::Null);
    }

    #[test]
    fn structured_content_is_preferred_and_a_tool_error_is_recoverable() {
        let mut result =
            CallToolResult::success(vec![rmcp::model::ContentBlock::text("{\"t\": 1}")]);
        result.structured_content = Some(serde_json::json!({"t": 1}));
        assert!(matches!(observation("x", result), ActionResult::Ok(v) if v["t"] == 1));
        let failed = CallToolResult::error(vec![rmcp::model::ContentBlock::text("no such city")]);
        assert!(
            matches!(observation("x", failed), ActionResult::Recoverable(e) if e.contains("no such city"))
        );
    }
}
