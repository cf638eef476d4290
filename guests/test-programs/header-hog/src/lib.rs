//! Test program `header-hog`: `invoke` holds host memory through `wasi:http` header sets
//! (`fields` resources), each made from the same buffer, so its own memory stays small.
//!
//! Input: `{"bytes": N, "value": V}`: it creates header sets of one `V`-byte value each
//! (default 64 KiB) and keeps them all, until they hold `N` bytes of values, then answers
//! `{"held": bytes, "fields": count}`. The host must stop it before it holds more than the
//! instance's memory limit.

use bindings::wasi::http::types::Fields;

/// The default size of one header value.
const DEFAULT_VALUE: u64 = 64 * 1024;

agentmesh_test_glue::tool_program! {
    fn invoke(_action, input) {
        let input: serde_json::Value = serde_json::from_str(&input)
            .map_err(|e| ToolError::Recoverable(format!("the input is not JSON: {e}")))?;
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
