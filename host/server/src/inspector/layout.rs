//! The page shell every view shares (head, navigation, the session's logout form) and small
//! pieces of markup: times, JSON in `<details>`, truncated text, buttons that post a form.

use agentmesh_secrets::Secrets;
use maud::{DOCTYPE, Markup, PreEscaped, html};
use serde_json::Value;

use crate::auth::{Caller, Role};

/// A view's place in the navigation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nav {
    /// The task list and task pages.
    Tasks,
    /// The reviews inbox.
    Reviews,
    /// Triggers and schedules.
    Triggers,
    /// Plugins and config.
    Plugins,
    /// The login page.
    Login,
}

/// Who is looking, as a page needs it: the caller and the session's CSRF token.
pub struct Viewer<'a> {
    /// The caller.
    pub caller: &'a Caller,
    /// The value state-changing forms carry.
    pub csrf: &'a str,
}

impl Viewer<'_> {
    /// Whether the caller may change anything (not `read_only`).
    pub fn may_write(&self) -> bool {
        self.caller.role != Role::ReadOnly
    }
}

/// A whole page: `title`, the navigation with `nav` current, and `body`.
pub fn page(title: &str, nav: Nav, viewer: Option<&Viewer<'_>>, body: &Markup) -> Markup {
    let link = |target: Nav, href: &str, label: &str| {
        html! {
            @if nav == target {
                a href=(href) aria-current="page" { (label) }
            } @else {
                a href=(href) { (label) }
            }
        }
    };
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                meta name="referrer" content="same-origin";
                title { (title) " · agentmesh inspector" }
                link rel="stylesheet" href="/ui/assets/inspector.css";
                script src="/ui/assets/inspector.js" defer {}
            }
            body {
                a.skip href="#main" { "Skip to content" }
                header {
                    nav aria-label="Inspector" {
                        span.brand { "agentmesh" }
                        @if viewer.is_some() {
                            (link(Nav::Tasks, "/ui/", "Tasks"))
                            (link(Nav::Reviews, "/ui/reviews", "Reviews"))
                            (link(Nav::Triggers, "/ui/triggers", "Triggers & schedules"))
                            (link(Nav::Plugins, "/ui/plugins", "Plugins & config"))
                        }
                    }
                    @if let Some(v) = viewer {
                        form.who method="post" action="/ui/logout" {
                            span { (v.caller.subject) " (" (role_name(v.caller.role)) ")" }
                            input type="hidden" name="csrf" value=(v.csrf);
                            button type="submit" { "Log out" }
                        }
                    }
                }
                main id="main" {
                    h1 { (title) }
                    (body)
                }
            }
        }
    }
}

/// A role as the host config names it.
pub fn role_name(role: Role) -> &'static str {
    match role {
        Role::Admin => "admin",
        Role::AgentUser => "agent_user",
        Role::ReadOnly => "read_only",
    }
}

/// Epoch ms as `YYYY-MM-DD HH:MM:SS` UTC, in a `<time>` element.
pub fn time_ms(ms: i64) -> Markup {
    time_rfc3339(&agentmesh_engine::task::rfc3339(ms))
}

/// An RFC 3339 time as `YYYY-MM-DD HH:MM:SS` UTC, in a `<time>` element.
pub fn time_rfc3339(at: &str) -> Markup {
    let shown: String = at.replacen('T', " ", 1).chars().take(19).collect();
    html! { time datetime=(at) { (shown) } }
}

/// A JSON value's time (a string), or a dash.
pub fn time_of(value: &Value) -> Markup {
    match value.as_str() {
        Some(at) => time_rfc3339(at),
        None => html! { "—" },
    }
}

/// `text` cut to `max` characters, with an ellipsis when cut. A text that is cut has every
/// secret of `secrets` replaced first: the page's own scrub finds whole secrets only, and a
/// cut could leave the head of one (in what the log stored before it was a secret).
pub fn cut(secrets: &Secrets, text: &str, max: usize) -> String {
    if text.char_indices().nth(max).is_none() {
        return text.to_owned();
    }
    let text = secrets.scrub(text);
    match text.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text.into_owned(),
    }
}

/// A JSON value on one line, cut to `max` characters as [`cut`] cuts.
pub fn compact(secrets: &Secrets, value: &Value, max: usize) -> String {
    cut(secrets, &value.to_string(), max)
}

/// JSON shown pretty in a closed `<details>` (at most `max` bytes, cut as [`cut`] cuts; past
/// that, a note and a link to the whole of it).
pub fn json_details(
    secrets: &Secrets,
    label: &str,
    value: &Value,
    max: usize,
    whole: Option<&str>,
) -> Markup {
    let mut pretty = serde_json::to_string_pretty(value).unwrap_or_default();
    if pretty.len() > max {
        secrets.scrub_string(&mut pretty);
    }
    let cut_at = (0..=max.min(pretty.len()))
        .rev()
        .find(|i| pretty.is_char_boundary(*i))
        .unwrap_or(0);
    html! {
        details {
            summary { (label) }
            pre { (&pretty[..cut_at]) }
            @if cut_at < pretty.len() {
                p.note {
                    "Cut at " (cut_at) " of " (pretty.len()) " bytes."
                    @if let Some(href) = whole { " " a href=(href) { "The whole JSON" } }
                }
            }
        }
    }
}

/// A one-button form posting to `action` with the session's CSRF token and `fields`.
pub fn post_button(
    viewer: &Viewer<'_>,
    action: &str,
    fields: &[(&str, &str)],
    label: &str,
    class: &str,
) -> Markup {
    html! {
        form.inline method="post" action=(action) {
            input type="hidden" name="csrf" value=(viewer.csrf);
            @for (name, value) in fields {
                input type="hidden" name=(name) value=(value);
            }
            button type="submit" class=(class) { (label) }
        }
    }
}

/// A status as a badge.
pub fn status_badge(status: &str) -> Markup {
    html! { span class={ "badge " (status) } { (status) } }
}

/// A paragraph saying there is nothing to show.
pub fn empty(what: &str) -> Markup {
    html! { p.empty { (what) } }
}

/// A table's head: a column header for each of `names`.
pub fn column_heads(names: &[&str]) -> Markup {
    html! { thead { tr { @for name in names { th scope="col" { (name) } } } } }
}

/// Markup that is already HTML (a row rendered for a live stream).
pub fn raw(html: String) -> Markup {
    PreEscaped(html)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const SECRET: &str = "hunter2-secret-value";

    #[test]
    fn a_cut_through_a_secret_leaves_no_head_of_it() {
        let secrets = Secrets::new([SECRET]).unwrap();
        let text = format!("{}{SECRET} and more", "x".repeat(8));
        let shown = cut(&secrets, &text, 12);
        assert!(!shown.contains("hunt"), "{shown}");
        assert!(
            shown.starts_with("xxxxxxxx") && shown.ends_with('…'),
            "{shown}"
        );
        let value = serde_json::json!({"pad": "x".repeat(40), "key": SECRET});
        let shown = json_details(&secrets, "JSON", &value, 60, None).into_string();
        assert!(!shown.contains("hunt"), "{shown}");
        assert!(shown.contains("Cut at"), "{shown}");
    }
}
