//! The glue every test program shares: the `tool-plugin` bindings, a stateless session and
//! the export, around the one thing a test program does — its `invoke`.
//!
//! ```ignore
//! agentmesh_test_glue::tool_program! {
//!     fn invoke(_action, _input) {
//!         Err(ToolError::Recoverable("nothing to do".to_owned()))
//!     }
//! }
//! ```
//!
//! The macro expands in the calling crate (which depends on `wit-bindgen`), so the WIT path is
//! relative to that crate's directory: every test program sits at `guests/test-programs/*`.

/// Defines the component: `invoke(action, input)` gets both as `String`s and answers
/// `Result<String, ToolError>`; `ToolError` and the crate's `bindings` are in scope.
#[macro_export]
macro_rules! tool_program {
    (fn invoke($action:ident, $input:ident) $body:block) => {
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

            fn invoke(&self, $action: String, $input: String) -> Result<String, ToolError> $body
        }

        bindings::export!(Program with_types_in bindings);
    };
}
