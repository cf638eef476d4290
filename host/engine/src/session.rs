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
//! Sessions live in memory: a host that stops without shutting down leaves its sessions to
//! expire on the remote side.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use agentmesh_expr::Activation;
use serde_json::{Map, Value};

use crate::Engine;
use crate::lock;
use crate::plan::{SessionPlan, ToolPlan};
use crate::runtime::{ActionResult, http_result, http_send, select, snippet};

/// A session: the task, and the tool with the session's identity within it.
type SessionKey = (String, String);

/// The live sessions of every task.
#[derive(Default)]
pub(crate) struct Sessions {
    slots: Mutex<HashMap<SessionKey, Arc<tokio::sync::Mutex<Slot>>>>,
}

/// What a task's place for one session holds.
enum Slot {
    /// No session: not made yet, or its create failed, or the remote side dropped it.
    Empty,
    /// A live session.
    Live(Live),
    /// Torn down with its task: a call that waited for it makes nothing.
    Closed,
}

/// A live session.
struct Live {
    /// `{session.*}`.
    values: Value,
    /// The variables its create was made with, for its destroy.
    act: Activation,
    /// The session's requests as they were when it was made.
    plan: Arc<SessionPlan>,
}

impl Sessions {
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
        let key = (task.to_owned(), format!("{} {}", tool.id(), plan.session));
        let slot = Arc::clone(
            lock(&self.slots)
                .entry(key)
                .or_insert_with(|| Arc::new(tokio::sync::Mutex::new(Slot::Empty))),
        );
        let mut slot = slot.lock().await;
        let mut made_now = false;
        loop {
            if matches!(*slot, Slot::Closed) {
                return ActionResult::Recoverable("the task's session was torn down".into());
            }
            if matches!(*slot, Slot::Empty) {
                match create(engine, plan, &act).await {
                    Ok(live) => {
                        *slot = Slot::Live(live);
                        made_now = true;
                    }
                    Err(failed) => return failed,
                }
            }
            let Slot::Live(live) = &*slot else {
                continue;
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
                *slot = Slot::Empty;
                continue;
            }
            return http_result(&plan.execute, answer);
        }
    }

    /// Tears down every session of `task` (it ended).
    pub(crate) async fn close_task(&self, engine: &Engine, task: &str) {
        let slots: Vec<_> = {
            let mut all = lock(&self.slots);
            let keys: Vec<SessionKey> = all.keys().filter(|(t, _)| t == task).cloned().collect();
            keys.iter().filter_map(|k| all.remove(k)).collect()
        };
        close(engine, slots).await;
    }

    /// Tears down every session (the host shuts down).
    pub(crate) async fn close_all(&self, engine: &Engine) {
        let slots: Vec<_> = lock(&self.slots).drain().map(|(_, s)| s).collect();
        close(engine, slots).await;
    }
}

/// Destroys the live sessions of `slots` (taken out of the pool), all at once, each after the
/// call it may be in.
async fn close(engine: &Engine, slots: Vec<Arc<tokio::sync::Mutex<Slot>>>) {
    let closing = slots.into_iter().map(|slot| async move {
        let mut slot = slot.lock().await;
        if let Slot::Live(live) = std::mem::replace(&mut *slot, Slot::Closed) {
            destroy(engine, live).await;
        }
    });
    futures::future::join_all(closing).await;
}

/// Makes a session (Initialize).
async fn create(
    engine: &Engine,
    plan: &Arc<SessionPlan>,
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
            snippet(&answer.body)
        ))));
    }
    let values = extract(&answer.body, plan.extract.as_deref())
        .map_err(|why| ActionResult::Recoverable(failed(why)))?;
    Ok(Live {
        values,
        act: act.clone(),
        plan: Arc::clone(plan),
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
