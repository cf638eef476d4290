//! Reading a filter's syntax tree once: which allow-list sets it references and how, and which
//! of its top-level conjuncts pin a parameter to a value computed from the event alone.
//!
//! It reads the tree the host compiled ([`Expression::tree`]), never the source again: macros
//! are expanded there (`list.exists(x, …)` is a comprehension) and `has(event)` is `__h(event)`.
//! Everything this module cannot read is treated conservatively: a use of `parameters` it
//! cannot name references every set, and a conjunct it cannot render is not a pin.

use std::collections::BTreeMap;

use agentmesh_expr::Expression;
use cel::common::ast::operators;
use cel::common::ast::{CallExpr, EntryExpr, Expr, IdedExpr, LiteralValue};

/// The root a filter's allow-list sets are read through.
const PARAMETERS: &str = "parameters";
/// The root of the event.
const EVENT: &str = "event";

/// What a filter references and which conjuncts the index can use.
#[derive(Debug)]
pub(crate) struct Analysis {
    pub(crate) parameters: Parameters,
    pub(crate) pins: Vec<Pin>,
}

/// The allow-list sets a filter references.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Parameters {
    /// These, by name.
    Named(BTreeMap<String, Binding>),
    /// `parameters` is used in a way the analysis cannot name (`parameters` alone,
    /// `parameters[event.x]`): every set of the task counts as referenced.
    All,
}

/// How a referenced set is bound when the filter is evaluated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Binding {
    /// One value per evaluation, every choice tried (CONTRACT §5).
    Each,
    /// The whole set as a list, when every reference is the right side of `in`: then
    /// `x in parameters.X` is membership in the set, as the spec reads it, in one evaluation.
    /// (Bound one value at a time, `x in v` would test membership in a single string, which
    /// CEL rejects.)
    Whole,
}

/// A top-level conjunct `<event side> == parameters.X` (either way round), or
/// `<event side> in parameters.X` for a set referenced only on the right of `in` (then bound
/// as a whole list), where the event side reads nothing but `event`. Whenever the filter is
/// true, the event side's value equals one of X's values, so routing looks that value up
/// instead of trying every subscription.
#[derive(Debug)]
pub struct Pin {
    parameter: String,
    event_side: Expression,
    membership: bool,
}

impl Pin {
    /// The parameter whose set the conjunct reads (`X` of `parameters.X`).
    pub fn parameter(&self) -> &str {
        &self.parameter
    }

    /// The event side, compiled on its own (its source is regenerated from the tree, so it
    /// is fully parenthesised rather than the text as written).
    pub fn event_side(&self) -> &Expression {
        &self.event_side
    }

    /// Whether the conjunct is `… in parameters.X` rather than `… == parameters.X`.
    pub fn is_membership(&self) -> bool {
        self.membership
    }
}

/// Analyses `expression`, a compiled filter.
pub(crate) fn analyse(expression: &Expression) -> Analysis {
    let tree = expression.tree();
    let mut refs = References::default();
    refs.visit(tree, false);
    let parameters = if refs.unnamed {
        Parameters::All
    } else {
        Parameters::Named(refs.named)
    };
    let mut conjuncts = Vec::new();
    flatten_and(tree, &mut conjuncts);
    let pins = conjuncts
        .into_iter()
        .filter_map(|c| pin(c, &parameters))
        .collect();
    Analysis { parameters, pins }
}

#[derive(Default)]
struct References {
    named: BTreeMap<String, Binding>,
    unnamed: bool,
}

impl References {
    /// Records the references in `expr`; `in_set` says `expr` is the right side of `in`.
    fn visit(&mut self, expr: &IdedExpr, in_set: bool) {
        if let Some(name) = parameter_name(expr) {
            let binding = if in_set {
                Binding::Whole
            } else {
                Binding::Each
            };
            let entry = self.named.entry(name.to_owned()).or_insert(binding);
            if binding == Binding::Each {
                *entry = Binding::Each;
            }
            return;
        }
        match &expr.expr {
            Expr::Ident(name) => self.unnamed |= name == PARAMETERS,
            Expr::Call(call) => {
                if let Some(target) = &call.target {
                    self.visit(target, false);
                }
                let is_in = call.func_name == operators::IN && call.target.is_none();
                for (i, arg) in call.args.iter().enumerate() {
                    self.visit(arg, is_in && i == 1);
                }
            }
            _ => children(expr, &mut |child| self.visit(child, false)),
        }
    }
}

/// `X` when `expr` is `parameters.X` or `parameters['X']`.
fn parameter_name(expr: &IdedExpr) -> Option<&str> {
    match &expr.expr {
        Expr::Select(select) if !select.test && is_ident(&select.operand, PARAMETERS) => {
            Some(&select.field)
        }
        Expr::Call(CallExpr {
            func_name,
            target: None,
            args,
        }) if func_name == operators::INDEX => match args.as_slice() {
            [operand, key] if is_ident(operand, PARAMETERS) => match &key.expr {
                Expr::Literal(LiteralValue::String(s)) => Some(s.inner()),
                _ => None,
            },
            _ => None,
        },
        _ => None,
    }
}

fn is_ident(expr: &IdedExpr, name: &str) -> bool {
    matches!(&expr.expr, Expr::Ident(n) if n == name)
}

/// The operands of a top-level chain of `&&`.
fn flatten_and<'a>(expr: &'a IdedExpr, out: &mut Vec<&'a IdedExpr>) {
    match &expr.expr {
        Expr::Call(call) if call.func_name == operators::LOGICAL_AND && call.target.is_none() => {
            for arg in &call.args {
                flatten_and(arg, out);
            }
        }
        _ => out.push(expr),
    }
}

/// The pin a conjunct makes, if it is one.
fn pin(conjunct: &IdedExpr, parameters: &Parameters) -> Option<Pin> {
    let Expr::Call(call) = &conjunct.expr else {
        return None;
    };
    let [left, right] = call.args.as_slice() else {
        return None;
    };
    if call.target.is_some() {
        return None;
    }
    let (parameter, event_side, membership) = match call.func_name.as_str() {
        operators::EQUALS => match (parameter_name(left), parameter_name(right)) {
            (None, Some(name)) => (name, left, false),
            (Some(name), None) => (name, right, false),
            _ => return None,
        },
        operators::IN => {
            let name = parameter_name(right)?;
            let whole = matches!(parameters, Parameters::Named(named)
                if named.get(name) == Some(&Binding::Whole));
            if !whole {
                return None;
            }
            (name, left, true)
        }
        _ => return None,
    };
    if !reads_only_event(event_side) {
        return None;
    }
    let mut source = String::new();
    render(event_side, &mut source)?;
    let event_side = Expression::compile(&source).ok()?;
    Some(Pin {
        parameter: parameter.to_owned(),
        event_side,
        membership,
    })
}

/// Whether every name `expr` reads is `event` (reading none is fine too).
fn reads_only_event(expr: &IdedExpr) -> bool {
    match &expr.expr {
        Expr::Ident(name) => name == EVENT,
        Expr::Comprehension(_) | Expr::Struct(_) | Expr::Unspecified => false,
        _ => {
            let mut only = true;
            children(expr, &mut |child| only &= reads_only_event(child));
            only
        }
    }
}

/// Calls `f` on each direct child of `expr`.
fn children<'a>(expr: &'a IdedExpr, f: &mut impl FnMut(&'a IdedExpr)) {
    match &expr.expr {
        Expr::Call(call) => {
            if let Some(target) = &call.target {
                f(target);
            }
            call.args.iter().for_each(f);
        }
        Expr::Comprehension(comp) => {
            for child in [
                &comp.iter_range,
                &comp.accu_init,
                &comp.loop_cond,
                &comp.loop_step,
                &comp.result,
            ] {
                f(child);
            }
        }
        Expr::List(list) => list.elements.iter().for_each(f),
        Expr::Map(map) => entries(&map.entries, f),
        Expr::Struct(s) => entries(&s.entries, f),
        Expr::Select(select) => f(&select.operand),
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => {}
    }
}

fn entries<'a>(entries: &'a [cel::common::ast::IdedEntryExpr], f: &mut impl FnMut(&'a IdedExpr)) {
    for entry in entries {
        match &entry.expr {
            EntryExpr::StructField(field) => f(&field.value),
            EntryExpr::MapEntry(e) => {
                f(&e.key);
                f(&e.value);
            }
        }
    }
}

/// The infix spelling of a binary operator.
fn infix(function: &str) -> Option<&'static str> {
    Some(match function {
        operators::EQUALS => "==",
        operators::NOT_EQUALS => "!=",
        operators::LESS => "<",
        operators::LESS_EQUALS => "<=",
        operators::GREATER => ">",
        operators::GREATER_EQUALS => ">=",
        operators::ADD => "+",
        operators::SUBSTRACT => "-",
        operators::MULTIPLY => "*",
        operators::DIVIDE => "/",
        operators::MODULO => "%",
        operators::LOGICAL_AND => "&&",
        operators::LOGICAL_OR => "||",
        operators::IN => "in",
        _ => return None,
    })
}

/// Writes CEL source for `expr`, every operator parenthesised so that no precedence rule can
/// change its meaning; `None` for a construct it does not write (the conjunct is then not a
/// pin, never a wrong one).
fn render(expr: &IdedExpr, out: &mut String) -> Option<()> {
    match &expr.expr {
        Expr::Ident(name) if is_identifier(name) => out.push_str(name),
        Expr::Literal(literal) => render_literal(literal, out),
        Expr::Select(select) if !select.test && is_identifier(&select.field) => {
            render(&select.operand, out)?;
            out.push('.');
            out.push_str(&select.field);
        }
        // `has(x.f)`, which the compiler expands into a testing selection.
        Expr::Select(select) if is_identifier(&select.field) => {
            out.push_str("has(");
            render(&select.operand, out)?;
            out.push('.');
            out.push_str(&select.field);
            out.push(')');
        }
        Expr::Call(call) => render_call(call, out)?,
        Expr::List(list) if list.optional_indices.is_empty() => {
            out.push('[');
            render_list(&list.elements, out)?;
            out.push(']');
        }
        Expr::Map(map) => {
            out.push('{');
            for (i, entry) in map.entries.iter().enumerate() {
                let EntryExpr::MapEntry(e) = &entry.expr else {
                    return None;
                };
                if e.optional {
                    return None;
                }
                if i > 0 {
                    out.push_str(", ");
                }
                render(&e.key, out)?;
                out.push_str(": ");
                render(&e.value, out)?;
            }
            out.push('}');
        }
        _ => return None,
    }
    Some(())
}

fn render_call(call: &CallExpr, out: &mut String) -> Option<()> {
    let name = call.func_name.as_str();
    match (call.target.as_deref(), call.args.as_slice()) {
        (None, [left, right]) if infix(name).is_some() => {
            out.push('(');
            render(left, out)?;
            out.push(' ');
            out.push_str(infix(name)?);
            out.push(' ');
            render(right, out)?;
            out.push(')');
        }
        (None, [operand]) if name == operators::LOGICAL_NOT || name == operators::NEGATE => {
            out.push('(');
            out.push(if name == operators::NEGATE { '-' } else { '!' });
            render(operand, out)?;
            out.push(')');
        }
        (None, [operand, index]) if name == operators::INDEX || name == operators::OPT_INDEX => {
            render(operand, out)?;
            out.push_str(if name == operators::INDEX { "[" } else { "[?" });
            render(index, out)?;
            out.push(']');
        }
        (None, [operand, field]) if name == operators::OPT_SELECT => {
            let Expr::Literal(LiteralValue::String(field)) = &field.expr else {
                return None;
            };
            if !is_identifier(field.inner()) {
                return None;
            }
            render(operand, out)?;
            out.push_str(".?");
            out.push_str(field.inner());
        }
        (None, [condition, then, otherwise]) if name == operators::CONDITIONAL => {
            out.push('(');
            render(condition, out)?;
            out.push_str(" ? ");
            render(then, out)?;
            out.push_str(" : ");
            render(otherwise, out)?;
            out.push(')');
        }
        (target, args) if is_identifier(name) => {
            if let Some(target) = target {
                render(target, out)?;
                out.push('.');
            }
            out.push_str(name);
            out.push('(');
            render_list(args, out)?;
            out.push(')');
        }
        _ => return None,
    }
    Some(())
}

fn render_list(items: &[IdedExpr], out: &mut String) -> Option<()> {
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        render(item, out)?;
    }
    Some(())
}

fn render_literal(literal: &LiteralValue, out: &mut String) {
    match literal {
        LiteralValue::Boolean(b) => out.push_str(if *b.inner() { "true" } else { "false" }),
        LiteralValue::Null => out.push_str("null"),
        LiteralValue::Int(i) => out.push_str(&i.inner().to_string()),
        LiteralValue::UInt(u) => {
            out.push_str(&u.inner().to_string());
            out.push('u');
        }
        // Debug writes a form that reads back as the same double (`1.0`, `1e20`); the
        // non-finite values have no literal and fail to compile, dropping the pin.
        LiteralValue::Double(d) => out.push_str(&format!("{:?}", d.inner())),
        LiteralValue::String(s) => {
            out.push('"');
            for c in s.inner().chars() {
                match c {
                    '"' => out.push_str("\\\""),
                    '\\' => out.push_str("\\\\"),
                    '\n' => out.push_str("\\n"),
                    '\r' => out.push_str("\\r"),
                    '\t' => out.push_str("\\t"),
                    c if c.is_control() => out.push_str(&format!("\\u{:04x}", u32::from(c))),
                    c => out.push(c),
                }
            }
            out.push('"');
        }
        LiteralValue::Bytes(bytes) => {
            out.push_str("b\"");
            for b in bytes.inner() {
                out.push_str(&format!("\\x{b:02x}"));
            }
            out.push('"');
        }
    }
}

fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // Tests unwrap what they just built.
mod tests {
    use agentmesh_expr::Activation;
    use serde_json::json;

    use super::*;

    fn named(pairs: &[(&str, Binding)]) -> Parameters {
        Parameters::Named(pairs.iter().map(|(n, b)| ((*n).to_owned(), *b)).collect())
    }

    fn analyse(source: &str) -> Analysis {
        super::analyse(&Expression::compile(source).unwrap())
    }

    fn pins(source: &str) -> Vec<(String, String, bool)> {
        analyse(source)
            .pins
            .into_iter()
            .map(|p| (p.parameter, p.event_side.source().to_owned(), p.membership))
            .collect()
    }

    #[test]
    fn member_and_index_references_are_named() {
        let a = analyse("event.payload.a == parameters.a && parameters['b'].size() > 0");
        assert_eq!(
            a.parameters,
            named(&[("a", Binding::Each), ("b", Binding::Each)])
        );
    }

    #[test]
    fn sets_only_on_the_right_of_in_are_bound_whole() {
        let a = analyse("event.x in parameters.xs && parameters.y in event.ys");
        assert_eq!(
            a.parameters,
            named(&[("xs", Binding::Whole), ("y", Binding::Each)])
        );
        let mixed = analyse("event.x in parameters.xs || parameters.xs == 'a'");
        assert_eq!(mixed.parameters, named(&[("xs", Binding::Each)]));
    }

    #[test]
    fn unnamed_uses_reference_every_set() {
        for source in [
            "size(parameters) > 0",
            "parameters[event.key] == 'x'",
            "parameters.?a.hasValue()",
        ] {
            assert_eq!(analyse(source).parameters, Parameters::All, "{source}");
        }
    }

    #[test]
    fn pins_are_top_level_conjuncts_over_the_event_alone() {
        assert_eq!(
            pins(
                "event.payload.repository.owner.login == parameters.owner && \
                 parameters['repo'] == event.payload.repository.name && \
                 event.name == 'comment'"
            ),
            [
                (
                    "owner".into(),
                    "event.payload.repository.owner.login".into(),
                    false
                ),
                ("repo".into(), "event.payload.repository.name".into(), false),
            ]
        );
        assert_eq!(
            pins("event.payload.user.lowerAscii() in parameters.users"),
            [(
                "users".into(),
                "event.payload.user.lowerAscii()".into(),
                true
            )]
        );
    }

    #[test]
    fn disjunctions_and_mixed_sides_are_not_pins() {
        for source in [
            "!has(event) || event.payload.a == parameters.a",
            "event.a == parameters.a || event.b == parameters.b",
            "parameters.a == parameters.b",
            "event.a + parameters.b == parameters.a",
            "event.items.exists(x, x == 'a') == parameters.a",
            "event.a in parameters.a && parameters.a != 'x'",
        ] {
            assert!(pins(source).is_empty(), "{source}");
        }
    }

    #[test]
    fn rendered_event_sides_evaluate_like_the_original() {
        let event = json!({
            "name": "comment",
            "payload": {"a": "Alice", "n": 3, "xs": ["p", "q"], "m": {"k": "v"}, "f": 1.5},
        });
        let mut act = Activation::new();
        act.set("event", event);
        for side in [
            "event.payload.a",
            "event.payload.a.lowerAscii()",
            "event.payload.f + 1.0 * 2.0",
            "-event.payload.f - -2.0",
            "event.payload.f / 2.0 - 0.25 >= 0.5",
            "event.payload.xs[1]",
            "event.payload['m'].k",
            "event.payload.?missing.orValue('d\"\\n')",
            "event.payload.n > 2 ? 'big' : 'small'",
            "size(event.payload.xs) == 2 + 0 ? [1, 2.5] : {'k': b'\\x00'}",
            "has(event.payload.a) && !has(event.payload.z)",
            "event.payload.a + '\u{7}é'",
            "event.payload.f * 2.0",
        ] {
            let source = format!("({side}) == parameters.p");
            let [(_, rendered, _)] = pins(&source).try_into().unwrap();
            let original = Expression::compile(side).unwrap().evaluate(&act).unwrap();
            let again = Expression::compile(&rendered)
                .unwrap()
                .evaluate(&act)
                .unwrap();
            assert_eq!(original, again, "{side} rendered as {rendered}");
        }
    }
}
