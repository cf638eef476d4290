//! `{{name}}`: an agentmesh tool. Each task that uses it gets a session (a value of
//! `{{Camel}}`, made by `Tool::new`); each call runs one action on it.

use agentmesh_guest::{Actions, Error, Start, Tool, kv, log};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A session of one task: what it remembers between that task's calls.
struct {{Camel}} {
    greeted: u64,
}

// An action's input type: its doc comment and fields are the action's description and
// parameters in tool.yaml (`cargo test -- --nocapture` prints them).
/// Greet someone by name.
#[derive(Deserialize, JsonSchema)]
struct Greet {
    /// Who to greet.
    name: String,
}

/// The output of `greet`: the observation the LLM sees.
#[derive(Serialize)]
struct Greeting {
    greeting: String,
    /// Greetings so far in this session.
    count: u64,
    /// Whom this task greeted before (kept in the host's key-value store).
    previous: Option<String>,
}

impl Tool for {{Camel}} {
    fn new(_start: &Start) -> Result<Self, Error> {
        // `start.settings()` and `start.parameters()` parse the operator's settings and the
        // task's tool parameters into types of your own.
        Ok({{Camel}} { greeted: 0 })
    }

    fn actions(actions: &mut Actions<Self>) {
        actions.add("greet", Self::greet);
    }
}

impl {{Camel}} {
    fn greet(&mut self, input: Greet) -> Result<Greeting, Error> {
        if input.name.trim().is_empty() {
            // Recoverable: the LLM hears why and may call again with other input.
            return Err(Error::recoverable("`name` is empty"));
        }
        self.greeted += 1;
        let previous = kv::get_json("last")?;
        kv::set_json("last", &input.name)?;
        log::debug(&format!("greeting {}", input.name));
        Ok(Greeting {
            greeting: format!("Hello, {}!", input.name),
            count: self.greeted,
            previous,
        })
    }
}

agentmesh_guest::export_tool!({{Camel}});

#[cfg(test)]
mod tests {
    /// Prints the `actions:` for tool.yaml (`cargo test -- --nocapture`): each action's
    /// description and parameters, from its input type.
    #[test]
    fn manifest_actions() {
        let actions = agentmesh_guest::manifest_actions::<super::{{Camel}}>();
        println!("{actions}");
        assert!(actions.contains("- name: greet"), "{actions}");
    }
}
