//! `github-pr`: a tool component (world `tool-plugin`) for GitHub pull requests.
//!
//! Actions (input = the call's resolved parameters, `owner` and `repo` included):
//! - `create_pr` `{title, head, base?, body?, author?}` → `POST {base_url}/repos/{owner}/{repo}/pulls`
//! - `comment` `{number, body, author?}` → `POST {base_url}/repos/{owner}/{repo}/issues/{number}/comments`
//! - `list_prs` `{state?}` → `GET {base_url}/repos/{owner}/{repo}/pulls?state={state}`
//!
//! The observation is GitHub's JSON answer. Settings: `base_url` (default
//! `https://api.github.com`; must be in the manifest's `allowed_hosts`) and `token`.

use agentmesh_guest::http::{Method, Request};
use agentmesh_guest::{Actions, Error, Start, Tool, log};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

/// A session: the settings and the task's parameters, read once.
struct GithubPr {
    /// Where the API is, without a trailing `/`.
    base_url: String,
    /// The bearer token, if any.
    token: Option<String>,
    /// The task's tool parameters (`owner`, `repo`).
    parameters: Repo,
}

/// The operator's settings.
#[derive(Deserialize)]
struct Settings {
    base_url: Option<String>,
    token: Option<String>,
}

/// Which repository: from the call's input (bindings are merged into it) or the task's
/// parameters.
#[derive(Default, Deserialize, JsonSchema)]
struct Repo {
    /// The repository's owner.
    owner: Option<String>,
    /// The repository's name.
    repo: Option<String>,
}

/// The input of `create_pr`.
#[derive(Deserialize, JsonSchema)]
struct CreatePr {
    #[serde(flatten)]
    at: Repo,
    /// The pull request's title.
    title: String,
    /// The branch with the changes.
    head: String,
    /// The branch to merge into (`main` unless given).
    base: Option<String>,
    /// The description.
    body: Option<String>,
    /// The GitHub login the PR is opened for.
    author: Option<String>,
}

/// The input of `comment`.
#[derive(Deserialize, JsonSchema)]
struct Comment {
    #[serde(flatten)]
    at: Repo,
    /// The pull request's number.
    number: Number,
    /// The comment.
    body: String,
    /// The GitHub login the comment is written for.
    author: Option<String>,
}

/// The input of `list_prs`.
#[derive(Deserialize, JsonSchema)]
struct ListPrs {
    #[serde(flatten)]
    at: Repo,
    /// `open` (the default), `closed` or `all`.
    state: Option<String>,
}

/// A pull request number; LLMs sometimes quote numbers, so `42` and `"42"` both work.
#[derive(Deserialize, JsonSchema)]
#[serde(untagged)]
enum Number {
    Number(u64),
    Text(String),
}

impl Tool for GithubPr {
    fn new(start: &Start) -> Result<Self, Error> {
        let settings: Settings = start.settings()?;
        let base_url = settings
            .base_url
            .unwrap_or_else(|| "https://api.github.com".to_owned());
        if !(base_url.starts_with("https://") || base_url.starts_with("http://"))
            || base_url.contains(['?', '#', '@'])
        {
            return Err(Error::fatal(format!(
                "settings.base_url: `{base_url}` is not a base URL (scheme://host[:port][/path])"
            )));
        }
        Ok(GithubPr {
            base_url: base_url.trim_end_matches('/').to_owned(),
            token: settings.token,
            parameters: start.parameters().unwrap_or_default(),
        })
    }

    fn actions(actions: &mut Actions<Self>) {
        actions
            .add("create_pr", Self::create_pr)
            .add("comment", Self::comment)
            .add("list_prs", Self::list_prs);
    }
}

impl GithubPr {
    fn create_pr(&mut self, input: CreatePr) -> Result<Value, Error> {
        let mut text = input.body.unwrap_or_default();
        if let Some(author) = input.author {
            text.push_str(&format!("\n\nRequested by @{author}."));
        }
        let body = json!({
            "title": input.title,
            "head": input.head,
            "base": input.base.as_deref().unwrap_or("main"),
            "body": text,
        });
        let path = format!("{}/pulls", self.repo_path(&input.at)?);
        self.call(Method::Post, &path, Some(&body))
    }

    fn comment(&mut self, input: Comment) -> Result<Value, Error> {
        let number = match input.number {
            Number::Number(n) => n,
            Number::Text(text) => text.parse().map_err(|_| {
                Error::recoverable("`number` (the pull request number) must be a number")
            })?,
        };
        let mut text = input.body;
        if let Some(author) = input.author {
            text.push_str(&format!("\n\n— @{author}"));
        }
        let path = format!("{}/issues/{number}/comments", self.repo_path(&input.at)?);
        self.call(Method::Post, &path, Some(&json!({ "body": text })))
    }

    fn list_prs(&mut self, input: ListPrs) -> Result<Value, Error> {
        let state = input.state.as_deref().unwrap_or("open");
        if !matches!(state, "open" | "closed" | "all") {
            return Err(Error::recoverable("`state` must be open, closed or all"));
        }
        let path = format!("{}/pulls?state={state}", self.repo_path(&input.at)?);
        self.call(Method::Get, &path, None)
    }

    /// `/repos/{owner}/{repo}`, each name checked.
    fn repo_path(&self, at: &Repo) -> Result<String, Error> {
        let owner = name(
            "owner",
            at.owner.as_ref().or(self.parameters.owner.as_ref()),
        )?;
        let repo = name("repo", at.repo.as_ref().or(self.parameters.repo.as_ref()))?;
        Ok(format!("/repos/{owner}/{repo}"))
    }

    /// Sends one request and turns GitHub's answer into the observation.
    fn call(&self, method: Method, path: &str, body: Option<&Value>) -> Result<Value, Error> {
        log::debug(&format!("{} {path}", method.name()));
        let mut request = Request::new(method, &format!("{}{path}", self.base_url))
            .header("accept", "application/vnd.github+json")
            .header("user-agent", "agentmesh-github-pr")
            .header("x-github-api-version", "2022-11-28");
        if let Some(token) = &self.token {
            request = request.header("authorization", &format!("Bearer {token}"));
        }
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request
            .send()
            .map_err(|e| Error::recoverable(format!("GitHub request failed: {e}")))?;
        let text = response.text();
        if response.is_success() {
            // GitHub answers JSON; anything else is passed on as a JSON string.
            Ok(serde_json::from_str(&text).unwrap_or(Value::String(text)))
        } else {
            let message = serde_json::from_str::<Value>(&text)
                .ok()
                .and_then(|v| v.get("message").and_then(Value::as_str).map(str::to_owned))
                .unwrap_or(text);
            Err(Error::recoverable(format!(
                "GitHub answered {}: {message}",
                response.status
            )))
        }
    }
}

/// `owner` or `repo`, required, with only characters GitHub allows in names, so the value
/// cannot change the request path.
fn name<'a>(key: &str, value: Option<&'a String>) -> Result<&'a str, Error> {
    let value = value.ok_or_else(|| Error::recoverable(format!("`{key}` is required")))?;
    let valid = !value.is_empty()
        && value != "."
        && value != ".."
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if valid {
        Ok(value)
    } else {
        Err(Error::recoverable(format!(
            "`{key}` is not a GitHub name: {value:?}"
        )))
    }
}

agentmesh_guest::export_tool!(GithubPr);
