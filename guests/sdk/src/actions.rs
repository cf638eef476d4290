//! The [`Tool`] trait, its [`Actions`] table and the [`Session`] the host drives.

use std::cell::RefCell;

use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::Error;
use crate::bindings::agentmesh::plugin::types::ToolError;
use crate::bindings::exports::agentmesh::plugin::tool::GuestSession;

/// A tool: one value of it is one session of one task.
pub trait Tool: Sized + 'static {
    /// Starts a session (the spec's Initialize). An error here is the answer of every call of
    /// the session, so a tool whose settings are unusable says why at its first call.
    fn new(start: &Start) -> Result<Self, Error>;

    /// Names the actions: `actions.add("name", Self::method)` for each.
    fn actions(actions: &mut Actions<Self>);
}

/// What a session starts from: the operator's settings for the tool and the task's tool
/// parameters, both JSON.
pub struct Start {
    settings: String,
    parameters: String,
}

impl Start {
    /// The settings (the manifest's `settings` schema, filled from the host config), parsed
    /// as `T`; an error is fatal, since only the operator can mend it.
    pub fn settings<T: DeserializeOwned>(&self) -> Result<T, Error> {
        serde_json::from_str(&self.settings).map_err(|e| Error::fatal(format!("settings: {e}")))
    }

    /// The task's tool parameters (bindings and allow-listed values), parsed as `T`.
    pub fn parameters<T: DeserializeOwned>(&self) -> Result<T, Error> {
        serde_json::from_str(&self.parameters).map_err(|e| Error::fatal(format!("parameters: {e}")))
    }
}

/// The input of an action that takes none (any object is accepted).
#[derive(Debug, Default, serde::Deserialize, JsonSchema)]
// Not the description of the actions that take it (see `manifest_actions`).
#[schemars(description = "")]
pub struct NoInput {}

/// How an action runs: on a session, from the input's JSON to the output's.
type Run<T> = Box<dyn Fn(&mut T, &str) -> Result<String, Error>>;

/// One action: its name, how to run it on a session, and (natively) its input's schema.
struct Action<T> {
    name: &'static str,
    run: Run<T>,
    #[cfg(not(target_arch = "wasm32"))]
    schema: fn() -> schemars::Schema,
}

/// The actions of a tool, by name.
pub struct Actions<T> {
    actions: Vec<Action<T>>,
}

impl<T: Tool> Actions<T> {
    /// The tool's actions, as [`Tool::actions`] names them.
    fn of_tool() -> Actions<T> {
        let mut actions = Actions {
            actions: Vec::new(),
        };
        T::actions(&mut actions);
        actions
    }

    /// Adds the action `name`, run by `action`: its input is the call's parameters (the LLM's
    /// arguments with defaults and bindings merged in) parsed as `I` — input that does not fit
    /// is a recoverable error — and its output, serialized, is the observation.
    pub fn add<I, O>(
        &mut self,
        name: &'static str,
        action: impl Fn(&mut T, I) -> Result<O, Error> + 'static,
    ) -> &mut Self
    where
        I: DeserializeOwned + JsonSchema,
        O: Serialize,
    {
        let run = move |tool: &mut T, input: &str| {
            let input: I = serde_json::from_str(input)
                .map_err(|e| Error::recoverable(format!("the input of `{name}`: {e}")))?;
            let output = action(tool, input)?;
            serde_json::to_string(&output)
                .map_err(|e| Error::fatal(format!("the output of `{name}`: {e}")))
        };
        self.actions.push(Action {
            name,
            run: Box::new(run),
            #[cfg(not(target_arch = "wasm32"))]
            schema: || schemars::SchemaGenerator::default().into_root_schema_for::<I>(),
        });
        self
    }

    /// Runs the action `name` on `tool`.
    fn run(&self, tool: &mut T, name: &str, input: &str) -> Result<String, Error> {
        match self.actions.iter().find(|a| a.name == name) {
            Some(action) => (action.run)(tool, input),
            None => {
                let names: Vec<&str> = self.actions.iter().map(|a| a.name).collect();
                Err(Error::fatal(format!(
                    "no action `{name}` (this component has: {})",
                    names.join(", ")
                )))
            }
        }
    }
}

/// The `actions:` of a tool manifest for `T`, as YAML to paste into it: each action's name,
/// its description (the doc comment of its input type) and its parameters (the JSON Schema of
/// its input type). Only on native targets: a test prints it, the component never carries the
/// schemas.
#[cfg(not(target_arch = "wasm32"))]
pub fn manifest_actions<T: Tool>() -> String {
    let mut out = String::from("actions:\n");
    for action in Actions::<T>::of_tool().actions {
        let mut schema = (action.schema)();
        schema.remove("$schema");
        schema.remove("title");
        out.push_str(&format!("  - name: {}\n", action.name));
        if let Some(serde_json::Value::String(text)) = schema.remove("description")
            && !text.is_empty()
        {
            // A JSON string is a YAML scalar, quotes and all.
            out.push_str(&format!(
                "    description: {}\n",
                serde_json::Value::String(text)
            ));
        }
        // JSON is YAML: one line per schema keeps the output free of a YAML writer.
        out.push_str(&format!("    parameters: {}\n", schema.as_value()));
    }
    out
}

/// A session as the host sees it: the tool (or why it could not start) and its actions.
/// [`export_tool!`](crate::export_tool) names it; a tool never uses it directly.
pub struct Session<T: Tool> {
    tool: Result<RefCell<T>, Error>,
    actions: Actions<T>,
}

impl<T: Tool> GuestSession for Session<T> {
    fn new(settings: String, parameters: String) -> Self {
        let start = Start {
            settings,
            parameters,
        };
        Session {
            tool: T::new(&start).map(RefCell::new),
            actions: Actions::of_tool(),
        }
    }

    fn invoke(&self, action: String, input: String) -> Result<String, ToolError> {
        let tool = self.tool.as_ref().map_err(|e| ToolError::from(e.clone()))?;
        // The host calls one session at a time and a call cannot re-enter it.
        let mut tool = tool
            .try_borrow_mut()
            .map_err(|_| ToolError::Fatal("the session is already in a call".to_owned()))?;
        Ok(self.actions.run(&mut tool, &action, &input)?)
    }
}
