//! `notes-native`: the `notes` tool as a native program, one call per process — the
//! benchmark's subprocess baseline (how a tool run as a program per call would cost).
//!
//! Usage: `notes-native ACTION < input.json`; prints the observation, or the error on stderr
//! with exit code 1.

use std::cell::RefCell;
use std::collections::HashMap;
use std::io::Read;
use std::process::ExitCode;

#[path = "../../benches/notes_twin.rs"]
mod notes_twin;

/// The process's key-value store (it lives as long as the call, like a fresh instance's).
#[derive(Default)]
struct ProcessKv(RefCell<HashMap<String, Vec<u8>>>);

impl notes_twin::Kv for ProcessKv {
    fn get(&self, key: &str) -> Option<Vec<u8>> {
        self.0.borrow().get(key).cloned()
    }

    fn set(&self, key: &str, value: &[u8]) {
        self.0.borrow_mut().insert(key.to_owned(), value.to_vec());
    }
}

fn main() -> ExitCode {
    let action = std::env::args().nth(1).unwrap_or_default();
    let mut input = String::new();
    if let Err(e) = std::io::stdin().read_to_string(&mut input) {
        eprintln!("cannot read the input: {e}");
        return ExitCode::FAILURE;
    }
    match notes_twin::invoke(&ProcessKv::default(), &action, &input) {
        Ok(answer) => {
            println!("{answer}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}
