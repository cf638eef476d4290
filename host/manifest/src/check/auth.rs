//! The auth providers request templates name: `{auth.<provider>()}` names one the host config
//! has (the providers themselves resolve in [`crate::credentials`]).

use agentmesh_expr::{Scope, Template};

use super::Checker;
use crate::load::Source;
use crate::suggest::did_you_mean_hint;
use crate::yaml::Node;

impl Checker<'_> {
    /// Every provider `template` (the string at `node`) names is one the host config has, and
    /// `auth` is read only by provider. Only in places whose `scope` has `auth`.
    pub(super) fn auth_providers(
        &mut self,
        source: &Source,
        node: &Node,
        template: &Template,
        scope: &Scope,
    ) {
        if !scope.roots.contains(&"auth") {
            return;
        }
        let config = self.config;
        let known: Vec<&str> = config
            .host
            .iter()
            .flat_map(|h| h.value.auth.keys().map(String::as_str))
            .collect();
        for (base, expr) in template.expressions() {
            for member in expr.members("auth") {
                let pos = node.pos_at(base + member.offset);
                match member.name {
                    None => self.error(
                        source,
                        pos,
                        "`auth` is read by provider name: write `auth.<provider>()`",
                    ),
                    Some(name) if !known.contains(&name.as_str()) => {
                        let hint = if known.is_empty() {
                            " (the host config has no `auth` block)".to_owned()
                        } else {
                            did_you_mean_hint(&name, known.iter().copied())
                        };
                        self.error(
                            source,
                            pos,
                            format!("unknown auth provider `{name}`: the host config's `auth` does not name it{hint}"),
                        );
                    }
                    Some(_) => {}
                }
            }
        }
    }
}
