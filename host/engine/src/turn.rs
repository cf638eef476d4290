//! One turn: an input through the guardrails, the LLM loop with its calls, the response
//! through the guardrails, outputs and exposes. Limits are checked at every step. A turn
//! suspended in a review across a restart resumes here too, at the call that waited.

use std::collections::HashMap;
use std::sync::Arc;

use agentmesh_expr::{Activation, Needs};
use agentmesh_llm::ChatRequest;
use agentmesh_model::event::{
    ContentPart, Event, EventKind, EventSource, MessageMetadata, ToolCall,
};
use agentmesh_store::{now_ms, now_rfc3339};
use serde_json::{Value, json};

use crate::call::{self, CallEnd};
use crate::plan::AgentPlan;
use crate::review::Replay;
use crate::steps::{self, Inner, Layers, StepVars, Verdict, Wrapped};
use crate::task::{Reason, Resume, Status, TaskRecord, status_event};
use crate::{Engine, QueuedInput, Result};

pub(crate) type Events = Vec<(EventSource, EventKind)>;

/// Processes one queued input of `record`'s task: the agent's guardrails wrap the turn
/// ([`steps::around`]); inside them, the input is logged and the conversation runs until an
/// answer (which the `after` guardrails see) or the end of the task.
pub(crate) async fn run(
    engine: &Engine,
    agent: &AgentPlan,
    record: &mut TaskRecord,
    input: QueuedInput,
) -> Result<()> {
    let mut vars = StepVars::guardrail(input.io.clone(), None);
    // Inside the guardrails: the input as they let it through, then the conversation.
    let inner = async |record: &mut TaskRecord, vars: &mut StepVars| {
        // Taken, the input leaves `vars`: the `after` guardrails see the answer alone.
        let io = std::mem::take(&mut vars.input);
        let (mut events, prompt_error) = take_input(engine, agent, record, io, &input);
        if let Some(message) = prompt_error {
            terminate(record, Reason::Error, None, &message, &mut events);
            engine.records().save(record, events)?;
            return Ok(Inner::Ended(true));
        }
        record.status = Some(Status::Running);
        events.push(status_event("running"));
        engine.records().log(record, events)?;
        conversation(engine, record).await
    };
    let layers = Layers::guardrails(agent, false);
    let wrapped = steps::around(engine, agent, record, layers, &mut vars, inner).await?;
    let ended = match wrapped {
        Wrapped::Blocked(reason) | Wrapped::Locked(reason) => {
            // What the guardrails let through (transformed, when a step replaced it) is the
            // input the log holds.
            let (mut events, _) = take_input(engine, agent, record, vars.input, &input);
            terminate(record, Reason::Locked, None, &reason, &mut events);
            engine.records().save(record, events)?;
            true
        }
        other => settle(engine, agent, record, other, vars.output)?,
    };
    if ended {
        engine.clear_queue(&record.id)?;
    }
    Ok(())
}

/// Takes `io`, the input as the guardrails let it through, into the record: the log, `context.
/// input` and the LLM hold only that. Returns the events to log (the system prompt the first
/// time, the message, subscriptions expired or restored) and why the prompt cannot be
/// rendered, if it cannot.
fn take_input(
    engine: &Engine,
    agent: &AgentPlan,
    record: &mut TaskRecord,
    io: Value,
    input: &QueuedInput,
) -> (Events, Option<String>) {
    let content: Vec<ContentPart> = io
        .get("message")
        .and_then(|m| serde_json::from_value(m.clone()).ok())
        .unwrap_or_default();
    let mut events: Events = Vec::new();
    let has_message = io.get("message").is_some();
    // Taken off the queue by the write that logs it.
    record.journal.take_held();
    record.inputs.push(io);
    // The prompt is rendered once the first input is in the context (the spec's own example
    // reads `{context.input[0].ticket_id}`); one that cannot render ends the task, naming the
    // hole, rather than sending the LLM a broken prompt.
    let mut prompt_error = None;
    if !record.prompt_logged {
        match system_prompt(engine, agent, record) {
            Ok(prompt) => {
                record.prompt_logged = true;
                events.push(prompt);
            }
            Err(message) => prompt_error = Some(message),
        }
    }
    if has_message {
        events.push((
            EventSource::User,
            EventKind::MessageEvent {
                content,
                metadata: Some(MessageMetadata {
                    queued_at: Some(input.queued_at),
                    trigger: input.trigger.clone(),
                }),
            },
        ));
    } else {
        // A trigger without `message` starts the turn with no message (trigger.md); the log
        // still says what fired it.
        events.push((
            EventSource::Environment,
            EventKind::ConversationStateUpdateEvent {
                key: "triggered".into(),
                value: json!({"queued_at": input.queued_at, "trigger": input.trigger}),
            },
        ));
    }
    record.history.push("input".into());
    let now = now_ms();
    // Subscriptions that expired while the task was idle stay expired: prune them before the
    // step resets the clock.
    events.extend(crate::subscription::prune_expired(
        &mut record.subscriptions,
        record.last_activity_ms,
        now,
    ));
    if record.interrupted {
        record.interrupted = false;
        events.push((
            EventSource::Environment,
            EventKind::ConversationStateUpdateEvent {
                key: "subscriptions_restored".into(),
                value: json!({"reason": "new input"}),
            },
        ));
    }
    record.last_activity_ms = now;
    (events, prompt_error)
}

/// The interpolated prompt and the function schemas, or why the prompt cannot be rendered.
fn system_prompt(
    engine: &Engine,
    agent: &AgentPlan,
    record: &TaskRecord,
) -> std::result::Result<(EventSource, EventKind), String> {
    let mut needs = Needs::default();
    needs.add_template(&agent.prompt, &["context", "c"]);
    let mut act = Activation::new();
    act.set_aliased("context", "c", record.context_for(agent, &needs))
        .bind("runtime", engine.runtime_variable())
        .set("now", json!(now_rfc3339()));
    let prompt = agent.prompt.render(&act).map_err(|e| {
        format!(
            "the prompt of agent `{}` cannot be rendered: {e}",
            agent.id()
        )
    })?;
    Ok((
        EventSource::Agent,
        EventKind::SystemPromptEvent {
            prompt,
            tools: agent.tools.to_vec(),
        },
    ))
}

/// Marks the record terminated and adds the events saying why.
pub(crate) fn terminate(
    record: &mut TaskRecord,
    reason: Reason,
    limit: Option<&str>,
    message: &str,
    events: &mut Events,
) {
    record.status = Some(Status::Terminated);
    record.reason = Some(reason);
    record.limit = limit.map(str::to_owned);
    let (key, value) = match (reason, limit) {
        (Reason::LimitExceeded, Some(l)) => {
            ("limit_exceeded", json!({"limit": l, "message": message}))
        }
        (Reason::Locked, _) => ("locked", json!({"message": message})),
        _ => ("error", json!({"message": message})),
    };
    events.push((
        EventSource::Environment,
        EventKind::ConversationStateUpdateEvent {
            key: key.into(),
            value,
        },
    ));
    events.push(status_event("terminated"));
}

/// Terminates the task for exceeding `limit`, committing `events` (answers to calls that will
/// not run) with the events saying why. Returns `true` (the task terminated).
pub(crate) fn exceeded(
    engine: &Engine,
    record: &mut TaskRecord,
    limit: &str,
    message: &str,
    mut events: Events,
) -> Result<bool> {
    terminate(
        record,
        Reason::LimitExceeded,
        Some(limit),
        message,
        &mut events,
    );
    engine.records().save(record, events)?;
    Ok(true)
}

/// The first limit the task is past, if any (checked before an LLM call).
fn limit_before_llm(agent: &AgentPlan, record: &TaskRecord) -> Option<(&'static str, String)> {
    let l = &agent.limits;
    if let Some(max) = l.max_turns
        && record.llm_calls >= max
    {
        return Some((
            "max_turns",
            format!("no more LLM turns: the limit of {max} is reached"),
        ));
    }
    if let Some(message) = record.past_max_age(agent) {
        return Some(("max_age", message));
    }
    tokens_exceeded(agent, record)
}

fn tokens_exceeded(agent: &AgentPlan, record: &TaskRecord) -> Option<(&'static str, String)> {
    let l = &agent.limits;
    if let Some(max) = l.max_prompt_tokens
        && record.prompt_tokens > max
    {
        return Some((
            "max_prompt_tokens",
            format!("{} prompt tokens exceed {max}", record.prompt_tokens),
        ));
    }
    if let Some(max) = l.max_completion_tokens
        && record.completion_tokens > max
    {
        return Some((
            "max_completion_tokens",
            format!(
                "{} completion tokens exceed {max}",
                record.completion_tokens
            ),
        ));
    }
    None
}

/// Calls the LLM until it answers without calling functions (the answer, for the `after`
/// guardrails), or the task ends (whether it terminated). A reload reaches the turn at its
/// next step: each LLM call and each function call is made as the config in force has the
/// agent (its functions, their steps and bindings, its limits and model).
async fn conversation(engine: &Engine, record: &mut TaskRecord) -> Result<Inner<bool>> {
    let id = record.id.clone();
    // The log is read once per turn (with what the turn has not written yet); what the turn
    // adds is appended as it goes.
    engine.records().log_view(record)?;
    loop {
        if engine.interrupt_requested(&id) {
            pause(record);
            return Ok(Inner::Ended(false));
        }
        // The agent and its model as one version of the config has them.
        let plan = engine.plan();
        let Some(agent) = plan.agents.get(&record.agent) else {
            return agent_gone(engine, record, &[]).map(Inner::Ended);
        };
        let agent: &AgentPlan = agent;
        if let Some((limit, message)) = limit_before_llm(agent, record) {
            return exceeded(engine, record, limit, &message, Vec::new()).map(Inner::Ended);
        }
        let calls = record.llm_calls;
        crate::condense::maybe_condense(engine, (&plan, agent), record).await?;
        // Condensing made an LLM call of its own, counted like any other.
        if record.llm_calls != calls
            && let Some((limit, message)) = limit_before_llm(agent, record)
        {
            return exceeded(engine, record, limit, &message, Vec::new()).map(Inner::Ended);
        }
        let provider = engine.inner.providers.get(&plan, &agent.model);
        let response = match provider {
            Ok((provider, model)) => {
                if !provider.in_process() {
                    engine.records().write_ahead(record)?;
                }
                let (messages, tokens) = record.journal.messages();
                let request = ChatRequest {
                    task_id: id.clone(),
                    call_index: record.llm_calls,
                    model,
                    messages,
                    tools: Arc::clone(&agent.tools),
                    prompt_estimate: Some(tokens),
                };
                let response = provider.complete(&request).await;
                record.journal.restore_messages(request.messages);
                response.map_err(|e| e.to_string())
            }
            Err(e) => Err(e.to_string()),
        };
        let response = match response {
            Ok(r) => r,
            Err(message) => {
                let mut events = vec![(
                    EventSource::Agent,
                    EventKind::AgentErrorEvent {
                        tool_call_id: None,
                        tool_name: None,
                        error: message.clone(),
                    },
                )];
                terminate(record, Reason::Error, None, &message, &mut events);
                engine.records().save(record, events)?;
                return Ok(Inner::Ended(true));
            }
        };
        record.llm_calls += 1;
        record.prompt_tokens += response.usage.prompt_tokens;
        record.completion_tokens += response.usage.completion_tokens;
        record.history.push("llm".into());
        record.last_activity_ms = now_ms();
        if let Some((limit, message)) = tokens_exceeded(agent, record) {
            return exceeded(engine, record, limit, &message, Vec::new()).map(Inner::Ended);
        }
        if response.tool_calls.is_empty() {
            let message = json!([ContentPart::text(response.text)]);
            return Ok(Inner::Output(json!({ "message": message })));
        }
        let actions: Events = response
            .tool_calls
            .iter()
            .enumerate()
            .map(|(i, call)| {
                (
                    EventSource::Agent,
                    EventKind::ActionEvent {
                        tool_call: call.clone(),
                        llm_response_id: response.id.clone(),
                        thought: if i == 0 {
                            response.text.clone()
                        } else {
                            String::new()
                        },
                    },
                )
            })
            .collect();
        engine.records().log(record, actions)?;
        let ended = run_calls(
            engine,
            record,
            &response.tool_calls,
            Replay::default(),
            false,
        )
        .await?;
        if let Some(ended) = ended {
            return Ok(Inner::Ended(ended));
        }
    }
}

/// Runs `calls`, the calls of one LLM response (or those of them not answered yet), in order,
/// logging each result; each runs as the config in force when it starts has the agent.
/// `replay` answers the first call's reviews that were decided already; `counted`: the first
/// call was counted against `max_tool_calls` already. Returns `Some(terminated)` when the turn
/// ended (an interrupt, a limit, a fatal result, the agent gone), `None` to go on.
async fn run_calls(
    engine: &Engine,
    record: &mut TaskRecord,
    calls: &[ToolCall],
    mut replay: Replay,
    counted: bool,
) -> Result<Option<bool>> {
    let id = record.id.clone();
    for (i, tool_call) in calls.iter().enumerate() {
        if engine.interrupt_requested(&id) {
            let mut events = Vec::new();
            skip_calls(
                &calls[i..],
                "not run: the task was interrupted",
                &mut events,
            );
            engine.records().save(record, events)?;
            pause(record);
            return Ok(Some(false));
        }
        let Ok(agent) = engine.agent(&record.agent) else {
            return agent_gone(engine, record, &calls[i..]).map(Some);
        };
        let agent = &*agent;
        if !(counted && i == 0) {
            if let Some(message) = over_tool_calls(agent, record) {
                let mut events = Vec::new();
                skip_rest(&calls[i..], &mut events);
                return exceeded(engine, record, "max_tool_calls", &message, events).map(Some);
            }
            record.tool_calls += 1;
        }
        let end = call::run(
            engine,
            agent,
            record,
            tool_call,
            std::mem::take(&mut replay),
        )
        .await?;
        record.last_activity_ms = now_ms();
        let (mut events, terminal) = answer(end, tool_call);
        if let Some((reason, message)) = terminal {
            skip_rest(&calls[i + 1..], &mut events);
            terminate(record, reason, None, &message, &mut events);
            engine.records().save(record, events)?;
            return Ok(Some(true));
        }
        engine.records().log(record, events)?;
        // The call may have grown an allow list, and it moved the subscriptions' deadlines:
        // events route by them now.
        engine.tell_watchers(record);
    }
    Ok(None)
}

/// Why the task may not make one more capability call (`max_tool_calls`), if it may not.
pub(crate) fn over_tool_calls(agent: &AgentPlan, record: &TaskRecord) -> Option<String> {
    let max = agent.limits.max_tool_calls?;
    (record.tool_calls >= max)
        .then(|| format!("no more capability calls: the limit of {max} is reached"))
}

/// The events that answer `call`, which ended as `end`, and why the task must terminate, if
/// it must (a fatal result, a `lock_task`).
pub(crate) fn answer(end: CallEnd, call: &ToolCall) -> (Events, Option<(Reason, String)>) {
    let (call_id, name) = (call.id.clone(), call.name.clone());
    let observation = |result| {
        (
            EventSource::Environment,
            EventKind::ObservationEvent {
                tool_call_id: call_id.clone(),
                tool_name: name.clone(),
                result,
            },
        )
    };
    let rejection = |reason| {
        (
            EventSource::Environment,
            EventKind::UserRejectObservation {
                tool_call_id: call_id.clone(),
                tool_name: name.clone(),
                reason,
            },
        )
    };
    match end {
        CallEnd::Observation(result) => (vec![observation(result)], None),
        CallEnd::Error(error) => (vec![observation(json!({"error": error}))], None),
        CallEnd::Rejected(reason) => (vec![rejection(reason)], None),
        CallEnd::Fatal(error) => {
            let event = (
                EventSource::Agent,
                EventKind::AgentErrorEvent {
                    tool_call_id: Some(call_id.clone()),
                    tool_name: Some(name.clone()),
                    error: error.clone(),
                },
            );
            (vec![event], Some((Reason::Error, error)))
        }
        CallEnd::Locked(reason) => {
            let event = rejection(reason.clone());
            (vec![event], Some((Reason::Locked, reason)))
        }
    }
}

/// Resumes a turn suspended across a restart once the review its call waited in is decided
/// ([`Engine::decide_review`]): the calls of the last LLM response not answered yet run, the
/// first (the one that waited) with the review decisions recorded for it, then the turn goes
/// on as usual.
pub(crate) async fn resume(
    engine: &Engine,
    agent: &AgentPlan,
    record: &mut TaskRecord,
    resume: &Resume,
) -> Result<()> {
    engine.records().log_view(record)?;
    let (calls, replay) = open_calls(record.journal.view());
    // The call that waited was counted when it first ran.
    let counted = calls.first().is_some_and(|c| c.id == resume.call_id);
    let inner = async |record: &mut TaskRecord, _: &mut StepVars| match run_calls(
        engine, record, &calls, replay, counted,
    )
    .await?
    {
        Some(ended) => Ok(Inner::Ended(ended)),
        None => conversation(engine, record).await,
    };
    let mut vars = StepVars::guardrail(Value::Null, None);
    let layers = Layers::guardrails(agent, true);
    let wrapped = steps::around(engine, agent, record, layers, &mut vars, inner).await?;
    if settle(engine, agent, record, wrapped, vars.output)? {
        engine.clear_queue(&record.id)?;
    }
    Ok(())
}

/// The calls of the log's last LLM response that have no result, in order, and the review
/// decisions made since the last call event for reviews its steps asked that wait across a
/// restart (those of the first open call's `before` steps, named by its id).
fn open_calls(log: &[Event]) -> (Vec<ToolCall>, Replay) {
    let mut calls: Vec<ToolCall> = Vec::new();
    let mut response: Option<&str> = None;
    // Reviews asked for a call's steps, by id: the reviewer, the call and what it showed.
    let mut reviewers: HashMap<&str, (&str, &str, &Value)> = HashMap::new();
    let mut replay = Replay::default();
    for event in log {
        match &event.kind {
            EventKind::ActionEvent {
                tool_call,
                llm_response_id,
                ..
            } => {
                if response != Some(llm_response_id.as_str()) {
                    calls.clear();
                    response = Some(llm_response_id);
                }
                calls.push(tool_call.clone());
                replay = Replay::default();
            }
            EventKind::ReviewRequestEvent {
                review_id,
                reviewer,
                call_id: Some(call),
                subject,
            } => {
                reviewers.insert(review_id, (reviewer, call, subject));
            }
            // Asked again whenever what asked it runs again.
            EventKind::ReviewRequestEvent { call_id: None, .. } => {}
            EventKind::ReviewDecisionEvent {
                review_id, approve, ..
            } => {
                let asked = reviewers.get(review_id.as_str());
                if let Some((reviewer, call, subject)) = asked
                    && calls.first().is_some_and(|c| c.id == *call)
                {
                    replay.push((*reviewer).to_owned(), (*subject).clone(), *approve);
                }
            }
            other => match other.answered_call() {
                Some(answered) => {
                    calls.retain(|c| c.id != answered);
                    replay = Replay::default();
                }
                None => response = None,
            },
        }
    }
    (calls, replay)
}

/// Answers calls that will not run because the task ended, so every call in the log has a
/// result.
fn skip_rest(calls: &[ToolCall], events: &mut Events) {
    skip_calls(calls, "not run: the task ended", events);
}

fn skip_calls(calls: &[ToolCall], why: &str, events: &mut Events) {
    for c in calls {
        events.push((
            EventSource::Environment,
            EventKind::AgentErrorEvent {
                tool_call_id: Some(c.id.clone()),
                tool_name: Some(c.name.clone()),
                error: why.into(),
            },
        ));
    }
}

/// Ends the turn of a task whose agent a reload took out of the config: `calls` are answered
/// as not run, and the task is idle, its queue kept (for the agent's return). Returns `false`
/// (the task did not terminate).
fn agent_gone(engine: &Engine, record: &mut TaskRecord, calls: &[ToolCall]) -> Result<bool> {
    let why = format!("agent `{}` is no longer in the config", record.agent);
    let mut events = Vec::new();
    skip_calls(calls, &format!("not run: {why}"), &mut events);
    events.push((
        EventSource::Agent,
        EventKind::AgentErrorEvent {
            tool_call_id: None,
            tool_name: None,
            error: format!("the turn stopped: {why}"),
        },
    ));
    record.status = Some(Status::Idle);
    events.push(status_event("idle"));
    engine.records().save(record, events)?;
    Ok(false)
}

/// Ends the turn for an interrupt; [`Engine::interrupt`] records the rest.
fn pause(record: &mut TaskRecord) {
    record.status = Some(Status::Idle);
}

/// How a turn inside its guardrails ended; returns whether the task terminated. An answer the
/// `after` guardrails passed (`output`, as they left it) becomes the agent message, the
/// output and what `exposes` derive from it; one they refused ends the task.
fn settle(
    engine: &Engine,
    agent: &AgentPlan,
    record: &mut TaskRecord,
    wrapped: Wrapped<bool>,
    output: Option<Value>,
) -> Result<bool> {
    let reason = match wrapped {
        Wrapped::Ended(ended) => return Ok(ended),
        Wrapped::Finished(Verdict::Pass) => None,
        Wrapped::Finished(Verdict::Lock(reason) | Verdict::Block(reason))
        | Wrapped::Blocked(reason)
        | Wrapped::Locked(reason) => Some(reason),
    };
    if let Some(reason) = reason {
        let mut events = Vec::new();
        terminate(record, Reason::Locked, None, &reason, &mut events);
        engine.records().save(record, events)?;
        return Ok(true);
    }
    // A guardrail's value is always a map (`StepVars::replace`).
    let mut output = match output {
        Some(Value::Object(m)) => m,
        _ => serde_json::Map::new(),
    };
    let content: Vec<ContentPart> = output
        .get("message")
        .and_then(|m| serde_json::from_value(m.clone()).ok())
        .unwrap_or_default();
    let mut act = Activation::new();
    let mut needs = Needs::default();
    agent
        .exposes
        .iter()
        .for_each(|(_, e)| needs.add(e, &["context", "c"]));
    if !needs.is_empty() {
        act.set_aliased("context", "c", record.context_for(agent, &needs));
    }
    act.set_aliased(
        "input",
        "i",
        record.inputs.last().cloned().unwrap_or(Value::Null),
    )
    .set_aliased("output", "o", Value::Object(output.clone()))
    .set("now", json!(now_rfc3339()))
    .bind("runtime", engine.runtime_variable());
    // The record is shown as it is kept (the API, the inspector's pages, `agentmesh tasks`):
    // like the log, it keeps no secret.
    let secrets = engine.secrets();
    for (key, expr) in &agent.exposes {
        let mut value = expr
            .evaluate(&act)
            .unwrap_or_else(|e| json!({"error": e.message}));
        secrets.scrub_json(&mut value);
        output.insert(key.clone(), value.clone());
        record.exposes.insert(key.clone(), value);
    }
    let mut output = Value::Object(output);
    secrets.scrub_json(&mut output);
    record.outputs.push(output);
    record.status = Some(Status::Idle);
    let events = vec![
        (
            EventSource::Agent,
            EventKind::MessageEvent {
                content,
                metadata: None,
            },
        ),
        status_event("idle"),
    ];
    engine.records().save(record, events)?;
    Ok(false)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // Tests fail loudly.
mod tests {
    use agentmesh_model::event::Event;
    use serde_json::{Value, json};

    use super::open_calls;

    /// A log of events given as `(kind, fields)`, numbered from 1.
    fn log(events: &[Value]) -> Vec<Event> {
        events
            .iter()
            .enumerate()
            .map(|(i, fields)| {
                let mut event = json!({
                    "seq": i + 1,
                    "id": format!("ev_{i}"),
                    "timestamp": "2026-11-28T00:00:00Z",
                    "source": "environment",
                });
                event
                    .as_object_mut()
                    .unwrap()
                    .extend(fields.as_object().unwrap().clone());
                serde_json::from_value(event).unwrap()
            })
            .collect()
    }

    /// A log where call `c1` asked `user:ops`, whose review request names `call`, and the
    /// review was approved.
    fn approved_review(call: Option<&str>) -> Vec<Event> {
        let mut request = json!({"kind": "ReviewRequestEvent", "review_id": "r1",
            "reviewer": "user:ops", "subject": {}});
        if let Some(call) = call {
            request["call_id"] = json!(call);
        }
        log(&[
            json!({"kind": "ActionEvent", "source": "agent", "llm_response_id": "resp_1",
                "tool_call": {"id": "c1", "name": "echo", "arguments": {}}}),
            request,
            json!({"kind": "ReviewDecisionEvent", "review_id": "r1", "approve": true,
                "decided_by": "user:ops"}),
        ])
    }

    #[test]
    fn a_decision_counts_for_the_call_its_review_names() {
        let (calls, mut replay) = open_calls(&approved_review(Some("c1")));
        assert_eq!(calls.len(), 1);
        assert_eq!(replay.take("user:ops", &json!({})), Some(true));
        assert_eq!(replay.take("user:ops", &json!({})), None, "used once");
    }

    #[test]
    fn a_decision_counts_only_for_what_its_reviewer_saw() {
        // The call ran again and its input came out otherwise: the reviewer is asked anew.
        let (_, mut replay) = open_calls(&approved_review(Some("c1")));
        let other = json!({"input": {"to": "B"}});
        assert_eq!(replay.take("user:ops", &other), None);
        assert_eq!(replay.take("user:ops", &json!({})), Some(true));
    }

    #[test]
    fn a_review_naming_no_call_is_asked_again_after_a_restart() {
        // Logs written before reviews named their call, and reviews of anything but a
        // call's `before` steps: the decision answers nothing that runs again (fail closed:
        // the step asks anew rather than taking an approval that may have been another's).
        let (calls, mut replay) = open_calls(&approved_review(None));
        assert_eq!(calls.len(), 1);
        assert_eq!(replay.take("user:ops", &json!({})), None);
        // Nor does a decision of a review naming another call.
        let (_, mut replay) = open_calls(&approved_review(Some("c0")));
        assert_eq!(replay.take("user:ops", &json!({})), None);
    }
}
