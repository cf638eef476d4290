//! Which root names each place in a manifest may read.

use crate::{Expression, Template};

/// The variables available at one place in a manifest, e.g. a binding (`context`, `runtime`,
/// `now`) or an event filter (`event`, `parameters`).
#[derive(Debug, Clone, Copy)]
pub struct Scope {
    /// How the place is named in messages ("a binding", "a guardrail before step").
    pub place: &'static str,
    /// The root names it may read, aliases included.
    pub roots: &'static [&'static str],
    /// Whether the asynchronous `review(user)` macro may be called here.
    pub review: bool,
}

/// A reference an expression may not make at its place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScopeError {
    /// Offset of the offending name in the source, in characters.
    pub offset: usize,
    /// The name as written.
    pub name: String,
    /// What is wrong and what is available.
    pub message: String,
}

impl Scope {
    /// Checks every root and global call of `expr`; returns one error per offending place.
    pub fn check(&self, expr: &Expression) -> Vec<ScopeError> {
        self.check_at(expr, 0)
    }

    /// Checks every expression of a template, offsets relative to the template's source.
    pub fn check_template(&self, template: &Template) -> Vec<ScopeError> {
        template
            .expressions()
            .flat_map(|(offset, expr)| self.check_at(expr, offset))
            .collect()
    }

    fn check_at(&self, expr: &Expression, base: usize) -> Vec<ScopeError> {
        let mut errors: Vec<ScopeError> = expr
            .roots()
            .iter()
            .filter(|r| !self.roots.contains(&r.name.as_str()))
            .map(|r| ScopeError {
                offset: base + r.offset,
                name: r.name.clone(),
                message: format!(
                    "`{}` is not available in {} (available: {})",
                    r.name,
                    self.place,
                    self.available()
                ),
            })
            .collect();
        if !self.review {
            errors.extend(
                expr.calls()
                    .iter()
                    .filter(|c| c.name == "review")
                    .map(|c| ScopeError {
                        offset: base + c.offset,
                        name: c.name.clone(),
                        message: format!("`review()` is not available in {}", self.place),
                    }),
            );
        }
        errors.sort_by_key(|e| e.offset);
        errors
    }

    fn available(&self) -> String {
        if self.roots.is_empty() {
            "nothing".into()
        } else {
            self.roots.join(", ")
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const BINDING: Scope = Scope {
        place: "a binding",
        roots: &["context", "c", "runtime", "now"],
        review: false,
    };

    #[test]
    fn unknown_roots_are_reported_where_they_stand() {
        let e = Expression::compile("buoyant-systems").unwrap();
        let errs = BINDING.check(&e);
        assert_eq!(errs.len(), 2);
        assert_eq!((errs[0].name.as_str(), errs[0].offset), ("buoyant", 0));
        assert_eq!((errs[1].name.as_str(), errs[1].offset), ("systems", 8));
        assert!(
            errs[0]
                .message
                .contains("available: context, c, runtime, now")
        );
    }

    #[test]
    fn review_outside_middleware_is_reported() {
        let e = Expression::compile("review(context.user.id)").unwrap();
        let errs = BINDING.check(&e);
        assert_eq!(errs.len(), 1);
        assert!(errs[0].message.contains("review()"));
    }

    #[test]
    fn template_offsets_are_relative_to_the_template() {
        let t = Template::parse("Hi {user.name}!").unwrap();
        let errs = BINDING.check_template(&t);
        assert_eq!(errs[0].offset, 4);
    }
}
