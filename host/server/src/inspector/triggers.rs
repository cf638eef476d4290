//! Triggers and schedules: each with whether it is enabled, when it last fired and fires
//! next, its total, consecutive failures, last error and what throttles or quotas dropped (the
//! JSON `GET /v1/triggers` and `GET /v1/schedules` answer); revoking a schedule; the wakeups
//! pending per task.

use std::collections::BTreeMap;
use std::sync::Arc;

use agentmesh_triggers::WakeupRecord;
use axum::extract::State;
use axum::response::{IntoResponse, Redirect, Response};
use maud::{Markup, html};
use serde::Deserialize;
use serde_json::Value;

use super::layout::{self, Nav, Viewer, column_heads, empty, json_details, post_button, time_of};
use super::{Ui, UiResult, blocking, form, html_page};
use crate::auth::Role;
use crate::error::Body;
use crate::{AppState, resources};

/// A JSON value as text: a string as it is, anything else as JSON, null as a dash.
fn text(v: &Value) -> String {
    match v {
        Value::Null => "—".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The status columns of a trigger or schedule (its `status` object).
fn status_cells(status: &Value) -> Markup {
    let failures = status["consecutive_failures"].as_u64().unwrap_or(0);
    html! {
        td { (time_of(&status["last_triggered_at"])) }
        td.num { (text(&status["total_triggers"])) }
        td class={ "num" @if failures > 0 { " bad" } } { (failures) }
        td.error-text { (text(&status["last_error"])) }
        td { (text(&status["dropped"])) }
    }
}

/// The wakeups `wakeups` as a table, each revocable by a caller that may write.
pub fn wakeup_table(viewer: &Viewer<'_>, wakeups: &[WakeupRecord]) -> Markup {
    html! {
        div.scroll { table.small {
            (column_heads(&["Wakeup", "Task", "Next", "Reason", "Expires", "Fired", ""]))
            tbody { @for w in wakeups {
                @let v = resources::wakeup(w);
                tr {
                    td { code { (w.id) } }
                    td { a href={ "/ui/tasks/" (w.task_id) } { code { (w.task_id) } } }
                    td { (time_of(&v["next_trigger_at"])) }
                    td { (text(&v["reason"])) }
                    td { (time_of(&v["expires_at"])) }
                    td.num { (text(&v["fires"])) }
                    td { @if viewer.may_write() { (post_button(viewer, "/ui/schedules/revoke", &[("id", &w.id)], "Revoke", "danger")) } }
                }
            } }
        } }
    }
}

/// `GET /ui/triggers`.
pub async fn page(State(state): State<Arc<AppState>>, ui: Ui) -> UiResult<Response> {
    blocking(move || {
        let caller = &ui.caller;
        let viewer = ui.viewer();
        let secrets = Arc::clone(&state.engine().plan().secrets);
        let owner = (caller.role == Role::AgentUser).then_some(caller.subject.as_str());
        let triggers = crate::triggers::trigger_objects(&state, caller)?;
        let scheduled = state.triggers().schedules(None, owner)?;
        let schedules: Vec<Value> = scheduled.schedules.iter().map(resources::schedule).collect();
        let mut by_task: BTreeMap<&str, Vec<WakeupRecord>> = BTreeMap::new();
        for w in &scheduled.wakeups {
            by_task.entry(&w.task_id).or_default().push(w.clone());
        }
        let body = html! {
            section aria-labelledby="schedules-h" {
                h2 id="schedules-h" { "Schedules" }
                @if schedules.is_empty() { (empty("No schedule.")) } @else {
                    div.scroll { table.schedules {
                        (column_heads(&["Schedule", "Agent", "When", "Enabled", "Last fired", "Total", "Failures in a row", "Last error", "Dropped", "Next fire", ""]))
                        tbody { @for s in &schedules {
                            @let id = s["id"].as_str().unwrap_or("");
                            @let revoked = s["status"]["revoked"].as_bool().unwrap_or(false);
                            tr id={ "schedule-" (id) } {
                                th scope="row" { (id) }
                                td { (text(&s["agent"])) }
                                td { @if let Some(c) = s["cron"].as_str() { code { (c) } " " (text(&s["timezone"])) } @else if let Some(i) = s["interval"].as_str() { "every " (i) } @else { (text(&s["at"])) } }
                                td { @if revoked { "revoked" } @else if s["enabled"].as_bool().unwrap_or(false) { "yes" } @else { "no" } }
                                (status_cells(&s["status"]))
                                td { (time_of(&s["next_trigger_at"])) }
                                td { @if viewer.may_write() && !revoked { (post_button(&viewer, "/ui/schedules/revoke", &[("id", id)], "Revoke", "danger")) } }
                            }
                        } }
                    } }
                }
            }
            section aria-labelledby="triggers-h" {
                h2 id="triggers-h" { "Triggers" }
                @if triggers.is_empty() { (empty("No trigger.")) } @else {
                    div.scroll { table.triggers {
                        (column_heads(&["Trigger", "Agent", "Source", "Enabled", "Last fired", "Total", "Failures in a row", "Last error", "Dropped", "Details"]))
                        tbody { @for t in &triggers { tr {
                            th scope="row" { (text(&t["id"])) }
                            td { (text(&t["agent"])) }
                            td { (text(&t["source"]["type"])) }
                            td { @if t["enabled"].as_bool().unwrap_or(false) { "yes" } @else { "no" } }
                            (status_cells(&t["status"]))
                            td { (json_details(&secrets, "JSON", t, 4 * 1024, None)) }
                        } } }
                    } }
                }
            }
            section aria-labelledby="wakeups-h" {
                h2 id="wakeups-h" { "Wakeups pending, by task" }
                @if by_task.is_empty() { (empty("No wakeup pending.")) }
                @for (task, wakeups) in &by_task {
                    h3 { a href={ "/ui/tasks/" (task) } { code { (task) } } " · " (wakeups.len()) }
                    (wakeup_table(&viewer, wakeups))
                }
            }
        };
        Ok(html_page(&layout::page("Triggers & schedules", Nav::Triggers, Some(&viewer), &body)))
    })
    .await
}

#[derive(Deserialize)]
struct RevokeForm {
    csrf: String,
    id: String,
}

/// `POST /ui/schedules/revoke`: revokes a schedule or a wakeup.
pub async fn revoke(
    State(state): State<Arc<AppState>>,
    ui: Ui,
    Body(body): Body,
) -> UiResult<Response> {
    let f: RevokeForm = form(&body)?;
    ui.check_csrf(&f.csrf)?;
    let caller = ui.caller.clone();
    blocking(move || Ok(crate::triggers::revoke_as(&state, &caller, &f.id)?)).await?;
    Ok(Redirect::to("/ui/triggers").into_response())
}
