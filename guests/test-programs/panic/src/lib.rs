//! Test program `panic`: `invoke` panics (after a line on stderr), or with action `abort`
//! prints two lines on stderr and aborts (a trap that is no panic). The host must report each
//! with what the guest printed, and serve the next call.

#![allow(clippy::panic)]

agentmesh_test_glue::tool_program! {
    fn invoke(action, _input) {
        if action == "ok" {
            return Ok("\"still alive\"".to_owned());
        }
        eprintln!("test-panic: step 1 of 2 done");
        if action == "abort" {
            eprintln!("test-panic: giving up on `{action}`");
            std::process::abort();
        }
        panic!("test-panic panics on purpose in `{action}`");
    }
}
