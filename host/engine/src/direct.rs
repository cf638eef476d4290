//! Calls made by a client outside any LLM turn: an MCP client calling the agent's functions
//! (`agentmesh mcp`, `/mcp`). Each client session is one task. A call goes the way an LLM's
//! call goes — bindings, the capability's steps, the runtime, allow lists, `max_tool_calls`
//! and `max_age`, the event log — and its answer goes back to the client instead of to an LLM.
//! In the log, a client's call is an `ActionEvent` from the `user`, answered as any call.

use agentmesh_model::event::{EventKind, EventSource, ToolCall, ToolSchema};
use agentmesh_secrets::Secrets;
use agentmesh_store::now_ms;
use serde_json::{Value, json};

use crate::call::{self, CallEnd};
use crate::review::Replay;
use crate::task::{Status, TaskRecord};
use crate::turn::{self, Events};
use crate::{Engine, EngineError, NewTask, Result, Run};

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
        Ok(TaskRecord::clone(&self.records().checkin(record)))
    }

    /// Ends the task of a client session (the session closed): it terminates as deleted, its
    /// subscriptions are removed and its tool sessions torn down. A task that has ended
    /// already is left as it is.
    pub async fn close_session(&self, id: &str) -> Result<()> {
        let closed = session_event(json!({"closed": true}));
        self.end_task(id, Some(closed)).await
    }

    /// Runs function `name` of task `id`'s agent with `arguments`, as a call of its LLM would
    /// run, waiting for a turn of the task that is running; logs the call and its answer.
    /// What it answers, a result or an error, holds no secret (`***` stands for each).
    pub async fn call_direct(&self, id: &str, name: &str, arguments: Value) -> Result<DirectEnd> {
        let task_lock = self.task_lock(id);
        let _turn = task_lock.lock().await;
        let mut record = self.records().checkout(id)?;
        if record.status() == Status::Terminated {
            self.records().checkin(record);
            return Err(EngineError::Conflict(format!("task `{id}` is terminated")));
        }
        let ran = self.direct(&mut record, name, arguments).await;
        // Whatever the call reached, the record holds what it did.
        let written = self.records().write_ahead(&mut record);
        let terminated = record.status() == Status::Terminated;
        self.tell_watchers(&record);
        self.records().checkin(record);
        if terminated {
            self.close_task_sessions(id).await;
        }
        written?;
        // The answer leaves the host: a client is shown no secret, however it encodes what it
        // is sent (JSON text inside JSON, a terminal).
        let secrets = self.secrets();
        ran.map(|end| end.scrubbed(&secrets))
            .map_err(|e| crate::secrets::scrub_error(&secrets, e))
    }

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
        let call = ToolCall {
            id: format!("call_{:x}", self.inner.store.next_id()?),
            name: name.to_owned(),
            arguments,
        };
        let asked = (
            EventSource::User,
            EventKind::ActionEvent {
                tool_call: call.clone(),
                llm_response_id: String::new(),
                thought: String::new(),
            },
        );
        let limit = match record.past_max_age(&agent) {
            Some(message) => Some(("max_age", message)),
            None => turn::over_tool_calls(&agent, record).map(|m| ("max_tool_calls", m)),
        };
        if let Some((limit, message)) = limit {
            turn::exceeded(self, record, limit, &message, vec![asked])?;
            return Ok(DirectEnd::Terminated(message));
        }
        self.records().log(record, vec![asked])?;
        record.tool_calls += 1;
        record.last_activity_ms = now_ms();
        let end = call::run(self, &agent, record, &call, Replay::default()).await?;
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

/// The log's note of a client session opening or closing.
fn session_event(value: Value) -> (EventSource, EventKind) {
    (
        EventSource::Environment,
        EventKind::ConversationStateUpdateEvent {
            key: "client_session".into(),
            value,
        },
    )
}
