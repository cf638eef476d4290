//! Test program `probe`: looks for what its sandbox must hide, and reports.
//!
//! - `probe` tries to reach `/etc/passwd`, the host's environment and arguments, paths above
//!   its mount (`..`), a socket. Input: `{"mount": "/mount", "inside": "/mount/file.txt"}`
//!   (both optional). Reading `inside` is the positive control: it must work when the host
//!   preopened the mount.
//! - `remember {"secret"}` leaves the secret in its linear memory — in a static, on the heap
//!   and on the stack; `recall {"secret"}` scans all of its linear memory for it. In the same
//!   instance `recall` finds it (the positive control); in a fresh instance it must not, even
//!   when the instance reuses the pool slot of the one that remembered.
//!
//! When nothing leaked the answer is a recoverable error saying what held; when something
//! leaked it is an `ok` listing the leaks (a test failure, except for the positive controls).

use std::sync::Mutex;

use serde_json::{Value, json};

/// Secrets are kept masked (each byte XORed with this), and `recall` unmasks memory byte by
/// byte as it compares: the plain secret in `recall`'s own input never matches, so only what
/// `remember` wrote can.
const MASK: u8 = 0x5a;

/// The static copy of the remembered secret (in the data section).
static KEPT: Mutex<[u8; 64]> = Mutex::new([0; 64]);

agentmesh_test_glue::tool_program! {
    fn invoke(action, input) {
        let input: Value = serde_json::from_str(&input).unwrap_or_default();
        let secret = input["secret"].as_str().unwrap_or_default().as_bytes();
        match action.as_str() {
            "remember" => remember(secret),
            "recall" => recall(secret),
            _ => probe(&input),
        }
    }
}

/// Tries the files, directories, environment, arguments and socket the sandbox must hide.
fn probe(input: &Value) -> Result<String, ToolError> {
    let mount = input["mount"].as_str().unwrap_or("/mount");
    let mut report = Report::default();

    report.file("/etc/passwd");
    report.file("/proc/self/environ");
    report.file(&format!("{mount}/../etc/passwd"));
    report.file(&format!("{mount}/../../../../etc/passwd"));
    report.file("../etc/passwd");
    report.dir(&format!("{mount}/.."));
    report.dir("/");

    report.names(
        "environment",
        std::env::vars().map(|(k, _)| k).collect(),
        "no variables",
    );
    report.names("arguments", std::env::args().collect(), "no arguments");
    match std::net::TcpStream::connect("127.0.0.1:9") {
        Ok(_) => report
            .leaked
            .push(json!({"what": "socket 127.0.0.1:9", "found": "connected"})),
        Err(e) => report
            .refused
            .push(json!({"what": "socket 127.0.0.1:9", "error": e.to_string()})),
    }
    if let Some(inside) = input["inside"].as_str() {
        match std::fs::read_to_string(inside) {
            Ok(text) => report.allowed.push(json!({"what": inside, "found": text})),
            Err(e) => report
                .refused
                .push(json!({"what": inside, "error": e.to_string()})),
        }
    }

    let leaked = !report.leaked.is_empty();
    let text = json!({
        "leaked": report.leaked,
        "refused": report.refused,
        "allowed": report.allowed,
    })
    .to_string();
    if leaked {
        Ok(text)
    } else {
        Err(ToolError::Recoverable(format!("the sandbox held: {text}")))
    }
}

/// Leaves `secret`, masked, in a static, on the heap and on the stack.
fn remember(secret: &[u8]) -> Result<String, ToolError> {
    let masked: Vec<u8> = secret.iter().map(|b| b ^ MASK).collect();
    let mut kept = KEPT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let Some(slot) = kept.get_mut(..masked.len()) else {
        return Err(ToolError::Recoverable(
            "the secret is longer than 64 bytes".into(),
        ));
    };
    slot.copy_from_slice(&masked);
    let mut on_stack = [0u8; 64];
    on_stack[..masked.len()].copy_from_slice(&masked);
    std::hint::black_box(&on_stack);
    // Never freed: the heap copy outlives the call, as a guest's leftovers do.
    let on_heap: &'static [u8] = masked.leak();
    std::hint::black_box(on_heap);
    Ok("\"remembered\"".into())
}

/// Scans the whole linear memory for `secret` as `remember` leaves it; answers the addresses
/// where it was found (a leak unless this instance remembered it).
fn recall(secret: &[u8]) -> Result<String, ToolError> {
    if secret.is_empty() {
        return Err(ToolError::Recoverable(
            "`secret` (a string) is required".into(),
        ));
    }
    let size = core::arch::wasm32::memory_size(0) * 65536;
    // Address 0 is the null pointer to Rust; a secret never starts there.
    let found: Vec<usize> = (1..size.saturating_sub(secret.len()))
        .filter(|&at| {
            secret.iter().enumerate().all(|(i, b)| {
                let byte = core::ptr::with_exposed_provenance::<u8>(at + i);
                // SAFETY: `at + i` is below the memory's size, so inside linear memory.
                let byte = unsafe { byte.read_volatile() };
                byte == b ^ MASK
            })
        })
        .collect();
    if found.is_empty() {
        Err(ToolError::Recoverable(format!(
            "the sandbox held: no trace of the secret in {size} bytes of memory"
        )))
    } else {
        Ok(json!({ "found": found }).to_string())
    }
}

/// What the probe found.
#[derive(Default)]
struct Report {
    /// What it should not have reached.
    leaked: Vec<Value>,
    /// What was refused, with the error.
    refused: Vec<Value>,
    /// What it may reach (the positive control).
    allowed: Vec<Value>,
}

impl Report {
    /// Names the guest could see of `what` (none: refused with `none`).
    fn names(&mut self, what: &str, found: Vec<String>, none: &str) {
        if found.is_empty() {
            self.refused.push(json!({"what": what, "error": none}));
        } else {
            self.leaked.push(json!({"what": what, "found": found}));
        }
    }

    /// Tries to read the file at `path`.
    fn file(&mut self, path: &str) {
        match std::fs::read(path) {
            Ok(bytes) => self
                .leaked
                .push(json!({"what": path, "found": format!("{} bytes", bytes.len())})),
            Err(e) => self
                .refused
                .push(json!({"what": path, "error": e.to_string()})),
        }
    }

    /// Tries to list the directory at `path`.
    fn dir(&mut self, path: &str) {
        match std::fs::read_dir(path) {
            Ok(entries) => {
                let names: Vec<String> = entries
                    .filter_map(Result::ok)
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect();
                self.leaked.push(json!({"what": path, "found": names}));
            }
            Err(e) => self
                .refused
                .push(json!({"what": path, "error": e.to_string()})),
        }
    }
}
