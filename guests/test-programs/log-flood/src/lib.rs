//! Test program `log-flood`: `invoke` calls the host's `log` in a loop, to flood the host's
//! log in one call.
//!
//! Input: `{"messages": N, "bytes": B}`: it logs `N` messages of `B` bytes each (default 1 KiB)
//! at info level, the first `message 1 …`, and answers `{"logged": N}`. The host must let at
//! most its per-call budget through and say how much it dropped.

use bindings::agentmesh::plugin::host::{Level, log};

/// The default size of one message.
const DEFAULT_BYTES: u64 = 1024;

agentmesh_test_glue::tool_program! {
    fn invoke(_action, input) {
        let input: serde_json::Value = serde_json::from_str(&input)
            .map_err(|e| ToolError::Recoverable(format!("the input is not JSON: {e}")))?;
        let messages = input["messages"].as_u64().unwrap_or(0);
        let bytes = usize::try_from(input["bytes"].as_u64().unwrap_or(DEFAULT_BYTES))
            .map_err(|_| ToolError::Recoverable("`bytes` is too large".to_owned()))?;
        let mut message = String::with_capacity(bytes);
        for n in 1..=messages {
            message.clear();
            message.push_str(&format!("message {n} "));
            let fill = bytes.saturating_sub(message.len());
            message.extend(std::iter::repeat_n('x', fill));
            log(Level::Info, &message);
        }
        Ok(serde_json::json!({ "logged": messages }).to_string())
    }
}
