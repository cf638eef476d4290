//! `counter`: the example tool of `guests/python/counter` and `guests/js/counter`, in Rust on
//! the guest SDK, so that the three languages can be compared on the same actions
//! (`cargo bench -p agentmesh-plugins --bench languages`).
//!
//! Actions: `count` → `{"count": N}` (the calls of `count` in this session); `remember {key,
//! value}` → `{"stored": key}` and `recall {key}` → `{"key", "value"}` (the host's key-value
//! store, private to the task); `fetch {url}` → `{"status", "body"}` (a GET over `wasi:http`,
//! the body's first 1,000 characters); `fail` panics, to show where a panic's message goes.

use agentmesh_guest::http::Request;
use agentmesh_guest::{Actions, Error, NoInput, Start, Tool, kv};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

/// How much of a fetched body the answer carries, in characters.
const BODY_CHARS: usize = 1000;

/// A session: how many times `count` ran in it.
struct Counter {
    counted: u64,
}

/// The input of `remember`.
#[derive(Deserialize, JsonSchema)]
struct Remember {
    key: String,
    value: Value,
}

/// The input of `recall`.
#[derive(Deserialize, JsonSchema)]
struct Recall {
    key: String,
}

/// The input of `fetch`.
#[derive(Deserialize, JsonSchema)]
struct Fetch {
    url: String,
}

impl Tool for Counter {
    fn new(_start: &Start) -> Result<Self, Error> {
        Ok(Counter { counted: 0 })
    }

    fn actions(actions: &mut Actions<Self>) {
        actions
            .add("count", Self::count)
            .add("remember", Self::remember)
            .add("recall", Self::recall)
            .add("fetch", Self::fetch)
            .add("fail", Self::fail);
    }
}

impl Counter {
    fn count(&mut self, _input: NoInput) -> Result<Value, Error> {
        self.counted += 1;
        Ok(json!({ "count": self.counted }))
    }

    fn remember(&mut self, input: Remember) -> Result<Value, Error> {
        kv::set_json(&input.key, &input.value)?;
        Ok(json!({ "stored": input.key }))
    }

    fn recall(&mut self, input: Recall) -> Result<Value, Error> {
        let value: Option<Value> = kv::get_json(&input.key)?;
        Ok(json!({ "key": input.key, "value": value }))
    }

    fn fetch(&mut self, input: Fetch) -> Result<Value, Error> {
        let answer = Request::get(&input.url).send()?;
        let body: String = answer.text().chars().take(BODY_CHARS).collect();
        Ok(json!({ "status": answer.status, "body": body }))
    }

    #[allow(
        clippy::panic,
        reason = "the action shows where a panic's message goes"
    )]
    fn fail(&mut self, _input: NoInput) -> Result<Value, Error> {
        panic!("counter failed on purpose")
    }
}

agentmesh_guest::export_tool!(Counter);
