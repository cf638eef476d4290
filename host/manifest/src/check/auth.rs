//! Auth providers: the host config's `auth` block (each provider has the fields of its type),
//! and the providers request templates name (`{auth.<provider>()}` names one the host config
//! has).

use agentmesh_expr::{Scope, Template};

use super::{Checker, K, Seg, key_pos, pos_at};
use crate::load::Source;
use crate::model::common::EnvValue;
use crate::model::host::{AuthKind, AuthProvider, HostConfig};
use crate::suggest::did_you_mean_hint;
use crate::yaml::Node;

/// The fields of a provider, and the type each belongs to.
const FIELDS: [(&str, AuthKind); 6] = [
    ("token", AuthKind::Bearer),
    ("token_url", AuthKind::OAuth2ClientCredentials),
    ("client_id", AuthKind::OAuth2ClientCredentials),
    ("client_secret", AuthKind::OAuth2ClientCredentials),
    ("scopes", AuthKind::OAuth2ClientCredentials),
    ("timeout", AuthKind::OAuth2ClientCredentials),
];

/// Checks each provider of `host` (in `src`): the fields its type needs are there, no field of
/// another type is, a token URL is an http(s) URL; adds the variables it reads to `vars`.
pub(super) fn providers<'a>(
    c: &mut Checker,
    src: &Source,
    host: &'a HostConfig,
    vars: &mut Vec<(Vec<Seg<'a>>, &'a str)>,
) {
    for (name, provider) in &host.auth {
        let at = |key: &'a str| vec![K("auth"), K(name), K(key)];
        let (kind, needs): (&str, &[&str]) = match provider.kind {
            AuthKind::Bearer => ("bearer", &["token"]),
            AuthKind::OAuth2ClientCredentials => (
                "oauth2_client_credentials",
                &["token_url", "client_id", "client_secret"],
            ),
        };
        for (field, belongs) in FIELDS {
            let given = given(provider, field);
            if belongs == provider.kind && needs.contains(&field) && !given {
                c.error(
                    src,
                    pos_at(&src.node, &[K("auth"), K(name)]),
                    format!("auth provider `{name}` of type `{kind}` needs `{field}`"),
                );
            } else if belongs != provider.kind && given {
                c.error(
                    src,
                    key_pos(&src.node, &at(field)),
                    format!("auth provider `{name}`: `{field}` is not a field of type `{kind}`"),
                );
            }
        }
        if let Some(url) = &provider.token_url
            && !(url.starts_with("http://") || url.starts_with("https://"))
        {
            c.error(
                src,
                pos_at(&src.node, &at("token_url")),
                format!("auth provider `{name}`: `token_url` must be an http:// or https:// URL, found `{url}`"),
            );
        }
        let secrets = [
            ("token", &provider.token),
            ("client_id", &provider.client_id),
            ("client_secret", &provider.client_secret),
        ];
        for (field, value) in secrets {
            if let Some(EnvValue::Env { env }) = value {
                let mut path = at(field);
                path.push(K("env"));
                vars.push((path, env));
            }
        }
    }
}

fn given(p: &AuthProvider, field: &str) -> bool {
    match field {
        "token" => p.token.is_some(),
        "token_url" => p.token_url.is_some(),
        "client_id" => p.client_id.is_some(),
        "client_secret" => p.client_secret.is_some(),
        "scopes" => p.scopes.is_some(),
        _ => p.timeout.is_some(),
    }
}

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
