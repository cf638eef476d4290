//! A client of a running `agentmesh serve`'s API, for the commands that read or act through it
//! (`--server URL`, the bearer token from `AGENTMESH_TOKEN`).

use std::time::Duration;

use anyhow::{Context, bail};
use serde_json::Value;

/// The API of the host at a base URL.
pub struct Api {
    base: String,
    token: Option<String>,
    client: reqwest::Client,
    runtime: tokio::runtime::Runtime,
}

impl Api {
    /// The API at `server` (`http://127.0.0.1:8080`), with the token of `AGENTMESH_TOKEN`.
    pub fn new(server: &str) -> anyhow::Result<Api> {
        if !(server.starts_with("http://") || server.starts_with("https://")) {
            bail!("`--server {server}` is not an http:// or https:// URL");
        }
        let client = agentmesh_llm::http_client()
            .connect_timeout(Duration::from_secs(10))
            .build()
            .context("starting the HTTP client")?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        Ok(Api {
            base: server.trim_end_matches('/').to_owned(),
            token: std::env::var("AGENTMESH_TOKEN")
                .ok()
                .filter(|t| !t.is_empty()),
            client,
            runtime,
        })
    }

    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let r = self.client.request(method, format!("{}{path}", self.base));
        match &self.token {
            Some(token) => r.bearer_auth(token),
            None => r,
        }
    }

    /// Sends `request`; a non-2xx answer is an error with the API's own message.
    async fn send(
        &self,
        what: &str,
        request: reqwest::RequestBuilder,
    ) -> anyhow::Result<reqwest::Response> {
        let answer = request
            .send()
            .await
            .with_context(|| format!("{what}: cannot reach {}", self.base))?;
        let status = answer.status();
        if status.is_success() {
            return Ok(answer);
        }
        let body: Value = answer.json().await.unwrap_or(Value::Null);
        let message = body["error"]["message"].as_str().unwrap_or("no message");
        let hint = if status == reqwest::StatusCode::UNAUTHORIZED && self.token.is_none() {
            " (set AGENTMESH_TOKEN to an API token)"
        } else {
            ""
        };
        bail!("{what}: {} {status}: {message}{hint}", self.base)
    }

    /// `GET path`'s JSON.
    pub fn get(&self, path: &str) -> anyhow::Result<Value> {
        self.runtime.block_on(async {
            let answer = self
                .send(
                    &format!("GET {path}"),
                    self.request(reqwest::Method::GET, path),
                )
                .await?;
            Ok(answer.json().await?)
        })
    }

    /// `POST path` with a JSON `body`; the answer's JSON.
    pub fn post(&self, path: &str, body: &Value) -> anyhow::Result<Value> {
        self.runtime.block_on(async {
            let request = self.request(reqwest::Method::POST, path).json(body);
            let answer = self.send(&format!("POST {path}"), request).await?;
            Ok(answer.json().await?)
        })
    }

    /// Follows the SSE stream at `path`, giving each frame's data to `on_data` until the
    /// stream ends (or `on_data` answers `false`).
    pub fn follow(
        &self,
        path: &str,
        on_data: &mut dyn FnMut(&str) -> anyhow::Result<bool>,
    ) -> anyhow::Result<()> {
        self.runtime.block_on(async {
            let request = self
                .request(reqwest::Method::GET, path)
                .header("Accept", "text/event-stream");
            let mut answer = self.send(&format!("GET {path}"), request).await?;
            let mut pending = String::new();
            while let Some(chunk) = answer.chunk().await.context("reading the event stream")? {
                pending.push_str(&String::from_utf8_lossy(&chunk));
                // Frames end with a blank line; a frame's `data:` lines are its payload.
                while let Some(end) = pending.find("\n\n") {
                    let frame: String = pending.drain(..end + 2).collect();
                    let data: Vec<&str> = frame
                        .lines()
                        .filter_map(|l| l.strip_prefix("data:"))
                        .map(|d| d.strip_prefix(' ').unwrap_or(d))
                        .collect();
                    if !data.is_empty() && !on_data(&data.join("\n"))? {
                        return Ok(());
                    }
                }
            }
            Ok(())
        })
    }
}
