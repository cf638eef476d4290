//! Test program `hog`: `invoke` allocates 1 MiB blocks, touching each, until memory runs out.
//! The host must stop it at its memory limit.

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
        let mut blocks: Vec<Vec<u8>> = Vec::new();
        loop {
            blocks.push(vec![0xA5; 1024 * 1024]);
            std::hint::black_box(&blocks);
        }
    }
}

bindings::export!(Program with_types_in bindings);
