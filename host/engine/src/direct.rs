//! Calls made by a client outside any LLM turn: an MCP client calling the agent's functions
//! (`agentmesh mcp`, `/mcp`). Each client session is one task. A call goes the way an LLM's
//! call goes — bindings, the capability's steps, the runtime, allow lists, `max_tool_calls`
//! and `max_age`, the event log — inside the agent's guardrails, which wrap it as they wrap a
//! turn, and its answer goes back to the client instead of to an LLM.
//! In the log, a client's call is an `ActionEvent` from the `user`, answered as any call.

use std::task::Poll;

use agentmesh_model::event::{ContentPart, EventKind, EventSource, ToolCall, ToolSchema};
use agentmesh_secrets::Secrets;
use agentmesh_store::now_ms;
use serde_json::{Value, json};

use crate::call::{self, CallEnd};
use crate::plan::{AgentPlan, Steps};
use crate::review::Replay;
use crate::steps::{self, Inner, Layers, StepVars, Verdict, Wrapped};
use crate::task::{Reason, Status, TaskRecord, status_event};
use crate::turn::{self, Events};
use crate::{Engine, EngineError, NewTask, Result, Run, lock};

/// How a client's call ended.
#[derive(Debug, Clone, PartialEq)]
pub enum DirectEnd {
    /// The agent has no such function (the call is not logged).
    Unknown,
    /// The result, as the capability's `after` steps left it.
    Observation(Value),
    /// The call failed; the task goes on.
    Error(String),
    /// The capability's steps refused the call; the task goes on.
    Rejected(String),
    /// The call ended the task (a fatal result, a `lock_task`, a limit): why.
    Terminated(String),
}

impl DirectEnd {
    /// The answer's text, as the `after` guardrails see it: a result's JSON text (a string
    /// result as it is), an error or refusal as said.
    fn text(&self) -> String {
        match self {
            DirectEnd::Observation(Value::String(text)) => text.clone(),
            DirectEnd::Observation(value) => value.to_string(),
            DirectEnd::Error(text) | DirectEnd::Rejected(text) | DirectEnd::Terminated(text) => {
                text.clone()
            }
            DirectEnd::Unknown => String::new(),
        }
    }

    /// This answer with `text`, the `after` guardrails' replacement: a result is the JSON value
    /// the text holds (a string when it holds none, or when the result was one).
    fn replaced(self, text: &str) -> DirectEnd {
        match self {
            DirectEnd::Observation(Value::String(_)) => DirectEnd::Observation(text.into()),
            DirectEnd::Observation(_) => DirectEnd::Observation(
                serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned())),
            ),
            DirectEnd::Error(_) => DirectEnd::Error(text.to_owned()),
            DirectEnd::Rejected(_) => DirectEnd::Rejected(text.to_owned()),
            DirectEnd::Terminated(_) => DirectEnd::Terminated(text.to_owned()),
            DirectEnd::Unknown => DirectEnd::Unknown,
        }
    }

    /// This end with every secret of `secrets` replaced by `***`.
    fn scrubbed(mut self, secrets: &Secrets) -> DirectEnd {
        match &mut self {
            DirectEnd::Observation(value) => secrets.scrub_json(value),
            DirectEnd::Error(text) | DirectEnd::Rejected(text) | DirectEnd::Terminated(text) => {
                secrets.scrub_string(text);
            }
            DirectEnd::Unknown => {}
        }
        self
    }
}

impl Engine {
    /// The functions of agent `agent`'s capabilities, as its LLM sees them: names,
    /// descriptions and the parameters the LLM fills in (bound ones hidden). The host's own
    /// tools (wakeups) are the LLM's alone.
    pub fn functions(&self, agent: &str) -> Result<Vec<ToolSchema>> {
        let agent = self.agent(agent)?;
        Ok(agent
            .tools
            .iter()
            .filter(|t| agent.function(&t.name).is_some_and(|f| f.host.is_none()))
            .cloned()
            .collect())
    }

    /// Starts the task of a client session of `agent` for `user`: a task without input,
    /// whose log names the client (`client`: what it said of itself).
    pub async fn open_session(
        &self,
        agent: &str,
        user: crate::UserRef,
        client: Value,
    ) -> Result<TaskRecord> {
        let new = NewTask {
            agent: agent.to_owned(),
            input: None,
            user,
        };
        let record = self.create_task(new, Run::Caller).await?;
        let task_lock = self.task_lock(&record.id);
        let _turn = task_lock.lock().await;
        let mut record = self.records().checkout(&record.id)?;
        let events = vec![session_event(json!({"opened": true, "client": client}))];
        self.records().save(&mut record, events)?;
        lock(&self.inner.client_sessions).insert(record.id.clone());
        Ok(TaskRecord::clone(&self.records().checkin(record)))
    }

    /// Ends the task of a client session (the session closed): it terminates as deleted, its
    /// subscriptions are removed and its tool sessions torn down, and the child tasks its
    /// calls delegated to are deleted. A task that has ended already is left as it is.
    pub async fn close_session(&self, id: &str) -> Result<()> {
        lock(&self.inner.client_sessions).remove(id);
        let closed = session_event(json!({"closed": true}));
        self.end_task(id, Some(closed)).await?;
        self.delete_children(id).await
    }

    /// Runs function `name` of task `id`'s agent with `arguments`, as a call of its LLM would
    /// run, waiting for a turn of the task that is running; logs the call and its answer.
    /// What it answers, a result or an error, holds no secret (`***` stands for each).
    ///
    /// `cancelled` resolves when the client gives the call up: a call still waiting for the
    /// task is not run, and a running one is asked to stop as an interrupt asks a turn (a
    /// review it waits in is denied, `decided_by: cancelled`). Either way the task is left
    /// free for the session's next call, and idle.
    pub async fn call_direct(
        &self,
        id: &str,
        name: &str,
        arguments: Value,
        cancelled: impl Future<Output = ()>,
    ) -> Result<DirectEnd> {
        let mut cancelled = std::pin::pin!(cancelled);
        let task_lock = self.task_lock(id);
        let _turn = tokio::select! {
            biased;
            turn = task_lock.lock() => turn,
            () = cancelled.as_mut() => {
                return Ok(DirectEnd::Error("the call was cancelled before it ran".into()));
            }
        };
        let mut record = self.records().checkout(id)?;
        if record.status() == Status::Terminated {
            self.records().checkin(record);
            return Err(EngineError::Conflict(format!("task `{id}` is terminated")));
        }
        let ran = {
            let mut call = std::pin::pin!(self.direct(&mut record, name, arguments));
            let unless_cancelled = std::future::poll_fn(|cx| {
                if let Poll::Ready(ran) = call.as_mut().poll(cx) {
                    return Poll::Ready(Some(ran));
                }
                cancelled.as_mut().poll(cx).map(|()| None)
            });
            match unless_cancelled.await {
                Some(ran) => ran,
                None => {
                    let _stop = self.cancel_call(id);
                    call.await
                }
            }
        };
        // A review leaves the task running once decided; the client's call is over.
        let settled = match record.status() {
            Status::Running | Status::Waiting => {
                record.status = Some(Status::Idle);
                self.records().log(&mut record, vec![status_event("idle")])
            }
            _ => Ok(()),
        };
        // Whatever the call reached, the record holds what it did.
        let written = self.records().write_ahead(&mut record);
        let terminated = record.status() == Status::Terminated;
        self.tell_watchers(&record);
        self.records().checkin(record);
        if terminated {
            self.close_task_sessions(id).await;
        }
        settled?;
        written?;
        // The answer leaves the host: a client is shown no secret, however it encodes what it
        // is sent (JSON text inside JSON, a terminal).
        let secrets = self.secrets();
        ran.map(|end| end.scrubbed(&secrets))
            .map_err(|e| crate::secrets::scrub_error(&secrets, e))
    }

    /// Runs the call inside the agent's guardrails, as a turn runs: `before` sees the call's
    /// arguments as the arriving message (a step may refuse the caller or replace what is
    /// sent), `after` sees the answer going out (a step may refuse it or replace it). A
    /// refusal locks the task, as in a turn.
    async fn direct(
        &self,
        record: &mut TaskRecord,
        name: &str,
        arguments: Value,
    ) -> Result<DirectEnd> {
        let agent = self.agent(&record.agent)?;
        if agent.function(name).is_none_or(|f| f.host.is_some()) {
            return Ok(DirectEnd::Unknown);
        }
        let call_id = format!("call_{:x}", self.inner.store.next_id()?);
        let arriving = guarded(&agent.guard_before, || message(arguments.to_string()));
        let mut vars = StepVars::guardrail(arriving.clone(), None);
        let mut answered = None;
        let inner = async |record: &mut TaskRecord, vars: &mut StepVars| {
            let sent = as_sent(&vars.input, &arriving, arguments);
            let end = self
                .call_logged(&agent, record, call_id.clone(), name, sent)
                .await?;
            Ok(match end {
                DirectEnd::Terminated(_) | DirectEnd::Unknown => Inner::Ended(end),
                seen => {
                    let out = guarded(&agent.guard_after, || message(seen.text()));
                    answered = Some((seen, out.clone()));
                    Inner::Output(out)
                }
            })
        };
        let layers = Layers::guardrails(&agent, false);
        let wrapped = steps::around(self, &agent, record, layers, &mut vars, inner).await?;
        let reason = match wrapped {
            Wrapped::Ended(end) => return Ok(end),
            Wrapped::Finished(Verdict::Pass) => {
                let Some((seen, out)) = answered else {
                    return Err(EngineError::Internal("a call answered nothing".into()));
                };
                return Ok(match vars.output {
                    Some(left) if left != out => seen.replaced(&text_of(&left)),
                    _ => seen,
                });
            }
            Wrapped::Finished(Verdict::Lock(reason) | Verdict::Block(reason)) => {
                let mut events = Vec::new();
                turn::terminate(record, Reason::Locked, None, &reason, &mut events);
                self.records().save(record, events)?;
                return Ok(DirectEnd::Terminated(reason));
            }
            Wrapped::Blocked(reason) | Wrapped::Locked(reason) => reason,
        };
        // Refused on the way in: the call is logged as the guardrails left it, refused, and
        // the task locked.
        let call = ToolCall {
            id: call_id,
            name: name.to_owned(),
            arguments: arguments_in(text_of(&vars.input)).unwrap_or_else(Value::String),
        };
        let (mut events, _) = turn::answer(CallEnd::Rejected(reason.clone()), &call);
        events.insert(0, asked(&call));
        turn::terminate(record, Reason::Locked, None, &reason, &mut events);
        self.records().save(record, events)?;
        Ok(DirectEnd::Terminated(reason))
    }

    /// Logs call `id` of function `name` with the arguments the guardrails let through (or,
    /// `Err`, the text they left that is not a call's arguments: the call is refused), runs
    /// it, and logs its answer.
    async fn call_logged(
        &self,
        agent: &AgentPlan,
        record: &mut TaskRecord,
        id: String,
        name: &str,
        sent: std::result::Result<Value, String>,
    ) -> Result<DirectEnd> {
        let (arguments, refused) = match sent {
            Ok(arguments) => (arguments, None),
            Err(text) => (Value::String(text), Some(NOT_ARGUMENTS.to_owned())),
        };
        let call = ToolCall {
            id,
            name: name.to_owned(),
            arguments,
        };
        let limit = match record.past_max_age(agent) {
            Some(message) => Some(("max_age", message)),
            None => turn::over_tool_calls(agent, record).map(|m| ("max_tool_calls", m)),
        };
        if let Some((limit, message)) = limit {
            turn::exceeded(self, record, limit, &message, vec![asked(&call)])?;
            return Ok(DirectEnd::Terminated(message));
        }
        self.records().log(record, vec![asked(&call)])?;
        let end = match refused {
            Some(reason) => CallEnd::Rejected(reason),
            None => {
                record.tool_calls += 1;
                record.last_activity_ms = now_ms();
                call::run(self, agent, record, &call, Replay::default()).await?
            }
        };
        record.last_activity_ms = now_ms();
        let seen = match &end {
            CallEnd::Observation(v) => DirectEnd::Observation(v.clone()),
            CallEnd::Error(e) => DirectEnd::Error(e.clone()),
            CallEnd::Rejected(r) => DirectEnd::Rejected(r.clone()),
            CallEnd::Fatal(m) | CallEnd::Locked(m) => DirectEnd::Terminated(m.clone()),
        };
        let (mut events, terminal): (Events, _) = turn::answer(end, &call);
        match terminal {
            Some((reason, message)) => {
                turn::terminate(record, reason, None, &message, &mut events);
                self.records().save(record, events)?;
            }
            None => self.records().log(record, events)?,
        }
        Ok(seen)
    }
}

/// Why a call is refused whose arguments a `guardrails.before` step replaced with text that is
/// not a JSON object.
const NOT_ARGUMENTS: &str =
    "guardrails.before replaced the call's arguments with text that is not a JSON object";

/// The log's record of a client's call.
fn asked(call: &ToolCall) -> (EventSource, EventKind) {
    (
        EventSource::User,
        EventKind::ActionEvent {
            tool_call: call.clone(),
            llm_response_id: String::new(),
            thought: String::new(),
        },
    )
}

/// What guardrail `steps` see of a call (`make`), or null when there are none to see it.
fn guarded(steps: &Steps, make: impl FnOnce() -> Value) -> Value {
    if steps.is_empty() {
        Value::Null
    } else {
        make()
    }
}

/// A guardrail's value for `text`: a message of one text part, as a turn's input and answer.
fn message(text: String) -> Value {
    json!({"message": [ContentPart::text(text)]})
}

/// The text of a guardrail's value (a message's text parts, joined).
fn text_of(value: &Value) -> String {
    let parts: Vec<ContentPart> = value
        .get("message")
        .and_then(|m| serde_json::from_value(m.clone()).ok())
        .unwrap_or_default();
    ContentPart::join(&parts)
}

/// The arguments to send: `arguments` when the guardrails left the arriving value as it came,
/// else the JSON object their replacement's text holds (`Err`: the text, which holds none).
fn as_sent(left: &Value, arriving: &Value, arguments: Value) -> std::result::Result<Value, String> {
    if left == arriving {
        return Ok(arguments);
    }
    arguments_in(text_of(left))
}

/// The arguments a guardrail's `text` holds: the JSON object it is (`Err`: the text, which is
/// none).
fn arguments_in(text: String) -> std::result::Result<Value, String> {
    match serde_json::from_str::<Value>(&text) {
        Ok(object @ Value::Object(_)) => Ok(object),
        _ => Err(text),
    }
}

/// The log's note of a client session opening or closing.
pub(crate) fn session_event(value: Value) -> (EventSource, EventKind) {
    (
        EventSource::Environment,
        EventKind::ConversationStateUpdateEvent {
            key: "client_session".into(),
            value,
        },
    )
}
