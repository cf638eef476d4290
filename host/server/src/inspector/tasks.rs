//! The task list and a task's page, their live streams, and the actions on a task.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use agentmesh_engine::{McpSessionState, QueuedInput, Status};
use agentmesh_store::Backend;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{Html, IntoResponse, Redirect, Response};
use maud::{Markup, html};
use serde::Deserialize;
use serde_json::{Value, json};

use super::index::{Filter, From, Row, SOURCES, TriggerFilter};
use super::layout::{
    self, Nav, column_heads, empty, json_details, post_button, status_badge, time_ms, time_of,
};
use super::{Ui, UiError, UiResult, blocking, form, html_page, timeline};
use crate::auth::Role;
use crate::error::{ApiPath, ApiQuery, Body};
use crate::{AppState, resources};

/// Tasks on a page of the list unless `limit` says otherwise.
const PAGE: usize = 50;

/// The most tasks on a page of the list (keeps a page well under 200 KB).
const MAX_PAGE: usize = 200;

/// Events read for one page of a timeline.
const EVENTS_PAGE: u64 = 200;

/// A timeline page stops adding rows past this many bytes of them, so that a page of a task
/// with big events stays small (the page before holds the rest).
const TIMELINE_BYTES: usize = 140 * 1024;

/// `GET /ui/` query.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    status: Option<String>,
    agent: Option<String>,
    owner: Option<String>,
    trigger: Option<String>,
    /// A page of tasks older than this one (`MS:ID`).
    older: Option<String>,
    /// A page of tasks newer than this one (`MS:ID`).
    newer: Option<String>,
    limit: Option<usize>,
    /// `rows`: only the table's rows (for the live update).
    part: Option<String>,
}

/// A non-empty query value.
pub(super) fn given(v: Option<&String>) -> Option<&str> {
    v.map(String::as_str).filter(|s| !s.is_empty())
}

fn parse_status(s: &str) -> UiResult<Status> {
    serde_json::from_value(json!(s)).map_err(|_| {
        UiError::bad_request(format!(
            "unknown status `{s}`: expected idle, running, waiting or terminated"
        ))
    })
}

pub(super) fn parse_key(s: &str) -> UiResult<(i64, String)> {
    s.split_once(':')
        .and_then(|(ms, id)| Some((ms.parse().ok()?, id.to_owned())))
        .ok_or_else(|| UiError::bad_request(format!("`{s}` is not a position of the list")))
}

fn status_name(s: Status) -> &'static str {
    match s {
        Status::Idle => "idle",
        Status::Running => "running",
        Status::Waiting => "waiting",
        Status::Terminated => "terminated",
    }
}

/// `GET /ui/`: the task list.
pub async fn list(
    State(state): State<Arc<AppState>>,
    ui: Ui,
    ApiQuery(q): ApiQuery<ListQuery>,
) -> UiResult<Response> {
    blocking(move || render_list(&state, &ui, &q)).await
}

/// The list page (or its rows) for `q`, as `ui` may see it.
pub fn render_list(state: &AppState, ui: &Ui, q: &ListQuery) -> UiResult<Response> {
    let status = given(q.status.as_ref()).map(parse_status).transpose()?;
    let trigger = given(q.trigger.as_ref())
        .map(|t| {
            TriggerFilter::parse(t).ok_or_else(|| {
                UiError::bad_request(format!(
                    "unknown trigger filter `{t}`: expected any, none or one of {}",
                    SOURCES.join(", ")
                ))
            })
        })
        .transpose()?;
    let limit = q.limit.unwrap_or(PAGE);
    if !(1..=MAX_PAGE).contains(&limit) {
        return Err(UiError::bad_request(format!(
            "`limit` must be between 1 and {MAX_PAGE}, found {limit}"
        )));
    }
    let caller = &ui.caller;
    let owner = match (caller.role, given(q.owner.as_ref())) {
        (Role::AgentUser, Some(o)) if o != caller.subject => {
            return Err(UiError::forbidden(format!(
                "an agent_user token lists only the tasks of `{}`",
                caller.subject
            )));
        }
        (Role::AgentUser, _) => Some(caller.subject.as_str()),
        (_, owner) => owner,
    };
    let from = match (given(q.older.as_ref()), given(q.newer.as_ref())) {
        (Some(k), _) => {
            let (ms, id) = parse_key(k)?;
            From::After((ms, Arc::from(id)))
        }
        (None, Some(k)) => {
            let (ms, id) = parse_key(k)?;
            From::Before((ms, Arc::from(id)))
        }
        (None, None) => From::Start,
    };
    let filter = Filter {
        agent: given(q.agent.as_ref()),
        status,
        owner,
        trigger,
    };
    let store = state.engine().store();
    let rows = state.inspector.index.current(store)?;
    let page = rows.page(&filter, &from, limit);
    let body_rows = table_rows(store, &page.rows)?;
    if q.part.as_deref() == Some("rows") {
        return Ok(Html(body_rows.into_string()).into_response());
    }
    // The query of this page without its position, for the paging links.
    let mut base: Vec<(&str, &str)> = Vec::new();
    for (k, v) in [
        ("status", &q.status),
        ("agent", &q.agent),
        ("owner", &q.owner),
        ("trigger", &q.trigger),
    ] {
        if let Some(v) = given(v.as_ref()) {
            base.push((k, v));
        }
    }
    let limit_text = limit.to_string();
    if q.limit.is_some() {
        base.push(("limit", &limit_text));
    }
    let link = |key: &str, row: &Row| {
        let position = format!("{}:{}", row.created_ms, row.id);
        let mut pairs = base.clone();
        pairs.push((key, &position));
        format!("/ui/?{}", query_string(&pairs))
    };
    let total = match owner {
        Some(o) if caller.role == Role::AgentUser => rows.owners.get(o).copied().unwrap_or(0),
        _ => rows.len(),
    };
    let agents: Vec<&str> = rows.agents.keys().map(|a| &**a).collect();
    let owners: Vec<&str> = rows.owners.keys().map(|a| &**a).collect();
    let live = matches!(from, From::Start);
    let body = html! {
        form.filters method="get" action="/ui/" {
            (select("status", "Status", &["idle", "running", "waiting", "terminated"], &str::to_owned, q.status.as_deref()))
            (select("agent", "Agent", &agents, &str::to_owned, q.agent.as_deref()))
            @if caller.role != Role::AgentUser {
                (select("owner", "Owner", &owners, &str::to_owned, q.owner.as_deref()))
            }
            (select("trigger", "Triggered turns", &["any", "none", "schedule", "webhook", "api", "self-schedule", "mcp-event"], &trigger_choice, q.trigger.as_deref()))
            button type="submit" { "Filter" }
            a href="/ui/" { "Clear" }
        }
        p.note { (total) " task(s) in the store" @if caller.role == Role::AgentUser { " owned by you" } "; newest first." }
        div.scroll {
            table.tasks id="tasks" data-live=[live.then_some("/ui/changes")] {
                caption.visually-hidden { "Tasks" }
                (column_heads(&["Task", "Status", "Agent", "Owner", "Created", "Last activity", "Queued", "Triggered by"]))
                tbody { (body_rows) }
            }
        }
        @if page.rows.is_empty() { (empty("No task matches.")) }
        nav.paging aria-label="Pages" {
            @if page.more_before { @if let Some(first) = page.rows.first() { a rel="prev" href=(link("newer", first)) { "← Newer" } } }
            @if page.more_after { @if let Some(last) = page.rows.last() { a rel="next" href=(link("older", last)) { "Older →" } } }
        }
    };
    Ok(html_page(&layout::page(
        "Tasks",
        Nav::Tasks,
        Some(&ui.viewer()),
        &body,
    )))
}

/// `pairs` as a query string.
pub(super) fn query_string(pairs: &[(&str, &str)]) -> String {
    pairs
        .iter()
        .map(|(k, v)| format!("{k}={}", super::encode(v)))
        .collect::<Vec<_>>()
        .join("&")
}

/// A labelled `<select>` of `choices` (each shown as itself, or as `shown` names it), with
/// "all" (no filter) first.
fn select(
    name: &str,
    label: &str,
    choices: &[&str],
    shown: &dyn Fn(&str) -> String,
    current: Option<&str>,
) -> Markup {
    let id = format!("f-{name}");
    html! {
        span.field {
            label for=(id) { (label) }
            select id=(id) name=(name) {
                option value="" { "all" }
                @for c in choices {
                    option value=(c) selected[current == Some(*c)] { (shown(c)) }
                }
            }
        }
    }
}

/// A trigger filter's choice as the list shows it.
fn trigger_choice(value: &str) -> String {
    match value {
        "any" => "any trigger".into(),
        "none" => "none (typed input)".into(),
        source => source.to_owned(),
    }
}

/// The table rows of `rows`, with each task's queue depth.
fn table_rows(store: &dyn Backend, rows: &[Row]) -> UiResult<Markup> {
    let mut out = Vec::with_capacity(rows.len());
    for r in rows {
        out.push((r, store.queued_count(&r.id)?));
    }
    Ok(html! {
        @for (r, queued) in out {
            tr {
                td { a href={ "/ui/tasks/" (r.id) } { code { (r.id) } } }
                td { (status_badge(status_name(r.status))) }
                td { (r.agent) }
                td { (r.owner) }
                td { (time_ms(r.created_ms)) }
                td { (time_ms(r.last_ms)) }
                td.num { (queued) }
                td { (r.trigger_names().join(", ")) }
            }
        }
    })
}

/// `GET /ui/changes`: an SSE stream saying `changed` (at most once a second) whenever a
/// task's log grows, for the list to fetch its rows again; it ends when the server drains, as
/// the API's streams do, or when the session may no longer read (logged out, its token gone).
pub async fn changes(State(state): State<Arc<AppState>>, ui: Ui) -> Response {
    let heard = (state.appended.subscribe(), state.draining.subscribe());
    let stream = futures::stream::unfold(heard, move |(mut appended, mut draining)| {
        let (state, session) = (Arc::clone(&state), ui.id.clone());
        async move {
            let grown = tokio::select! {
                grown = appended.recv() => grown,
                _ = draining.wait_for(|d| *d) => return None,
            };
            match grown {
                Err(tokio::sync::broadcast::error::RecvError::Closed) => None,
                _ => {
                    // One notice for a burst: wait a little, then drop what queued meanwhile.
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    while appended.try_recv().is_ok() {}
                    // A session logged out, or whose token a reload removed, hears no more.
                    super::session_caller(&state, &session)?;
                    let event = SseEvent::default().event("changed").data("tasks");
                    Some((Ok::<_, Infallible>(event), (appended, draining)))
                }
            }
        }
    });
    Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response()
}

/// `GET /ui/tasks/{id}` query.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskQuery {
    /// The last event of the page (default: the last of the log).
    to: Option<u64>,
}

/// What a task page shows of the record, read in place.
struct Seen {
    object: Value,
    owner: String,
    agent: String,
    status: Status,
    reviewer_is_caller: bool,
    pending: Option<agentmesh_engine::PendingReview>,
    llm_calls: u64,
    prompt_tokens: u64,
    completion_tokens: u64,
    tool_calls: u64,
    created_ms: i64,
    last_ms: i64,
    limit: Option<String>,
    parent: Option<String>,
}

/// `GET /ui/tasks/{id}`.
pub async fn task(
    State(state): State<Arc<AppState>>,
    ui: Ui,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<TaskQuery>,
) -> UiResult<Response> {
    blocking(move || render_task(&state, &ui, &id, q.to)).await
}

/// The limit `name` of the agent, used against it.
fn limit_row(name: &str, used: &str, limit: Option<String>) -> Markup {
    html! {
        tr { th scope="row" { (name) } td.num { (used) } td.num { (limit.unwrap_or_else(|| "—".into())) } }
    }
}

/// How many of a task's queued inputs its page lists.
const QUEUED_SHOWN: usize = 50;

/// The text of a queued input's message (its text parts, joined), else its JSON; for a lock
/// waiting to be done, its reason.
fn queued_text(input: &QueuedInput) -> String {
    if let Some(reason) = &input.lock {
        return format!("Lock: {reason}");
    }
    let io = &input.io;
    let texts: Vec<&str> = io["message"]
        .as_array()
        .map(|parts| parts.iter().filter_map(|p| p["text"].as_str()).collect())
        .unwrap_or_default();
    if texts.is_empty() {
        io.to_string()
    } else {
        texts.join(" ")
    }
}

/// Task `id`'s page, its timeline ending at event `to` (default: the last).
pub fn render_task(state: &AppState, ui: &Ui, id: &str, to: Option<u64>) -> UiResult<Response> {
    let caller = &ui.caller;
    let engine = state.engine();
    let seen = engine.read_task(id, |r, queued| Seen {
        object: resources::task(r, queued),
        owner: r.user.id.clone(),
        agent: r.agent.clone(),
        status: r.status(),
        reviewer_is_caller: crate::tasks::is_reviewer(caller, r),
        pending: r.pending_review.clone(),
        llm_calls: r.llm_calls,
        prompt_tokens: r.prompt_tokens,
        completion_tokens: r.completion_tokens,
        tool_calls: r.tool_calls,
        created_ms: r.created_ms,
        last_ms: r.last_activity_ms,
        limit: r.limit.clone(),
        parent: r.parent.clone(),
    })?;
    let sees = caller.may_see(&seen.owner);
    if !sees && !seen.reviewer_is_caller {
        return Err(UiError::Page(
            StatusCode::NOT_FOUND,
            format!("not found: task `{id}`"),
        ));
    }
    let secrets = Arc::clone(&engine.plan().secrets);
    let store = engine.store();
    let last = store.last_event_seq(id)?;
    let to = to.unwrap_or(last).min(last);
    let from = to.saturating_sub(EVENTS_PAGE - 1).max(1);
    let (events, _) = store.events_between(id, from, to)?;
    // Newest first until the page is full, then shown oldest first.
    let mut rows: Vec<(u64, String)> = Vec::new();
    let mut bytes = 0;
    for event in events.iter().rev() {
        let row = timeline::row(id, event, &secrets).into_string();
        bytes += row.len();
        if bytes > TIMELINE_BYTES && !rows.is_empty() {
            break;
        }
        rows.push((event.seq, row));
    }
    rows.reverse();
    let first_shown = rows.first().map_or(to + 1, |(seq, _)| *seq);
    let latest = to == last;
    let viewer = ui.viewer();
    let may_act = sees && viewer.may_write() && seen.status != Status::Terminated;
    let limits = engine.agent(&seen.agent).ok().map(|a| a.limits.clone());
    let age = agentmesh_store::now_ms().saturating_sub(seen.created_ms) / 1000;
    let queued = if sees {
        engine.queued_inputs(id, QUEUED_SHOWN)?
    } else {
        Vec::new()
    };
    let wakeups = if sees {
        let owner = (caller.role == Role::AgentUser).then_some(caller.subject.as_str());
        state.triggers().schedules(Some(id), owner)?.wakeups
    } else {
        Vec::new()
    };
    let mcp_sessions = if sees {
        engine.mcp_sessions(id)
    } else {
        Vec::new()
    };
    let object = &seen.object;
    let subscriptions = object["subscriptions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let allow_list = object["allow_list"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    let status = status_name(seen.status);
    let task_href = format!("/ui/tasks/{id}");
    let body = html! {
        dl.facts {
            dt { "Status" } dd id="task-status" { (status_badge(status)) @if let Some(r) = object["reason"].as_str() { " (" (r) @if let Some(l) = &seen.limit { ": " (l) } ")" } }
            dt { "Agent" } dd { (seen.agent) }
            dt { "Owner" } dd { (seen.owner) }
            dt { "Created" } dd { (time_ms(seen.created_ms)) }
            dt { "Last activity" } dd { (time_ms(seen.last_ms)) }
            dt { "Queued inputs" } dd { (object["queue_depth"]) }
            @if let Some(p) = &seen.parent { dt { "Delegated by" } dd { a href={ "/ui/tasks/" (p) } { (p) } } }
        }
        @if let Some(review) = &seen.pending {
            section.pending aria-labelledby="pending-h" {
                h2 id="pending-h" { "Waiting for a review" }
                p { "Review " code { (review.review_id) } " asks " strong { (review.reviewer) } "; requested " (time_ms(review.requested_ms)) "." }
                (json_details(&secrets, "Step and subject", &json!({"step": review.step, "subject": review.subject}), 8 * 1024, None))
                @if viewer.may_write() && review.may_decide(&caller.decider()) {
                    (super::reviews::decide_buttons(&viewer, id, &review.review_id))
                }
            }
        }
        @if may_act {
            section.actions aria-labelledby="actions-h" {
                h2 id="actions-h" { "Actions" }
                form.input method="post" action={ (task_href) "/input" } {
                    input type="hidden" name="csrf" value=(viewer.csrf);
                    label for="message" { "Send input" }
                    textarea id="message" name="message" rows="2" required {}
                    button type="submit" { "Send" }
                }
                (post_button(&viewer, &format!("{task_href}/interrupt"), &[], "Interrupt", "warn"))
                form.inline method="post" action={ (task_href) "/delete" } data-confirm="Delete this task? It ends for good." {
                    input type="hidden" name="csrf" value=(viewer.csrf);
                    button type="submit" class="danger" { "Delete" }
                }
            }
        }
        section aria-labelledby="limits-h" {
            h2 id="limits-h" { "Limits used" }
            table.small {
                (column_heads(&["Limit", "Used", "Allowed"]))
                tbody {
                    (limit_row("LLM calls (turns)", &seen.llm_calls.to_string(), limits.as_ref().and_then(|l| l.max_turns).map(|n| n.to_string())))
                    (limit_row("Tool calls", &seen.tool_calls.to_string(), limits.as_ref().and_then(|l| l.max_tool_calls).map(|n| n.to_string())))
                    (limit_row("Prompt tokens", &seen.prompt_tokens.to_string(), limits.as_ref().and_then(|l| l.max_prompt_tokens).map(|n| n.to_string())))
                    (limit_row("Completion tokens", &seen.completion_tokens.to_string(), limits.as_ref().and_then(|l| l.max_completion_tokens).map(|n| n.to_string())))
                    (limit_row("Age", &format!("{age} s"), limits.as_ref().and_then(|l| l.max_age).map(|d| format!("{} s", d.0.as_secs()))))
                }
            }
        }
        section aria-labelledby="queue-h" {
            h2 id="queue-h" { "Queued inputs" }
            @if queued.is_empty() { (empty("Nothing queued.")) } @else {
                table.small {
                    (column_heads(&["Queued", "From", "Message"]))
                    tbody {
                        @for input in &queued {
                            tr {
                                td { (time_ms(input.queued_at)) }
                                td { (input.trigger.as_ref().map_or("user", |t| t.source.as_str())) }
                                td { (queued_text(input)) }
                            }
                        }
                    }
                }
                @if object["queue_depth"].as_u64().is_some_and(|n| n > queued.len() as u64) {
                    p { "The first " (queued.len()) " of " (object["queue_depth"]) " are shown." }
                }
            }
        }
        section aria-labelledby="subs-h" {
            h2 id="subs-h" { "Subscriptions" }
            @if subscriptions.is_empty() { (empty("No subscription.")) } @else {
                table.small {
                    (column_heads(&["Tool", "Event", "Expires"]))
                    tbody { @for s in &subscriptions { tr {
                        td { (s["tool"].as_str().unwrap_or("")) } td { (s["event"].as_str().unwrap_or("")) }
                        td { @if s["expires_at"].is_null() { "never" } @else { (time_of(&s["expires_at"])) } }
                    } } }
                }
            }
            h2 { "Allow lists" }
            @if allow_list.is_empty() { (empty("No allow list.")) } @else {
                table.small {
                    (column_heads(&["Tool", "Parameter", "Values"]))
                    tbody { @for (tool, params) in &allow_list { @if let Some(params) = params.as_object() { @for (param, values) in params { tr {
                        td { (tool) } td { (param) }
                        td { (values.as_array().map(|v| v.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(", ")).unwrap_or_default()) }
                    } } } } }
                }
            }
            @if !wakeups.is_empty() {
                h2 { "Wakeups pending" }
                (super::triggers::wakeup_table(&viewer, &wakeups))
            }
            h2 id="mcp-h" { "MCP sessions on this host" }
            @if mcp_sessions.is_empty() { (empty("No MCP session.")) } @else {
                table.small id="mcp-sessions" {
                    (column_heads(&["Tool", "Session", "State", "Server process"]))
                    tbody { @for s in &mcp_sessions { tr {
                        td { (s.tool) } td { (s.session) }
                        td { (match s.state { McpSessionState::Open => "open, idle", McpSessionState::Busy => "in a call", McpSessionState::Closed => "closed: the next call opens it" }) }
                        td { @if let Some(pid) = s.pid { "pid " (pid) } @else { "—" } }
                    } } }
                }
            }
        }
        section aria-labelledby="timeline-h" {
            h2 id="timeline-h" { "Timeline" }
            p.note {
                "Events " (first_shown) "–" (to) " of " (last) "."
                @if latest { span id="live" aria-live="polite" {} }
            }
            nav.paging aria-label="Timeline pages" {
                @if first_shown > 1 { a rel="prev" href={ (task_href) "?to=" (first_shown - 1) } { "← Earlier events" } }
                @if !latest { a rel="next" href=(task_href) { "Latest events →" } }
            }
            div.scroll {
                table.timeline id="timeline" data-stream=[latest.then(|| format!("{task_href}/stream?after={to}"))] {
                    caption.visually-hidden { "Events of the task" }
                    (column_heads(&["#", "When", "From", "What"]))
                    tbody { @for (_, row) in &rows { (layout::raw(row.clone())) } }
                }
            }
            @if rows.is_empty() { (empty("No event yet.")) }
            (json_details(&secrets, "Task object (JSON)", object, 16 * 1024, None))
        }
    };
    let title = format!("Task {id}");
    Ok(html_page(&layout::page(
        &title,
        Nav::Tasks,
        Some(&viewer),
        &body,
    )))
}

/// `GET /ui/tasks/{id}/stream?after=SEQ` query.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamQuery {
    #[serde(default)]
    after: u64,
}

/// `GET /ui/tasks/{id}/stream?after=SEQ`: the task's new events as timeline rows, live.
pub async fn stream(
    State(state): State<Arc<AppState>>,
    ui: Ui,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<StreamQuery>,
) -> UiResult<Response> {
    crate::tasks::readable_task(&state, &ui.caller, &id)?;
    // Asked again before each batch of rows: a session logged out or whose token a reload
    // removed, or a reviewer whose review was decided, reads nothing more.
    let session = ui.id;
    let may_read = move |state: &AppState, id: &str| {
        super::session_caller(state, &session)
            .is_some_and(|(_, c)| crate::tasks::readable_task(state, &c, id).is_ok())
    };
    Ok(crate::tasks::event_stream(
        state,
        id,
        q.after,
        may_read,
        |state, task, event| {
            // A carriage return cannot travel in an SSE field; as a character reference it is the
            // same text.
            let secrets = Arc::clone(&state.engine().plan().secrets);
            let row = timeline::row(task, event, &secrets)
                .into_string()
                .replace('\r', "&#13;");
            SseEvent::default()
                .id(event.seq.to_string())
                .event("row")
                .data(row)
        },
    ))
}

/// `GET /ui/tasks/{id}/events/{seq}`: one event's whole JSON.
pub async fn event_json(
    State(state): State<Arc<AppState>>,
    ui: Ui,
    ApiPath((id, seq)): ApiPath<(String, u64)>,
) -> UiResult<Response> {
    blocking(move || {
        crate::tasks::readable_task(&state, &ui.caller, &id)?;
        let (events, _) = state.engine().store().events_between(&id, seq, seq)?;
        let event = events.first().ok_or_else(|| {
            UiError::Page(
                StatusCode::NOT_FOUND,
                format!("task `{id}` has no event {seq}"),
            )
        })?;
        let text = serde_json::to_string_pretty(event).unwrap_or_default();
        Ok(([(header::CONTENT_TYPE, "application/json")], text).into_response())
    })
    .await
}

#[derive(Deserialize)]
struct InputForm {
    csrf: String,
    message: String,
}

/// `POST /ui/tasks/{id}/input`: queues a message as the caller's input.
pub async fn input(
    State(state): State<Arc<AppState>>,
    ui: Ui,
    ApiPath(id): ApiPath<String>,
    Body(body): Body,
) -> UiResult<Response> {
    let f: InputForm = form(&body)?;
    ui.check_csrf(&f.csrf)?;
    if f.message.trim().is_empty() {
        return Err(UiError::bad_request("the message is empty"));
    }
    crate::tasks::feed(&state, &ui.caller, &id, json!({"message": f.message})).await?;
    Ok(Redirect::to(&format!("/ui/tasks/{id}")).into_response())
}

#[derive(Deserialize)]
struct CsrfForm {
    csrf: String,
}

/// What a one-button form does to a task.
enum Change {
    Interrupt,
    Delete,
}

/// `POST /ui/tasks/{id}/interrupt`.
pub async fn interrupt(
    State(state): State<Arc<AppState>>,
    ui: Ui,
    ApiPath(id): ApiPath<String>,
    Body(body): Body,
) -> UiResult<Response> {
    change(&state, &ui, &id, &body, Change::Interrupt).await
}

/// `POST /ui/tasks/{id}/delete`.
pub async fn delete(
    State(state): State<Arc<AppState>>,
    ui: Ui,
    ApiPath(id): ApiPath<String>,
    Body(body): Body,
) -> UiResult<Response> {
    change(&state, &ui, &id, &body, Change::Delete).await
}

/// Interrupts or deletes task `id` as the caller, if the form carries the session's CSRF
/// token and the caller may change the task; then back to the task (or to the list).
async fn change(
    state: &AppState,
    ui: &Ui,
    id: &str,
    body: &[u8],
    what: Change,
) -> UiResult<Response> {
    let f: CsrfForm = form(body)?;
    ui.check_csrf(&f.csrf)?;
    crate::tasks::may_change(state, &ui.caller, id)?;
    let engine = state.engine();
    let back = match what {
        Change::Interrupt => {
            engine.interrupt(id).await?;
            format!("/ui/tasks/{id}")
        }
        Change::Delete => {
            engine.delete_task(id).await?;
            "/ui/".to_owned()
        }
    };
    Ok(Redirect::to(&back).into_response())
}
