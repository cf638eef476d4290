//! Test program `panic`: `invoke` panics. The host must report it and serve the next call.

#![allow(clippy::panic)]

agentmesh_test_glue::tool_program! {
    fn invoke(action, _input) {
        if action == "ok" {
            return Ok("\"still alive\"".to_owned());
        }
        panic!("test-panic panics on purpose in `{action}`");
    }
}
