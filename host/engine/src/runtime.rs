//! Action backends: `cel`, `stateless_http` (and the HTTP requests `stateful_session` makes,
//! `session.rs`; their URLs made in `runtime/url.rs`), `openapi` (`runtime/openapi.rs`), the
//! dispatch to Wasm components (`wasm.rs`), MCP servers (`mcp.rs`) and Kubernetes Jobs
//! (`kubernetes.rs`), and sub-agent delegation.

mod openapi;
mod url;

use std::sync::Arc;

use agentmesh_expr::{Activation, MountIo, Needs, Template};
use agentmesh_llm::Capped;
use agentmesh_manifest::model::tool::HttpMethod;
use agentmesh_secrets::Secrets;
use agentmesh_store::now_rfc3339;
use serde_json::{Map, Value, json};

use crate::mount::FileMount;
pub(crate) use crate::outcome::ActionResult;
use crate::plan::{AgentPlan, AuthPlan, HttpPlan, Runtime, ToolPlan};
use crate::task::{Status, TaskRecord};
use crate::{Engine, MAX_DELEGATION_DEPTH, NewTask, Run};

/// Largest response body a `stateless_http` call reads: it becomes part of the LLM's context
/// and the event log, so an endpoint that streams gigabytes cannot exhaust memory.
pub const MAX_HTTP_RESPONSE: usize = 4 * 1024 * 1024;

/// How many redirects one request follows (reqwest's default): a loop ends as an error
/// instead of going round for ever.
const MAX_REDIRECTS: usize = 10;

/// The redirects the engine's HTTP requests follow (`stateless_http`, `stateful_session`,
/// `openapi`, `receive.poll`, auth providers' token requests): only those within the origin
/// (scheme, host and port) of the URL first asked for. On a redirect to another origin
/// reqwest drops `Authorization` and `Cookie` but keeps every other header, so a key a tool
/// sends from its settings (`X-Api-Key`, an `openapi` key) would reach a host the manifest
/// never named; such a redirect is the answer instead (see [`exchange`]).
pub(crate) fn same_origin_redirects() -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(|attempt| {
        let first = attempt.previous().first().map(reqwest::Url::origin);
        if first != Some(attempt.url().origin()) {
            attempt.stop()
        } else if attempt.previous().len() > MAX_REDIRECTS {
            attempt.error(format!("more than {MAX_REDIRECTS} redirects"))
        } else {
            attempt.follow()
        }
    })
}

/// The agent's mount for this task.
pub(crate) fn mount_of(
    engine: &Engine,
    agent: &AgentPlan,
    record: &TaskRecord,
) -> Option<FileMount> {
    let plan = engine.plan();
    FileMount::new(
        plan.host.mount.as_ref(),
        &engine.inner.options.mount_root,
        agent.mount,
        &agent.namespace,
        &agent.name,
        &record.id,
    )
}

/// Whether running `tool`'s `action` for `agent` stays inside the process: a `cel`
/// expression with no mount to write to. Anything else may be seen outside, so a turn writes
/// its progress first ([`Engine::write_ahead`]).
pub(crate) fn stays_inside(agent: &AgentPlan, tool: &ToolPlan, action: usize) -> bool {
    agent.mount == agentmesh_manifest::model::agent::MountScope::None
        && tool
            .actions
            .get(action)
            .is_some_and(|a| matches!(&a.runtime, Runtime::Cel(e) if !e.calls_review()))
}

/// Runs action `action` of `tool` with resolved `input`. `routing`: the action runs for an
/// event being routed (an `invoke` in event middleware), on a copy of the task that nothing
/// may be written from, with nobody to wait for: a `review()` in a `cel` tool's expression
/// is a denial, decided at once.
pub(crate) async fn run_action(
    engine: &Engine,
    agent: &AgentPlan,
    record: &mut TaskRecord,
    tool: &ToolPlan,
    action: usize,
    input: &Value,
    routing: bool,
) -> ActionResult {
    let Some(plan) = tool.actions.get(action) else {
        return ActionResult::Fatal(format!("tool `{}` has no action #{action}", tool.id()));
    };
    match &plan.runtime {
        Runtime::Cel(expr) => {
            let mut act = Activation::new();
            let mut needs = Needs::default();
            needs.add(expr, &["context", "c"]);
            if !needs.is_empty() {
                act.set_aliased("context", "c", record.context_for(agent, &needs));
            }
            act.set_aliased("input", "i", input.clone());
            if expr.uses("now") {
                act.set("now", json!(now_rfc3339()));
            }
            if expr.uses("runtime") {
                act.bind("runtime", engine.runtime_variable());
            }
            if let Some(mount) = mount_of(engine, agent, record) {
                act.set("mount", mount.variable());
                act.set_mount(Arc::new(mount) as Arc<dyn MountIo>);
            }
            if expr.calls_review() {
                let asked = (plan.name.as_str(), input);
                act = match crate::review::tool_reviews(engine, record, expr, act, asked, routing)
                    .await
                {
                    Ok(act) => act,
                    Err(e) => return ActionResult::Fatal(e.to_string()),
                };
            }
            match expr.evaluate(&act) {
                Ok(v) => ActionResult::Ok(v),
                Err(e) => ActionResult::Recoverable(e.message),
            }
        }
        Runtime::Http(http) => {
            let act = request_activation(engine, agent, record, tool, input, http.uses_context);
            http_call(engine, http, &act).await
        }
        Runtime::Session(session) => {
            let act =
                request_activation(engine, agent, record, tool, input, session.uses_context());
            let sessions = &engine.inner.sessions;
            sessions.call(engine, &record.id, tool, session, act).await
        }
        Runtime::Kubernetes(job) => {
            let act = request_activation(engine, agent, record, tool, input, job.uses_context);
            crate::kubernetes::run(engine, job, &act, &record.id).await
        }
        Runtime::Wasm { path, runtime } => {
            let plugins = match engine.plugins() {
                Ok(p) => p,
                Err(e) => return ActionResult::Fatal(e),
            };
            let mount = match mount_of(engine, agent, record).map(|m| m.open_dir()) {
                Some(Ok(dir)) => Some(dir),
                Some(Err(e)) => return ActionResult::Recoverable(format!("mount: {e}")),
                None => None,
            };
            let root_params: Map<String, Value> = match input {
                Value::Object(m) => m
                    .iter()
                    .filter(|(k, _)| tool.manifest.parameters.as_ref().is_some_and(|p| p.has(k)))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
                _ => Map::new(),
            };
            plugins
                .invoke(
                    &record.id,
                    &tool.id(),
                    path,
                    runtime,
                    mount,
                    &Value::Object(tool.settings.clone()),
                    &Value::Object(root_params),
                    &plan.name,
                    input,
                )
                .await
        }
        Runtime::Mcp(mcp) => {
            let max_sessions = engine.plan().host.policy.max_mcp_sessions;
            engine
                .inner
                .mcp
                .call(&record.id, tool, mcp, max_sessions, input)
                .await
        }
        Runtime::OpenApi(op) => {
            let mut act = Activation::new();
            act.set("settings", Value::Object(tool.settings.clone()));
            openapi::call(engine, op, &act, input).await
        }
        Runtime::Unsupported(kind) => ActionResult::Recoverable(format!(
            "action `{}` uses the `{kind}` runtime, which this host does not run yet",
            plan.name
        )),
    }
}

/// The variables of a request's templates (`session` and `auth` are the request's own):
/// `parameters` (the call's input), `settings`, `runtime`, `agent`, `mount` with a mount,
/// and `context` when a template reads it.
fn request_activation(
    engine: &Engine,
    agent: &AgentPlan,
    record: &TaskRecord,
    tool: &ToolPlan,
    input: &Value,
    uses_context: bool,
) -> Activation {
    let mut act = Activation::new();
    act.set("parameters", input.clone())
        .set("settings", Value::Object(tool.settings.clone()))
        .bind("runtime", engine.runtime_variable())
        .set(
            "agent",
            json!({"name": agent.name, "namespace": agent.namespace}),
        );
    if uses_context {
        act.set_aliased("context", "c", record.context(agent));
    }
    if let Some(mount) = mount_of(engine, agent, record) {
        act.set("mount", mount.variable());
    }
    act
}

/// A `stateless_http` call: the request, then its answer as the result.
async fn http_call(engine: &Engine, http: &HttpPlan, act: &Activation) -> ActionResult {
    match http_send(engine, http, act).await {
        Ok(answer) => http_result(&engine.secrets(), http, answer),
        Err(failed) => failed,
    }
}

/// What a request was answered: its status and body (JSON, or the text as a string).
pub(crate) struct HttpAnswer {
    pub status: reqwest::StatusCode,
    pub body: Value,
    /// Whether the body was JSON.
    pub json: bool,
}

impl HttpAnswer {
    /// The answer of `status` with body `bytes`.
    fn new(status: reqwest::StatusCode, bytes: &[u8]) -> HttpAnswer {
        match serde_json::from_slice(bytes) {
            Ok(body) => HttpAnswer {
                status,
                body,
                json: true,
            },
            Err(_) => HttpAnswer {
                status,
                body: Value::String(String::from_utf8_lossy(bytes).into_owned()),
                json: false,
            },
        }
    }
}

/// The result of a call answered `answer`: the body, or the part `response_path` selects; a
/// failing status is an observation.
pub(crate) fn http_result(secrets: &Secrets, http: &HttpPlan, answer: HttpAnswer) -> ActionResult {
    let HttpAnswer { status, body, .. } = answer;
    if !status.is_success() {
        return ActionResult::Recoverable(format!(
            "HTTP {}: {}",
            status.as_u16(),
            snippet(secrets, &body)
        ));
    }
    match &http.response_path {
        Some(path) => match select(&body, path) {
            Some(v) => ActionResult::Ok(v.clone()),
            None => ActionResult::Recoverable(format!("`{path}` selects nothing in the response")),
        },
        None => ActionResult::Ok(body),
    }
}

/// Makes request `http` with the variables of `act` and the header values of the auth
/// providers it names: its answer, whatever the status, or why there is none (an
/// observation, or a fault of the configuration). Nothing it gives back holds a token.
pub(crate) async fn http_send(
    engine: &Engine,
    http: &HttpPlan,
    act: &Activation,
) -> Result<HttpAnswer, ActionResult> {
    authorized(engine, &http.auth, act, async |act| {
        send(engine, http, act).await
    })
    .await
}

/// `send`'s answer to a request made with `act` and, as `auth`, the header values of
/// `providers` (none: `act` as it is). Nothing it gives back holds a token; a 401 drops the
/// tokens it was made with from the cache.
pub(crate) async fn authorized(
    engine: &Engine,
    providers: &[(String, Arc<AuthPlan>)],
    act: &Activation,
    send: impl AsyncFnOnce(&Activation) -> Result<HttpAnswer, ActionResult>,
) -> Result<HttpAnswer, ActionResult> {
    if providers.is_empty() {
        return send(act).await;
    }
    let auth = &engine.inner.auth;
    let headers = auth
        .headers(&engine.inner.http, providers)
        .await
        .map_err(ActionResult::Recoverable)?;
    let mut act = act.clone();
    act.set("auth", Value::Object(headers.values));
    let tokens = agentmesh_secrets::Secrets::new(&headers.tokens).unwrap_or_default();
    let mut sent = send(&act).await;
    if let Ok(answer) = &sent
        && answer.status == reqwest::StatusCode::UNAUTHORIZED
    {
        for ((name, _), token) in providers.iter().zip(&headers.tokens) {
            auth.forget(name, token).await;
        }
    }
    match &mut sent {
        Ok(answer) => tokens.scrub_json(&mut answer.body),
        Err(ActionResult::Recoverable(why) | ActionResult::Fatal(why)) => tokens.scrub_string(why),
        Err(ActionResult::Ok(_)) => {}
    }
    sent
}

async fn send(
    engine: &Engine,
    http: &HttpPlan,
    act: &Activation,
) -> Result<HttpAnswer, ActionResult> {
    let url = match url::render(&http.url, act) {
        Ok(u) => u,
        Err(e) => return Err(ActionResult::Recoverable(format!("url: {e}"))),
    };
    // A request the values made invalid (a URL that does not parse, a line break in a
    // header) is the LLM's to fix; one the manifest's literal text makes invalid is the
    // configuration's.
    let invalid = |template: &Template, what: String| -> Result<HttpAnswer, ActionResult> {
        Err(if template.is_literal() {
            ActionResult::Fatal(what)
        } else {
            ActionResult::Recoverable(what)
        })
    };
    if let Err(e) = reqwest::Url::parse(&url) {
        return invalid(&http.url, format!("`{url}` is not a valid URL: {e}"));
    }
    let method = match http.method {
        HttpMethod::Get => reqwest::Method::GET,
        HttpMethod::Post => reqwest::Method::POST,
        HttpMethod::Put => reqwest::Method::PUT,
        HttpMethod::Patch => reqwest::Method::PATCH,
        HttpMethod::Delete => reqwest::Method::DELETE,
    };
    let mut req = engine
        .inner
        .http
        .request(method, &url)
        .timeout(http.timeout);
    for (name, value) in &http.headers {
        match value.render(act) {
            Ok(v) if reqwest::header::HeaderValue::from_str(&v).is_err() => {
                return invalid(
                    value,
                    format!("header `{name}`: `{v}` is not a valid header value"),
                );
            }
            Ok(v) => req = req.header(name.as_str(), v),
            Err(e) => return Err(ActionResult::Recoverable(format!("header `{name}`: {e}"))),
        }
    }
    if let Some(body) = &http.body {
        match body.render(act) {
            Ok(b) => {
                req = req
                    .header(reqwest::header::CONTENT_TYPE, "application/json")
                    .body(b.to_string());
            }
            Err(e) => return Err(ActionResult::Recoverable(format!("body: {e}"))),
        }
    }
    let (status, bytes) = exchange(req, &url).await?;
    Ok(HttpAnswer::new(status, &bytes))
}

/// Sends `req` (to `url`, as errors show it) and reads the answer's status and body: whatever
/// the endpoint does (unreachable, slow, a body that cannot be read or is too large, a
/// redirect to another origin) is an observation the LLM can act on; the task goes on.
async fn exchange(
    req: reqwest::RequestBuilder,
    url: &str,
) -> Result<(reqwest::StatusCode, Vec<u8>), ActionResult> {
    let response = match req.send().await {
        Ok(r) => r,
        Err(e) if e.is_builder() => {
            return Err(ActionResult::Recoverable(format!(
                "invalid request to `{url}`: {e}"
            )));
        }
        Err(e) if e.is_timeout() => {
            return Err(ActionResult::Recoverable(format!("`{url}` timed out")));
        }
        Err(e) => {
            return Err(ActionResult::Recoverable(format!(
                "`{url}` is unreachable: {e}"
            )));
        }
    };
    let status = response.status();
    // A redirect the client did not follow (to another origin) says where it leads.
    if status.is_redirection()
        && let Some(location) = response.headers().get(reqwest::header::LOCATION)
    {
        return Err(ActionResult::Recoverable(format!(
            "HTTP {}: `{url}` redirects to `{}`, another origin, which the host does not follow",
            status.as_u16(),
            String::from_utf8_lossy(location.as_bytes())
        )));
    }
    let bytes = match agentmesh_llm::read_capped(response, MAX_HTTP_RESPONSE).await {
        Ok(b) => b,
        Err(Capped::Read(e)) => {
            return Err(ActionResult::Recoverable(format!(
                "reading the response: {e}"
            )));
        }
        Err(Capped::TooLarge) => {
            return Err(ActionResult::Recoverable(format!(
                "the response is larger than {MAX_HTTP_RESPONSE} bytes"
            )));
        }
    };
    Ok((status, bytes.to_vec()))
}

/// Sends an operation's request `req` (to `url`, as errors show it): its answer.
pub(crate) async fn send_operation(
    req: reqwest::RequestBuilder,
    url: &str,
) -> Result<HttpAnswer, ActionResult> {
    let (status, bytes) = exchange(req, url).await?;
    Ok(HttpAnswer::new(status, &bytes))
}

/// The result of an operation answered `answer`: its body; a failing status, or with `json`
/// a body that is not JSON, is an observation.
pub(crate) fn operation_result(secrets: &Secrets, answer: HttpAnswer, json: bool) -> ActionResult {
    let HttpAnswer {
        status,
        body,
        json: parsed,
    } = answer;
    if !status.is_success() {
        return ActionResult::Recoverable(format!(
            "HTTP {}: {}",
            status.as_u16(),
            snippet(secrets, &body)
        ));
    }
    if parsed || !json {
        return ActionResult::Ok(body);
    }
    // An empty answer (`204 No Content`) is no result, not a malformed one.
    if body.as_str().is_some_and(str::is_empty) {
        return ActionResult::Ok(Value::Null);
    }
    ActionResult::Recoverable(format!(
        "the operation answered HTTP {} with a body that is not the JSON its API describes: {}",
        status.as_u16(),
        snippet(secrets, &body)
    ))
}

/// The start of `v` as text, for an error (at most [`SNIPPET_CHARS`] characters), with every
/// secret of `secrets` replaced before it is cut: cut first, a secret's head would be left
/// where the cut fell, which no scrubbing after would recognise.
pub(crate) fn snippet(secrets: &Secrets, v: &Value) -> String {
    let text = match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    secrets.scrub(&text).chars().take(SNIPPET_CHARS).collect()
}

/// How much of an answer an error quotes: enough to read what went wrong, while an error
/// page of megabytes does not fill the LLM's context.
const SNIPPET_CHARS: usize = 500;

/// A small JSONPath: `$`, `.name`, `['name']`, `[index]`.
pub(crate) fn select<'a>(value: &'a Value, path: &str) -> Option<&'a Value> {
    let mut rest = path.trim().strip_prefix('$').unwrap_or(path.trim());
    let mut current = value;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            current = current.get(&r[..end])?;
            rest = &r[end..];
        } else if let Some(r) = rest.strip_prefix('[') {
            let end = r.find(']')?;
            let key = r[..end].trim_matches(|c| c == '\'' || c == '"');
            current = match key.parse::<usize>() {
                Ok(i) => current.get(i)?,
                Err(_) => current.get(key)?,
            };
            rest = &r[end + 1..];
        } else {
            return None;
        }
    }
    Some(current)
}

/// Runs a child task for `child` with `input`, to idle; its output (or error) is the result.
pub(crate) async fn delegate(
    engine: &Engine,
    record: &TaskRecord,
    child: &str,
    input: Value,
) -> (ActionResult, Option<String>) {
    if record.depth >= MAX_DELEGATION_DEPTH {
        return (
            ActionResult::Recoverable(format!(
                "delegation deeper than {MAX_DELEGATION_DEPTH} levels is not allowed"
            )),
            None,
        );
    }
    let new = NewTask {
        agent: child.to_owned(),
        input: Some(input),
        user: record.user.clone(),
    };
    let created =
        Box::pin(engine.create(new, Some(&record.id), record.depth + 1, Run::Caller)).await;
    let child_record = match created {
        Ok(r) => r,
        Err(e) => {
            return (
                ActionResult::Recoverable(format!("cannot start `{child}`: {e}")),
                None,
            );
        }
    };
    let id = child_record.id.clone();
    let delegation = engine.delegating(&record.id, &id);
    let done = Box::pin(engine.run_until_idle(&id)).await;
    // The parent was asked to stop (interrupted, deleted): so is the child, whose turn
    // stopped with it; its subscriptions are suspended as an interrupt's are.
    let stopped = engine.interrupt_requested(&id);
    drop(delegation);
    if stopped {
        if let Err(e) = Box::pin(engine.interrupt(&id)).await {
            tracing::warn!(task.id = %id, "the child of a stopped task not interrupted: {e}");
        }
        let why = format!("agent `{child}` did not finish: the task was asked to stop");
        return (ActionResult::Recoverable(why), Some(id));
    }
    let result = match done {
        Ok(r) if r.status() == Status::Terminated => ActionResult::Recoverable(format!(
            "agent `{child}` ended its task ({})",
            r.limit
                .clone()
                .or_else(|| r.reason.map(|x| format!("{x:?}")))
                .unwrap_or_default()
        )),
        Ok(r) => ActionResult::Ok(Value::String(r.last_output_text().unwrap_or_default())),
        Err(e) => ActionResult::Recoverable(format!("agent `{child}` failed: {e}")),
    };
    (result, Some(id))
}
