//! The cost bound of one evaluation. CEL has no loops of its own, but its macros (`all`,
//! `exists`, `map`, `filter`, …) iterate, nest, and run over data the host does not control:
//! four nested `.all` over 100-element lists took 113 s per evaluation, and a chain of
//! `replace` calls built a 100 MB string. Every compiled expression is instrumented (a copy of
//! its tree, the one that is evaluated) so that each iteration of a macro, and each value an
//! operation that grows values produces, is counted against the evaluation's budget; past it
//! the evaluation stops with an error naming the limit. Like every evaluation error, it fails
//! closed (a filter or an assert does not pass) and is recoverable in a `cel` tool.

use std::cell::Cell;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use cel::ExecutionError;
use cel::common::ast::{CallExpr, ComprehensionExpr, EntryExpr, Expr, IdedExpr, operators};
use cel::common::types::CelString;
use cel::common::value::{CowVal, Val};

/// The most macro iterations one evaluation may run (all nesting levels together). An
/// iteration costs around a microsecond, so this is a few tenths of a second of work.
pub const MAX_STEPS: u64 = 250_000;

/// The most one evaluation may build: the bytes of the strings and eight bytes per element of
/// the lists and maps that growing operations (`+`, `replace`, `join`, `split`, `map`,
/// `filter`, …) produce, together.
pub const MAX_BUILT_BYTES: u64 = 16 * 1024 * 1024;

/// The longest one evaluation may run, from its first counted event (checked as it counts;
/// what runs before any is bounded by the expression's size).
pub const MAX_TIME: Duration = Duration::from_secs(1);

/// Called on each macro iteration (`@t(step)` around the part of the macro that runs per
/// element). Its name cannot be written in CEL source.
pub(crate) const STEP_FN: &str = "@t";

/// Called on the value of each growing operation (`@s(a + b)`).
pub(crate) const SIZE_FN: &str = "@s";

/// Functions whose result may be larger than their arguments.
const GROWING: [&str; 6] = [
    operators::ADD,
    "replace",
    "join",
    "split",
    "format",
    "quote",
];

/// How often (in counted events) the clock is read.
const CLOCK_EVERY: u64 = 1024;

#[derive(Clone, Copy)]
struct State {
    steps: u64,
    built: u64,
    /// When the first counted event happened: an evaluation that counts none (no macro, no
    /// growing call) never reads the clock.
    started: Option<Instant>,
    /// Why the evaluation was stopped, once it was.
    exceeded: Option<&'static str>,
}

thread_local! {
    static STATE: Cell<Option<State>> = const { Cell::new(None) };
}

/// Where evaluations of expressions that iterate run (see [`offload_iterating_with`]).
static OFFLOAD: OnceLock<fn(&mut dyn FnMut())> = OnceLock::new();

/// Makes every evaluation of an expression that iterates (a macro: `all`, `exists`, `map`,
/// `filter`, …, which may run up to the budget's time) run through `run`, which calls the
/// function it is given once: the host moves such evaluations off its async workers. Set
/// once; later calls change nothing.
pub fn offload_iterating_with(run: fn(&mut dyn FnMut())) {
    let _ = OFFLOAD.set(run);
}

/// Runs `eval` where evaluations that iterate run, if the expression `iterates`.
pub(crate) fn offloaded<T>(iterates: bool, mut eval: impl FnMut() -> T) -> T {
    let Some(run) = OFFLOAD.get().filter(|_| iterates) else {
        return eval();
    };
    let mut out = None;
    run(&mut || out = Some(eval()));
    // `run` calls it; should it not, the evaluation runs here.
    out.unwrap_or_else(eval)
}

/// Whether `expr` holds a comprehension (a macro) anywhere. Recursive: the tree is at most
/// [`crate::expression::MAX_DEPTH`] deep by then.
pub(crate) fn iterates(expr: &IdedExpr) -> bool {
    match &expr.expr {
        Expr::Comprehension(_) => true,
        Expr::Call(call) => {
            call.target.as_deref().is_some_and(iterates) || call.args.iter().any(iterates)
        }
        Expr::List(list) => list.elements.iter().any(iterates),
        Expr::Map(m) => m.entries.iter().any(|x| entry_iterates(&x.expr)),
        Expr::Struct(s) => s.entries.iter().any(|x| entry_iterates(&x.expr)),
        Expr::Select(select) => iterates(&select.operand),
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => false,
    }
}

fn entry_iterates(e: &EntryExpr) -> bool {
    match e {
        EntryExpr::StructField(field) => iterates(&field.value),
        EntryExpr::MapEntry(e) => iterates(&e.key) || iterates(&e.value),
    }
}

/// Runs one evaluation under a fresh budget; the error says which limit stopped it, if one
/// did. Evaluations do not nest (host functions do not evaluate expressions).
pub(crate) fn metered<T>(f: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
    let outer = STATE.replace(Some(State {
        steps: 0,
        built: 0,
        started: None,
        exceeded: None,
    }));
    let out = f();
    let state = STATE.replace(outer);
    match (out, state.and_then(|s| s.exceeded)) {
        (Err(_), Some(limit)) => Err(limit.to_owned()),
        (out, _) => out,
    }
}

/// Counts `cost` of `what` against the running evaluation's budget.
fn charge(steps: u64, bytes: u64) -> Result<(), ExecutionError> {
    let Some(mut state) = STATE.get() else {
        return Ok(());
    };
    let started = *state.started.get_or_insert_with(Instant::now);
    let before = state.steps + state.built;
    state.steps += steps;
    state.built += bytes;
    let exceeded = if state.steps > MAX_STEPS {
        Some(
            "the expression was stopped: it ran more than 250000 macro iterations (the limit of one evaluation)",
        )
    } else if state.built > MAX_BUILT_BYTES {
        Some(
            "the expression was stopped: it built more than 16 MiB of values (the limit of one evaluation)",
        )
    } else if (before / CLOCK_EVERY != (state.steps + state.built) / CLOCK_EVERY
        || bytes > 64 * 1024)
        && started.elapsed() > MAX_TIME
    {
        Some("the expression was stopped: it ran longer than 1s (the limit of one evaluation)")
    } else {
        None
    };
    state.exceeded = state.exceeded.or(exceeded);
    STATE.set(Some(state));
    match exceeded {
        Some(message) => Err(ExecutionError::function_error("budget", message)),
        None => Ok(()),
    }
}

/// `@t(x)`: one macro iteration; answers `x`.
pub(crate) fn step<'b, 'v>(
    mut args: Vec<CowVal<'b, 'v>>,
) -> Result<CowVal<'b, 'v>, ExecutionError> {
    charge(1, 0)?;
    args.pop()
        .ok_or_else(|| ExecutionError::function_error(STEP_FN, "takes one argument"))
}

/// `@s(x)`: a value a growing operation produced; answers `x`.
pub(crate) fn size<'b, 'v>(
    mut args: Vec<CowVal<'b, 'v>>,
) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let value = args
        .pop()
        .ok_or_else(|| ExecutionError::function_error(SIZE_FN, "takes one argument"))?;
    charge(0, bytes_of(value.as_ref()))?;
    Ok(value)
}

/// What `value` weighs: a string its bytes, a list or map eight bytes an element.
fn bytes_of(value: &dyn Val) -> u64 {
    if let Some(s) = value.downcast_ref::<CelString>() {
        return s.inner().len() as u64;
    }
    value.as_sizer().map_or(0, |s| {
        u64::try_from(*s.size().inner())
            .unwrap_or(0)
            .saturating_mul(8)
    })
}

/// A copy of `expr` with the budget's calls in place: around the per-element part of every
/// macro and around every growing call. The copy keeps node ids (error places stay right).
/// Recursive: the tree is at most [`crate::expression::MAX_DEPTH`] deep by then.
pub(crate) fn instrument(expr: &IdedExpr) -> IdedExpr {
    let mut copy = expr.clone();
    walk(&mut copy);
    copy
}

fn walk(e: &mut IdedExpr) {
    match &mut e.expr {
        Expr::Call(call) => {
            if let Some(t) = &mut call.target {
                walk(t);
            }
            call.args.iter_mut().for_each(walk);
            if GROWING.contains(&call.func_name.as_str()) {
                wrap(e, SIZE_FN);
            }
        }
        Expr::Comprehension(c) => {
            for part in [
                &mut c.iter_range,
                &mut c.accu_init,
                &mut c.loop_cond,
                &mut c.loop_step,
                &mut c.result,
            ] {
                walk(part);
            }
            per_iteration(c);
        }
        Expr::List(list) => list.elements.iter_mut().for_each(walk),
        Expr::Map(m) => m.entries.iter_mut().for_each(|x| entry(&mut x.expr)),
        Expr::Struct(s) => s.entries.iter_mut().for_each(|x| entry(&mut x.expr)),
        Expr::Select(select) => walk(&mut select.operand),
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => {}
    }
}

fn entry(e: &mut EntryExpr) {
    match e {
        EntryExpr::StructField(field) => walk(&mut field.value),
        EntryExpr::MapEntry(e) => {
            walk(&mut e.key);
            walk(&mut e.value);
        }
    }
}

/// Counts each iteration of `c`. `map` and `filter` append to their accumulator
/// (`@result + [x]`, or `cond ? @result + [x] : @result`), a shape the interpreter runs in
/// place: the count goes inside the appended item (or the guard), keeping that shape; any
/// other macro's step is wrapped whole. The append's own `+` is not a growing call to meter
/// (its result is metered as it grows, by the items).
fn per_iteration(c: &mut ComprehensionExpr) {
    let accu = c.accu_var.clone();
    let is_accu = |e: &IdedExpr| matches!(&e.expr, Expr::Ident(n) if *n == accu);
    // Unwraps `@s(@result + [x])` back to `@result + [x]` with `x` counted.
    let append = |e: &mut IdedExpr| -> bool {
        if let Expr::Call(outer) = &mut e.expr
            && outer.func_name == SIZE_FN
            && let Some(inner) = outer.args.pop()
        {
            *e = inner;
        }
        let Expr::Call(call) = &mut e.expr else {
            return false;
        };
        match call.args.as_mut_slice() {
            [lhs, rhs] if call.func_name == operators::ADD && is_accu(lhs) => match &mut rhs.expr {
                Expr::List(items) => {
                    items.elements.iter_mut().for_each(|x| wrap(x, STEP_FN));
                    true
                }
                _ => false,
            },
            _ => false,
        }
    };
    if is_accu(&c.result) && matches!(c.loop_cond.expr, Expr::Literal(_)) {
        if append(&mut c.loop_step) {
            return;
        }
        if let Expr::Call(call) = &mut c.loop_step.expr
            && call.func_name == operators::CONDITIONAL
            && let [_, step, otherwise] = call.args.as_mut_slice()
            && is_accu(otherwise)
            && append(step)
        {
            // The guard runs for every element, the item only for those that pass.
            wrap(&mut call.args[0], STEP_FN);
            return;
        }
    }
    wrap(&mut c.loop_step, STEP_FN);
}

/// Replaces `e` with `function(e)`, keeping its id.
fn wrap(e: &mut IdedExpr, function: &str) {
    let inner = std::mem::take(e);
    *e = IdedExpr {
        id: inner.id,
        expr: Expr::Call(CallExpr {
            func_name: function.to_owned(),
            target: None,
            args: vec![inner],
        }),
    };
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::json;

    use crate::{Activation, Expression};

    fn eval(src: &str, act: &Activation) -> Result<serde_json::Value, String> {
        Expression::compile(src)
            .unwrap()
            .evaluate(act)
            .map_err(|e| e.message)
    }

    fn hundred() -> Activation {
        let mut act = Activation::new();
        act.set("l", json!((0..100).collect::<Vec<_>>()));
        act
    }

    #[test]
    fn nested_comprehensions_stop_at_the_iteration_budget() {
        // 100^4 = 10^8 iterations (113 s unbounded) stop after 250,000.
        let err = eval(
            "l.all(a, l.all(b, l.all(c, l.all(d, a + b + c + d >= 0))))",
            &hundred(),
        )
        .unwrap_err();
        assert!(err.contains("more than 250000 macro iterations"), "{err}");
        // 100^2 is well within it.
        assert_eq!(
            eval("l.all(a, l.all(b, a + b >= 0))", &hundred()).unwrap(),
            json!(true)
        );
    }

    #[test]
    fn map_and_filter_are_counted_and_keep_their_results() {
        let act = hundred();
        assert_eq!(
            eval("size(l.map(x, x * 2).filter(y, y % 4 == 0))", &act).unwrap(),
            json!(50)
        );
        assert_eq!(eval("l.exists_one(x, x == 7)", &act).unwrap(), json!(true));
        let err = eval("l.map(a, l.map(b, l.map(c, l.filter(d, d > a))))", &act).unwrap_err();
        assert!(err.contains("macro iterations"), "{err}");
    }

    #[test]
    fn a_growing_string_stops_at_the_size_budget() {
        // Each `replace` multiplies the length by ten: 10^8 bytes unbounded.
        let mut act = Activation::new();
        act.set("s", json!("a"));
        let chain = (0..8).fold("s".to_owned(), |e, _| {
            format!("{e}.replace('a', 'aaaaaaaaaa')")
        });
        let err = eval(&chain, &act).unwrap_err();
        assert!(err.contains("built more than 16 MiB"), "{err}");
        assert_eq!(
            eval("s.replace('a', 'bb') + 'c'", &act).unwrap(),
            json!("bbc")
        );
    }

    #[test]
    fn each_evaluation_gets_a_fresh_budget() {
        let e = Expression::compile("l.all(a, l.all(b, a + b >= 0))").unwrap();
        let act = hundred();
        for _ in 0..50 {
            assert_eq!(e.evaluate(&act).unwrap(), json!(true));
        }
    }
}
