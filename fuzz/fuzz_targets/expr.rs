//! Any text, as a CEL expression and as a template: compiling must return, never panic or hang.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = agentmesh_expr::Expression::compile(text);
        let _ = agentmesh_expr::Template::parse(text);
    }
});
