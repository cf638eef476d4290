//! The reviews inbox: the reviews waiting for a decision the caller may make (what
//! `GET /v1/reviews` lists), approved or denied in one click, and the decisions the logs hold
//! with who made them and when. Both lists are pages of the index ([`super::index`]), walked
//! from a position given in the query (keyset paging, links that work without a script): the
//! waiting reviews oldest first, reading the task records of one page only; the decisions
//! newest first.

use std::cmp::Reverse;
use std::sync::Arc;

use axum::extract::State;
use axum::response::{IntoResponse, Redirect, Response};
use maud::{Markup, html};
use serde::Deserialize;

use super::index::{DecisionKey, From, WaitingKey};
use super::layout::{
    self, Nav, Viewer, column_heads, compact, empty, json_details, post_button, time_of,
    time_rfc3339,
};
use super::tasks::{given, parse_key, query_string};
use super::{Ui, UiError, UiResult, blocking, form, html_page};
use crate::auth::Role;
use crate::error::{ApiPath, ApiQuery, Body};
use crate::{AppState, resources};

/// Entries in a page of either list.
const PAGE: usize = 50;

/// `GET /ui/reviews` query: each list's position (a key of its own, as the links give it).
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct InboxQuery {
    /// Waiting reviews requested after this one (`MS:TASK`).
    waiting_after: Option<String>,
    /// Waiting reviews requested before this one.
    waiting_before: Option<String>,
    /// Decisions older than this one (`TASK:REVIEW:AT`).
    decided_after: Option<String>,
    /// Decisions newer than this one.
    decided_before: Option<String>,
}

/// The approve and deny buttons of review `review_id` of task `task_id`.
pub fn decide_buttons(viewer: &Viewer<'_>, task_id: &str, review_id: &str) -> Markup {
    let action = format!("/ui/reviews/{task_id}/{review_id}");
    html! {
        span.decide {
            (post_button(viewer, &action, &[("approve", "true")], "Approve", "ok"))
            (post_button(viewer, &action, &[("approve", "false")], "Deny", "danger"))
        }
    }
}

/// The position of a list a query gives: after `after`, before `before`, or its start.
fn position<K>(
    after: Option<&String>,
    before: Option<&String>,
    key: impl Fn(&str) -> UiResult<K>,
) -> UiResult<From<K>> {
    Ok(match (given(after), given(before)) {
        (Some(k), _) => From::After(key(k)?),
        (None, Some(k)) => From::Before(key(k)?),
        (None, None) => From::Start,
    })
}

fn waiting_key(s: &str) -> UiResult<WaitingKey> {
    let (ms, task) = parse_key(s)?;
    Ok((Reverse(ms), Reverse(Arc::from(task))))
}

fn decision_key(s: &str) -> UiResult<DecisionKey> {
    let mut parts = s.splitn(3, ':');
    match (parts.next(), parts.next(), parts.next()) {
        (Some(task), Some(review), Some(at)) => {
            Ok((at.to_owned(), Arc::from(task), review.to_owned()))
        }
        _ => Err(UiError::bad_request(format!(
            "`{s}` is not a position of the decisions"
        ))),
    }
}

/// A link to the inbox with `moved` (a list's new position) and the other list's position
/// as it is.
fn inbox_link(q: &InboxQuery, moved: (&str, &str)) -> String {
    let waiting = moved.0.starts_with("waiting");
    let mut pairs = vec![moved];
    let kept = if waiting {
        [
            ("decided_after", &q.decided_after),
            ("decided_before", &q.decided_before),
        ]
    } else {
        [
            ("waiting_after", &q.waiting_after),
            ("waiting_before", &q.waiting_before),
        ]
    };
    for (k, v) in kept {
        if let Some(v) = given(v.as_ref()) {
            pairs.push((k, v));
        }
    }
    format!("/ui/reviews?{}", query_string(&pairs))
}

/// `GET /ui/reviews`.
pub async fn inbox(
    State(state): State<Arc<AppState>>,
    ui: Ui,
    ApiQuery(q): ApiQuery<InboxQuery>,
) -> UiResult<Response> {
    blocking(move || {
        let caller = &ui.caller;
        let viewer = ui.viewer();
        let decider = caller.decider();
        let secrets = Arc::clone(&state.engine().plan().secrets);
        let waiting_from = position(q.waiting_after.as_ref(), q.waiting_before.as_ref(), waiting_key)?;
        let decided_from = position(q.decided_after.as_ref(), q.decided_before.as_ref(), decision_key)?;
        let (waiting, decisions) = {
            let rows = state.inspector.index.current(state.engine().store())?;
            let waiting = rows.waiting(&waiting_from, PAGE, |w| decider.may_decide_for(&w.reviewer));
            let decisions = rows.decisions(&decided_from, PAGE, |d| {
                caller.role != Role::AgentUser
                    || *d.owner == *caller.subject
                    || d.decided_by == caller.subject
            });
            (waiting, decisions)
        };
        // Only the records of this page's reviews are read.
        let reviews = crate::tasks::waiting_reviews(&state, &waiting.rows, decider)?;
        let pending: Vec<_> = reviews.iter().map(resources::review).collect();
        let waiting_link = |moved: &str, i: usize| {
            waiting.rows.get(i).map(|w| {
                let key = format!("{}:{}", w.requested_ms, w.task_id);
                inbox_link(&q, (moved, &key))
            })
        };
        let decided_link = |moved: &str, i: usize| {
            decisions.rows.get(i).map(|d| {
                let key = format!("{}:{}:{}", d.task_id, d.review_id, d.at);
                inbox_link(&q, (moved, &key))
            })
        };
        let last_waiting = waiting.rows.len().saturating_sub(1);
        let last_decided = decisions.rows.len().saturating_sub(1);
        let body = html! {
            section aria-labelledby="pending-h" {
                h2 id="pending-h" { "Waiting for your decision" }
                @if pending.is_empty() { (empty("No review waits for you.")) } @else {
                    p.note { "Oldest request first." }
                    div.scroll { table.reviews id="waiting" {
                        (column_heads(&["Task", "Agent", "Reviewer", "Requested", "Under review", "Decide"]))
                        tbody { @for r in &pending {
                            @let task = r["task_id"].as_str().unwrap_or("");
                            @let review = r["review_id"].as_str().unwrap_or("");
                            tr id={ "review-" (review) } {
                                td { a href={ "/ui/tasks/" (task) } { code { (task) } } }
                                td { (r["agent"].as_str().unwrap_or("")) }
                                td { (r["reviewer"].as_str().unwrap_or("")) }
                                td { (time_of(&r["requested_at"])) }
                                td {
                                    code.args { (compact(&secrets, &r["input"], 300)) }
                                    (json_details(&secrets, "Step, input and output", r, 8 * 1024, None))
                                }
                                td { @if viewer.may_write() { (decide_buttons(&viewer, task, review)) } @else { "read only" } }
                            }
                        } }
                    } }
                }
                nav.paging aria-label="Pages of the waiting reviews" {
                    @if waiting.more_before { @if let Some(href) = waiting_link("waiting_before", 0) { a rel="prev" href=(href) { "← Earlier requests" } } }
                    @if waiting.more_after { @if let Some(href) = waiting_link("waiting_after", last_waiting) { a rel="next" href=(href) { "Later requests →" } } }
                }
            }
            section aria-labelledby="decided-h" {
                h2 id="decided-h" { "Decided" }
                @if decisions.rows.is_empty() { (empty("No decision yet.")) } @else {
                    div.scroll { table.reviews id="decided" {
                        (column_heads(&["Task", "Review", "Asked", "Decision", "By", "When"]))
                        tbody { @for d in &decisions.rows { tr id={ "decision-" (d.review_id) } {
                            td { a href={ "/ui/tasks/" (d.task_id) } { code { (d.task_id) } } }
                            td { code { (d.review_id) } }
                            td { (d.reviewer.as_deref().unwrap_or("—")) }
                            td { @if d.approve { span.badge.idle { "approved" } } @else { span.badge.terminated { "denied" } } }
                            td { (d.decided_by) }
                            td { (time_rfc3339(&d.at)) }
                        } } }
                    } }
                }
                nav.paging aria-label="Pages of the decisions" {
                    @if decisions.more_before { @if let Some(href) = decided_link("decided_before", 0) { a rel="prev" href=(href) { "← Newer decisions" } } }
                    @if decisions.more_after { @if let Some(href) = decided_link("decided_after", last_decided) { a rel="next" href=(href) { "Older decisions →" } } }
                }
            }
        };
        Ok(html_page(&layout::page("Reviews", Nav::Reviews, Some(&viewer), &body)))
    })
    .await
}

#[derive(Deserialize)]
struct DecideForm {
    csrf: String,
    approve: bool,
}

/// `POST /ui/reviews/{task}/{review}`: approve or deny, as the caller.
pub async fn decide(
    State(state): State<Arc<AppState>>,
    ui: Ui,
    ApiPath((task, review)): ApiPath<(String, String)>,
    Body(body): Body,
) -> UiResult<Response> {
    let f: DecideForm = form(&body)?;
    ui.check_csrf(&f.csrf)?;
    crate::tasks::decide(&state, &ui.caller, &task, &review, f.approve).await?;
    Ok(Redirect::to(&format!("/ui/tasks/{task}")).into_response())
}
