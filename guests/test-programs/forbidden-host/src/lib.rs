//! Test program `forbidden-host`: `invoke` sends `GET {url}` (input `{"url": ...}`) with the
//! guest SDK's HTTP client and reports the failure as a recoverable error. Pointed at a host
//! outside `allowed_hosts`, the request must be refused by the host before any connection is
//! made.

use agentmesh_guest::http::Request;
use agentmesh_guest::{Actions, Error, Start, Tool};
use serde::Deserialize;
use serde_json::{Value, json};

/// A session; it holds nothing.
struct Program;

/// The input: where to send the request.
#[derive(Deserialize, schemars::JsonSchema)]
struct Get {
    url: Option<String>,
}

impl Tool for Program {
    fn new(_start: &Start) -> Result<Self, Error> {
        Ok(Program)
    }

    fn actions(actions: &mut Actions<Self>) {
        actions.add("get", |_: &mut Program, input: Get| {
            let url = input.url.as_deref().unwrap_or("http://forbidden.example/");
            match Request::get(url).send() {
                Ok(response) => Ok::<Value, _>(json!({ "status": response.status })),
                Err(e) => Err(Error::recoverable(format!("GET {url} failed: {e}"))),
            }
        });
    }
}

agentmesh_guest::export_tool!(Program);
