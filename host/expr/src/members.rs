//! The members an expression selects of a root: which auth providers a request names
//! (`auth.<provider>()`, read as the field `auth.<provider>`, see `expression`), which
//! `session` keys it reads.

use cel::common::ast::{Expr, IdedExpr, LiteralValue, operators};

use crate::Expression;
use crate::needs::for_each_child;

/// One use of a root in an expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// The member selected (`github` in `auth.github()` or `auth['github']`); `None` when the
    /// root is read otherwise (whole, or by a computed key).
    pub name: Option<String>,
    /// Offset of the root's identifier in the expression's source, in characters.
    pub offset: usize,
}

impl Expression {
    /// Every use of root `root` (a free identifier), in source order, with the member it
    /// selects.
    pub fn members(&self, root: &str) -> Vec<Member> {
        let info = self.program().source_info();
        let at = |id| info.offset_for(id).map_or(0, |(start, _)| start as usize);
        let mut out = Vec::new();
        walk(self.tree(), root, &mut |id, name| {
            out.push(Member {
                name,
                offset: at(id),
            })
        });
        out.sort_by_key(|m| m.offset);
        out.dedup();
        out
    }
}

/// `visit(id of the root identifier, member)` for every use of `root`.
fn walk(e: &IdedExpr, root: &str, visit: &mut impl FnMut(u64, Option<String>)) {
    let is_root = |x: &IdedExpr| matches!(&x.expr, Expr::Ident(n) if n == root);
    match &e.expr {
        Expr::Ident(_) if is_root(e) => visit(e.id, None),
        Expr::Select(s) if is_root(&s.operand) => visit(s.operand.id, Some(s.field.clone())),
        Expr::Call(c)
            if c.func_name == operators::INDEX && c.args.len() == 2 && is_root(&c.args[0]) =>
        {
            match &c.args[1].expr {
                Expr::Literal(LiteralValue::String(key)) => {
                    visit(c.args[0].id, Some(key.inner().to_owned()))
                }
                _ => {
                    visit(c.args[0].id, None);
                    walk(&c.args[1], root, visit);
                }
            }
        }
        _ => for_each_child(e, |child| walk(child, root, visit)),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::json;

    use crate::{Activation, Expression, Template};

    fn members(src: &str, root: &str) -> Vec<(Option<String>, usize)> {
        Expression::compile(src)
            .unwrap()
            .members(root)
            .into_iter()
            .map(|m| (m.name, m.offset))
            .collect()
    }

    #[test]
    fn a_provider_call_reads_the_provider_as_a_field() {
        let t = Template::parse("{auth.github()} and { auth . crm ( ) } and {auth.plain}").unwrap();
        let mut act = Activation::new();
        act.set(
            "auth",
            json!({"github": "Bearer a", "crm": "Bearer b", "plain": "Bearer c"}),
        );
        assert_eq!(
            t.render(&act).unwrap(),
            "Bearer a and Bearer b and Bearer c"
        );
    }

    #[test]
    fn only_the_root_is_rewritten() {
        // A method of another value, a longer name and text in a string keep their calls.
        let e =
            Expression::compile("input.auth.size() + size(oauth.x) + 'auth.x()'.size()").unwrap();
        assert!(e.members("auth").is_empty());
        assert_eq!(e.roots()[1].name, "oauth");
    }

    #[test]
    fn members_name_what_is_selected_and_where() {
        assert_eq!(
            members("auth.github() + auth['crm']", "auth"),
            [(Some("github".into()), 0), (Some("crm".into()), 16)]
        );
        assert_eq!(
            members("session.id + string(session)", "session"),
            [(Some("id".into()), 0), (None, 20)]
        );
        assert_eq!(members("auth[input.p]", "auth"), [(None, 0)]);
    }
}
