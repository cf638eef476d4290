//! The `stateful_session` runtime: a remote session per task and tool, kept across calls.
//!
//! - Initialize: a task's first call of an action makes the `create` request (the tool page's
//!   `initialize`); `extract` takes the session's values from its answer (`session key →
//!   JSONPath`); without `extract`, the session is the whole answer (a JSON object).
//! - Invoke: each call makes the `execute` request with `{session.*}` in scope; its answer is
//!   the result (`response_path` selects a part).
//! - Teardown: when the task ends (terminated, deleted) and when the host shuts down, the
//!   `destroy` request (the tool page's `teardown`) of each live session, with `{session.*}`.
//!
//! A create that fails (unreachable, slow, an error status, an answer `extract` finds nothing
//! in) is an observation the LLM sees, and the next call tries again. An `execute` answered 401
//! or 404 on a session made by an earlier call means the remote side dropped it: the session is
//! made anew and the request made again, once. Every other failure of `execute` is an
//! observation and keeps the session. A task's calls of one session take turns.
//!
//! Sessions are pooled (`pool.rs`): at most `policy.max_remote_sessions` are kept at once; to
//! make room, the least recently used session not in a call is destroyed (its `destroy`
//! request made in the background), and its task's next call makes a new one. A call that finds every session in a call waits for one up to its
//! `execute` request's timeout.
//!
//! Sessions live in memory: a host that stops without shutting down leaves its sessions to
//! expire on the remote side.

use std::sync::{Arc, Mutex};

use agentmesh_expr::Activation;
use serde_json::{Map, Value};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::plan::{SessionPlan, ToolPlan};
use crate::pool::{Pool, SessionKey, State};
use crate::runtime::{ActionResult, http_result, http_send, select, snippet};
use crate::{Engine, lock};

/// How many sessions may be kept at once when the host config does not say.
const DEFAULT_MAX_SESSIONS: usize = 1024;

/// The live sessions of every task.
pub(crate) struct Sessions {
    pool: Pool<Live>,
    /// The destroys of evicted sessions, under way (awaited when the host stops).
    evicted: Mutex<JoinSet<()>>,
}

/// A live session.
struct Live {
    /// `{session.*}`.
    values: Value,
    /// The variables its create was made with, for its destroy.
    act: Activation,
    /// The session's requests as they were when it was made.
    plan: Arc<SessionPlan>,
    /// The tool's settings it was made with: a call after a reload changed them destroys it
    /// and makes it anew (its create, and its destroy, were written with the old ones).
    settings: Map<String, Value>,
}

impl Sessions {
    pub(crate) fn new() -> Sessions {
        Sessions {
            pool: Pool::new(),
            evicted: Mutex::new(JoinSet::new()),
        }
    }

    /// Calls action `plan` of `tool` in task `task`'s session (made first if need be), with
    /// the request variables `act`.
    pub(crate) async fn call(
        &self,
        engine: &Engine,
        task: &str,
        tool: &ToolPlan,
        plan: &Arc<SessionPlan>,
        act: Activation,
    ) -> ActionResult {
        let max_sessions = engine
            .plan()
            .host
            .policy
            .max_remote_sessions
            .map_or(DEFAULT_MAX_SESSIONS, |n| n.max(1) as usize);
        let key = (task.to_owned(), format!("{} {}", tool.id(), plan.session));
        let deadline = Instant::now() + plan.execute.timeout;
        // The evicted session's destroy runs on its own: this call does not wait for another
        // task's remote side (up to its request's timeout).
        let evict = |(task, _): SessionKey, live: Live| {
            tracing::info!(
                task.id = task,
                "remote session pool full: destroying the least recently used idle session"
            );
            let engine = engine.clone();
            let mut evicted = lock(&self.evicted);
            while evicted.try_join_next().is_some() {}
            evicted.spawn(async move { destroy(&engine, live).await });
            std::future::ready(())
        };
        loop {
            let Ok(mut held) = self.pool.reserve(&key, max_sessions, deadline, evict).await else {
                return ActionResult::Recoverable(format!(
                    "no remote session could be made: all {max_sessions} sessions of the host \
                     (policy.max_remote_sessions) are in calls"
                ));
            };
            return match *held {
                State::Evicted => continue,
                State::Ended => {
                    ActionResult::Recoverable("the task's session was torn down".into())
                }
                State::Closed | State::Open(_) => {
                    call_in(engine, &mut held, task, tool, plan, &act).await
                }
            };
        }
    }

    /// Tears down every session of `task` (it ended).
    pub(crate) async fn close_task(&self, engine: &Engine, task: &str) {
        self.pool
            .close_task(task, |_, live| destroy(engine, live))
            .await;
    }

    /// Tears down every session (the host shuts down).
    pub(crate) async fn close_all(&self, engine: &Engine) {
        self.pool.close_all(|_, live| destroy(engine, live)).await;
        let mut evicted = std::mem::take(&mut *lock(&self.evicted));
        while evicted.join_next().await.is_some() {}
    }
}

/// One call in a held slot: makes the session if it has none, then the `execute` request;
/// once more on a new session when the remote side dropped one an earlier call made.
async fn call_in(
    engine: &Engine,
    state: &mut State<Live>,
    task: &str,
    tool: &ToolPlan,
    plan: &Arc<SessionPlan>,
    act: &Activation,
) -> ActionResult {
    let mut made_now = false;
    if let State::Open(live) = state
        && live.settings != tool.settings
        && let State::Open(stale) = std::mem::replace(state, State::Closed)
    {
        tracing::info!(task.id = task, tool.name = %tool.id(), "the tool's settings changed: its session is made anew");
        destroy(engine, stale).await;
    }
    loop {
        if matches!(state, State::Closed) {
            match create(engine, (plan, &tool.settings), act).await {
                Ok(live) => {
                    *state = State::Open(live);
                    made_now = true;
                }
                Err(failed) => return failed,
            }
        }
        let State::Open(live) = &*state else {
            return ActionResult::Recoverable("the task's session was torn down".into());
        };
        let mut call = act.clone();
        call.set("session", live.values.clone());
        let answer = match http_send(engine, &plan.execute, &call).await {
            Ok(answer) => answer,
            Err(failed) => return failed,
        };
        let gone = matches!(answer.status.as_u16(), 401 | 404);
        if gone && !made_now {
            tracing::info!(
                task.id = task,
                tool.name = %tool.id(),
                status = answer.status.as_u16(),
                "the remote side dropped the session: making it anew"
            );
            *state = State::Closed;
            continue;
        }
        return http_result(&engine.secrets(), &plan.execute, answer);
    }
}

/// Makes a session (Initialize) with the tool's `settings`.
async fn create(
    engine: &Engine,
    (plan, settings): (&Arc<SessionPlan>, &Map<String, Value>),
    act: &Activation,
) -> Result<Live, ActionResult> {
    let failed = |why: String| format!("the session could not be created: {why}");
    let answer = http_send(engine, &plan.create, act)
        .await
        .map_err(|e| match e {
            ActionResult::Recoverable(why) => ActionResult::Recoverable(failed(why)),
            ActionResult::Fatal(why) => ActionResult::Fatal(failed(why)),
            ok @ ActionResult::Ok(_) => ok,
        })?;
    if !answer.status.is_success() {
        return Err(ActionResult::Recoverable(failed(format!(
            "HTTP {}: {}",
            answer.status.as_u16(),
            snippet(&engine.secrets(), &answer.body)
        ))));
    }
    let values = extract(&answer.body, plan.extract.as_deref())
        .map_err(|why| ActionResult::Recoverable(failed(why)))?;
    Ok(Live {
        values,
        act: act.clone(),
        plan: Arc::clone(plan),
        settings: settings.clone(),
    })
}

/// The session's values from the create answer `body`: each key of `extract` with what its
/// JSONPath selects; without `extract`, the answer itself (a JSON object).
pub(crate) fn extract(body: &Value, extract: Option<&[(String, String)]>) -> Result<Value, String> {
    let Some(paths) = extract else {
        return match body {
            Value::Object(_) => Ok(body.clone()),
            _ => Err("its answer is not a JSON object (give `extract` to pick values)".into()),
        };
    };
    let mut values = Map::new();
    for (key, path) in paths {
        let value = select(body, path)
            .ok_or_else(|| format!("its answer has nothing at `{path}` (for `session.{key}`)"))?;
        values.insert(key.clone(), value.clone());
    }
    Ok(Value::Object(values))
}

/// Ends a session (Teardown): its `destroy` request, if it has one. A failure is logged; the
/// session is forgotten all the same.
async fn destroy(engine: &Engine, live: Live) {
    let Some(request) = &live.plan.destroy else {
        return;
    };
    let mut act = live.act;
    act.set("session", live.values);
    match http_send(engine, request, &act).await {
        Ok(answer) if answer.status.is_success() => {}
        Ok(answer) => tracing::warn!(
            status = answer.status.as_u16(),
            "destroying a session: the remote side answered with an error"
        ),
        Err(ActionResult::Recoverable(why) | ActionResult::Fatal(why)) => {
            tracing::warn!("destroying a session: {why}")
        }
        Err(ActionResult::Ok(_)) => {}
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn paths(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, p)| ((*k).to_owned(), (*p).to_owned()))
            .collect()
    }

    #[test]
    fn extract_takes_each_key_from_its_json_path() {
        let body = json!({"data": {"session": {"id": "s-1"}}, "items": [{"token": "t"}]});
        let got = extract(
            &body,
            Some(&paths(&[
                ("id", "$.data.session.id"),
                ("token", "$.items[0]['token']"),
                ("all", "$"),
            ])),
        )
        .unwrap();
        assert_eq!(got["id"], "s-1");
        assert_eq!(got["token"], "t");
        assert_eq!(got["all"], body);
    }

    #[test]
    fn a_path_that_selects_nothing_names_the_key() {
        let err = extract(&json!({"id": 1}), Some(&paths(&[("sid", "$.session_id")]))).unwrap_err();
        assert!(
            err.contains("`$.session_id`") && err.contains("session.sid"),
            "{err}"
        );
        let err = extract(&json!("text"), Some(&paths(&[("id", "$.id")]))).unwrap_err();
        assert!(err.contains("session.id"), "{err}");
    }

    #[test]
    fn without_extract_the_session_is_the_answer_object() {
        let body = json!({"id": "s-2", "region": "eu"});
        assert_eq!(extract(&body, None).unwrap(), body);
        assert!(extract(&json!(["s"]), None).is_err());
    }
}
