//! Test program `greedy-middleware` (world `middleware-plugin`): `before` loops for ever when
//! its config holds `loop`, and allocates 1 MiB blocks, touching each, until memory runs out
//! when it holds `hog`; otherwise it passes. The host must stop it at the step's `timeout` or
//! `memory_limit`.

mod bindings {
    wit_bindgen::generate!({
        world: "middleware-plugin",
        path: "../../../wit",
        generate_all,
    });
}

use bindings::exports::agentmesh::plugin::middleware::{Guest, Verdict};

/// The component.
struct Greedy;

impl Guest for Greedy {
    fn before(config: String, _context: String, _input: String, _event: Option<String>) -> Verdict {
        if config.contains("loop") {
            let mut n: u64 = 0;
            loop {
                n = std::hint::black_box(n.wrapping_add(1));
            }
        }
        if config.contains("hog") {
            let mut blocks: Vec<Vec<u8>> = Vec::new();
            loop {
                blocks.push(vec![0xA5; 1024 * 1024]);
                std::hint::black_box(&blocks);
            }
        }
        Verdict::Pass
    }

    fn after(
        _config: String,
        _context: String,
        _input: String,
        _output: String,
        _event: Option<String>,
    ) -> Verdict {
        Verdict::Pass
    }
}

bindings::export!(Greedy with_types_in bindings);
