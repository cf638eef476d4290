//! An `mcp` action compiled: how its server is started or reached (templates over `settings`,
//! rendered when a task's session opens), the MCP tool it calls, and its limits.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use agentmesh_expr::Template;
use agentmesh_manifest::model::tool::{Mcp, McpTransport};
use agentmesh_plugins::Origin;

use super::template;
use crate::EngineError;

/// How long the server may take to start (Initialize) and to answer each call, when the
/// manifest does not say.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// The largest message a server may send when the manifest does not say. A result becomes
/// part of the LLM's context and the event log, and a stdio message is buffered whole before
/// it is parsed, so a server that writes gigabytes (or one line that never ends) is cut here
/// instead of exhausting the host's memory. The same bound as a `stateless_http` response.
pub const DEFAULT_MAX_OUTPUT: usize = 4 * 1024 * 1024;

/// An `mcp` action (its block completed from the tool's shared one), compiled.
pub struct McpPlan {
    /// The server.
    pub server: Arc<McpServer>,
    /// The MCP tool the action calls.
    pub tool_name: String,
    /// Wall-clock limit of the server's start (Initialize) and of each call.
    pub timeout: Duration,
    /// Largest message the server may send.
    pub max_output: usize,
    /// What a task's session of the action is known by within the tool: actions whose blocks
    /// come out the same but for `tool_name` share one session (and one process).
    pub session: String,
}

/// How an MCP server is reached.
pub enum McpServer {
    /// A program started for each task, spoken to over its stdin and stdout.
    Stdio(StdioServer),
    /// A server at a URL, spoken to over streamable HTTP (`http`) or the legacy HTTP+SSE
    /// transport (`sse`).
    Http(HttpServer),
}

/// An stdio MCP server.
pub struct StdioServer {
    /// The program as written: a name looked up in the host's `PATH`, or a path (with a `/`)
    /// relative to `dir`.
    pub command: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Its whole environment: names and templates over `settings`.
    pub env: Vec<(String, Template)>,
    /// The manifest's directory: where a relative `command` is found and where it runs.
    pub dir: PathBuf,
}

/// A streamable-HTTP MCP server.
pub struct HttpServer {
    /// The endpoint, a template over `settings`.
    pub url: Template,
    /// Header names and templates over `settings`.
    pub headers: Vec<(String, Template)>,
    /// The origins the rendered `url` may have: `allowed_hosts`, and a literal `url`'s own.
    pub allowed: Vec<Origin>,
    /// `transport: sse`: the legacy HTTP+SSE transport (`url` is its event stream), not
    /// streamable HTTP.
    pub legacy_sse: bool,
}

/// Compiles `mcp`, the block of action `action` (written in the manifest in `dir`).
pub(super) fn mcp_plan(mcp: &Mcp, action: &str, dir: &Path) -> Result<McpPlan, EngineError> {
    let config = |what: String| EngineError::Config(format!("action `{action}`: {what}"));
    let max_output = match mcp.max_output {
        Some(size) => usize::try_from(size.0)
            .map_err(|_| config(format!("max_output of {} bytes is too large", size.0)))?,
        None => DEFAULT_MAX_OUTPUT,
    };
    let templates = |pairs: &Option<indexmap::IndexMap<String, String>>| {
        pairs
            .iter()
            .flatten()
            .map(|(k, v)| Ok((k.clone(), template(v)?)))
            .collect::<Result<Vec<_>, EngineError>>()
    };
    let server = match mcp.transport {
        Some(McpTransport::Stdio) => McpServer::Stdio(StdioServer {
            command: mcp
                .command
                .clone()
                .ok_or_else(|| config("an stdio `mcp` server needs a `command`".into()))?,
            args: mcp.args.clone().unwrap_or_default(),
            env: templates(&mcp.env)?,
            dir: dir.to_path_buf(),
        }),
        Some(McpTransport::Sse | McpTransport::Http) => {
            let written = mcp
                .url
                .as_deref()
                .ok_or_else(|| config("an sse or http `mcp` server needs a `url`".into()))?;
            let url = template(written)?;
            let mut allowed = Vec::new();
            for host in mcp.allowed_hosts.iter().flatten() {
                allowed
                    .push(Origin::parse(host).map_err(|e| config(format!("allowed_hosts: {e}")))?);
            }
            if url.is_literal() {
                allowed
                    .push(origin_of(written).map_err(|e| config(format!("url `{written}`: {e}")))?);
            }
            McpServer::Http(HttpServer {
                url,
                headers: templates(&mcp.headers)?,
                allowed,
                legacy_sse: mcp.transport == Some(McpTransport::Sse),
            })
        }
        None => {
            return Err(config(
                "`mcp` needs a `transport`: stdio, sse or http".into(),
            ));
        }
    };
    let shared = Mcp {
        tool_name: None,
        ..mcp.clone()
    };
    Ok(McpPlan {
        server: Arc::new(server),
        tool_name: mcp.tool_name.clone().unwrap_or_else(|| action.to_owned()),
        timeout: mcp.timeout.map_or(DEFAULT_TIMEOUT, |d| d.0),
        max_output,
        session: serde_json::to_string(&shared).unwrap_or_default(),
    })
}

/// The origin (`scheme://host:port`) of URL `url`.
pub fn origin_of(url: &str) -> Result<Origin, String> {
    let parsed = reqwest::Url::parse(url).map_err(|e| format!("not a valid URL: {e}"))?;
    Origin::parse(&parsed.origin().ascii_serialization()).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]

    use super::*;

    fn block(yaml: serde_json::Value) -> Mcp {
        serde_json::from_value(yaml).unwrap()
    }

    /// The allowed origins and the MCP tool of action `search` with block `yaml`.
    fn http(yaml: serde_json::Value) -> (Vec<Origin>, String) {
        let plan = mcp_plan(&block(yaml), "search", Path::new("/m")).unwrap();
        let McpServer::Http(server) = &*plan.server else {
            panic!("not http")
        };
        (server.allowed.clone(), plan.tool_name)
    }

    #[test]
    fn a_literal_url_allows_its_own_origin_and_a_template_only_the_listed_ones() {
        let (allowed, tool) =
            http(serde_json::json!({"transport": "http", "url": "https://mcp.example.com/mcp"}));
        assert_eq!(allowed, [origin_of("https://mcp.example.com:443").unwrap()]);
        assert_eq!(tool, "search");

        let (allowed, tool) = http(serde_json::json!({
            "transport": "http",
            "url": "https://{settings.host}/mcp",
            "allowed_hosts": ["https://a.example.com"],
            "tool_name": "find",
        }));
        assert_eq!(allowed, [origin_of("https://a.example.com/").unwrap()]);
        assert_eq!(tool, "find");
    }

    #[test]
    fn actions_differing_only_in_tool_name_share_a_session() {
        let dir = Path::new("/m");
        let one =
            block(serde_json::json!({"transport": "stdio", "command": "srv", "tool_name": "a"}));
        let two =
            block(serde_json::json!({"transport": "stdio", "command": "srv", "tool_name": "b"}));
        let three =
            block(serde_json::json!({"transport": "stdio", "command": "srv", "args": ["-v"]}));
        let session = |m: &Mcp| mcp_plan(m, "x", dir).unwrap().session;
        assert_eq!(session(&one), session(&two));
        assert_ne!(session(&one), session(&three));
    }
}
