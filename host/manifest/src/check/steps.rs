//! Middleware, guardrail and trigger `source.before` steps.

use agentmesh_expr::Scope;

use super::scopes;
use super::{Checker, ComponentWorld, K, Seg, key_pos, member_names, node_at, pos_at};
use crate::load::Source;
use crate::model::Tool;
use crate::model::common::{MiddlewareStep, OnFail};
use crate::suggest::did_you_mean_hint;

/// Where a list of steps stands; decides scopes, defaults and what is allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Layer {
    /// Capability `before_first`.
    BeforeFirst,
    /// Capability `before`.
    Before,
    /// Capability `after`.
    After,
    /// `guardrails.before`.
    GuardBefore,
    /// `guardrails.after`.
    GuardAfter,
    /// A trigger's `source.before`.
    TriggerBefore,
}

impl Layer {
    fn scope(self) -> Scope {
        match self {
            Layer::BeforeFirst | Layer::Before => scopes::MIDDLEWARE_BEFORE,
            Layer::After => scopes::MIDDLEWARE_AFTER,
            Layer::GuardBefore => scopes::GUARDRAIL_BEFORE,
            Layer::GuardAfter => scopes::GUARDRAIL_AFTER,
            Layer::TriggerBefore => scopes::TRIGGER_BEFORE,
        }
    }

    fn is_guardrail(self) -> bool {
        matches!(self, Layer::GuardBefore | Layer::GuardAfter)
    }
}

/// What the steps of a capability apply to (for `match` and `invoke`).
pub(crate) struct Around<'a> {
    /// The agent's namespace, for resolving `invoke` tools.
    pub namespace: &'a str,
    /// The tool of the capability, when it is one.
    pub tool: Option<&'a Tool>,
    /// The agent the capability delegates to, when it does (it has no actions to match).
    pub delegate: Option<&'a str>,
}

/// Checks the steps at `path` (a list of [`MiddlewareStep`]).
pub(crate) fn check(
    c: &mut Checker,
    source: &Source,
    path: &[Seg],
    steps: &[MiddlewareStep],
    layer: Layer,
    around: &Around,
) {
    for (i, step) in steps.iter().enumerate() {
        let mut p = path.to_vec();
        p.push(Seg::I(i));
        check_step(c, source, &p, step, layer, around);
    }
}

/// Checks each list of steps that is set: `(field, steps, layer)`, at `prefix` + `field`.
pub(crate) fn check_lists<'a>(
    c: &mut Checker,
    source: &Source,
    prefix: &[Seg<'a>],
    lists: &[(&'a str, &Option<Vec<MiddlewareStep>>, Layer)],
    around: &Around,
) {
    for &(field, steps, layer) in lists {
        if let Some(steps) = steps {
            let mut path = prefix.to_vec();
            path.push(Seg::K(field));
            check(c, source, &path, steps, layer, around);
        }
    }
}

fn check_step(
    c: &mut Checker,
    source: &Source,
    path: &[Seg],
    step: &MiddlewareStep,
    layer: Layer,
    around: &Around,
) {
    let at = |key: &'static str| -> Vec<Seg> {
        let mut p = path.to_vec();
        p.push(K(key));
        p
    };
    let actions: Vec<&str> = [
        ("assert", step.assert_expr.is_some()),
        ("invoke", step.invoke.is_some()),
        ("transform", step.transform.is_some()),
        ("wasm", step.wasm.is_some()),
    ]
    .into_iter()
    .filter_map(|(n, set)| set.then_some(n))
    .collect();
    match actions.as_slice() {
        [] => c.error(
            source,
            pos_at(&source.node, path),
            "a step needs exactly one of `assert`, `invoke`, `transform`, `wasm`; it has none",
        ),
        [_] => {}
        several => c.error(
            source,
            key_pos(&source.node, &at(several[1])),
            format!(
                "a step needs exactly one of `assert`, `invoke`, `transform`, `wasm`; it has {}",
                several
                    .iter()
                    .map(|s| format!("`{s}`"))
                    .collect::<Vec<_>>()
                    .join(" and ")
            ),
        ),
    }
    if layer == Layer::TriggerBefore
        && (step.invoke.is_some() || step.transform.is_some() || step.wasm.is_some())
    {
        c.error(
            source,
            pos_at(&source.node, path),
            "a trigger's `source.before` takes `assert` steps only",
        );
    }
    if step.bindings.is_some() && step.invoke.is_none() {
        c.error(
            source,
            key_pos(&source.node, &at("bindings")),
            "`bindings` are only allowed on `invoke` steps",
        );
    }
    if layer.is_guardrail() && step.on_fail == Some(OnFail::Block) {
        c.error(
            source,
            pos_at(&source.node, &at("on_fail")),
            "`on_fail: block` is not allowed on a guardrail (use `lock_task`, the default, or `continue`)",
        );
    }
    let scope = layer.scope();
    c.expr(source, &at("assert"), &scope, "");
    c.expr(source, &at("transform"), &scope, "");
    // A condition only decides whether the step runs, and an error message is rendered after
    // it failed: neither can wait for a person (the step's own expression can).
    let condition_scope = Scope {
        place: "a step's `condition`",
        review: false,
        ..scope
    };
    c.expr(source, &at("condition"), &condition_scope, "");
    let message_scope = Scope {
        place: "a step's `error_message`",
        review: false,
        ..scope
    };
    c.template(source, &at("error_message"), &message_scope);
    if step.wasm.is_some() {
        let mut p = at("wasm");
        p.push(K("component"));
        c.component(source, &p, ComponentWorld::Middleware);
    }
    if let (Some(name), Some(tool)) = (&step.match_action, around.tool) {
        let names = member_names(tool);
        if !names.contains(&name.as_str()) {
            let hint = did_you_mean_hint(name, names.iter().copied());
            c.error(
                source,
                pos_at(&source.node, &at("match")),
                format!(
                    "`match` names `{name}`, which tool `{}/{}` does not have{hint}",
                    tool.namespace, tool.name
                ),
            );
        }
    }
    if let (Some(_), Some(agent)) = (&step.match_action, around.delegate) {
        c.error(
            source,
            pos_at(&source.node, &at("match")),
            format!(
                "`match` names an action, and this capability delegates to agent `{agent}`, \
                 which has none: the step would never run (leave `match` out)"
            ),
        );
    }
    if let Some(target) = &step.invoke {
        check_invoke(c, source, &at("invoke"), target, around);
    }
    if let Some(bindings) = &step.bindings {
        // An `invoke` step's bindings see the step's scope, `review()` included where the
        // step may call it (cel.md).
        for key in bindings.keys() {
            let mut p = at("bindings");
            p.push(K(key));
            c.expr(source, &p, &scope, "");
        }
    }
}

/// `invoke: "<tool>:<action>"` must name an existing tool and action.
fn check_invoke(c: &mut Checker, source: &Source, path: &[Seg], target: &str, around: &Around) {
    let pos = pos_at(&source.node, path);
    let Some((tool_ref, action)) =
        c.split_ref(source, pos, "invoke", target, (':', "<tool>:<action>"))
    else {
        return;
    };
    let (ns, name) = tool_ref
        .split_once('/')
        .unwrap_or((around.namespace, tool_ref));
    let Some(tool) = c.config.tool(ns, name) else {
        c.error(
            source,
            pos,
            format!("`invoke` names tool `{ns}/{name}`, which does not exist"),
        );
        return;
    };
    if !tool.value.actions.iter().any(|a| a.name == action) {
        let names: Vec<&str> = tool.value.actions.iter().map(|a| a.name.as_str()).collect();
        let hint = did_you_mean_hint(action, names.iter().copied());
        c.error(
            source,
            pos,
            format!(
                "`invoke` names action `{action}`, which tool `{ns}/{name}` does not have{hint}"
            ),
        );
    }
    let _ = node_at(&source.node, path);
}
