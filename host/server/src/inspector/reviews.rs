//! The reviews inbox: the reviews waiting for a decision the caller may make (what
//! `GET /v1/reviews` lists, found through the index's waiting tasks rather than every record),
//! approved or denied in one click, and the latest decisions with who made them and when.

use std::sync::Arc;

use agentmesh_engine::{Status, WaitingReview};
use axum::extract::State;
use axum::response::{IntoResponse, Redirect, Response};
use maud::{Markup, html};
use serde::Deserialize;

use super::index::{Filter, From};
use super::layout::{
    self, Nav, Viewer, compact, empty, json_details, post_button, time_of, time_rfc3339,
};
use super::{Ui, UiResult, blocking, form, html_page};
use crate::auth::Role;
use crate::error::{ApiPath, Body};
use crate::{AppState, resources};

/// Decisions shown.
const DECISIONS_SHOWN: usize = 100;

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

/// `GET /ui/reviews`.
pub async fn inbox(State(state): State<Arc<AppState>>, ui: Ui) -> UiResult<Response> {
    blocking(move || {
        let caller = &ui.caller;
        let viewer = ui.viewer();
        let engine = state.engine();
        let rows = state.inspector.index.current(engine.store())?;
        // The waiting tasks from the index, then only their records: what
        // `Engine::pending_reviews` finds by reading every record.
        let decider = caller.decider();
        let waiting = Filter {
            status: Some(Status::Waiting),
            ..Filter::default()
        };
        let mut reviews: Vec<WaitingReview> = Vec::new();
        for row in rows.page(&waiting, &From::Newest, usize::MAX).rows {
            let found = engine.read_task(&row.id, |r, _| {
                r.pending_review
                    .clone()
                    .filter(|p| p.may_decide(&decider))
                    .map(|review| WaitingReview {
                        task_id: r.id.clone(),
                        agent: r.agent.clone(),
                        review,
                    })
            });
            match found {
                Ok(Some(review)) => reviews.push(review),
                // Deleted since it was indexed.
                Ok(None) | Err(agentmesh_engine::EngineError::NotFound(_)) => {}
                Err(e) => return Err(e.into()),
            }
        }
        reviews.sort_by_key(|r| r.review.requested_ms);
        let pending: Vec<_> = reviews.iter().map(resources::review).collect();
        let decisions: Vec<_> = rows
            .decisions
            .iter()
            .filter(|d| {
                caller.role != Role::AgentUser
                    || *d.owner == *caller.subject
                    || d.decided_by == caller.subject
            })
            .take(DECISIONS_SHOWN)
            .collect();
        let body = html! {
            section aria-labelledby="pending-h" {
                h2 id="pending-h" { "Waiting for your decision" }
                @if pending.is_empty() { (empty("No review waits for you.")) } @else {
                    div.scroll { table.reviews {
                        thead { tr {
                            th scope="col" { "Task" } th scope="col" { "Agent" } th scope="col" { "Reviewer" }
                            th scope="col" { "Requested" } th scope="col" { "Under review" } th scope="col" { "Decide" }
                        } }
                        tbody { @for r in &pending {
                            @let task = r["task_id"].as_str().unwrap_or("");
                            @let review = r["review_id"].as_str().unwrap_or("");
                            tr id={ "review-" (review) } {
                                td { a href={ "/ui/tasks/" (task) } { code { (task) } } }
                                td { (r["agent"].as_str().unwrap_or("")) }
                                td { (r["reviewer"].as_str().unwrap_or("")) }
                                td { (time_of(&r["requested_at"])) }
                                td {
                                    code.args { (compact(&r["input"], 300)) }
                                    (json_details("Step, input and output", r, 8 * 1024, None))
                                }
                                td { @if viewer.may_write() { (decide_buttons(&viewer, task, review)) } @else { "read only" } }
                            }
                        } }
                    } }
                }
            }
            section aria-labelledby="decided-h" {
                h2 id="decided-h" { "Decided" }
                @if decisions.is_empty() { (empty("No decision yet.")) } @else {
                    div.scroll { table.reviews {
                        thead { tr {
                            th scope="col" { "Task" } th scope="col" { "Review" } th scope="col" { "Asked" }
                            th scope="col" { "Decision" } th scope="col" { "By" } th scope="col" { "When" }
                        } }
                        tbody { @for d in &decisions { tr {
                            td { a href={ "/ui/tasks/" (d.task_id) } { code { (d.task_id) } } }
                            td { code { (d.review_id) } }
                            td { (d.reviewer.as_deref().unwrap_or("—")) }
                            td { @if d.approve { span.badge.idle { "approved" } } @else { span.badge.terminated { "denied" } } }
                            td { (d.decided_by) }
                            td { (time_rfc3339(&d.at)) }
                        } } }
                    } }
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
