//! `openapi` blocks, without loading the document (the engine loads it when it compiles the
//! plan, see `agentmesh_engine::plan::openapi`): an action ends up with a `url` and an
//! `operation`, names its operation once, and `base_url` and `security` credentials are
//! templates over `settings`.

use super::{Checker, I, K, Seg, key_pos, pos_at, scopes};
use crate::load::Source;
use crate::model::Tool;
use crate::model::tool::OpenApi;

/// Checks tool `tool`'s shared `openapi` block, then each action's own block and what the two
/// make together.
pub(super) fn check(c: &mut Checker, src: &Source, tool: &Tool) {
    if let Some(shared) = &tool.openapi {
        fields(c, src, &[K("openapi")], shared);
    }
    for (i, action) in tool.actions.iter().enumerate() {
        let Some(own) = action.execute.as_ref().and_then(|e| e.openapi.as_ref()) else {
            continue;
        };
        let path = [K("actions"), I(i), K("execute"), K("openapi")];
        fields(c, src, &path, own);
        let Some(openapi) = tool.execute_of(action).and_then(|e| e.openapi) else {
            continue;
        };
        let at = key_pos(&src.node, &path);
        if openapi.url.is_none() {
            c.error(
                src,
                at,
                format!(
                    "action `{}`: `openapi` needs a `url` (here or in the tool's shared block)",
                    action.name
                ),
            );
        }
        if openapi.operation().is_none() {
            c.error(
                src,
                at,
                format!(
                    "action `{}`: `openapi` needs an `operation` (the `operationId` it calls)",
                    action.name
                ),
            );
        }
    }
}

/// One block's own fields: `operation` named once, templates over `settings`, a `url` that is
/// not a template.
fn fields(c: &mut Checker, src: &Source, path: &[Seg], block: &OpenApi) {
    let at = |key: &'static str| {
        let mut p = path.to_vec();
        p.push(K(key));
        p
    };
    if block.operation.is_some() && block.operation_id.is_some() {
        c.error(
            src,
            key_pos(&src.node, &at("operation_id")),
            "`operation_id` is another name of `operation`; set one of them",
        );
    }
    if let Some(url) = &block.url
        && url.contains('{')
    {
        c.error(
            src,
            pos_at(&src.node, &at("url")),
            format!(
                "the `openapi` url `{url}` is not a template (tool.md: interpolation does not \
                 apply to it); use `base_url` for a server that comes from settings"
            ),
        );
    }
    c.template(src, &at("base_url"), &scopes::OPENAPI);
    c.templates_in(src, &at("security"), &scopes::OPENAPI);
}
