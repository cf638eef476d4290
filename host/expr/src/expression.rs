//! Compiling one CEL expression: guards against hostile input, the `has(event)` and
//! `auth.<provider>()` rewrites, positions of errors and of the root names an expression
//! references.

use std::collections::HashSet;
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};

use cel::common::ast::{EntryExpr, Expr, IdedExpr};
use cel::{ParseErrors, Program};

use crate::env::{ENV, HAS_VALUE_FN};

/// The longest expression the host compiles. Manifests are written by people; a larger
/// expression is almost certainly generated or hostile, and the parser's work grows with it.
pub const MAX_EXPRESSION_LEN: usize = 16 * 1024;

/// The deepest bracket nesting the host hands to the parser. The CEL parser recurses per level;
/// an input like `((((…` thousands deep would overflow the stack and abort the process, which
/// no `catch_unwind` can stop, so depth is bounded before parsing.
pub const MAX_NESTING: usize = 48;

/// The deepest expression tree the host evaluates. Evaluation recurses once per level of the
/// tree, and an operator chain (`1 + 1 + … + 1`, `a && b && …`) nests one level per operator
/// without a single bracket: a 2 KB chain of 1,000 terms passed the bracket limit and
/// overflowed a worker's stack at its first evaluation, aborting the host (and again at every
/// restart, which replayed the turn). Bounded at compile time, with the place it is passed.
pub const MAX_DEPTH: usize = 100;

/// A compiled CEL expression. Cheap to evaluate many times; compile it once at load.
pub struct Expression {
    source: String,
    program: Program,
    /// The tree that is evaluated: the program's, with the evaluation budget's counting calls
    /// in place (see `budget`).
    metered: Box<IdedExpr>,
    /// Whether it holds a macro (see [`crate::budget::offload_iterating_with`]).
    iterates: bool,
    roots: Vec<RootRef>,
    calls: Vec<RootRef>,
}

/// A root name an expression reads (`context` in `context.user.id`), and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RootRef {
    /// The identifier as written.
    pub name: String,
    /// Offset of the identifier in the expression's source, in characters.
    pub offset: usize,
}

/// Why an expression did not compile, and where in its source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompileError {
    /// Offset in the expression's source, in characters, of the first problem.
    pub offset: usize,
    /// What is wrong, in the parser's words.
    pub message: String,
}

impl fmt::Display for CompileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for CompileError {}

impl fmt::Debug for Expression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Expression").field(&self.source).finish()
    }
}

impl Expression {
    /// Compiles `source` with the host's environment.
    pub fn compile(source: &str) -> Result<Expression, CompileError> {
        guard(source)?;
        let rewritten = rewrite_member_calls(&rewrite_has_event(source));
        let parsed = catch_unwind(AssertUnwindSafe(|| ENV.compile(&rewritten)));
        let program = match parsed {
            Ok(Ok(program)) => program,
            Ok(Err(errors)) => return Err(first_error(&rewritten, &errors)),
            Err(_) => {
                return Err(CompileError {
                    offset: 0,
                    message: "the CEL parser could not handle this expression".into(),
                });
            }
        };
        if let Some(id) = too_deep(program.expression()) {
            let offset = program
                .source_info()
                .offset_for(id)
                .map_or(0, |(start, _)| start as usize);
            return Err(CompileError {
                offset,
                message: format!(
                    "expression nests more than {MAX_DEPTH} levels deep (operator chains count one level per operator); split it up"
                ),
            });
        }
        let (roots, calls) = collect_names(&program, &rewritten);
        Ok(Expression {
            source: source.to_owned(),
            metered: Box::new(crate::budget::instrument(program.expression())),
            iterates: crate::budget::iterates(program.expression()),
            program,
            roots,
            calls,
        })
    }

    /// The source as written in the manifest.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Every free identifier the expression reads, in source order (comprehension variables
    /// such as the `x` of `list.filter(x, x > 1)` excluded).
    pub fn roots(&self) -> &[RootRef] {
        &self.roots
    }

    /// Every global function the expression calls (`review(…)`, `size(…)`), in source order.
    pub fn calls(&self) -> &[RootRef] {
        &self.calls
    }

    /// The parsed tree (macros expanded, `has(event)` read as `__h(event)`), for analyses
    /// that read the expression's structure instead of parsing its source again.
    pub fn tree(&self) -> &IdedExpr {
        self.program.expression()
    }

    pub(crate) fn program(&self) -> &Program {
        &self.program
    }

    /// Whether the expression holds a macro (`all`, `map`, …): its evaluations may run long.
    pub fn iterates(&self) -> bool {
        self.iterates
    }

    /// The tree to evaluate (counting against the evaluation's budget).
    pub(crate) fn metered(&self) -> &IdedExpr {
        &self.metered
    }
}

/// Refuses input the parser must not see: too long, or nested too deep.
fn guard(source: &str) -> Result<(), CompileError> {
    if source.len() > MAX_EXPRESSION_LEN {
        return Err(CompileError {
            offset: 0,
            message: format!(
                "expression is {} bytes long; the limit is {MAX_EXPRESSION_LEN}",
                source.len()
            ),
        });
    }
    let mut depth = 0usize;
    for (offset, c) in Lexed::new(source) {
        match c {
            Some('(' | '[' | '{') => {
                depth += 1;
                if depth > MAX_NESTING {
                    return Err(CompileError {
                        offset,
                        message: format!("expression nests brackets more than {MAX_NESTING} deep"),
                    });
                }
            }
            Some(')' | ']' | '}') => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    Ok(())
}

/// Characters of CEL source with their offsets; characters inside string literals and
/// comments come out as `None`, so callers only see code.
pub(crate) struct Lexed<'a> {
    chars: std::iter::Peekable<std::iter::Enumerate<std::str::Chars<'a>>>,
    quote: Option<(char, bool)>,
    comment: bool,
}

impl<'a> Lexed<'a> {
    pub(crate) fn new(source: &'a str) -> Self {
        Lexed {
            chars: source.chars().enumerate().peekable(),
            quote: None,
            comment: false,
        }
    }
}

impl Iterator for Lexed<'_> {
    type Item = (usize, Option<char>);

    fn next(&mut self) -> Option<Self::Item> {
        let (offset, c) = self.chars.next()?;
        if self.comment {
            if c == '\n' {
                self.comment = false;
            }
            return Some((offset, None));
        }
        if let Some((q, triple)) = self.quote {
            if c == '\\' {
                self.chars.next();
            } else if c == q {
                if !triple {
                    self.quote = None;
                } else if self.chars.peek().map(|p| p.1) == Some(q) {
                    self.chars.next();
                    if self.chars.peek().map(|p| p.1) == Some(q) {
                        self.chars.next();
                        self.quote = None;
                    }
                }
            }
            return Some((offset, None));
        }
        match c {
            '\'' | '"' => {
                let triple = {
                    let mut ahead = self.chars.clone();
                    ahead.next().map(|p| p.1) == Some(c) && ahead.next().map(|p| p.1) == Some(c)
                };
                if triple {
                    self.chars.next();
                    self.chars.next();
                }
                self.quote = Some((c, triple));
                Some((offset, None))
            }
            '/' if self.chars.peek().map(|p| p.1) == Some('/') => {
                self.comment = true;
                Some((offset, None))
            }
            _ => Some((offset, Some(c))),
        }
    }
}

/// Rewrites every `has(event)` to `__h(event)`: CEL's `has` macro only accepts a field
/// selection, while the spec's `!has(event) || …` asks whether a variable is set. The
/// replacement has the same length, so error positions need no mapping.
fn rewrite_has_event(source: &str) -> String {
    let chars: Vec<char> = source.chars().collect();
    let code: Vec<Option<char>> = Lexed::new(source).map(|(_, c)| c).collect();
    let mut out = chars;
    let is_ident = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
    let mut i = 0;
    while i + 3 <= code.len() {
        let is_has = code[i..i + 3] == [Some('h'), Some('a'), Some('s')]
            && (i == 0 || !(is_ident(code[i - 1]) || code[i - 1] == Some('.')));
        if is_has {
            let mut j = i + 3;
            let skip_ws = |j: &mut usize| {
                while *j < code.len() && code[*j].is_some_and(char::is_whitespace) {
                    *j += 1;
                }
            };
            skip_ws(&mut j);
            if code.get(j) == Some(&Some('(')) {
                j += 1;
                skip_ws(&mut j);
                let word: String = code[j.min(code.len())..]
                    .iter()
                    .take_while(|c| is_ident(**c))
                    .flatten()
                    .collect();
                let mut k = j + word.chars().count();
                skip_ws(&mut k);
                if word == "event" && code.get(k) == Some(&Some(')')) {
                    for (slot, c) in out[i..i + 3].iter_mut().zip(HAS_VALUE_FN.chars()) {
                        *slot = c;
                    }
                }
            }
        }
        i += 1;
    }
    out.into_iter().collect()
}

/// The roots whose member calls without arguments are read as fields: `auth.github()` is
/// `auth.github`, the header value of provider `github`. Both forms are in the spec.
const MEMBER_CALL_ROOTS: &[&str] = &["auth"];

/// `auth.x()` → `auth.x  ` (same length: positions stay where they were), outside strings
/// and comments, where `auth` is a root (not preceded by `.` or part of a longer name).
fn rewrite_member_calls(source: &str) -> String {
    let code: Vec<Option<char>> = Lexed::new(source).map(|(_, c)| c).collect();
    let mut out: Vec<char> = source.chars().collect();
    let is_ident = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
    let skip_ws = |mut j: usize| {
        while j < code.len() && code[j].is_some_and(char::is_whitespace) {
            j += 1;
        }
        j
    };
    for root in MEMBER_CALL_ROOTS {
        let n = root.chars().count();
        let word: Vec<Option<char>> = root.chars().map(Some).collect();
        let mut i = 0;
        while i + n <= code.len() {
            let starts = code[i..i + n] == word[..]
                && (i == 0 || !(is_ident(code[i - 1]) || code[i - 1] == Some('.')))
                && !is_ident(code.get(i + n).copied().flatten());
            i += 1;
            if !starts {
                continue;
            }
            let mut j = skip_ws(i - 1 + n);
            if code.get(j) != Some(&Some('.')) {
                continue;
            }
            j = skip_ws(j + 1);
            let name_len = code[j..].iter().take_while(|c| is_ident(**c)).count();
            if name_len == 0 {
                continue;
            }
            let open = skip_ws(j + name_len);
            if code.get(open) != Some(&Some('(')) {
                continue;
            }
            let close = skip_ws(open + 1);
            if code.get(close) == Some(&Some(')')) {
                out[open] = ' ';
                out[close] = ' ';
            }
        }
    }
    out.into_iter().collect()
}

/// The first parse error as an offset into the source.
fn first_error(source: &str, errors: &ParseErrors) -> CompileError {
    let Some(error) = errors.errors.first() else {
        return CompileError {
            offset: 0,
            message: "invalid CEL".into(),
        };
    };
    let (line, col) = error.pos;
    let line = usize::try_from(line).unwrap_or(1).max(1);
    let col = usize::try_from(col).unwrap_or(0);
    let mut offset = 0;
    for (n, text) in source.split_inclusive('\n').enumerate() {
        if n + 1 == line {
            offset += col.min(text.chars().count());
            break;
        }
        offset += text.chars().count();
    }
    CompileError {
        offset: offset.min(source.chars().count()),
        message: error.msg.clone(),
    }
}

/// The free identifiers and the global calls of a program, with their offsets.
fn collect_names(program: &Program, source: &str) -> (Vec<RootRef>, Vec<RootRef>) {
    let mut roots = Vec::new();
    let mut calls = Vec::new();
    let mut bound = Vec::new();
    let info = program.source_info();
    let at = |id| info.offset_for(id).map_or(0, |(start, _)| start as usize);
    walk(
        program.expression(),
        &mut bound,
        &mut |id, name, is_call| {
            let r = RootRef {
                name: name.to_owned(),
                offset: at(id),
            };
            if is_call {
                calls.push(r)
            } else {
                roots.push(r)
            }
        },
    );
    (tidy(roots, source), tidy(calls, source))
}

/// Sorted by place, one entry per name and place (a macro expansion reuses ids), internal
/// names dropped.
fn tidy(mut refs: Vec<RootRef>, source: &str) -> Vec<RootRef> {
    let mut seen = HashSet::new();
    refs.retain(|r| {
        r.name != HAS_VALUE_FN
            && r.name.starts_with(|c: char| c.is_ascii_alphabetic())
            && seen.insert((r.name.clone(), r.offset))
    });
    refs.sort_by_key(|r| r.offset);
    let len = source.chars().count();
    for r in &mut refs {
        r.offset = r.offset.min(len);
    }
    refs
}

/// The id of the first node deeper than [`MAX_DEPTH`], if any. Iterative: the tree it checks
/// may be deep enough to overflow a recursive walk.
fn too_deep(root: &IdedExpr) -> Option<u64> {
    let mut stack = vec![(root, 1usize)];
    while let Some((expr, depth)) = stack.pop() {
        if depth > MAX_DEPTH {
            return Some(expr.id);
        }
        let mut push = |e| stack.push((e, depth + 1));
        match &expr.expr {
            Expr::Call(call) => {
                call.target.iter().for_each(|t| push(t));
                call.args.iter().for_each(&mut push);
            }
            Expr::Comprehension(c) => {
                for e in [
                    &c.iter_range,
                    &c.accu_init,
                    &c.loop_cond,
                    &c.loop_step,
                    &c.result,
                ] {
                    push(e);
                }
            }
            Expr::List(list) => list.elements.iter().for_each(push),
            Expr::Map(m) => m.entries.iter().for_each(|e| entry(&e.expr, &mut push)),
            Expr::Struct(s) => s.entries.iter().for_each(|e| entry(&e.expr, &mut push)),
            Expr::Select(select) => push(&select.operand),
            Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => {}
        }
    }
    None
}

/// The expressions of a map or struct entry.
fn entry<'a>(e: &'a EntryExpr, push: &mut impl FnMut(&'a IdedExpr)) {
    match e {
        EntryExpr::StructField(field) => push(&field.value),
        EntryExpr::MapEntry(e) => {
            push(&e.key);
            push(&e.value);
        }
    }
}

fn walk<'a>(expr: &'a IdedExpr, bound: &mut Vec<&'a str>, visit: &mut impl FnMut(u64, &str, bool)) {
    match &expr.expr {
        Expr::Ident(name) => {
            if !name.starts_with('@') && !bound.contains(&name.as_str()) {
                visit(expr.id, name, false);
            }
        }
        Expr::Call(call) => {
            match &call.target {
                Some(target) => walk(target, bound, visit),
                None => visit(expr.id, &call.func_name, true),
            }
            for arg in &call.args {
                walk(arg, bound, visit);
            }
        }
        Expr::Comprehension(comp) => {
            walk(&comp.iter_range, bound, visit);
            walk(&comp.accu_init, bound, visit);
            let depth = bound.len();
            bound.push(&comp.iter_var);
            if let Some(v) = &comp.iter_var2 {
                bound.push(v);
            }
            bound.push(&comp.accu_var);
            walk(&comp.loop_cond, bound, visit);
            walk(&comp.loop_step, bound, visit);
            walk(&comp.result, bound, visit);
            bound.truncate(depth);
        }
        Expr::List(list) => {
            for e in &list.elements {
                walk(e, bound, visit);
            }
        }
        Expr::Map(map) => {
            for entry in &map.entries {
                match &entry.expr {
                    EntryExpr::StructField(field) => walk(&field.value, bound, visit),
                    EntryExpr::MapEntry(e) => {
                        walk(&e.key, bound, visit);
                        walk(&e.value, bound, visit);
                    }
                }
            }
        }
        Expr::Select(select) => walk(&select.operand, bound, visit),
        Expr::Struct(s) => {
            for entry in &s.entries {
                match &entry.expr {
                    EntryExpr::StructField(field) => walk(&field.value, bound, visit),
                    EntryExpr::MapEntry(e) => {
                        walk(&e.key, bound, visit);
                        walk(&e.value, bound, visit);
                    }
                }
            }
        }
        Expr::Literal(_) | Expr::Unspecified => {}
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn roots(src: &str) -> Vec<(String, usize)> {
        Expression::compile(src)
            .unwrap()
            .roots()
            .iter()
            .map(|r| (r.name.clone(), r.offset))
            .collect()
    }

    #[test]
    fn roots_are_free_identifiers_with_offsets() {
        assert_eq!(
            roots("context.user.id == input.owner"),
            vec![("context".into(), 0), ("input".into(), 19)]
        );
    }

    #[test]
    fn comprehension_variables_are_not_roots() {
        assert_eq!(
            roots("input.items.filter(x, x > limit).size() > 0"),
            vec![("input".into(), 0), ("limit".into(), 26)]
        );
    }

    #[test]
    fn has_event_compiles_and_keeps_event_as_root() {
        assert_eq!(
            roots("!has(event) || event.author != 'bot'"),
            vec![("event".into(), 5), ("event".into(), 15)]
        );
    }

    #[test]
    fn has_inside_strings_is_not_rewritten() {
        let e = Expression::compile("'has(event)' == x").unwrap();
        assert_eq!(e.roots()[0].name, "x");
    }

    #[test]
    fn syntax_error_points_into_the_source() {
        let err = Expression::compile("a &&\n  b ||| c").unwrap_err();
        assert!(err.offset >= 5, "{err:?}");
    }

    #[test]
    fn unquoted_literal_compiles_to_a_subtraction() {
        // The spec's `owner: "buoyant-systems"` parses, as two roots: validate catches it.
        assert_eq!(
            roots("buoyant-systems"),
            vec![("buoyant".into(), 0), ("systems".into(), 8)]
        );
    }

    #[test]
    fn an_operator_chain_deeper_than_the_limit_is_refused_with_its_place() {
        let chain = |terms: usize| vec!["1"; terms].join(" + ");
        // `n` terms nest `n - 1` additions; the literals sit one level below the last.
        let fits = Expression::compile(&chain(MAX_DEPTH - 1)).unwrap();
        assert_eq!(
            fits.evaluate(&crate::Activation::new()).unwrap(),
            serde_json::json!(MAX_DEPTH - 1)
        );
        let err = Expression::compile(&chain(1000)).unwrap_err();
        assert!(err.message.contains("more than 100 levels"), "{err}");
        assert!(err.offset > 0, "{err:?}");
        // A field path nests one level per step.
        let path = format!("input{}", ".a".repeat(500));
        let err = Expression::compile(&path).unwrap_err();
        assert!(err.message.contains("levels deep"), "{err}");
        // The parser balances chains of `&&` and `||`: 500 conditions are 9 levels.
        Expression::compile(&vec!["true"; 500].join(" && ")).unwrap();
    }

    /// The deepest expression of each nesting kind that still compiles: `wrap` nests one more
    /// level around its argument, from `seed`.
    fn deepest(seed: &str, wrap: impl Fn(&str) -> String) -> Expression {
        let mut text = seed.to_owned();
        let mut last = Expression::compile(&text).unwrap();
        loop {
            let deeper = wrap(&text);
            match Expression::compile(&deeper) {
                Ok(e) => (text, last) = (deeper, e),
                Err(_) => return last,
            }
        }
    }

    #[test]
    fn the_deepest_expressions_that_compile_evaluate_on_a_quarter_of_a_workers_stack() {
        // Tokio workers (where turns evaluate) get 2 MiB; these run on 512 KiB, so whatever
        // compiles evaluates there with room to spare.
        // Each kind: its innermost expression, and one level of nesting around `@`.
        let kinds = [
            ("1", "1 + @"),
            ("1", "[@][0]"),
            ("1", "true ? @ : 0"),
            ("'a'", "string(@)"),
            ("1", "{'k': @}.k"),
            ("true", "[1].all(x, @)"),
            ("[1]", "@.map(x, x + 1)"),
            ("'a'", "@.replace('a', 'ab')"),
        ];
        for (seed, level) in kinds {
            let expr = deepest(seed, |e| level.replace('@', e));
            let evaluated = std::thread::Builder::new()
                .stack_size(512 * 1024)
                .spawn(move || expr.evaluate(&crate::Activation::new()).is_ok())
                .unwrap()
                .join();
            assert_eq!(evaluated.ok(), Some(true), "from `{seed}`");
        }
    }

    #[test]
    fn deep_nesting_is_refused_before_parsing() {
        let src = "(".repeat(10_000);
        let err = Expression::compile(&src).unwrap_err();
        assert!(err.message.contains("nests"), "{err:?}");
    }
}
