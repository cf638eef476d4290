//! Running middleware and guardrail steps: `match`, `condition`, assert / invoke / transform,
//! `review()`, and the failure policy. Step lists wrap what they guard ([`around`]): a
//! capability's `before_first`/`before`/`after` wrap its call, the agent's guardrails wrap
//! its turn.

use agentmesh_expr::{Activation, Bound, EvalError, Expression, Needs};
use agentmesh_manifest::model::common::OnFail;
use agentmesh_model::event::ContentPart;
use agentmesh_store::now_rfc3339;
use serde_json::{Value, json};

use crate::plan::{AgentPlan, Reads, Step, StepKind, Steps};
use crate::review::{self, Asking, At, Replay};
use crate::task::{Outcome, TaskRecord};
use crate::{Engine, Result, runtime};

/// What a list of steps decided.
pub(crate) enum Verdict {
    /// Every step passed (or failed with `continue`).
    Pass,
    /// A step failed with `block`: the message for the LLM.
    Block(String),
    /// A step failed with `lock_task`: the task ends.
    Lock(String),
}

/// Where steps run: what they may change.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Before the call: transforms replace `input`.
    Before,
    /// After the call: transforms replace `output`.
    After,
}

/// Where a step of a list run in `phase` for `action` is, as a pending review names it.
fn at(phase: Phase, action: Option<&str>) -> At<'_> {
    let phase = match (phase, action.is_none()) {
        (Phase::Before, false) => "before",
        (Phase::After, false) => "after",
        (Phase::Before, true) => "guardrails.before",
        (Phase::After, true) => "guardrails.after",
    };
    At { action, phase }
}

/// Evaluates a step's `expr` with `eval` ([`review::reviewed`]: a denial of a `review()` it
/// reaches fails the step) in `phase` at `at` with `vars`: events being routed deny at once,
/// and only a call's `before` steps wait across a restart.
async fn reviewed<T>(
    engine: &Engine,
    record: &mut TaskRecord,
    (expr, act): (&Expression, &Activation),
    (phase, at): (Phase, At<'_>),
    vars: &mut StepVars,
    eval: impl Fn(&Expression, &Activation) -> std::result::Result<T, EvalError>,
) -> Result<std::result::Result<T, String>> {
    if !expr.calls_review() {
        return Ok(eval(expr, act).map_err(|e| e.message));
    }
    let asking = Asking {
        at,
        routing: vars.routing(),
        call_id: match phase {
            Phase::Before => vars.call_id.clone(),
            Phase::After => None,
        },
        subject: vars.subject(),
        replay: &mut vars.replay,
    };
    review::reviewed(engine, record, expr, act.clone(), asking, eval).await
}

/// The step lists around something: `before` run first, in order, until one refuses; `after`
/// run on its output.
pub(crate) struct Layers<'a> {
    /// The function the steps run for (`None` for guardrails).
    pub name: Option<&'a str>,
    /// The lists that run before, in order (`None`: a list that does not run).
    pub before: [Option<&'a Steps>; 2],
    /// The list that runs on the output.
    pub after: &'a Steps,
}

impl<'a> Layers<'a> {
    /// `agent`'s guardrails around a turn; without the `before` ones for a turn that resumes
    /// (they saw its input when it began).
    pub(crate) fn guardrails(agent: &'a AgentPlan, resumed: bool) -> Layers<'a> {
        Layers {
            name: None,
            before: [(!resumed).then_some(&agent.guard_before), None],
            after: &agent.guard_after,
        }
    }
}

/// What the wrapped part of [`around`] came to.
pub(crate) enum Inner<T> {
    /// An output, for the `after` steps (in `vars.output` once they ran).
    Output(Value),
    /// It ended without an output: the `after` steps do not run.
    Ended(T),
}

/// What running something inside its [`Layers`] came to.
pub(crate) enum Wrapped<T> {
    /// A `before` step failed with `block`: it did not run.
    Blocked(String),
    /// A `before` step failed with `lock_task`: it did not run.
    Locked(String),
    /// It ended without an output.
    Ended(T),
    /// It gave an output, and the `after` steps decided (their output is `vars.output`).
    Finished(Verdict),
}

/// Runs `inner` inside `layers`: the `before` lists, then `inner` (unless one refused), then
/// the `after` list on its output. `vars` carry the input and output through.
pub(crate) async fn around<T>(
    engine: &Engine,
    agent: &AgentPlan,
    record: &mut TaskRecord,
    layers: Layers<'_>,
    vars: &mut StepVars,
    inner: impl AsyncFnOnce(&mut TaskRecord, &mut StepVars) -> Result<Inner<T>>,
) -> Result<Wrapped<T>> {
    for steps in layers.before.into_iter().flatten() {
        match run(
            engine,
            agent,
            record,
            steps,
            layers.name,
            Phase::Before,
            vars,
        )
        .await?
        {
            Verdict::Pass => {}
            Verdict::Block(reason) => return Ok(Wrapped::Blocked(reason)),
            Verdict::Lock(reason) => return Ok(Wrapped::Locked(reason)),
        }
    }
    match inner(record, vars).await? {
        Inner::Ended(end) => Ok(Wrapped::Ended(end)),
        Inner::Output(output) => {
            vars.output = Some(output);
            let after = layers.after;
            let verdict = run(
                engine,
                agent,
                record,
                after,
                layers.name,
                Phase::After,
                vars,
            )
            .await?;
            Ok(Wrapped::Finished(verdict))
        }
    }
}

/// Runs `steps` for function `name`. `input` and `output` are the activation's values, and
/// the targets of transforms (by phase).
pub(crate) async fn run(
    engine: &Engine,
    agent: &AgentPlan,
    record: &mut TaskRecord,
    steps: &Steps,
    name: Option<&str>,
    phase: Phase,
    vars: &mut StepVars,
) -> Result<Verdict> {
    if steps.is_empty() {
        return Ok(Verdict::Pass);
    }
    // The context is converted once for the list (only the parts its steps read); only an
    // invoke step changes it. Middleware components get it as JSON too.
    let (needs, keep_json) = (&steps.needs, steps.keep_json);
    let (mut context, mut context_json) = bind_context(record, agent, needs, keep_json);
    for step in steps.iter() {
        if let (Some(m), Some(name)) = (&step.match_action, name)
            && m != name
        {
            continue;
        }
        let act = vars.activation(&context, steps.reads);
        // A condition that cannot be evaluated (a missing key, a type error) runs its step:
        // a guard must not be walked around by making its condition fail.
        if let Some(cond) = &step.condition
            && matches!(cond.evaluate_bool(&act), Ok(false))
        {
            continue;
        }
        let failure = match &step.kind {
            StepKind::Assert(expr) => {
                let place = (phase, at(phase, name));
                let eval = Expression::evaluate_bool;
                match reviewed(engine, record, (expr, &act), place, vars, eval).await? {
                    Ok(true) => None,
                    Ok(false) => Some(format!("assertion `{}` is false", expr.source())),
                    Err(e) => Some(format!("assertion `{}` failed: {e}", expr.source())),
                }
            }
            StepKind::Transform(expr) => {
                let place = (phase, at(phase, name));
                let eval = Expression::evaluate;
                match reviewed(engine, record, (expr, &act), place, vars, eval).await? {
                    Ok(v) => vars
                        .replace(phase, v)
                        .err()
                        .map(|e| format!("transform `{}` {e}", expr.source())),
                    Err(e) => Some(format!("transform `{}` failed: {e}", expr.source())),
                }
            }
            StepKind::Invoke {
                tool,
                action,
                function,
                ..
            } => {
                let input =
                    invoke_input(engine, record, step, &act, (phase, name, &mut *vars)).await?;
                let mut fatal = false;
                let (outcome, input, output, failure) = match input {
                    Err(message) => (
                        Outcome::Errored,
                        Value::Null,
                        json!({"error": message}),
                        Some(format!("invoke `{function}`: {message}")),
                    ),
                    Ok(input) => {
                        if !runtime::stays_inside(agent, tool, *action) {
                            engine.records().write_ahead(record)?;
                        }
                        let routing = vars.routing();
                        match runtime::run_action(
                            engine, agent, record, tool, *action, &input, routing,
                        )
                        .await
                        {
                            runtime::ActionResult::Ok(v) => (Outcome::Successful, input, v, None),
                            runtime::ActionResult::Recoverable(e) => (
                                Outcome::Errored,
                                input,
                                json!({"error": e}),
                                Some(format!("invoke `{function}` failed: {e}")),
                            ),
                            runtime::ActionResult::Fatal(e) => {
                                fatal = true;
                                (
                                    Outcome::Errored,
                                    input,
                                    json!({"error": e}),
                                    Some(format!("invoke `{function}` failed fatally: {e}")),
                                )
                            }
                        }
                    }
                };
                record
                    .capabilities
                    .entry(function.clone())
                    .or_default()
                    .record(outcome, input, output, None);
                // A fatal failure ends the task whatever the step's `on_fail` says, as it
                // would in a call (in routing: the event is dropped).
                if let (true, Some(reason)) = (fatal, &failure) {
                    return Ok(Verdict::Lock(reason.clone()));
                }
                // Later steps see the result.
                (context, context_json) = bind_context(record, agent, needs, keep_json);
                failure
            }
            StepKind::Wasm { .. } => {
                engine.records().write_ahead(record)?;
                match wasm_step(
                    engine,
                    record,
                    &step.kind,
                    phase,
                    vars,
                    context_json.as_ref(),
                )
                .await
                {
                    Ok(None) => None,
                    Ok(Some(replacement)) => vars
                        .replace(phase, replacement)
                        .err()
                        .map(|e| format!("the middleware component's replacement {e}")),
                    Err(reason) => Some(reason),
                }
            }
        };
        let Some(reason) = failure else { continue };
        match fail(step, &vars.activation(&context, steps.reads), reason) {
            Verdict::Pass => continue,
            other => return Ok(other),
        }
    }
    Ok(Verdict::Pass)
}

/// The context converted for CEL, and as JSON when `keep_json`.
fn bind_context(
    record: &TaskRecord,
    agent: &AgentPlan,
    needs: &Needs,
    keep_json: bool,
) -> (Bound, Option<Value>) {
    let value = record.context_for(agent, needs);
    if keep_json {
        (Bound::new(value.clone()), Some(value))
    } else {
        (Bound::new(value), None)
    }
}

/// The input of an `invoke` step's action: the capability's bindings (in their own scope),
/// the step's over them (its `review()` calls decided first), the action's defaults for what
/// is still missing, checked against the action's parameter schema. `Err`: why there is none.
async fn invoke_input(
    engine: &Engine,
    record: &mut TaskRecord,
    step: &Step,
    act: &Activation,
    (phase, name, vars): (Phase, Option<&str>, &mut StepVars),
) -> Result<std::result::Result<Value, String>> {
    let StepKind::Invoke {
        tool,
        action,
        bindings,
        capability_bindings,
        ..
    } = &step.kind
    else {
        return Ok(Err("not an invoke step".into()));
    };
    let mut params = serde_json::Map::new();
    if !capability_bindings.is_empty() {
        let mut scope = act.clone();
        scope
            .bind("runtime", engine.runtime_variable())
            .set("now", json!(now_rfc3339()));
        for (k, e) in capability_bindings {
            match e.evaluate(&scope) {
                Ok(v) => params.insert(k.clone(), v),
                Err(e) => return Ok(Err(format!("the capability's binding `{k}` failed: {e}"))),
            };
        }
    }
    for (k, e) in bindings {
        let place = (phase, at(phase, name));
        match reviewed(engine, record, (e, act), place, vars, Expression::evaluate).await? {
            Ok(v) => params.insert(k.clone(), v),
            Err(e) => return Ok(Err(format!("binding `{k}` failed: {e}"))),
        };
    }
    let Some(plan) = tool.actions.get(*action) else {
        return Ok(Err(format!("tool `{}` has no action #{action}", tool.id())));
    };
    Ok(plan.complete(params))
}

/// Runs a middleware component: `Ok(None)` passes, `Ok(Some(v))` replaces, `Err` denies.
async fn wasm_step(
    engine: &Engine,
    record: &TaskRecord,
    kind: &StepKind,
    phase: Phase,
    vars: &StepVars,
    context: Option<&Value>,
) -> std::result::Result<Option<Value>, String> {
    let StepKind::Wasm {
        path,
        config,
        memory_limit,
        timeout,
    } = kind
    else {
        return Err("not a wasm step".into());
    };
    let plugins = engine.plugins()?;
    let context_json = context.map(Value::to_string).unwrap_or_default();
    let input = vars.input.to_string();
    let event = vars.event.as_ref().map(Bound::to_json_string);
    let call = agentmesh_plugins::MiddlewareCall {
        task_id: &record.id,
        config: &config.to_string(),
        context: &context_json,
        input: &input,
        event: event.as_deref(),
    };
    let output = match phase {
        Phase::Before => None,
        Phase::After => Some(vars.output.clone().unwrap_or(Value::Null).to_string()),
    };
    let limits = (*memory_limit, *timeout);
    match plugins
        .middleware(path, limits, &call, output.as_deref())
        .await?
    {
        agentmesh_plugins::MiddlewareVerdict::Pass => Ok(None),
        agentmesh_plugins::MiddlewareVerdict::Deny(reason) => Err(reason),
        agentmesh_plugins::MiddlewareVerdict::Replace(json) => serde_json::from_str(&json)
            .map(Some)
            .map_err(|e| format!("the component replaced with invalid JSON: {e}")),
    }
}

/// Applies a failed step's policy, rendering its `error_message`.
fn fail(step: &Step, act: &Activation, reason: String) -> Verdict {
    let message = step
        .error_message
        .as_ref()
        .and_then(|t| t.render(act).ok())
        .unwrap_or(reason);
    match step.on_fail {
        OnFail::Continue => Verdict::Pass,
        OnFail::Block => Verdict::Block(message),
        OnFail::LockTask => Verdict::Lock(message),
    }
}

/// The values steps see and change.
pub(crate) struct StepVars {
    /// `input` / `i`.
    pub input: Value,
    /// `output` / `o` (after steps).
    pub output: Option<Value>,
    /// `event` (`None` outside event activations, where `event` is null).
    pub event: Option<Bound>,
    /// Whether `input` is a guardrail's arriving input (no `event` in scope).
    pub guardrail: bool,
    /// The capability call whose steps these are (`None` in guardrails and routing).
    pub call_id: Option<String>,
    /// Decisions recorded for this call's reviews before a restart.
    pub replay: Replay,
}

impl StepVars {
    /// The variables of a guardrail's steps: the arriving `input`, or the answer going out
    /// (`output`).
    pub(crate) fn guardrail(input: Value, output: Option<Value>) -> StepVars {
        StepVars {
            input,
            output,
            event: None,
            guardrail: true,
            call_id: None,
            replay: Replay::default(),
        }
    }

    /// Whether these steps decide on an event being routed, which cannot wait for a person:
    /// every `review()` they lead to is a denial, decided at once.
    pub(crate) fn routing(&self) -> bool {
        self.event.is_some() && !self.guardrail
    }

    /// The activation of `steps`' expressions: the context, and those of the variables they
    /// read.
    fn activation(&self, context: &Bound, reads: Reads) -> Activation {
        let mut act = Activation::new();
        act.set_bound("context", "c", context);
        if reads.input {
            act.set_aliased("input", "i", self.input.clone());
        }
        if reads.now {
            act.set("now", json!(now_rfc3339()));
        }
        if reads.event && !self.guardrail {
            match &self.event {
                Some(event) => act.bind("event", event.clone()),
                None => act.set("event", Value::Null),
            };
        }
        if reads.output
            && let Some(o) = &self.output
        {
            act.set_aliased("output", "o", o.clone());
        }
        act
    }

    /// Replaces `input` (before) or `output` (after) with a transform's or a component's
    /// value. A guardrail's value is the arriving input or the answer: a map (its `message` a
    /// string or content parts) or a string (the message text). A capability `before` step's
    /// value is the call's input, a map; in an event activation a string is the message text.
    /// An `after` step's value may be anything. A value of another shape is refused (the
    /// step fails) rather than ignored.
    fn replace(&mut self, phase: Phase, v: Value) -> std::result::Result<(), String> {
        if self.guardrail {
            let io = task_io(v)?;
            match phase {
                Phase::Before => self.input = io,
                Phase::After => self.output = Some(io),
            }
            return Ok(());
        }
        match (phase, v) {
            (Phase::After, v) => self.output = Some(v),
            (Phase::Before, v @ Value::Object(_)) => self.input = v,
            (Phase::Before, Value::String(text)) if self.event.is_some() => {
                self.input = json!({"message": text});
            }
            (Phase::Before, other) => {
                return Err(format!(
                    "must yield a map (the call's input), not {}",
                    json_kind(&other)
                ));
            }
        }
        Ok(())
    }

    fn subject(&self) -> Value {
        match &self.output {
            Some(o) => json!({"input": self.input, "output": o}),
            None => json!({"input": self.input}),
        }
    }
}

/// A guardrail's replacement as a TaskIO: a string is the message text (one text part); a
/// map's `message` may be a string or content parts.
fn task_io(v: Value) -> std::result::Result<Value, String> {
    let mut io = match v {
        Value::String(text) => return Ok(json!({"message": [ContentPart::text(text)]})),
        Value::Object(m) => m,
        other => {
            return Err(format!(
                "must yield the message text (a string) or a map with `message`, not {}",
                json_kind(&other)
            ));
        }
    };
    match io.get("message") {
        Some(Value::String(text)) => {
            let parts = json!([ContentPart::text(text.clone())]);
            io.insert("message".into(), parts);
        }
        Some(parts @ Value::Array(_))
            if serde_json::from_value::<Vec<ContentPart>>(parts.clone()).is_ok() => {}
        Some(_) => return Err("yielded a `message` that is neither text nor content parts".into()),
        None => return Err("yielded a map without `message`".into()),
    }
    Ok(Value::Object(io))
}

/// `a string`, `a list`, … for messages about a value of the wrong shape.
pub(crate) fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a map",
    }
}
