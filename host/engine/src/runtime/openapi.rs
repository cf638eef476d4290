//! Runs an `openapi` action: the call's values placed where the operation's document says
//! (path, query, header, cookie, JSON body), the credentials of its security schemes added,
//! and the request sent and read as `stateless_http`'s is ([`super::send_operation`]), with
//! the header values of the auth providers its credentials name (`{auth.<provider>()}`).

use agentmesh_expr::{Activation, Template};
use serde_json::{Map, Value};

use super::ActionResult;
use crate::Engine;
use crate::plan::openapi::{Body, CredentialKind, OpenApiPlan, Place, basic_credential};

/// Calls the operation of `op` with the action's `input` (defaults filled in, optional
/// parameters absent when not given); `act` holds `settings`, and the header values of the
/// auth providers its credentials name are added as `auth`.
pub(super) async fn call(
    engine: &Engine,
    op: &OpenApiPlan,
    act: &Activation,
    input: &Value,
) -> ActionResult {
    let sent = super::authorized(engine, &op.auth, act, async |act| {
        let (req, shown) = request(engine, op, act, input)?;
        super::send_operation(req, &shown).await
    })
    .await;
    match sent {
        Ok(answer) => super::operation_result(&engine.secrets(), answer, op.json_response),
        Err(failed) => failed,
    }
}

/// The request of `op` for `input` with the variables of `act`, and its URL as errors show
/// it; `Err` when the values make no request.
fn request(
    engine: &Engine,
    op: &OpenApiPlan,
    act: &Activation,
    input: &Value,
) -> Result<(reqwest::RequestBuilder, String), ActionResult> {
    let empty = Map::new();
    let input = input.as_object().unwrap_or(&empty);
    let base = match op.base_url.render(act) {
        Ok(b) => b,
        Err(e) => return Err(ActionResult::Recoverable(format!("base_url: {e}"))),
    };
    let mut path = op.path.clone();
    let mut query: Vec<(String, String)> = Vec::new();
    let mut headers: Vec<(String, String)> = Vec::new();
    let mut cookies: Vec<String> = Vec::new();
    for (name, place) in &op.params {
        let Some(value) = input.get(name).filter(|v| !v.is_null()) else {
            if *place == Place::Path {
                return Err(ActionResult::Recoverable(format!(
                    "missing path parameter `{name}`"
                )));
            }
            continue;
        };
        match place {
            Place::Path => {
                path = path.replace(&format!("{{{name}}}"), &super::url::encode(&text(value)));
            }
            // An array is sent as the parameter repeated (OpenAPI's default `form`, exploded).
            Place::Query => match value {
                Value::Array(items) => {
                    query.extend(items.iter().map(|i| (name.clone(), text(i))));
                }
                other => query.push((name.clone(), text(other))),
            },
            Place::Header => headers.push((name.clone(), text(value))),
            Place::Cookie => cookies.push(format!("{name}={}", text(value))),
        }
    }
    let mut authorization = None;
    for c in &op.security {
        let value = match credential(&c.template, act) {
            Ok(v) => v,
            Err(e) => {
                return Err(ActionResult::Recoverable(format!(
                    "the credential of security scheme `{}` cannot be rendered: {e}",
                    c.scheme
                )));
            }
        };
        match &c.kind {
            CredentialKind::Header(name) => headers.push((name.clone(), value)),
            CredentialKind::Query(name) => query.push((name.clone(), value)),
            CredentialKind::Cookie(name) => cookies.push(format!("{name}={value}")),
            // An auth provider's header value (`{auth.x()}`) says its scheme already (a token
            // has no space).
            CredentialKind::Bearer if says_scheme(&value, "Bearer") => {
                authorization = Some(value);
            }
            CredentialKind::Bearer => authorization = Some(format!("Bearer {value}")),
            CredentialKind::Basic => {
                authorization = Some(format!("Basic {}", basic_credential(&value)));
            }
        }
    }
    let shown = format!("{}{path}", base.trim_end_matches('/'));
    if let Err(e) = super::url::no_dot_segments(&shown) {
        return Err(ActionResult::Recoverable(e));
    }
    let mut url = match reqwest::Url::parse(&shown) {
        Ok(u) => u,
        Err(e) => {
            return Err(ActionResult::Recoverable(format!(
                "`{shown}` is not a valid URL: {e}"
            )));
        }
    };
    if !query.is_empty() {
        url.query_pairs_mut().extend_pairs(&query);
    }
    let method = match reqwest::Method::from_bytes(op.method.as_bytes()) {
        Ok(m) => m,
        Err(e) => return Err(ActionResult::Fatal(format!("method `{}`: {e}", op.method))),
    };
    let mut req = engine.inner.http.request(method, url).timeout(op.timeout);
    for (name, value) in headers {
        if reqwest::header::HeaderValue::from_str(&value).is_err() {
            return Err(ActionResult::Recoverable(format!(
                "header `{name}`: the value is not a valid header value"
            )));
        }
        req = req.header(name, value);
    }
    if !cookies.is_empty() {
        req = req.header(reqwest::header::COOKIE, cookies.join("; "));
    }
    if let Some(auth) = authorization {
        req = req.header(reqwest::header::AUTHORIZATION, auth);
    }
    let body = match &op.body {
        None => None,
        Some(Body::Whole) => input.get("body").filter(|b| !b.is_null()).cloned(),
        Some(Body::Fields(fields)) => {
            let members: Map<String, Value> = fields
                .iter()
                .filter_map(|f| {
                    input
                        .get(f)
                        .filter(|v| !v.is_null())
                        .map(|v| (f.clone(), v.clone()))
                })
                .collect();
            Some(Value::Object(members))
        }
    };
    if let Some(body) = body {
        req = req
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.to_string());
    }
    Ok((req, shown))
}

/// The credential of a security scheme, rendered from its template: the one place a
/// credential is made, so a template reading another root (an auth provider's token) needs
/// only that root in `act`.
fn credential(template: &Template, act: &Activation) -> Result<String, String> {
    match template.render(act) {
        Ok(v) if v.is_empty() => Err("it is empty".into()),
        Ok(v) => Ok(v),
        Err(e) => Err(e.message),
    }
}

/// Whether `value` is an `Authorization` value of `scheme` (`Bearer …`), as an auth
/// provider's header value is.
fn says_scheme(value: &str, scheme: &str) -> bool {
    value
        .split_once(' ')
        .is_some_and(|(word, _)| word.eq_ignore_ascii_case(scheme))
}

/// A value as the text of a path segment, query parameter or header: a string as it is,
/// anything else as JSON.
fn text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}
