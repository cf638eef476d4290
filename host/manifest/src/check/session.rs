//! `stateful_session` blocks: each action's block, completed from the tool's shared one, has a
//! `create` and an `execute` request with URLs; `create`/`initialize` and
//! `destroy`/`teardown` (the tool page's names) are given once each; `extract` paths are
//! JSONPaths this host reads; `{session.*}` stands only where a session exists (not in
//! `create`) and names keys `extract` gives.

use std::collections::BTreeSet;

use super::{Checker, I, K, Seg, key_pos, node_at, pos_at, scopes, string_leaves};
use crate::load::Source;
use crate::model::Tool;
use crate::model::tool::StatefulSession;

pub(crate) fn check(c: &mut Checker, src: &Source, tool: &Tool) {
    // The keys `{session.*}` may read in a block: those its `extract` and the shared one's
    // give; `None` when no `extract` is written (the session is the whole create response).
    let own_keys = |s: &StatefulSession| -> Vec<String> {
        s.extract.iter().flatten().map(|(k, _)| k.clone()).collect()
    };
    let any_extract = tool
        .stateful_session
        .as_ref()
        .is_some_and(|s| s.extract.is_some())
        || tool
            .actions
            .iter()
            .filter_map(|a| a.execute.as_ref()?.stateful_session.as_ref())
            .any(|s| s.extract.is_some());
    let shared_keys: BTreeSet<String> = tool.stateful_session.iter().flat_map(own_keys).collect();
    if let Some(shared) = &tool.stateful_session {
        let mut keys = shared_keys.clone();
        for action in &tool.actions {
            if let Some(own) = action
                .execute
                .as_ref()
                .and_then(|e| e.stateful_session.as_ref())
            {
                keys.extend(own_keys(own));
            }
        }
        block(
            c,
            src,
            &[K("stateful_session")],
            shared,
            any_extract.then_some(&keys),
        );
    }
    for (i, action) in tool.actions.iter().enumerate() {
        let Some(own) = action
            .execute
            .as_ref()
            .and_then(|e| e.stateful_session.as_ref())
        else {
            continue;
        };
        let path = [K("actions"), I(i), K("execute"), K("stateful_session")];
        let mut keys = shared_keys.clone();
        keys.extend(own_keys(own));
        block(c, src, &path, own, any_extract.then_some(&keys));
        let Some(whole) = tool.execute_of(action).and_then(|e| e.stateful_session) else {
            continue;
        };
        let at = pos_at(&src.node, &path);
        let parts = [
            (
                "create",
                whole.create.as_ref().or(whole.initialize.as_ref()),
                true,
            ),
            ("execute", whole.execute.as_ref(), true),
            (
                "destroy",
                whole.destroy.as_ref().or(whole.teardown.as_ref()),
                false,
            ),
        ];
        for (name, req, required) in parts {
            match req {
                None if required => c.error(
                    src,
                    at,
                    format!("action `{}`: `stateful_session` needs a `{name}` request (here or in the tool's shared block)", action.name),
                ),
                Some(r) if r.url.is_none() => c.error(
                    src,
                    at,
                    format!("action `{}`: the session's `{name}` request needs a `url` (here or in the tool's shared block)", action.name),
                ),
                _ => {}
            }
        }
    }
}

/// One block as written (the tool's shared one or an action's), at `path`; `keys`: the
/// session keys its requests may read (`None`: any).
fn block(
    c: &mut Checker,
    src: &Source,
    path: &[Seg],
    session: &StatefulSession,
    keys: Option<&BTreeSet<String>>,
) {
    let sub = |key: &'static str| {
        let mut p = path.to_vec();
        p.push(K(key));
        p
    };
    for (alias, name, given) in [
        (
            "initialize",
            "create",
            session.create.is_some() && session.initialize.is_some(),
        ),
        (
            "teardown",
            "destroy",
            session.destroy.is_some() && session.teardown.is_some(),
        ),
    ] {
        if given {
            c.error(
                src,
                key_pos(&src.node, &sub(alias)),
                format!("`{alias}` is the tool page's name for `{name}`: give one of them"),
            );
        }
    }
    let requests = [
        ("create", &session.create, &scopes::SESSION_CREATE),
        ("initialize", &session.initialize, &scopes::SESSION_CREATE),
        ("execute", &session.execute, &scopes::SESSION_REQUEST),
        ("destroy", &session.destroy, &scopes::SESSION_REQUEST),
        ("teardown", &session.teardown, &scopes::SESSION_REQUEST),
    ];
    for (name, req, scope) in requests {
        let Some(req) = req else { continue };
        let at = sub(name);
        super::tool::http(c, src, &at, req, scope);
        if let Some(p) = &req.response_path {
            let mut rp = at.clone();
            rp.push(K("response_path"));
            json_path(c, src, &rp, p);
        }
        if let Some(keys) = keys
            && name != "create"
            && name != "initialize"
        {
            session_keys(c, src, &at, keys);
        }
    }
    for (key, p) in session.extract.iter().flatten() {
        let mut at = sub("extract");
        at.push(K(key));
        json_path(c, src, &at, p);
    }
}

/// Every `{session.<key>}` in the request at `path` names one of `keys`.
fn session_keys(c: &mut Checker, src: &Source, path: &[Seg], keys: &BTreeSet<String>) {
    let Some(node) = node_at(&src.node, path) else {
        return;
    };
    let mut leaves = Vec::new();
    string_leaves(node, &mut leaves);
    for leaf in leaves {
        let Some(template) = leaf
            .as_str()
            .and_then(|t| agentmesh_expr::Template::parse(t).ok())
        else {
            continue;
        };
        for (base, expr) in template.expressions() {
            for member in expr.members("session") {
                let Some(name) = member.name else { continue };
                if !keys.contains(&name) {
                    let written: Vec<&str> = keys.iter().map(String::as_str).collect();
                    c.error(
                        src,
                        leaf.pos_at(base + member.offset),
                        format!(
                            "`session.{name}` is not extracted: the session's `extract` gives {}",
                            if written.is_empty() {
                                "no key".to_owned()
                            } else {
                                written.join(", ")
                            }
                        ),
                    );
                }
            }
        }
    }
}

/// The JSONPath at `path` is one this host reads: `$`, then `.name`, `['name']` or `[index]`.
fn json_path(c: &mut Checker, src: &Source, path: &[Seg], text: &str) {
    if let Some(problem) = json_path_problem(text) {
        c.error(
            src,
            pos_at(&src.node, path),
            format!("`{text}` is not a JSONPath this host reads ({problem}); write e.g. `$.session.id` or `$.items[0]['name']`"),
        );
    }
}

/// Why `text` is not a JSONPath of the form `$` (`.name` | `['name']` | `[index]`)*.
pub(crate) fn json_path_problem(text: &str) -> Option<&'static str> {
    let Some(mut rest) = text.trim().strip_prefix('$') else {
        return Some("it must start with `$`");
    };
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            if end == 0 || r[..end].contains(['*', ']', '\'', '"', ' ']) {
                return Some("a `.` must be followed by a member name");
            }
            rest = &r[end..];
        } else if let Some(r) = rest.strip_prefix('[') {
            let Some(end) = r.find(']') else {
                return Some("a `[` is not closed");
            };
            let key = &r[..end];
            let quoted = key.len() >= 2
                && ((key.starts_with('\'') && key.ends_with('\''))
                    || (key.starts_with('"') && key.ends_with('"')));
            if !quoted && key.parse::<usize>().is_err() {
                return Some(
                    "`[…]` holds an index or a quoted name; filters and wildcards are not read",
                );
            }
            rest = &r[end + 1..];
        } else {
            return Some("after `$`, each step is `.name`, `['name']` or `[index]`");
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::json_path_problem;

    #[test]
    fn json_paths_of_members_and_indexes_are_read_and_others_refused() {
        for ok in [
            "$",
            "$.id",
            "$.data.session_id",
            "$['id']",
            "$.items[0].name",
            "$[\"a b\"]",
        ] {
            assert_eq!(json_path_problem(ok), None, "{ok}");
        }
        for bad in [
            "id",
            "$.",
            "$..id",
            "$.items[*]",
            "$[?(@.x)]",
            "$.a[0",
            "$x",
        ] {
            assert!(json_path_problem(bad).is_some(), "{bad}");
        }
    }
}
