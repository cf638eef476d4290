//! Plugins and config: the components in force (content hash, world, size, whether their code
//! came from the compiled cache), the cache's hits and misses, the last reload and its error,
//! and the agents and tools loaded — what `GET /v1/status` answers, and a little more.

use std::sync::{Arc, PoisonError};

use axum::extract::State;
use axum::response::Response;
use maud::html;

use super::layout::{self, Nav, column_heads, empty};
use super::{Ui, UiResult, blocking, html_page};
use crate::AppState;

/// `GET /ui/plugins`.
pub async fn page(State(state): State<Arc<AppState>>, ui: Ui) -> UiResult<Response> {
    blocking(move || {
        let engine = state.engine();
        let plan = engine.plan();
        let components = engine.components_loaded();
        let cache = engine.component_cache_stats();
        let reload = state
            .reload
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let mut agents: Vec<_> = plan.agents.values().collect();
        agents.sort_by_key(|a| a.id());
        let mut tools: Vec<_> = plan.tools.iter().collect();
        tools.sort_by_key(|(id, _)| *id);
        let body = html! {
            dl.facts {
                dt { "Config dir" } dd { code { (state.config_dir.display()) } }
                dt { "Loaded" } dd { (reload.loaded_at.as_deref().unwrap_or("at start")) }
                dt { "Reloads" } dd { (reload.generation) }
                dt { "Last reload error" } dd {
                    @match &reload.last_error {
                        Some((at, message)) => { span.error-text role="status" { (message) } " (" (at) ")" }
                        None => { "none" }
                    }
                }
                @if !reload.restart_required.is_empty() {
                    dt { "Changed, needs a restart" } dd { (reload.restart_required.join(", ")) }
                }
                dt { "Compiled cache" } dd {
                    @match cache {
                        Some(c) => { (c.hits) " hit(s), " (c.misses) " compilation(s)" }
                        None => { "no component loaded" }
                    }
                    @if let Some(dir) = engine.component_cache() { " · " code { (dir.display()) } }
                }
            }
            section aria-labelledby="components-h" {
                h2 id="components-h" { "Components" }
                @if components.is_empty() { (empty("No Wasm component is loaded.")) } @else {
                    div.scroll { table {
                        (column_heads(&["Runs as", "World", "File", "Size", "Content hash (SHA-256)", "Code"]))
                        tbody { @for c in &components { tr {
                            th scope="row" { (c.name) }
                            td { (c.world) }
                            td { code { (c.path.display()) } }
                            td.num { (std::fs::metadata(&c.path).map_or_else(|_| "—".to_owned(), |m| format!("{} KiB", m.len().div_ceil(1024)))) }
                            td { code.hash { (c.hash) } }
                            td { @if c.from_cache { "from the cache" } @else { "compiled" } }
                        } } }
                    } }
                }
            }
            section aria-labelledby="agents-h" {
                h2 id="agents-h" { "Agents" }
                @if agents.is_empty() { (empty("No agent.")) } @else {
                    div.scroll { table {
                        (column_heads(&["Agent", "Model", "Functions"]))
                        tbody { @for a in &agents { tr {
                            th scope="row" { (a.id()) }
                            td { code { (a.model) } }
                            td { (a.tools.iter().map(|t| t.name.as_str()).collect::<Vec<_>>().join(", ")) }
                        } } }
                    } }
                }
            }
            section aria-labelledby="tools-h" {
                h2 id="tools-h" { "Tools" }
                @if tools.is_empty() { (empty("No tool.")) } @else {
                    div.scroll { table {
                        (column_heads(&["Tool", "Actions", "Events"]))
                        tbody { @for (id, t) in &tools { tr {
                            th scope="row" { (id) }
                            td { (t.actions.iter().map(|a| a.name.as_str()).collect::<Vec<_>>().join(", ")) }
                            td { (t.events.len()) }
                        } } }
                    } }
                }
            }
        };
        Ok(html_page(&layout::page("Plugins & config", Nav::Plugins, Some(&ui.viewer()), &body)))
    })
    .await
}
