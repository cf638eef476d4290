//! Test program `panic`: `invoke` panics. The host must report it and serve the next call.

#![allow(clippy::panic)]

mod bindings {
    wit_bindgen::generate!({
        world: "tool-plugin",
        path: "../../../wit",
        generate_all,
    });
}

use bindings::agentmesh::plugin::types::ToolError;
use bindings::exports::agentmesh::plugin::tool::{Guest, GuestSession};

/// The component.
struct Program;

impl Guest for Program {
    type Session = Session;
}

/// A session; it holds nothing.
struct Session;

impl GuestSession for Session {
    fn new(_settings: String, _parameters: String) -> Self {
        Session
    }

    fn invoke(&self, action: String, _input: String) -> Result<String, ToolError> {
        if action == "ok" {
            return Ok("\"still alive\"".to_owned());
        }
        panic!("test-panic panics on purpose in `{action}`");
    }
}

bindings::export!(Program with_types_in bindings);
