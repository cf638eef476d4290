//! Any bytes, as the text of a manifest file: validation must return, never panic or hang.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = agentmesh_manifest::validate_text(text, std::path::Path::new("fuzz.yaml"), &|_| None);
    }
});
