//! Which parts of a large root variable (the task context) expressions read, so the caller
//! can build only those parts.

use std::collections::BTreeMap;

use cel::common::ast::{EntryExpr, Expr, IdedExpr, LiteralValue, operators};

use crate::{Expression, Template};

/// The parts of a root that expressions read, as a tree: the root whole, or some of its
/// fields, each whole or some of its own fields, and so on down the selections written out
/// (`context.capabilities.calc.count_successful`, `context['user'].id`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Needs {
    /// Used as a whole (or in a way that is not a chain of field selections).
    All,
    /// Only these fields, each with what is read of it.
    Fields(BTreeMap<String, Needs>),
}

impl Default for Needs {
    fn default() -> Self {
        Needs::Fields(BTreeMap::new())
    }
}

/// What is read of a field of a value read whole.
static ALL: Needs = Needs::All;

impl Needs {
    /// Whether nothing is read.
    pub fn is_empty(&self) -> bool {
        matches!(self, Needs::Fields(f) if f.is_empty())
    }

    /// Whether the value is read whole.
    pub fn is_all(&self) -> bool {
        matches!(self, Needs::All)
    }

    /// What is read of field `field` (`None`: nothing).
    pub fn field(&self, field: &str) -> Option<&Needs> {
        match self {
            Needs::All => Some(&ALL),
            Needs::Fields(f) => f.get(field),
        }
    }

    /// Adds what `expr` reads of the roots named `names` (a root and its aliases).
    pub fn add(&mut self, expr: &Expression, names: &[&str]) {
        if matches!(self, Needs::All)
            || !expr
                .roots()
                .iter()
                .any(|r| names.contains(&r.name.as_str()))
        {
            return;
        }
        walk(expr.program().expression(), names, self);
    }

    /// Adds what every hole of `template` reads.
    pub fn add_template(&mut self, template: &Template, names: &[&str]) {
        for (_, e) in template.expressions() {
            self.add(e, names);
        }
    }

    /// Marks the value at `path` as read whole.
    fn insert(&mut self, path: &[&str]) {
        let mut node = self;
        for field in path {
            match node {
                Needs::All => return,
                Needs::Fields(fields) => node = fields.entry((*field).to_owned()).or_default(),
            }
        }
        *node = Needs::All;
    }
}

fn is_root(e: &IdedExpr, names: &[&str]) -> bool {
    matches!(&e.expr, Expr::Ident(n) if names.contains(&n.as_str()))
}

/// `root.a.b['c']` → `[a, b, c]` (a root alone → `[]`); `None` when `e` is not a chain of
/// field selections and string-literal indexes on a root.
fn path<'a>(e: &'a IdedExpr, names: &[&str]) -> Option<Vec<&'a str>> {
    match &e.expr {
        Expr::Ident(_) if is_root(e, names) => Some(Vec::new()),
        Expr::Select(s) => {
            let mut p = path(&s.operand, names)?;
            p.push(&s.field);
            Some(p)
        }
        Expr::Call(c) if c.func_name == operators::INDEX && c.args.len() == 2 => {
            let Expr::Literal(LiteralValue::String(key)) = &c.args[1].expr else {
                return None;
            };
            let mut p = path(&c.args[0], names)?;
            p.push(key.inner());
            Some(p)
        }
        _ => None,
    }
}

fn walk(e: &IdedExpr, names: &[&str], needs: &mut Needs) {
    if matches!(needs, Needs::All) {
        return;
    }
    if let Some(p) = path(e, names) {
        needs.insert(&p);
        return;
    }
    for_each_child(e, |child| walk(child, names, needs));
}

/// Calls `f` on each direct subexpression of `e`: what a walk of the tree descends into.
pub(crate) fn for_each_child<'a>(e: &'a IdedExpr, mut f: impl FnMut(&'a IdedExpr)) {
    match &e.expr {
        Expr::Select(s) => f(&s.operand),
        Expr::Call(c) => {
            if let Some(t) = &c.target {
                f(t);
            }
            c.args.iter().for_each(&mut f);
        }
        Expr::Comprehension(c) => {
            for part in [
                &c.iter_range,
                &c.accu_init,
                &c.loop_cond,
                &c.loop_step,
                &c.result,
            ] {
                f(part);
            }
        }
        Expr::List(l) => l.elements.iter().for_each(&mut f),
        Expr::Map(m) => m
            .entries
            .iter()
            .for_each(|en| entry_children(&en.expr, &mut f)),
        Expr::Struct(s) => s
            .entries
            .iter()
            .for_each(|en| entry_children(&en.expr, &mut f)),
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => {}
    }
}

fn entry_children<'a>(e: &'a EntryExpr, f: &mut impl FnMut(&'a IdedExpr)) {
    match e {
        EntryExpr::StructField(field) => f(&field.value),
        EntryExpr::MapEntry(me) => {
            f(&me.key);
            f(&me.value);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn needs(src: &str) -> Needs {
        let mut n = Needs::default();
        n.add(&Expression::compile(src).unwrap(), &["context", "c"]);
        n
    }

    /// The fields read under `path`, or `None` when it is read whole (or not at all).
    fn fields<'a>(n: &'a Needs, path: &[&str]) -> Option<Vec<&'a str>> {
        let mut node = n;
        for f in path {
            node = node.field(f)?;
        }
        match node {
            Needs::All => None,
            Needs::Fields(f) => Some(f.keys().map(String::as_str).collect()),
        }
    }

    #[test]
    fn field_selections_narrow_what_is_needed() {
        let n = needs(
            "context.capabilities['github_pr'].count_successful < 20 && c.user.id != '' && c.capabilities.calc.count_errored == 0 && has(c.capabilities.calc.inputs)",
        );
        assert_eq!(fields(&n, &[]), Some(vec!["capabilities", "user"]));
        assert_eq!(
            fields(&n, &["capabilities"]),
            Some(vec!["calc", "github_pr"])
        );
        assert_eq!(
            fields(&n, &["capabilities", "calc"]),
            Some(vec!["count_errored", "inputs"])
        );
        assert!(
            n.field("capabilities")
                .unwrap()
                .field("calc")
                .unwrap()
                .field("inputs")
                .unwrap()
                .is_all()
        );
        assert_eq!(fields(&n, &["user"]), Some(vec!["id"]));
        assert_eq!(n.field("input"), None);
    }

    #[test]
    fn whole_uses_need_everything() {
        assert_eq!(needs("size(context) > 0"), Needs::All);
        assert_eq!(needs("context.input[0].message"), {
            let mut n = Needs::default();
            n.insert(&["input"]);
            n
        });
        let dynamic = needs("context.capabilities[input.name].count_successful > 0");
        assert!(dynamic.field("capabilities").unwrap().is_all());
        // A selection below a value read whole changes nothing.
        let n = needs("size(c.user) > 0 && c.user.id != '' && c.capabilities.calc.all(k, k != '')");
        assert!(n.field("user").unwrap().is_all());
        assert!(
            n.field("capabilities")
                .unwrap()
                .field("calc")
                .unwrap()
                .is_all()
        );
        assert_eq!(Needs::All.field("x"), Some(&Needs::All));
    }
}
