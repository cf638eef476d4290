//! Test program `loop`: `invoke` never returns. The host must stop it at its timeout.

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

    fn invoke(&self, _action: String, _input: String) -> Result<String, ToolError> {
        let mut n: u64 = 0;
        loop {
            n = std::hint::black_box(n.wrapping_add(1));
        }
    }
}

bindings::export!(Program with_types_in bindings);
