//! One function call of the LLM: bindings → `before_first` → `before` → runtime → `after`,
//! then statistics and allow lists.

use agentmesh_expr::{Activation, Needs};
use agentmesh_model::allow_list::allow_value;
use agentmesh_model::event::ToolCall;
use agentmesh_store::now_rfc3339;
use serde_json::{Map, Value, json};

use crate::plan::{AgentPlan, CapabilityPlan, Target};
use crate::review::Replay;
use crate::runtime::{self, ActionResult};
use crate::steps::{self, Inner, Layers, StepVars, Verdict, Wrapped};
use crate::task::{Outcome, TaskRecord};
use crate::{Engine, Result};

/// How a call ended, for the event log and the task.
pub(crate) enum CallEnd {
    /// The result the LLM sees.
    Observation(Value),
    /// Middleware refused the call: the reason the LLM sees.
    Rejected(String),
    /// The call failed; the LLM is told.
    Error(String),
    /// The task must end (`reason: error`).
    Fatal(String),
    /// A step said `lock_task`.
    Locked(String),
}

/// Runs one call. The record's statistics, counters and allow lists are updated; the caller
/// logs the outcome and commits. `replay`: the decisions of the call's reviews made before a
/// restart (empty unless the call runs again after one).
pub(crate) async fn run(
    engine: &Engine,
    agent: &AgentPlan,
    record: &mut TaskRecord,
    call: &ToolCall,
    replay: Replay,
) -> Result<CallEnd> {
    let Some(function) = agent.function(&call.name) else {
        return Ok(CallEnd::Error(format!(
            "there is no function `{}`",
            call.name
        )));
    };
    if let Some(tool) = function.host {
        engine.records().write_ahead(record)?;
        return Ok(match engine.host_tool(record, tool, &call.arguments) {
            Ok(v) => CallEnd::Observation(v),
            Err(message) => CallEnd::Error(message),
        });
    }
    let cap = &agent.capabilities[function.capability];
    let args = match &call.arguments {
        Value::Object(m) => m.clone(),
        Value::Null => Map::new(),
        _ => return Ok(CallEnd::Error("arguments must be a JSON object".into())),
    };
    let input = match resolve_input(engine, agent, record, cap, function.action, args) {
        Ok(i) => i,
        Err(message) => {
            record
                .capabilities
                .entry(call.name.clone())
                .or_default()
                .record(
                    Outcome::Errored,
                    call.arguments.clone(),
                    json!({"error": message}),
                    None,
                );
            return Ok(CallEnd::Error(message));
        }
    };
    let action_name = match (&cap.target, function.action) {
        (Target::Tool(t), Some(a)) => t.actions[a].name.clone(),
        _ => call.name.clone(),
    };
    let mut vars = StepVars {
        input: input.clone(),
        output: None,
        event: None,
        guardrail: false,
        call_id: Some(call.id.clone()),
        replay,
    };
    // The gate stays shut until a call has passed every step and run: a blocked, denied,
    // failed or interrupted attempt (or a restart while a review in it waits) meets it again.
    let gated = !record.before_first_done.contains(&cap.key) && !cap.before_first.is_empty();
    let name = &call.name;
    // For the statistics: the agent that answered a delegation, and the output as the action
    // gave it (the LLM sees it as the `after` steps leave it).
    let (mut child, mut raw) = (None, Value::Null);
    // The error of an action that failed recoverably. Its text may come from outside (an HTTP
    // answer's body, an MCP server's error, a component's message), so the `after` steps see
    // it, as `output.error`, before the LLM does: a guard on what reaches the LLM is not
    // walked around by a failing answer.
    let mut failed: Option<String> = None;
    // Inside the steps: the action (or the delegation) on the input they let through.
    let inner = async |record: &mut TaskRecord, vars: &mut StepVars| {
        invoked(record, name);
        let input = &vars.input;
        // The task may be past its `max_age` by now (a call before this one, or a review in
        // the steps, took that long): nothing more runs; its next LLM call ends the task.
        if let Some(message) = record.past_max_age(agent) {
            let not_run = format!("not run: {message}");
            return Ok(Inner::Ended(errored(
                record,
                name,
                input.clone(),
                not_run,
                None,
                CallEnd::Error,
            )));
        }
        // What leaves the process is preceded by a write of the turn so far.
        let result = match (&cap.target, function.action) {
            (Target::Tool(tool), Some(action)) => {
                if !runtime::stays_inside(agent, tool, action) {
                    engine.records().write_ahead(record)?;
                }
                runtime::run_action(engine, agent, record, tool, action, input, false).await
            }
            (Target::Agent(agent_id), _) => {
                engine.records().write_ahead(record)?;
                record.delegation_count += 1;
                let (result, from) =
                    runtime::delegate(engine, record, agent_id, input.clone()).await;
                child = from;
                result
            }
            (Target::Tool(tool), None) => {
                ActionResult::Fatal(format!("tool `{}` has no such action", tool.id()))
            }
        };
        let fatal = match result {
            ActionResult::Ok(v) => {
                raw = v.clone();
                return Ok(Inner::Output(v));
            }
            ActionResult::Recoverable(e) => {
                // A failed call was made with these values all the same (the allow list grows
                // with every call); one that succeeded grows it once its `after` steps let it
                // through.
                grow_allow_list(record, cap, input);
                let output = json!({ "error": e });
                failed = Some(e);
                return Ok(Inner::Output(output));
            }
            ActionResult::Fatal(e) => e,
        };
        grow_allow_list(record, cap, input);
        let from = child.as_deref();
        Ok(Inner::Ended(errored(
            record,
            name,
            input.clone(),
            fatal,
            from,
            CallEnd::Fatal,
        )))
    };
    let layers = Layers {
        name: Some(&action_name),
        before: [gated.then_some(&cap.before_first), Some(&cap.before)],
        after: &cap.after,
    };
    let wrapped = steps::around(engine, agent, record, layers, &mut vars, inner).await?;
    let (input, from) = (vars.input, child.as_deref());
    let (verdict, seen) = match wrapped {
        Wrapped::Blocked(reason) => {
            invoked(record, name);
            restricted(record, name, input, &reason);
            return Ok(CallEnd::Rejected(reason));
        }
        Wrapped::Locked(reason) => {
            invoked(record, name);
            restricted(record, name, input, &reason);
            return Ok(CallEnd::Locked(reason));
        }
        Wrapped::Ended(end) => return Ok(end),
        Wrapped::Finished(verdict) => (verdict, vars.output.unwrap_or_default()),
    };
    match verdict {
        Verdict::Pass => {
            if let Some(error) = failed {
                // The steps let the error through: the LLM reads it as they leave it.
                let text = match seen {
                    Value::String(text) => text,
                    Value::Object(m) => match m.get("error") {
                        Some(Value::String(error)) if m.len() == 1 => error.clone(),
                        _ => Value::Object(m).to_string(),
                    },
                    other => other.to_string(),
                };
                // `context.capabilities` keeps the error as the action gave it.
                errored(record, name, input, error, from, CallEnd::Error);
                return Ok(CallEnd::Error(text));
            }
            if gated {
                record.before_first_done.insert(cap.key.clone());
            }
            grow_allow_list(record, cap, &input);
            stats(record, name, Outcome::Successful, input, raw, from);
            Ok(CallEnd::Observation(seen))
        }
        // Refused after it ran: what the LLM was kept from is not kept for later steps and
        // bindings either (`outputs[0]` is the refusal, as for a call refused before).
        Verdict::Block(reason) => {
            let refused = json!({"error": reason});
            stats(record, name, Outcome::Restricted, input, refused, from);
            Ok(CallEnd::Rejected(reason))
        }
        Verdict::Lock(reason) => {
            let refused = json!({"error": reason});
            stats(record, name, Outcome::Restricted, input, refused, from);
            Ok(CallEnd::Locked(reason))
        }
    }
}

/// Counts a call that reached its capability (whatever its steps decide).
fn invoked(record: &mut TaskRecord, name: &str) {
    record.invocations.push(name.to_owned());
    record.history.push("capability".into());
}

/// Records a failed call and ends it as `end` says (an error for the LLM, or fatal).
fn errored(
    record: &mut TaskRecord,
    name: &str,
    input: Value,
    error: String,
    child: Option<&str>,
    end: fn(String) -> CallEnd,
) -> CallEnd {
    stats(
        record,
        name,
        Outcome::Errored,
        input,
        json!({"error": error}),
        child,
    );
    end(error)
}

fn stats(
    record: &mut TaskRecord,
    name: &str,
    outcome: Outcome,
    input: Value,
    output: Value,
    child: Option<&str>,
) {
    record
        .capabilities
        .entry(name.to_owned())
        .or_default()
        .record(outcome, input, output, child);
}

fn restricted(record: &mut TaskRecord, name: &str, input: Value, reason: &str) {
    stats(
        record,
        name,
        Outcome::Restricted,
        input,
        json!({"error": reason}),
        None,
    );
}

/// The action's input: the LLM's arguments, bindings merged over them (bindings always
/// win), defaults filled, checked against the action's parameter schema.
fn resolve_input(
    engine: &Engine,
    agent: &AgentPlan,
    record: &TaskRecord,
    cap: &CapabilityPlan,
    action: Option<usize>,
    mut args: Map<String, Value>,
) -> std::result::Result<Value, String> {
    // A provider keeps arguments that are not a JSON object as `{"_raw": …}` (see
    // agentmesh-llm): tell the LLM so, rather than which argument is missing.
    if let (1, Some(Value::String(raw))) = (args.len(), args.get("_raw")) {
        let shown: String = raw.chars().take(200).collect();
        let more = if shown.len() < raw.len() { "…" } else { "" };
        return Err(format!(
            "the arguments are not a JSON object: `{shown}{more}`; send them as one JSON object"
        ));
    }
    // A delegation shows the LLM `message` alone: any other argument would set a parameter
    // of the agent it calls that the LLM was never offered (only bindings set those).
    if matches!(cap.target, Target::Agent(_)) {
        args.retain(|name, _| name == "message");
    }
    let mut act = Activation::new();
    if !cap.bindings.is_empty() {
        let mut needs = Needs::default();
        cap.bindings
            .iter()
            .for_each(|(_, e)| needs.add(e, &["context", "c"]));
        act.set_aliased("context", "c", record.context_for(agent, &needs))
            .bind("runtime", engine.runtime_variable())
            .set("now", json!(now_rfc3339()));
    }
    for (name, expr) in &cap.bindings {
        let value = expr
            .evaluate(&act)
            .map_err(|e| format!("binding `{name}` could not be evaluated: {e}"))?;
        args.insert(name.clone(), value);
    }
    match (&cap.target, action) {
        (Target::Tool(tool), Some(a)) => match tool.actions.get(a) {
            Some(plan) => plan.complete(args),
            None => Err(format!("tool `{}` has no action #{a}", tool.id())),
        },
        _ => Ok(Value::Object(args)),
    }
}

/// Adds every resolved parameter value to the tool's allow list, except sealed names.
fn grow_allow_list(record: &mut TaskRecord, cap: &CapabilityPlan, input: &Value) {
    let Target::Tool(tool) = &cap.target else {
        return;
    };
    let Value::Object(values) = input else { return };
    let id = tool.id();
    let sealed = record.sealed.get(&id).cloned().unwrap_or_default();
    let declared: Vec<&String> = tool
        .actions
        .iter()
        .flat_map(|a| a.parameters.keys())
        .collect();
    for (name, value) in values {
        if sealed.contains(name) || !declared.contains(&name) {
            continue;
        }
        record.allow(&id, name, Some(allow_value(value)));
    }
}
