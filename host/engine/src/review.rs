//! `review()`: a person's decision inside an expression (a step's, a `cel` tool's). The task
//! waits (`waiting`, a `ReviewRequestEvent`, durable before anyone can answer) until the
//! reviewer decides or the review times out (a denial); a decision recorded before a restart
//! is used instead of asking again.

use agentmesh_expr::{Activation, EvalError, Expression};
use agentmesh_model::event::{EventKind, EventSource};
use agentmesh_store::now_ms;
use serde_json::{Value, json};
use tokio::sync::oneshot;

use crate::task::{PendingReview, Status, TaskRecord, status_event};
use crate::{Engine, EngineError, Result, lock};

/// Where a step asking for a review is, as the pending review names it.
#[derive(Clone, Copy)]
pub(crate) struct At<'a> {
    /// The action the step is run for (what a step's `match` names); `None` in a guardrail.
    pub(crate) action: Option<&'a str>,
    /// `before`, `after`, `action` (a `cel` tool's expression), `guardrails.before` or
    /// `guardrails.after`.
    pub(crate) phase: &'static str,
}

/// Where the `review()` calls of one expression ask, and what they show.
pub(crate) struct Asking<'a> {
    /// The step asking.
    pub(crate) at: At<'a>,
    /// Routing an event, which cannot wait for a person: every review is a denial, decided at
    /// once, and nothing is written to the task.
    pub(crate) routing: bool,
    /// The call whose steps ask, when the review may wait across a restart (only a call's
    /// steps before its action: running it again from its start repeats nothing that left
    /// the process).
    pub(crate) call_id: Option<String>,
    /// Decisions recorded for the call before a restart, used instead of asking.
    pub(crate) replay: &'a mut Replay,
    /// What the reviewer sees.
    pub(crate) subject: Value,
}

/// At most this many reviewers decide one step's expression (each a person's wait).
const MAX_REVIEWERS: usize = 16;

/// Evaluates a step's expression with `eval`, asking each reviewer whose `review(user)` the
/// evaluation reaches before it can go on: only the reviews the expression's value depends on
/// are asked (`input.amount < 100 || review('user:ops')` asks nobody for 5). A denial fails
/// the step (CONTRACT §5): the answer is `Err` saying who denied, whatever the expression
/// would make of a `false`.
pub(crate) async fn reviewed<T>(
    engine: &Engine,
    record: &mut TaskRecord,
    expr: &Expression,
    mut act: Activation,
    mut asking: Asking<'_>,
    eval: impl Fn(&Expression, &Activation) -> std::result::Result<T, EvalError>,
) -> Result<std::result::Result<T, String>> {
    for _ in 0..=MAX_REVIEWERS {
        let reviewer = match eval(expr, &act) {
            Err(EvalError {
                needs_review: Some(reviewer),
                ..
            }) => reviewer,
            evaluated => return Ok(evaluated.map_err(|e| e.message)),
        };
        if !decision(engine, record, expr, &reviewer, &mut asking).await? {
            return Ok(Err(format!("the review of `{reviewer}` was denied")));
        }
        act.set_review(&reviewer, true);
    }
    Ok(Err(format!(
        "more than {MAX_REVIEWERS} reviewers would decide `{}`",
        expr.source()
    )))
}

/// For a `cel` tool's expression: obtains the decision of every reviewer its `review(user)`
/// calls name before evaluating it (an evaluation that stopped at a review might already have
/// written to the mount), and returns the activation with the decisions; the expression
/// decides what a denial means.
async fn with_reviews(
    engine: &Engine,
    record: &mut TaskRecord,
    expr: &Expression,
    mut act: Activation,
    mut asking: Asking<'_>,
) -> Result<Activation> {
    let reviewers = expr.reviewers(&act).unwrap_or_default();
    for reviewer in reviewers {
        let approve = decision(engine, record, expr, &reviewer, &mut asking).await?;
        act.set_review(&reviewer, approve);
    }
    Ok(act)
}

/// `reviewer`'s decision on the expression `asking` asks about: a denial at once while
/// routing, the decision recorded before a restart, or the person's.
async fn decision(
    engine: &Engine,
    record: &mut TaskRecord,
    expr: &Expression,
    reviewer: &str,
    asking: &mut Asking<'_>,
) -> Result<bool> {
    if asking.routing {
        return Ok(false);
    }
    if let Some(approve) = asking.replay.take(reviewer, &asking.subject) {
        return Ok(approve);
    }
    let step = json!({
        "action": asking.at.action,
        "phase": asking.at.phase,
        "expression": expr.source(),
    });
    let asked = Asked {
        reviewer,
        step,
        subject: asking.subject.clone(),
    };
    review(engine, record, asked, asking.call_id.clone()).await
}

/// Obtains the decisions of the `review()` calls of a `cel` tool's expression, whose
/// reviewers see the call's `input`. The action runs once its steps have passed, so, like a
/// review in an `after` step, this one does not wait across a restart. `routing`: the tool
/// runs for an event being routed (see [`Asking::routing`]).
pub(crate) async fn tool_reviews(
    engine: &Engine,
    record: &mut TaskRecord,
    expr: &Expression,
    act: Activation,
    (action, input): (&str, &Value),
    routing: bool,
) -> Result<Activation> {
    let asking = Asking {
        at: At {
            action: Some(action),
            phase: "action",
        },
        routing,
        call_id: None,
        replay: &mut Replay::default(),
        subject: json!({"input": input}),
    };
    with_reviews(engine, record, expr, act, asking).await
}

/// A review to ask for: who decides, the step asking and what it shows them.
struct Asked<'a> {
    reviewer: &'a str,
    step: Value,
    subject: Value,
}

/// One review: a `ReviewRequestEvent`, the task `waiting`, then the decision. `call_id`: the
/// call whose steps ask, when the review may wait across a restart.
async fn review(
    engine: &Engine,
    record: &mut TaskRecord,
    Asked {
        reviewer,
        step,
        subject,
    }: Asked<'_>,
    call_id: Option<String>,
) -> Result<bool> {
    let review_id = format!("rv_{:016x}", engine.inner.store.next_id()?);
    let (tx, rx) = oneshot::channel();
    lock(&engine.inner.reviews).insert(review_id.clone(), Waiter::Turn(tx));
    record.status = Some(Status::Waiting);
    record.pending_review = Some(PendingReview {
        review_id: review_id.clone(),
        reviewer: reviewer.to_owned(),
        call_id: call_id.clone(),
        requested_ms: now_ms(),
        triggered: engine.is_triggered(&record.id),
        step,
        subject: subject.clone(),
    });
    engine.records().save(
        record,
        vec![
            (
                EventSource::Environment,
                EventKind::ReviewRequestEvent {
                    review_id: review_id.clone(),
                    reviewer: reviewer.to_owned(),
                    subject,
                    call_id,
                },
            ),
            status_event("waiting"),
        ],
    )?;
    // Durable before a reviewer can answer it: the review survives a crash too.
    engine.flush()?;
    let id = record.id.clone();
    let decided = async {
        match engine.review_timeout(&id) {
            Some(t) => tokio::time::timeout(t, rx).await.ok().and_then(Result::ok),
            None => rx.await.ok(),
        }
    };
    // An interrupt, a deletion or the client's cancelling its call ends the wait: the call is
    // denied, and the turn stops at its next step.
    let (decision, ended_by) = tokio::select! {
        decision = decided => (decision, "timeout"),
        () = engine.stop_asked(&id) => {
            let cancelled = engine.call_cancelled(&id);
            (None, if cancelled { "cancelled" } else { "interrupt" })
        }
    };
    lock(&engine.inner.reviews).remove(&review_id);
    let (approve, decided_by, recorded) = match decision {
        Some(ReviewDecision {
            approve,
            user,
            recorded,
        }) => (approve, user, Some(recorded)),
        None => (false, ended_by.into(), None),
    };
    let events = decision_events(record, review_id, approve, decided_by);
    // Durable before the decider is answered: what it was told is what the log says.
    let saved = engine
        .records()
        .save(record, events)
        .and_then(|()| Ok(engine.flush()?));
    if let Some(recorded) = recorded {
        let answer = match &saved {
            Ok(()) => Ok(()),
            Err(EngineError::Store(e)) if e.is_io() => Err(EngineError::Store(
                agentmesh_store::StoreError::Io(e.to_string()),
            )),
            Err(e) => Err(EngineError::Internal(e.to_string())),
        };
        // The decider may have gone (its connection closed): the decision stands.
        let _ = recorded.send(answer);
    }
    saved?;
    Ok(approve)
}

/// A decision sent to a turn waiting in [`review`]; the turn answers on `recorded` once the
/// decision is in the log and on disk (or why it could not be written).
pub(crate) struct ReviewDecision {
    pub(crate) approve: bool,
    pub(crate) user: String,
    pub(crate) recorded: oneshot::Sender<Result<()>>,
}

/// Ends the wait on a review: the task `running` again, and the events recording the decision.
pub(crate) fn decision_events(
    record: &mut TaskRecord,
    review_id: String,
    approve: bool,
    decided_by: String,
) -> Vec<(EventSource, EventKind)> {
    record.status = Some(Status::Running);
    record.pending_review = None;
    vec![
        (
            EventSource::User,
            EventKind::ReviewDecisionEvent {
                review_id,
                approve,
                decided_by,
            },
        ),
        status_event("running"),
    ]
}

/// Who waits for a review's decision.
pub(crate) enum Waiter {
    /// A turn of this process, suspended in [`review`].
    Turn(oneshot::Sender<ReviewDecision>),
    /// Nobody: the review was pending when the host restarted, and is kept in the task record
    /// (the decision resumes the turn, see [`Engine::decide_review`]).
    Stored,
}

/// Review decisions already recorded for a call's `before` steps, by reviewer, in the order
/// they were made: a call run again after a restart answers those reviews from them instead
/// of asking again. Reviews asked by anything else on the way (a tool an `invoke` step runs)
/// are asked again, and their decisions are not among these.
#[derive(Debug, Default)]
pub(crate) struct Replay(Vec<(String, Value, bool)>);

impl Replay {
    /// Records `reviewer`'s decision on `subject` (what the review showed).
    pub(crate) fn push(&mut self, reviewer: String, subject: Value, approve: bool) {
        self.0.push((reviewer, subject, approve));
    }

    /// Takes `reviewer`'s first decision not used yet on what `subject` shows: a decision
    /// stands only for what its reviewer saw (a call run again whose input came out otherwise,
    /// from `now` or an `invoke` step's answer, is asked again).
    pub(crate) fn take(&mut self, reviewer: &str, subject: &Value) -> Option<bool> {
        let at = self
            .0
            .iter()
            .position(|(r, s, _)| r == reviewer && s == subject)?;
        Some(self.0.remove(at).2)
    }
}
