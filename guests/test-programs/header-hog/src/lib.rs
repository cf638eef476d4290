//! Test program `header-hog`: `invoke` holds host resources through `wasi:http`.
//!
//! Action `hold`, input `{"bytes": N, "value": V}`: it creates header sets (`fields`
//! resources) of one `V`-byte value each (default 64 KiB), each made from the same buffer so
//! its own memory stays small, and keeps them all, until they hold `N` bytes of values, then
//! answers `{"held": bytes, "fields": count}`. The host must stop it before it holds more
//! than the instance's memory limit.
//!
//! Action `connect`, input `{"url": U, "requests": N}` (U: `http://host:port/path`): it sends
//! N `GET U` at once and keeps every response it gets without reading its body, then answers
//! `{"answered": count, "refused": count, "error": first refusal}`. The host must bound the
//! connections one instance holds open.

use bindings::wasi::http::outgoing_handler;
use bindings::wasi::http::types::{Fields, OutgoingRequest, Scheme};

/// The default size of one header value.
const DEFAULT_VALUE: u64 = 64 * 1024;

agentmesh_test_glue::tool_program! {
    fn invoke(action, input) {
        let input: serde_json::Value = serde_json::from_str(&input)
            .map_err(|e| ToolError::Recoverable(format!("the input is not JSON: {e}")))?;
        if action == "connect" {
            return connect(&input);
        }
        let size = |name: &str, default: u64| {
            let value = input[name].as_u64().unwrap_or(default);
            usize::try_from(value)
                .map_err(|_| ToolError::Recoverable(format!("`{name}` is too large")))
        };
        let target = size("bytes", 0)?;
        let value = size("value", DEFAULT_VALUE)?.max(1);
        let entries = [("x-hog".to_owned(), vec![b'a'; value])];
        let mut kept = Vec::new();
        let mut held = 0;
        while held < target {
            let fields = Fields::from_list(&entries).map_err(|e| {
                ToolError::Recoverable(format!("header set {} refused: {e:?}", kept.len() + 1))
            })?;
            kept.push(fields);
            held += value;
        }
        Ok(serde_json::json!({ "held": held, "fields": kept.len() }).to_string())
    }
}

/// Action `connect` (see the crate's documentation).
fn connect(input: &serde_json::Value) -> Result<String, ToolError> {
    let url = input["url"].as_str().unwrap_or_default();
    let (authority, path) = url
        .strip_prefix("http://")
        .and_then(|rest| rest.split_once('/'))
        .ok_or_else(|| ToolError::Recoverable(format!("not an http URL with a path: {url}")))?;
    let path = format!("/{path}");
    let mut pending = Vec::new();
    for _ in 0..input["requests"].as_u64().unwrap_or(1) {
        let request = OutgoingRequest::new(Fields::new());
        let set = request.set_scheme(Some(&Scheme::Http)).is_ok()
            && request.set_authority(Some(authority)).is_ok()
            && request.set_path_with_query(Some(&path)).is_ok();
        if !set {
            return Err(ToolError::Recoverable(format!("a bad URL: {url}")));
        }
        pending.push(outgoing_handler::handle(request, None));
    }
    let (mut kept, mut refused, mut error) = (Vec::new(), 0, None);
    for sent in pending {
        let answer = sent.map_err(|e| format!("{e:?}")).and_then(|future| {
            loop {
                match future.get() {
                    Some(Ok(Ok(response))) => break Ok(response),
                    Some(Ok(Err(e))) => break Err(format!("{e:?}")),
                    Some(Err(())) => break Err("the response was taken already".to_owned()),
                    None => future.subscribe().block(),
                }
            }
        });
        match answer {
            Ok(response) => kept.push(response),
            Err(e) => {
                refused += 1;
                error.get_or_insert(e);
            }
        }
    }
    Ok(serde_json::json!({"answered": kept.len(), "refused": refused, "error": error}).to_string())
}
