//! `/v1/tasks`: create, read, list, feed, stream, interrupt, delete, review.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use agentmesh_engine::{
    Decider, EngineError, NewTask, Origin, Run, Status, UserRef, WaitingReview,
};
use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::auth::{Caller, Role};
use crate::error::{ApiError, ApiPath, ApiQuery, ApiResult, Body};
use crate::inspector::index::{Filter, From, Waiting};
use crate::metrics::Metrics;
use crate::{AppState, resources};

/// `POST /v1/tasks` body.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateTask {
    agent: String,
    #[serde(default)]
    input: Option<Value>,
    #[serde(default)]
    user: Option<UserBody>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UserBody {
    id: String,
    #[serde(default)]
    email: Option<String>,
}

/// A JSON body, with a clear 400 when it is not JSON of the expected shape.
pub fn parse_body<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> ApiResult<T> {
    serde_json::from_slice(bytes)
        .map_err(|e| ApiError::bad_request(format!("the body is not the expected JSON: {e}")))
}

fn caller(state: &AppState, headers: &HeaderMap) -> ApiResult<Caller> {
    state.auth().caller(headers)
}

/// The caller, checked from the request's head: a handler taking it before its [`Body`] is
/// answered 401 without reading a byte of the body, so that callers without a token cannot
/// make the server hold bodies of up to `max_body_bytes` each.
impl axum::extract::FromRequestParts<Arc<AppState>> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &Arc<AppState>,
    ) -> ApiResult<Caller> {
        caller(state, &parts.headers)
    }
}

/// The task, if the caller may read it: one it may see, or one waiting for the caller's
/// review (404 otherwise, so ids do not leak).
pub(crate) fn readable_task(
    state: &AppState,
    caller: &Caller,
    id: &str,
) -> ApiResult<agentmesh_engine::TaskRecord> {
    task_seen_by(state, caller, id, |r| is_reviewer(caller, r))
}

/// Whether `record` waits for a review naming the caller.
pub(crate) fn is_reviewer(caller: &Caller, record: &agentmesh_engine::TaskRecord) -> bool {
    record
        .pending_review
        .as_ref()
        .is_some_and(|r| r.reviewer == caller.subject)
}

/// The task, if the caller may see it (404 otherwise, so ids do not leak).
fn visible_task(
    state: &AppState,
    caller: &Caller,
    id: &str,
) -> ApiResult<agentmesh_engine::TaskRecord> {
    task_seen_by(state, caller, id, |_| false)
}

/// Task `id`, if the caller may see it or `also` lets it.
fn task_seen_by(
    state: &AppState,
    caller: &Caller,
    id: &str,
    also: impl Fn(&agentmesh_engine::TaskRecord) -> bool,
) -> ApiResult<agentmesh_engine::TaskRecord> {
    let record = state.engine().task(id)?;
    if !caller.may_see(&record.user.id) && !also(&record) {
        return Err(ApiError::not_found(format!("not found: task `{id}`")));
    }
    Ok(record)
}

/// `POST /v1/tasks`.
pub async fn create(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    Body(body): Body,
) -> ApiResult<Response> {
    caller.require_write()?;
    let body: CreateTask = parse_body(&body)?;
    let user = match (caller.role, body.user) {
        (Role::AgentUser, Some(u)) if u.id != caller.subject => {
            return Err(ApiError::forbidden(format!(
                "an agent_user token acts only as `{}`",
                caller.subject
            )));
        }
        // The host knows a token's subject, not its holder's email: one the caller chose
        // would pass a guard that trusts `context.user.email`.
        (Role::AgentUser, Some(u)) if u.email.is_some() => {
            return Err(ApiError::forbidden(
                "an agent_user token cannot set `user.email`: only an admin names a user's email",
            ));
        }
        (_, Some(u)) => UserRef {
            id: u.id,
            email: u.email,
        },
        (_, None) => UserRef {
            id: caller.subject.clone(),
            email: None,
        },
    };
    let engine = state.engine();
    let record = engine
        .create_task(
            NewTask {
                agent: body.agent,
                input: body.input,
                user,
            },
            Run::Background,
        )
        .await?;
    Metrics::inc(&state.metrics.tasks_created);
    let object = engine.read_task(&record.id, resources::task)?;
    Ok((StatusCode::CREATED, Json(object)).into_response())
}

/// `GET /v1/tasks/{id}`.
pub async fn get(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<Json<Value>> {
    let caller = caller(&state, &headers)?;
    readable_task(&state, &caller, &id)?;
    Ok(Json(state.engine().read_task(&id, resources::task)?))
}

/// `GET /v1/tasks` query.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    agent: Option<String>,
    status: Option<String>,
    owner: Option<String>,
    limit: Option<usize>,
    cursor: Option<String>,
}

/// Tasks in one page of `GET /v1/tasks` unless `limit` says otherwise.
const DEFAULT_PAGE: usize = 100;

/// The largest `limit` of `GET /v1/tasks`.
const MAX_PAGE: usize = 1000;

// A page of `GET /v1/tasks` ends at its last task's creation time and id (the list is newest
// first, ties by id descending), given as `MS:ID`.

/// The position a cursor names: `(created_ms, id)`.
fn parse_cursor(cursor: &str) -> ApiResult<(i64, String)> {
    cursor
        .split_once(':')
        .and_then(|(ms, id)| Some((ms.parse().ok()?, id.to_owned())))
        .ok_or_else(|| {
            ApiError::bad_request(format!(
                "`cursor` `{cursor}` is not one this API gave (`next_cursor` of a page)"
            ))
        })
}

/// `GET /v1/tasks?agent=ns/name&status=idle&owner=…&limit=100&cursor=…`: newest first, a page
/// at a time.
pub async fn list(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    ApiQuery(q): ApiQuery<ListQuery>,
) -> ApiResult<Json<Value>> {
    let caller = caller(&state, &headers)?;
    let status = q
        .status
        .as_deref()
        .map(|s| {
            serde_json::from_value::<Status>(json!(s)).map_err(|_| {
                ApiError::bad_request(format!(
                    "unknown status `{s}`: expected idle, running, waiting or terminated"
                ))
            })
        })
        .transpose()?;
    let limit = q.limit.unwrap_or(DEFAULT_PAGE);
    if !(1..=MAX_PAGE).contains(&limit) {
        return Err(ApiError::bad_request(format!(
            "`limit` must be between 1 and {MAX_PAGE}, found {limit}"
        )));
    }
    let after = q.cursor.as_deref().map(parse_cursor).transpose()?;
    let owner = match (caller.role, q.owner.as_deref()) {
        (Role::AgentUser, Some(o)) if o != caller.subject => {
            return Err(ApiError::forbidden(format!(
                "an agent_user token lists only the tasks of `{}`",
                caller.subject
            )));
        }
        (Role::AgentUser, _) => Some(caller.subject.as_str()),
        (_, owner) => owner,
    };
    let owner = owner.map(str::to_owned);
    off_the_workers(move || {
        let filter = Filter {
            agent: q.agent.as_deref(),
            status,
            owner: owner.as_deref(),
            trigger: None,
        };
        let from = after.map_or(From::Start, |(ms, id)| From::After((ms, Arc::from(id))));
        let engine = state.engine();
        let page = state
            .inspector
            .index
            .current(engine.store())
            .map_err(EngineError::Store)?
            .page(&filter, &from, limit);
        let next_cursor = page
            .more_after
            .then(|| {
                page.rows
                    .last()
                    .map(|r| format!("{}:{}", r.created_ms, r.id))
            })
            .flatten();
        let mut objects = Vec::with_capacity(page.rows.len());
        for row in &page.rows {
            // The record as it is now: one changed since the index saw it is shown as it is,
            // if it still matches; one deleted since is left out.
            let read = engine.read_task(&row.id, |r, queued| {
                filter.matches_record(r).then(|| resources::task(r, queued))
            });
            match read {
                Ok(Some(object)) => objects.push(object),
                Ok(None) | Err(EngineError::NotFound(_)) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(Json(
            json!({ "tasks": objects, "next_cursor": next_cursor }),
        ))
    })
    .await
}

/// Runs `f`, which reads the store and may wait for the index to be built, off the async
/// workers.
async fn off_the_workers<T: Send + 'static>(
    f: impl FnOnce() -> ApiResult<T> + Send + 'static,
) -> ApiResult<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::internal(format!("the request failed: {e}")))?
}

/// `POST /v1/tasks/{id}/input`.
pub async fn input(
    State(state): State<Arc<AppState>>,
    ApiPath(id): ApiPath<String>,
    caller: Caller,
    Body(body): Body,
) -> ApiResult<Response> {
    let input: Value = parse_body(&body)?;
    let submitted = feed(&state, &caller, &id, input).await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({ "queued_at": submitted })),
    )
        .into_response())
}

/// Queues `input` for task `id` as the caller's, if it may change the task: when it was queued.
pub(crate) async fn feed(
    state: &AppState,
    caller: &Caller,
    id: &str,
    input: Value,
) -> ApiResult<i64> {
    may_change(state, caller, id)?;
    let submitted = state
        .engine()
        .submit(id, input, Origin::User, Run::Background)
        .await?;
    Metrics::inc(&state.metrics.inputs_queued);
    Ok(submitted)
}

/// `GET /v1/tasks/{id}/events` query.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventsQuery {
    #[serde(default)]
    after: u64,
}

/// `GET /v1/tasks/{id}/events?after=SEQ`: the events, or a live SSE stream.
pub async fn events(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<EventsQuery>,
) -> ApiResult<Response> {
    let caller = caller(&state, &headers)?;
    readable_task(&state, &caller, &id)?;
    let wants_stream = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("text/event-stream"));
    if !wants_stream {
        let events = state.engine().events(&id, q.after)?;
        return Ok(Json(json!({ "events": events })).into_response());
    }
    // Asked again before each batch of events is sent: a token removed by a reload, or a
    // reviewer whose review was decided, reads nothing more.
    let authorization = headers.get(header::AUTHORIZATION).cloned();
    let may_read = move |state: &AppState, id: &str| {
        let mut headers = HeaderMap::new();
        if let Some(value) = authorization.clone() {
            headers.insert(header::AUTHORIZATION, value);
        }
        state
            .auth()
            .caller(&headers)
            .is_ok_and(|c| readable_task(state, &c, id).is_ok())
    };
    Ok(event_stream(state, id, q.after, may_read, |_, _, event| {
        SseEvent::default()
            .id(event.seq.to_string())
            .event(event.kind.name())
            .json_data(event)
            .unwrap_or_else(|_| SseEvent::default().comment("unencodable event"))
    }))
}

/// A live SSE stream of task `id`'s events after `after`, each as `frame` makes it (from the
/// state, the task id and the event), with keep-alives. `may_read` is asked after each read of new
/// events, before any of them is sent: when the caller may no longer read the task (its
/// token was removed, the review that let it read was decided), the stream ends. Asked after
/// the read, it answers as a `GET` of the events at that moment would.
pub(crate) fn event_stream(
    state: Arc<AppState>,
    id: String,
    after: u64,
    may_read: impl Fn(&AppState, &str) -> bool + Send + Sync + 'static,
    frame: fn(&AppState, &str, &agentmesh_model::event::Event) -> SseEvent,
) -> Response {
    let may_read = Arc::new(may_read);
    let stream = futures::stream::unfold(
        (state, id, after, Vec::new().into_iter()),
        move |(state, id, mut after, mut pending)| {
            let may_read = Arc::clone(&may_read);
            async move {
                loop {
                    if let Some(event) = pending.next() {
                        let event: agentmesh_model::event::Event = event;
                        after = event.seq;
                        let sse = frame(&state, &id, &event);
                        return Some((Ok::<_, Infallible>(sse), (state, id, after, pending)));
                    }
                    // Subscribe before reading so nothing appended in between is missed.
                    let mut appended = state.appended.subscribe();
                    match state.engine().events(&id, after) {
                        Ok(events) if !events.is_empty() => {
                            if !may_read(&state, &id) {
                                tracing::info!(task.id = %id, "event stream ended: the caller may no longer read the task");
                                return None;
                            }
                            pending = events.into_iter();
                            continue;
                        }
                        Ok(_) => {}
                        Err(e) => {
                            tracing::warn!(task.id = %id, "event stream ended: {e}");
                            return None;
                        }
                    }
                    if !wait_for_more(&state, &id, &mut appended).await {
                        return None;
                    }
                }
            }
        },
    );
    Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response()
}

/// Waits until task `id` may have new events (or 15 s pass); `false` once the host drains.
async fn wait_for_more(
    state: &AppState,
    id: &str,
    appended: &mut tokio::sync::broadcast::Receiver<Arc<str>>,
) -> bool {
    let mut draining = state.draining.subscribe();
    loop {
        let grown = tokio::select! {
            grown = tokio::time::timeout(Duration::from_secs(15), appended.recv()) => grown,
            _ = draining.wait_for(|d| *d) => return false,
        };
        match grown {
            Ok(Ok(task)) if *task != *id => continue,
            Ok(Err(tokio::sync::broadcast::error::RecvError::Closed)) => return false,
            _ => return true,
        }
    }
}

/// The caller of a request that changes task `id`, checked: it may write, and see the task.
fn writer(state: &AppState, headers: &HeaderMap, id: &str) -> ApiResult<Caller> {
    let caller = caller(state, headers)?;
    may_change(state, &caller, id)?;
    Ok(caller)
}

/// Refuses a caller that may not change task `id`: one that may only read, or not see it.
pub(crate) fn may_change(state: &AppState, caller: &Caller, id: &str) -> ApiResult<()> {
    caller.require_write()?;
    visible_task(state, caller, id)?;
    Ok(())
}

/// `POST /v1/tasks/{id}/interrupt`.
pub async fn interrupt(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<StatusCode> {
    writer(&state, &headers, &id)?;
    state.engine().interrupt(&id).await?;
    Ok(StatusCode::ACCEPTED)
}

/// `DELETE /v1/tasks/{id}`.
pub async fn delete(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<StatusCode> {
    writer(&state, &headers, &id)?;
    state.engine().delete_task(&id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /v1/tasks/{id}/reviews/{review_id}` body. `user`, if given, must be the caller: the
/// decision is recorded as the authenticated subject, never as a name from the body.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReviewBody {
    approve: bool,
    #[serde(default)]
    user: Option<String>,
}

/// `POST /v1/tasks/{id}/reviews/{review_id}`: only the reviewer the review names, or an
/// admin, decides; the task's owner needs to be neither.
pub async fn review(
    State(state): State<Arc<AppState>>,
    ApiPath((id, review_id)): ApiPath<(String, String)>,
    caller: Caller,
    Body(body): Body,
) -> ApiResult<Json<Value>> {
    caller.require_write()?;
    let body: ReviewBody = parse_body(&body)?;
    if let Some(user) = body.user.filter(|u| *u != caller.subject) {
        return Err(ApiError::forbidden(format!(
            "a review is decided as the authenticated caller `{}`, not `{user}`",
            caller.subject
        )));
    }
    decide(&state, &caller, &id, &review_id, body.approve).await?;
    Ok(Json(
        json!({"task_id": id, "review_id": review_id, "approve": body.approve}),
    ))
}

/// Decides review `review_id` of task `id` as the caller: only the reviewer it names, or an
/// admin.
pub(crate) async fn decide(
    state: &AppState,
    caller: &Caller,
    id: &str,
    review_id: &str,
    approve: bool,
) -> ApiResult<()> {
    caller.require_write()?;
    // Only a caller who may see the task, or whom its pending review names, learns anything
    // of it: to anyone else the task is as unknown as a task that does not exist.
    readable_task(state, caller, id)?;
    state
        .engine()
        .decide_review(id, review_id, approve, caller.decider())
        .await?;
    Ok(())
}

/// The reviews of `waiting` (from the index) as their task records hold them, those `decider`
/// may decide, in the same order: one record read each. A review decided, or a task deleted,
/// since the index saw it is left out.
pub(crate) fn waiting_reviews(
    state: &AppState,
    waiting: &[Waiting],
    decider: Decider<'_>,
) -> ApiResult<Vec<WaitingReview>> {
    let engine = state.engine();
    let mut reviews = Vec::with_capacity(waiting.len());
    for w in waiting {
        let found = engine.read_task(&w.task_id, |r, _| {
            r.pending_review
                .clone()
                .filter(|p| r.status() == Status::Waiting && p.may_decide(&decider))
                .map(|review| WaitingReview {
                    task_id: r.id.clone(),
                    agent: r.agent.clone(),
                    review,
                })
        });
        match found {
            Ok(Some(review)) => reviews.push(review),
            Ok(None) | Err(EngineError::NotFound(_)) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(reviews)
}

/// `GET /v1/reviews`: the pending reviews the caller may decide (every one, for an admin),
/// oldest request first: the index's waiting reviews, then only their records.
pub async fn reviews(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
) -> ApiResult<Json<Value>> {
    let caller = caller(&state, &headers)?;
    off_the_workers(move || {
        let decider = caller.decider();
        let waiting = state
            .inspector
            .index
            .current(state.engine().store())
            .map_err(EngineError::Store)?
            .waiting(&From::Start, usize::MAX, |w| {
                decider.may_decide_for(&w.reviewer)
            });
        let reviews: Vec<Value> = waiting_reviews(&state, &waiting.rows, decider)?
            .iter()
            .map(resources::review)
            .collect();
        Ok(Json(json!({ "reviews": reviews })))
    })
    .await
}
