//! What a compiled list of steps reads: the parts of the context its expressions need, and
//! which other variables an activation must bind.

use agentmesh_expr::{Expression, Needs};

use super::{Step, StepKind};

/// The context the steps read.
pub(crate) fn needs_of(steps: &[Step]) -> Needs {
    const CONTEXT: [&str; 2] = ["context", "c"];
    let mut needs = Needs::default();
    for step in steps {
        if matches!(step.kind, StepKind::Wasm { .. }) {
            needs = Needs::All;
        }
        expressions(step, |e| needs.add(e, &CONTEXT));
    }
    needs
}

/// Calls `f` with every expression of `step` (its action's, condition, message holes).
fn expressions<'a>(step: &'a Step, mut f: impl FnMut(&'a Expression)) {
    match &step.kind {
        StepKind::Assert(e) | StepKind::Transform(e) => f(e),
        StepKind::Invoke {
            bindings,
            capability_bindings,
            ..
        } => bindings
            .iter()
            .chain(capability_bindings)
            .for_each(|(_, e)| f(e)),
        StepKind::Wasm { .. } => {}
    }
    if let Some(c) = &step.condition {
        f(c);
    }
    if let Some(t) = &step.error_message {
        t.expressions().for_each(|(_, e)| f(e));
    }
}

/// Which variables besides `context` a list of steps reads: an activation binds only those
/// (converting nothing it does not bind).
#[derive(Clone, Copy, Default)]
pub(crate) struct Reads {
    pub(crate) input: bool,
    pub(crate) output: bool,
    pub(crate) now: bool,
    pub(crate) event: bool,
}

impl Reads {
    pub(crate) fn of(steps: &[Step]) -> Reads {
        let mut reads = Reads::default();
        for step in steps {
            expressions(step, |e| {
                for root in e.roots() {
                    match root.name.as_str() {
                        "input" | "i" => reads.input = true,
                        "output" | "o" => reads.output = true,
                        "now" => reads.now = true,
                        "event" => reads.event = true,
                        _ => {}
                    }
                }
            });
        }
        reads
    }
}
