//! The inspector: server-rendered HTML views of the host at `/ui/`, behind the API's tokens
//! and roles (CONTRACT §3: `GET /ui/`).
//!
//! - [`session`]: the login page trades a token for an `HttpOnly`, `SameSite=Strict` session
//!   cookie and a per-session CSRF token that every state-changing form carries;
//! - `tasks`: the task list (filters, keyset paging over [`index`], live updates) and a task's
//!   page (its timeline from `timeline`, paged, live over SSE; subscriptions, allow lists,
//!   queue, MCP sessions, limits used; send input, interrupt, delete);
//! - `reviews`: the reviews the caller may decide, one click each, and the decisions, both
//!   paged;
//! - `triggers`: triggers, schedules and wakeups with their status; revoking a schedule;
//! - `plugins`: the components in force, the compiled cache, the last reload, agents and tools;
//! - `layout`: the page shell and small pieces of markup; `assets/`: the stylesheet and the
//!   script (live parts only: every page reads without it), embedded in the binary.
//!
//! Every value is escaped by the templates (maud). Answers carry a `Content-Security-Policy`
//! that allows scripts and styles from the host only — no inline script, no third party.
//! The views read what the JSON API reads, through the same engine and trigger functions and
//! the same JSON of resources ([`crate::resources`]), and check the caller as the API does.

pub mod index;
mod layout;
mod plugins;
mod reviews;
pub mod session;
mod tasks;
mod timeline;
mod triggers;

use std::sync::Arc;

use axum::Router;
use axum::extract::{FromRequestParts, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use maud::html;
use serde::Deserialize;

use crate::AppState;
use crate::auth::{Auth, Caller};
use crate::error::{ApiError, Body, read_body_within};
use layout::{Nav, Viewer};
use session::{Session, Sessions};

/// What the inspector keeps: its sessions and its index of tasks.
#[derive(Default)]
pub struct Inspector {
    /// Open browser sessions.
    pub sessions: Sessions,
    /// Tasks in creation order, kept current.
    pub index: Arc<index::TaskIndex>,
}

/// The policy of every inspector answer: scripts, styles, images and connections from the host
/// only; no inline script or style, no plugin, no framing, forms posting only to the host.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
     connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// The routes under `/ui`.
pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/ui", get(|| async { Redirect::to("/ui/") }))
        .route("/ui/", get(tasks::list))
        .route("/ui/changes", get(tasks::changes))
        .route("/ui/tasks/{id}", get(tasks::task))
        .route("/ui/tasks/{id}/stream", get(tasks::stream))
        .route("/ui/tasks/{id}/events/{seq}", get(tasks::event_json))
        .route("/ui/tasks/{id}/input", post(tasks::input))
        .route("/ui/tasks/{id}/interrupt", post(tasks::interrupt))
        .route("/ui/tasks/{id}/delete", post(tasks::delete))
        .route("/ui/reviews", get(reviews::inbox))
        .route("/ui/reviews/{task}/{review}", post(reviews::decide))
        .route("/ui/triggers", get(triggers::page))
        .route("/ui/schedules/revoke", post(triggers::revoke))
        .route("/ui/plugins", get(plugins::page))
        .route("/ui/login", get(login_page).post(login))
        .route("/ui/logout", post(logout))
        .route("/ui/assets/inspector.css", get(css))
        .route("/ui/assets/inspector.js", get(js))
        .layer(axum::middleware::map_response(headers))
        .layer(axum::middleware::from_fn(same_origin_posts))
}

/// Refuses a post whose `Origin` names another site than the one it was sent to: browsers
/// send `Origin` with every form post, so a form on another site (including a login form that
/// would sign the victim into the attacker's session) is refused before anything is read.
/// Requests without `Origin` (not from a browser) go on to the session and CSRF checks.
async fn same_origin_posts(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    if request.method() == axum::http::Method::POST {
        let headers = request.headers();
        let host = headers.get(header::HOST).and_then(|v| v.to_str().ok());
        if let Some(origin) = headers.get(header::ORIGIN) {
            let origin = origin.to_str().unwrap_or("");
            let same = origin
                .split_once("://")
                .is_some_and(|(_, authority)| Some(authority) == host);
            if !same {
                return UiError::forbidden(format!(
                    "a form of another site (`{origin}`) cannot post to the inspector"
                ))
                .into_response();
            }
        }
    }
    next.run(request).await
}

/// The headers of every inspector answer.
async fn headers(mut response: Response) -> Response {
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    if !h.contains_key(header::CACHE_CONTROL) {
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    response
}

async fn css() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/css; charset=utf-8"),
            (header::CACHE_CONTROL, "max-age=300"),
        ],
        include_str!("assets/inspector.css"),
    )
}

async fn js() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/javascript; charset=utf-8"),
            (header::CACHE_CONTROL, "max-age=300"),
        ],
        include_str!("assets/inspector.js"),
    )
}

/// An inspector error: a page saying what went wrong, or the login page for a request
/// without a valid session.
#[derive(Debug)]
pub enum UiError {
    /// No valid session: log in, then come back to this path.
    Login(String),
    /// An error with its status and message.
    Page(StatusCode, String),
}

impl UiError {
    fn bad_request(message: impl Into<String>) -> Self {
        UiError::Page(StatusCode::BAD_REQUEST, message.into())
    }

    fn forbidden(message: impl Into<String>) -> Self {
        UiError::Page(StatusCode::FORBIDDEN, message.into())
    }
}

impl From<ApiError> for UiError {
    fn from(e: ApiError) -> Self {
        UiError::Page(e.status(), e.message().to_owned())
    }
}

impl From<agentmesh_engine::EngineError> for UiError {
    fn from(e: agentmesh_engine::EngineError) -> Self {
        ApiError::from(e).into()
    }
}

impl From<agentmesh_store::StoreError> for UiError {
    fn from(e: agentmesh_store::StoreError) -> Self {
        ApiError::from(agentmesh_engine::EngineError::Store(e)).into()
    }
}

impl IntoResponse for UiError {
    fn into_response(self) -> Response {
        match self {
            UiError::Login(next) => {
                let target = format!("/ui/login?next={}", encode(&next));
                Redirect::to(&target).into_response()
            }
            UiError::Page(status, message) => {
                let title = status.canonical_reason().unwrap_or("Error");
                let body = html! {
                    p.error role="alert" { (message) }
                    p { a href="/ui/" { "Back to the tasks" } }
                };
                (
                    status,
                    Html(layout::page(title, Nav::Tasks, None, &body).into_string()),
                )
                    .into_response()
            }
        }
    }
}

/// `s` encoded for a query value.
fn encode(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

/// The inspector's result.
type UiResult<T> = Result<T, UiError>;

/// The caller of a request holding a valid session.
pub struct Ui {
    /// Who the session's token names.
    pub caller: Caller,
    /// The session.
    pub session: Session,
    /// Its id.
    pub id: String,
}

impl Ui {
    /// The viewer of a page.
    fn viewer(&self) -> Viewer<'_> {
        Viewer {
            caller: &self.caller,
            csrf: &self.session.csrf,
        }
    }

    /// Refuses a form whose CSRF token is not the session's.
    fn check_csrf(&self, presented: &str) -> UiResult<()> {
        if Sessions::check_csrf(&self.session, presented) {
            Ok(())
        } else {
            Err(UiError::forbidden(
                "the form's CSRF token is missing or not this session's: reload the page and try again",
            ))
        }
    }
}

/// The caller a token names under `auth` (any token, for a host without tokens).
fn caller_of_token(auth: &Auth, token: &str) -> Result<Caller, ApiError> {
    let mut headers = HeaderMap::new();
    let value = HeaderValue::from_str(&format!("Bearer {token}"))
        .map_err(|_| ApiError::unauthorized("the token is not visible ASCII"))?;
    headers.insert(header::AUTHORIZATION, value);
    auth.caller(&headers)
}

impl FromRequestParts<Arc<AppState>> for Ui {
    type Rejection = UiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &Arc<AppState>,
    ) -> Result<Self, UiError> {
        let back = parts
            .uri
            .path_and_query()
            .map_or("/ui/", |p| p.as_str())
            .to_owned();
        let id = parts
            .headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .find_map(session::id_in_cookies)
            .map(str::to_owned);
        let Some(id) = id else {
            return Err(UiError::Login(back));
        };
        match session_caller(state, &id) {
            Some((session, caller)) => Ok(Ui {
                caller,
                session,
                id,
            }),
            None => Err(UiError::Login(back)),
        }
    }
}

/// Session `id` and who its token names now; `None` when there is no such session, or its
/// token was removed or rotated by a reload (the session then ends).
pub(crate) fn session_caller(state: &AppState, id: &str) -> Option<(Session, Caller)> {
    let session = state.inspector.sessions.get(id)?;
    match caller_of_token(&state.auth(), &session.token) {
        Ok(caller) => Some((session, caller)),
        Err(_) => {
            state.inspector.sessions.close(id);
            None
        }
    }
}

/// A form body of type `T`, with a clear 400 when it does not parse.
fn form<T: serde::de::DeserializeOwned>(body: &[u8]) -> UiResult<T> {
    serde_urlencoded::from_bytes(body)
        .map_err(|e| UiError::bad_request(format!("the form is not as expected: {e}")))
}

/// Runs `f` (which reads the store) off the async workers.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> UiResult<T> + Send + 'static,
) -> UiResult<T> {
    tokio::task::spawn_blocking(f).await.map_err(|e| {
        UiError::Page(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("the view failed: {e}"),
        )
    })?
}

/// An HTML answer.
fn html_page(markup: &maud::Markup) -> Response {
    Html(markup.clone().into_string()).into_response()
}

/// The login page's query: where to go once logged in.
#[derive(Deserialize)]
struct LoginQuery {
    next: Option<String>,
}

/// `next` if it is a path of the inspector (never another site: no open redirect).
fn safe_next(next: Option<&str>) -> &str {
    next.filter(|n| n.starts_with("/ui/") && !n.contains("//") && !n.contains('\\'))
        .unwrap_or("/ui/")
}

fn login_form(state: &AppState, next: &str, error: Option<&str>) -> maud::Markup {
    let open = state.auth().is_open();
    let body = html! {
        @if let Some(e) = error { p.error role="alert" { (e) } }
        form.login method="post" action="/ui/login" {
            input type="hidden" name="next" value=(next);
            @if open {
                p { "This host has no API tokens (it serves loopback only): every caller is an admin." }
                input type="hidden" name="token" value="";
                button type="submit" { "Continue" }
            } @else {
                label for="token" { "API token" }
                input id="token" name="token" type="password" autocomplete="current-password" required autofocus;
                p.note { "The token stays in this browser's session cookie (HttpOnly); it never appears in a URL." }
                button type="submit" { "Log in" }
            }
        }
    };
    layout::page("Log in", Nav::Login, None, &body)
}

/// `GET /ui/login`.
async fn login_page(
    State(state): State<Arc<AppState>>,
    crate::error::ApiQuery(q): crate::error::ApiQuery<LoginQuery>,
) -> Response {
    html_page(&login_form(&state, safe_next(q.next.as_deref()), None))
}

#[derive(Deserialize)]
struct LoginForm {
    token: String,
    next: Option<String>,
}

/// The largest login form read: a token and a path, never more than a few hundred bytes.
/// Whoever posts it has no token yet, so it is not allowed `max_body_bytes`.
const LOGIN_FORM_BYTES: usize = 16 * 1024;

/// `POST /ui/login`: a valid token opens a session.
async fn login(State(state): State<Arc<AppState>>, body: axum::body::Body) -> UiResult<Response> {
    let body = read_body_within(body, &state, (LOGIN_FORM_BYTES, "a login form may be")).await?;
    let f: LoginForm = form(&body)?;
    let next = safe_next(f.next.as_deref()).to_owned();
    let token = f.token.trim();
    if let Err(e) = caller_of_token(&state.auth(), token) {
        let page = login_form(&state, &next, Some(e.message()));
        return Ok((StatusCode::UNAUTHORIZED, Html(page.into_string())).into_response());
    }
    let Some(id) = state.inspector.sessions.open(token) else {
        return Err(UiError::Page(
            StatusCode::INTERNAL_SERVER_ERROR,
            "no randomness for a session id".into(),
        ));
    };
    let mut response = Redirect::to(&next).into_response();
    if let Ok(cookie) = HeaderValue::from_str(&session::cookie_for(&id)) {
        response.headers_mut().insert(header::SET_COOKIE, cookie);
    }
    Ok(response)
}

#[derive(Deserialize)]
struct CsrfOnly {
    csrf: String,
}

/// `POST /ui/logout`.
async fn logout(
    State(state): State<Arc<AppState>>,
    ui: Ui,
    Body(body): Body,
) -> UiResult<Response> {
    let f: CsrfOnly = form(&body)?;
    ui.check_csrf(&f.csrf)?;
    state.inspector.sessions.close(&ui.id);
    let mut response = Redirect::to("/ui/login").into_response();
    if let Ok(cookie) = HeaderValue::from_str(&session::cookie_cleared()) {
        response.headers_mut().insert(header::SET_COOKIE, cookie);
    }
    Ok(response)
}
