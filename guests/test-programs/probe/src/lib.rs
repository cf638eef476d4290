//! Test program `probe`: `invoke` tries to reach what its sandbox must hide — `/etc/passwd`,
//! the host's environment and arguments, paths above its mount (`..`), a socket — and reports.
//!
//! Input: `{"mount": "/mount", "inside": "/mount/file.txt"}` (both optional). Reading `inside`
//! is the positive control: it must work when the host preopened the mount. When nothing
//! leaked the answer is a recoverable error listing every refusal; when something leaked it is
//! an `ok` listing the leaks (a test failure).

use serde_json::{Value, json};

agentmesh_test_glue::tool_program! {
    fn invoke(_action, input) {
        let input: Value = serde_json::from_str(&input).unwrap_or_default();
        let mount = input["mount"].as_str().unwrap_or("/mount");
        let mut report = Report::default();

        report.file("/etc/passwd");
        report.file("/proc/self/environ");
        report.file(&format!("{mount}/../etc/passwd"));
        report.file(&format!("{mount}/../../../../etc/passwd"));
        report.file("../etc/passwd");
        report.dir(&format!("{mount}/.."));
        report.dir("/");

        let vars: Vec<String> = std::env::vars().map(|(k, _)| k).collect();
        if vars.is_empty() {
            report
                .refused
                .push(json!({"what": "environment", "error": "no variables"}));
        } else {
            report
                .leaked
                .push(json!({"what": "environment", "found": vars}));
        }
        let args: Vec<String> = std::env::args().collect();
        if args.is_empty() {
            report
                .refused
                .push(json!({"what": "arguments", "error": "no arguments"}));
        } else {
            report
                .leaked
                .push(json!({"what": "arguments", "found": args}));
        }
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
