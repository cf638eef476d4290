//! Whether a task takes a tool event that routing matched to it (CONTRACT §5): the event
//! filter component, the capability's middleware with `event` in scope, the event's message
//! and its `after` transforms. Decided on a copy of the task: admission changes nothing in it.

use agentmesh_expr::Bound;
use agentmesh_model::allow_list::AllowLists;
use agentmesh_plugins::{AllowList, Limits};
use agentmesh_store::now_rfc3339;
use serde_json::{Value, json};

use crate::Engine;
use crate::plan::{AgentPlan, CapabilityPlan, EventPlan, Target, ToolPlan};
use crate::review::Replay;
use crate::steps::{self, Phase, StepVars, Verdict};
use crate::task::Status;

/// What a task says to a routed event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    /// It takes the event: the message text to queue.
    Take(String),
    /// It does not take it.
    Drop,
    /// A step failed with `lock_task` (or a tool it invoked failed fatally): the task is to
    /// be locked, for this reason, and does not take the event.
    Lock(String),
}

/// Whether task `task` takes `event`: the filter component, then the capability's
/// `before` steps with `event` in scope, the message, and its `after` transforms.
pub(crate) async fn admit(
    engine: &Engine,
    tool: &ToolPlan,
    event: &EventPlan,
    task: &str,
    event_json: &Bound,
) -> crate::Result<Admission> {
    let mut record = engine.task(task)?;
    if record.status() == Status::Terminated || record.interrupted {
        return Ok(Admission::Drop);
    }
    let agent = engine.agent(&record.agent)?;
    let tool_id = tool.id();
    // Every capability of the tool whose `include` takes the event guards it (the same tool
    // may be listed under two refs); one that leaves it out does not admit it (a reload may
    // have narrowed `include` since the task subscribed).
    let caps: Vec<&CapabilityPlan> = agent
        .capabilities
        .iter()
        .filter(|c| matches!(&c.target, Target::Tool(t) if t.id() == tool_id))
        .filter(|c| c.includes(&event.name))
        .collect();
    if caps.is_empty() {
        return Ok(Admission::Drop);
    }
    if let Some(path) = &event.filter_component
        && !filter_component(engine, path, event_json, record.allow_lists.get(&tool_id)).await
    {
        return Ok(Admission::Drop);
    }
    let message = message_text(&agent, event, event_json, &record);
    let mut vars = StepVars {
        input: json!({"message": message}),
        output: None,
        event: Some(event_json.clone()),
        guardrail: false,
        call_id: None,
        replay: Replay::default(),
    };
    // Middleware decides on a copy: routing changes nothing in the task. Each capability's
    // `before` steps run, then each one's `after` steps on what the last left.
    let befores = caps.iter().map(|c| (&c.before, Phase::Before));
    let afters = caps.iter().map(|c| (&c.after, Phase::After));
    for (i, (steps, phase)) in befores.chain(afters).enumerate() {
        if i == caps.len() {
            vars.output = Some(vars.input.clone());
        }
        let verdict = steps::run(
            engine,
            &agent,
            &mut record,
            steps,
            Some(&event.name),
            phase,
            &mut vars,
        )
        .await?;
        match verdict {
            Verdict::Pass => {}
            Verdict::Block(reason) => {
                tracing::debug!(task.id = %task, event = %event.name, "event refused by middleware: {reason}");
                return Ok(Admission::Drop);
            }
            Verdict::Lock(reason) => return Ok(Admission::Lock(reason)),
        }
    }
    // An `after` transform yielding a string replaces the text; a map replaces the input.
    Ok(Admission::Take(match vars.output {
        Some(Value::String(text)) => text,
        Some(Value::Object(m)) => match m.get("message") {
            Some(Value::String(text)) => text.clone(),
            _ => Value::Object(m).to_string(),
        },
        _ => message,
    }))
}

/// Runs an event-filter component; a failure is a refusal (fail closed), logged.
async fn filter_component(
    engine: &Engine,
    path: &std::path::Path,
    event_json: &Bound,
    lists: Option<&AllowLists>,
) -> bool {
    let plugins = match engine.plugins() {
        Ok(p) => p,
        Err(e) => {
            tracing::warn!("event filter component not run: {e}");
            return false;
        }
    };
    let component = match plugins.component(&path.display().to_string(), path) {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!("event filter component `{}`: {e}", path.display());
            return false;
        }
    };
    let parameters: Vec<AllowList> = lists
        .into_iter()
        .flatten()
        .map(|(name, values)| AllowList {
            name: name.clone(),
            values: values.iter().cloned().collect(),
        })
        .collect();
    match component
        .event_filter_matches(
            &Limits::default(),
            &event_json.to_json_string(),
            &parameters,
        )
        .await
    {
        Ok(pass) => pass,
        Err(e) => {
            tracing::warn!("event filter component `{}` failed: {e}", path.display());
            false
        }
    }
}

/// The event's message (`{event.payload.*}`), rendered; a hole that cannot be rendered
/// leaves the template's text and the error, so the agent still hears of the event.
fn message_text(
    agent: &AgentPlan,
    event: &EventPlan,
    event_json: &Bound,
    record: &crate::TaskRecord,
) -> String {
    let mut needs = agentmesh_expr::Needs::default();
    needs.add_template(&event.message, &["context", "c"]);
    let mut act = agentmesh_expr::Activation::new();
    act.bind("event", event_json.clone())
        .set("now", json!(now_rfc3339()));
    // Most messages read only the event: the context is built only for what they read.
    if !needs.is_empty() {
        act.set_aliased("context", "c", record.context_for(agent, &needs));
    }
    event.message.render(&act).unwrap_or_else(|e| {
        format!(
            "{} (the message could not be rendered: {e})",
            event.message.source()
        )
    })
}
