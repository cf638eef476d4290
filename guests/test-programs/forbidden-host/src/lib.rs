//! Test program `forbidden-host`: `invoke` sends `GET {url}` (input `{"url": ...}`) and reports
//! the failure as a recoverable error. Pointed at a host outside `allowed_hosts`, the request
//! must be refused by the host before any connection is made.

// The same small client as `github-pr` (it only uses this crate's `bindings`).
#[path = "../../../github-pr/src/http.rs"]
#[allow(dead_code, reason = "shared with github-pr, which uses all of it")]
mod http;

agentmesh_test_glue::tool_program! {
    fn invoke(_action, input) {
        let input: serde_json::Value = serde_json::from_str(&input).unwrap_or_default();
        let url = input["url"].as_str().unwrap_or("http://forbidden.example/");
        let split = url.find("://").map_or(0, |i| i + 3);
        let path_at = url[split..].find('/').map_or(url.len(), |i| split + i);
        let base = http::Url::parse(&url[..path_at]).map_err(ToolError::Recoverable)?;
        let path = if path_at < url.len() {
            &url[path_at..]
        } else {
            "/"
        };
        match http::send(http::Method::Get, &base, path, &[], None) {
            Ok(response) => Ok(serde_json::json!({ "status": response.status }).to_string()),
            Err(e) => Err(ToolError::Recoverable(format!("GET {url} failed: {e}"))),
        }
    }
}
