//! `{…}` templates: text with holes, each hole a CEL expression.
//!
//! `{{` and `}}` stand for literal braces. Inside a hole, braces nest and string literals may
//! hold any character, so `{ {'a': 1}.a }` and `{ '}' }` are single holes.

use std::fmt::Write as _;

use cel::common::types::CelString;
use serde_json::Value as Json;

use crate::eval::result_json;
use crate::expression::Lexed;
use crate::{Activation, CompileError, EvalError, Expression};

/// A parsed template.
#[derive(Debug)]
pub struct Template {
    source: String,
    segments: Vec<Segment>,
}

/// One piece of a template.
#[derive(Debug)]
pub enum Segment {
    /// Text copied as it is (escapes already resolved).
    Text(String),
    /// A hole: the compiled expression and the offset of its first character in the
    /// template's source, in characters.
    Expr(usize, Expression),
}

/// A rendered piece of a template.
#[derive(Debug)]
pub enum Rendered<'t> {
    /// The template's own text.
    Text(&'t str),
    /// A hole's value (a string as it is, any other value as JSON) and its expression.
    Value(String, &'t Expression),
}

impl Template {
    /// Parses and compiles every hole of `source`. The error's offset is in characters from the
    /// start of the template.
    pub fn parse(source: &str) -> Result<Template, CompileError> {
        let chars: Vec<char> = source.chars().collect();
        let mut segments = Vec::new();
        let mut text = String::new();
        let mut i = 0;
        while i < chars.len() {
            match chars[i] {
                '{' if chars.get(i + 1) == Some(&'{') => {
                    text.push('{');
                    i += 2;
                }
                '}' if chars.get(i + 1) == Some(&'}') => {
                    text.push('}');
                    i += 2;
                }
                '}' => {
                    return Err(CompileError {
                        offset: i,
                        message: "unmatched `}` (write `}}` for a literal brace)".into(),
                    });
                }
                '{' => {
                    let start = i + 1;
                    let end = hole_end(&chars[start..])
                        .map(|n| start + n)
                        .ok_or(CompileError {
                            offset: i,
                            message: "unclosed `{` (write `{{` for a literal brace)".into(),
                        })?;
                    let inner: String = chars[start..end].iter().collect();
                    if inner.trim().is_empty() {
                        return Err(CompileError {
                            offset: i,
                            message: "empty `{}` in template".into(),
                        });
                    }
                    let expr = Expression::compile(&inner).map_err(|e| CompileError {
                        offset: start + e.offset,
                        message: e.message,
                    })?;
                    if !text.is_empty() {
                        segments.push(Segment::Text(std::mem::take(&mut text)));
                    }
                    segments.push(Segment::Expr(start, expr));
                    i = end + 1;
                }
                c => {
                    text.push(c);
                    i += 1;
                }
            }
        }
        if !text.is_empty() {
            segments.push(Segment::Text(text));
        }
        Ok(Template {
            source: source.to_owned(),
            segments,
        })
    }

    /// The source as written.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The pieces of the template, in order.
    pub fn segments(&self) -> &[Segment] {
        &self.segments
    }

    /// Every hole with the offset of its expression in the template's source.
    pub fn expressions(&self) -> impl Iterator<Item = (usize, &Expression)> {
        self.segments.iter().filter_map(|s| match s {
            Segment::Expr(offset, e) => Some((*offset, e)),
            Segment::Text(_) => None,
        })
    }

    /// Whether the template has no holes.
    pub fn is_literal(&self) -> bool {
        self.expressions().next().is_none()
    }

    /// Renders the template: strings are inserted as they are, other values as JSON.
    pub fn render(&self, activation: &Activation) -> Result<String, EvalError> {
        let mut out = String::new();
        for piece in self.render_pieces(activation)? {
            match piece {
                Rendered::Text(t) => out.push_str(t),
                Rendered::Value(v, _) => out.push_str(&v),
            }
        }
        Ok(out)
    }

    /// Renders each hole as [`Template::render`] inserts it, keeping the template's text and
    /// the values apart: for a caller that escapes each value for where it lands (a URL).
    pub fn render_pieces(&self, activation: &Activation) -> Result<Vec<Rendered<'_>>, EvalError> {
        let mut pieces = Vec::with_capacity(self.segments.len());
        for segment in &self.segments {
            match segment {
                Segment::Text(t) => pieces.push(Rendered::Text(t)),
                Segment::Expr(_, e) => {
                    let mut value = String::new();
                    crate::budget::offloaded(e.iterates(), || {
                        activation.eval(e.metered(), |v| {
                            match v.downcast_ref::<CelString>() {
                                Some(s) => value.push_str(s.inner()),
                                None => {
                                    let json = result_json(v)?;
                                    // Writing to a `String` cannot fail.
                                    let _ = write!(value, "{json}");
                                }
                            }
                            Ok(())
                        })
                    })
                    .map_err(|err| hole_error(e, &err))?;
                    pieces.push(Rendered::Value(value, e));
                }
            }
        }
        Ok(pieces)
    }

    /// Renders a template that is exactly one hole to the hole's value, keeping its type
    /// (`"{parameters.count}"` gives a number); any other template renders to a string.
    pub fn render_value(&self, activation: &Activation) -> Result<Json, EvalError> {
        match self.segments.as_slice() {
            [Segment::Expr(_, e)] => e.evaluate(activation).map_err(|err| hole_error(e, &err)),
            _ => self.render(activation).map(Json::String),
        }
    }
}

/// An evaluation error naming the hole it came from (a template may have many).
fn hole_error(hole: &Expression, err: &EvalError) -> EvalError {
    EvalError {
        message: format!("`{{{}}}`: {}", hole.source(), err.message),
        needs_review: err.needs_review.clone(),
    }
}

/// The index (relative to `chars`) of the `}` closing a hole that starts at `chars[0]`.
fn hole_end(chars: &[char]) -> Option<usize> {
    let text: String = chars.iter().collect();
    let mut depth = 0usize;
    for (offset, c) in Lexed::new(&text) {
        match c {
            Some('{') => depth += 1,
            Some('}') if depth == 0 => return Some(offset),
            Some('}') => depth -= 1,
            _ => {}
        }
    }
    None
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn renders_text_and_holes() {
        let t = Template::parse("PR #{event.payload.number} by {event.payload.user}").unwrap();
        let mut act = Activation::new();
        act.set("event", json!({"payload": {"number": 7, "user": "alice"}}));
        assert_eq!(t.render(&act).unwrap(), "PR #7 by alice");
    }

    #[test]
    fn braces_nest_and_strings_hide_braces() {
        let t = Template::parse("{ {'a': '}'}.a }{{x}}").unwrap();
        assert_eq!(t.render(&Activation::new()).unwrap(), "}{x}");
    }

    #[test]
    fn single_hole_keeps_its_type() {
        let t = Template::parse("{1 + 2}").unwrap();
        assert_eq!(t.render_value(&Activation::new()).unwrap(), json!(3));
    }

    #[test]
    fn errors_point_into_the_template() {
        let err = Template::parse("ab {c +} d").unwrap_err();
        assert!(err.offset >= 4, "{err:?}");
        let err = Template::parse("ab {c").unwrap_err();
        assert_eq!(err.offset, 3);
        assert!(err.message.contains("unclosed"));
        let err = Template::parse("a } b").unwrap_err();
        assert_eq!(err.offset, 2);
    }
}
