//! Which parts of a large root variable (the task context) expressions read, so the caller
//! can build only those parts.

use std::collections::{BTreeMap, BTreeSet};

use cel::common::ast::{EntryExpr, Expr, IdedExpr, LiteralValue, operators};

use crate::{Expression, Template};

/// The parts of a root that expressions read: everything, or some first-level fields —
/// each whole or only some of its second-level keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Needs {
    /// The root is used as a whole (or in a way that is not a field selection).
    All,
    /// First-level field → `None` for the whole field, or the second-level keys read.
    Fields(BTreeMap<String, Option<BTreeSet<String>>>),
}

impl Default for Needs {
    fn default() -> Self {
        Needs::Fields(BTreeMap::new())
    }
}

impl Needs {
    /// Whether nothing is read.
    pub fn is_empty(&self) -> bool {
        matches!(self, Needs::Fields(f) if f.is_empty())
    }

    /// Whether first-level `field` is read, and which of its keys (`None`: all).
    pub fn field(&self, field: &str) -> Option<Option<&BTreeSet<String>>> {
        match self {
            Needs::All => Some(None),
            Needs::Fields(f) => f.get(field).map(Option::as_ref),
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

    fn insert(&mut self, field: &str, key: Option<&str>) {
        let Needs::Fields(fields) = self else { return };
        match (fields.get_mut(field), key) {
            (Some(None), _) => {}
            (Some(Some(keys)), Some(k)) => {
                keys.insert(k.to_owned());
            }
            (Some(slot @ Some(_)), None) => *slot = None,
            (None, key) => {
                fields.insert(
                    field.to_owned(),
                    key.map(|k| BTreeSet::from([k.to_owned()])),
                );
            }
        }
    }
}

fn is_root(e: &IdedExpr, names: &[&str]) -> bool {
    matches!(&e.expr, Expr::Ident(n) if names.contains(&n.as_str()))
}

/// `root.f` → Some(f).
fn first_field<'a>(e: &'a IdedExpr, names: &[&str]) -> Option<&'a str> {
    match &e.expr {
        Expr::Select(s) if is_root(&s.operand, names) => Some(&s.field),
        _ => None,
    }
}

fn walk(e: &IdedExpr, names: &[&str], needs: &mut Needs) {
    if matches!(needs, Needs::All) {
        return;
    }
    match &e.expr {
        Expr::Ident(_) if is_root(e, names) => *needs = Needs::All,
        Expr::Select(s) => {
            if let Some(f) = first_field(&s.operand, names) {
                needs.insert(f, Some(&s.field));
            } else if is_root(&s.operand, names) {
                needs.insert(&s.field, None);
            } else {
                walk(&s.operand, names, needs);
            }
        }
        Expr::Call(c) => {
            if c.func_name == operators::INDEX
                && c.args.len() == 2
                && let (Some(f), Expr::Literal(LiteralValue::String(k))) =
                    (first_field(&c.args[0], names), &c.args[1].expr)
            {
                needs.insert(f, Some(k.inner()));
                return;
            }
            if let Some(t) = &c.target {
                walk(t, names, needs);
            }
            for a in &c.args {
                walk(a, names, needs);
            }
        }
        Expr::Comprehension(c) => {
            for part in [
                &c.iter_range,
                &c.accu_init,
                &c.loop_cond,
                &c.loop_step,
                &c.result,
            ] {
                walk(part, names, needs);
            }
        }
        Expr::List(l) => l.elements.iter().for_each(|x| walk(x, names, needs)),
        Expr::Map(m) => {
            for entry in &m.entries {
                if let EntryExpr::MapEntry(me) = &entry.expr {
                    walk(&me.key, names, needs);
                    walk(&me.value, names, needs);
                }
            }
        }
        Expr::Struct(s) => {
            for entry in &s.entries {
                match &entry.expr {
                    EntryExpr::StructField(f) => walk(&f.value, names, needs),
                    EntryExpr::MapEntry(me) => {
                        walk(&me.key, names, needs);
                        walk(&me.value, names, needs);
                    }
                }
            }
        }
        _ => {}
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

    #[test]
    fn field_selections_narrow_what_is_needed() {
        let n = needs(
            "context.capabilities['github_pr'].count_successful < 20 && c.user.id != '' && c.capabilities.calc.count_errored == 0",
        );
        assert_eq!(
            n.field("capabilities"),
            Some(Some(&BTreeSet::from([
                "calc".to_owned(),
                "github_pr".to_owned()
            ])))
        );
        assert_eq!(
            n.field("user"),
            Some(Some(&BTreeSet::from(["id".to_owned()])))
        );
        assert_eq!(n.field("input"), None);
    }

    #[test]
    fn whole_uses_need_everything() {
        assert_eq!(needs("size(context) > 0"), Needs::All);
        assert_eq!(needs("context.input[0].message"), {
            let mut n = Needs::default();
            n.insert("input", None);
            n
        });
        let dynamic = needs("context.capabilities[input.name].count_successful > 0");
        assert_eq!(dynamic.field("capabilities"), Some(None));
    }
}
