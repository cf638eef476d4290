//! `github-pr`: a tool component (world `tool-plugin`) for GitHub pull requests.
//!
//! Actions (input = the call's resolved parameters, `owner` and `repo` included):
//! - `create_pr` `{title, head, base, body?, author?}` → `POST {base_url}/repos/{owner}/{repo}/pulls`
//! - `comment` `{number, body, author?}` → `POST {base_url}/repos/{owner}/{repo}/issues/{number}/comments`
//! - `list_prs` `{state?}` → `GET {base_url}/repos/{owner}/{repo}/pulls?state={state}`
//!
//! The observation is GitHub's JSON answer. Settings: `base_url` (default
//! `https://api.github.com`; must be in the manifest's `allowed_hosts`) and `token`.

mod bindings {
    wit_bindgen::generate!({
        world: "tool-plugin",
        path: "../../wit",
        generate_all,
    });
}
mod http;

use bindings::agentmesh::plugin::host::{Level, log};
use bindings::agentmesh::plugin::types::ToolError;
use bindings::exports::agentmesh::plugin::tool::{Guest, GuestSession};
use serde_json::{Map, Value, json};

use crate::http::{Method, Url};

/// The component.
struct GithubPr;

impl Guest for GithubPr {
    type Session = Session;
}

/// A session: the settings and the task's parameters, parsed once.
struct Session {
    /// Where the API is, or why the settings are unusable.
    base: Result<Url, String>,
    /// The bearer token, if any.
    token: Option<String>,
    /// The task's tool parameters (`owner`, `repo`).
    parameters: Map<String, Value>,
}

impl GuestSession for Session {
    fn new(settings: String, parameters: String) -> Self {
        let settings = object(&settings);
        let base_url = settings
            .get("base_url")
            .and_then(Value::as_str)
            .unwrap_or("https://api.github.com");
        Session {
            base: Url::parse(base_url).map_err(|e| format!("settings.base_url: {e}")),
            token: settings
                .get("token")
                .and_then(Value::as_str)
                .map(str::to_owned),
            parameters: object(&parameters),
        }
    }

    fn invoke(&self, action: String, input: String) -> Result<String, ToolError> {
        let base = self
            .base
            .as_ref()
            .map_err(|e| ToolError::Fatal(e.clone()))?;
        let input: Map<String, Value> = serde_json::from_str(&input)
            .map_err(|e| ToolError::Recoverable(format!("input is not a JSON object: {e}")))?;
        let repo_path = format!(
            "/repos/{}/{}",
            self.name(&input, "owner")?,
            self.name(&input, "repo")?
        );
        let (method, path, body) = match action.as_str() {
            "create_pr" => {
                let mut text = optional(&input, "body").unwrap_or_default().to_owned();
                if let Some(author) = optional(&input, "author") {
                    text.push_str(&format!("\n\nRequested by @{author}."));
                }
                let body = json!({
                    "title": required(&input, "title")?,
                    "head": required(&input, "head")?,
                    "base": optional(&input, "base").unwrap_or("main"),
                    "body": text,
                });
                (Method::Post, format!("{repo_path}/pulls"), Some(body))
            }
            "comment" => {
                // LLMs sometimes quote numbers: accept `42` and `"42"`.
                let number = input
                    .get("number")
                    .and_then(|n| {
                        n.as_u64()
                            .or_else(|| n.as_str().and_then(|s| s.parse().ok()))
                    })
                    .ok_or_else(|| recoverable("`number` (the pull request number) is required"))?;
                let mut text = required(&input, "body")?.to_owned();
                if let Some(author) = optional(&input, "author") {
                    text.push_str(&format!("\n\n— @{author}"));
                }
                let body = json!({ "body": text });
                (
                    Method::Post,
                    format!("{repo_path}/issues/{number}/comments"),
                    Some(body),
                )
            }
            "list_prs" => {
                let state = optional(&input, "state").unwrap_or("open");
                if !matches!(state, "open" | "closed" | "all") {
                    return Err(recoverable("`state` must be open, closed or all"));
                }
                (
                    Method::Get,
                    format!("{repo_path}/pulls?state={state}"),
                    None,
                )
            }
            other => {
                return Err(ToolError::Fatal(format!(
                    "github-pr has no action `{other}`"
                )));
            }
        };
        log(Level::Debug, &format!("{} {path}", method.name()));
        self.call(base, method, &path, body.as_ref())
    }
}

impl Session {
    /// `owner` or `repo`: from the input (bindings are merged into it) or the session's
    /// parameters; only characters GitHub allows in names, so the value cannot change the path.
    fn name<'a>(&'a self, input: &'a Map<String, Value>, key: &str) -> Result<&'a str, ToolError> {
        let value = optional(input, key)
            .or_else(|| optional(&self.parameters, key))
            .ok_or_else(|| recoverable(&format!("`{key}` is required")))?;
        let valid = !value.is_empty()
            && value != "."
            && value != ".."
            && value
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
        if valid {
            Ok(value)
        } else {
            Err(recoverable(&format!(
                "`{key}` is not a GitHub name: {value:?}"
            )))
        }
    }

    /// Sends one request and turns GitHub's answer into the observation.
    fn call(
        &self,
        base: &Url,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<String, ToolError> {
        let mut headers = vec![
            ("accept", "application/vnd.github+json".to_owned()),
            ("user-agent", "agentmesh-github-pr".to_owned()),
            ("x-github-api-version", "2022-11-28".to_owned()),
        ];
        if let Some(token) = &self.token {
            headers.push(("authorization", format!("Bearer {token}")));
        }
        let body = body.map(|b| b.to_string());
        if body.is_some() {
            headers.push(("content-type", "application/json".to_owned()));
        }
        let response = http::send(
            method,
            base,
            path,
            &headers,
            body.as_deref().map(str::as_bytes),
        )
        .map_err(|e| recoverable(&format!("GitHub request failed: {e}")))?;
        let text = String::from_utf8_lossy(&response.body).into_owned();
        if (200..300).contains(&response.status) {
            // GitHub answers JSON; anything else is passed on as a JSON string.
            match serde_json::from_str::<Value>(&text) {
                Ok(_) => Ok(text),
                Err(_) => Ok(Value::String(text).to_string()),
            }
        } else {
            let message = serde_json::from_str::<Value>(&text)
                .ok()
                .and_then(|v| v.get("message").and_then(Value::as_str).map(str::to_owned))
                .unwrap_or(text);
            Err(recoverable(&format!(
                "GitHub answered {}: {message}",
                response.status
            )))
        }
    }
}

/// Parses a JSON object, treating anything else as empty.
fn object(text: &str) -> Map<String, Value> {
    serde_json::from_str(text).unwrap_or_default()
}

/// A string field, if present.
fn optional<'a>(input: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    input.get(key).and_then(Value::as_str)
}

/// A string field that must be present.
fn required<'a>(input: &'a Map<String, Value>, key: &str) -> Result<&'a str, ToolError> {
    optional(input, key).ok_or_else(|| recoverable(&format!("`{key}` is required")))
}

/// A recoverable error with `message`.
fn recoverable(message: &str) -> ToolError {
    ToolError::Recoverable(message.to_owned())
}

bindings::export!(GithubPr with_types_in bindings);
