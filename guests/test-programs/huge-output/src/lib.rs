//! Test program `huge-output`: `invoke` returns a JSON string of `{"bytes": N}` bytes
//! (default 100 MB). The host must refuse an output above its cap. Input that is not JSON is a
//! recoverable error (the host's tests feed it JSON nested to the parser's limit).

/// The default size of the answer.
const DEFAULT_BYTES: u64 = 100_000_000;

agentmesh_test_glue::tool_program! {
    fn invoke(_action, input) {
        let input: serde_json::Value = serde_json::from_str(&input)
            .map_err(|e| ToolError::Recoverable(format!("the input is not JSON: {e}")))?;
        let bytes = input["bytes"].as_u64().unwrap_or(DEFAULT_BYTES);
        let len = usize::try_from(bytes.saturating_sub(2))
            .map_err(|_| ToolError::Recoverable("`bytes` is too large".to_owned()))?;
        let mut out = String::with_capacity(len + 2);
        out.push('"');
        out.extend(std::iter::repeat_n('x', len));
        out.push('"');
        Ok(out)
    }
}
