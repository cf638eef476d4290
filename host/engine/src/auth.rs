//! Auth providers at run time: the header value `{auth.<provider>()}` yields in a request.
//!
//! A `bearer` provider yields `Bearer <token>`. An `oauth2_client_credentials` provider yields
//! `Bearer <access token>`, the token fetched from its token endpoint (RFC 6749 §4.4: a form
//! POST with `grant_type=client_credentials` and the scopes, the client authenticated by HTTP
//! Basic) on first use and cached ([`AuthTokens`]) until it is about to expire: it is fetched
//! again once less than a tenth of its lifetime, or a minute, whichever is less, remains. A
//! token without `expires_in` is kept for [`DEFAULT_LIFETIME`]. A request that a token made
//! answer 401 drops it, so the next request fetches a new one. A token endpoint that fails
//! (unreachable, slow, an error status, an answer without a token) fails the request that
//! needed the token, as an observation the LLM sees; the next request tries again.
//!
//! Tokens never leave: they go only into the requests whose templates name the provider, and
//! whatever those requests send back (an answer, an error) is scrubbed of them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Map, Value};

use crate::lock;
use crate::plan::AuthPlan;

/// How long a token whose answer has no `expires_in` is used.
pub const DEFAULT_LIFETIME: Duration = Duration::from_secs(3600);

/// Largest token-endpoint answer read: a token answer is a few hundred bytes, and an endpoint
/// that streams without end must not exhaust memory.
const MAX_TOKEN_ANSWER: usize = 64 * 1024;

/// The tokens of `oauth2_client_credentials` providers, cached per provider.
#[derive(Default)]
pub(crate) struct AuthTokens {
    /// Per provider name: held while a token is fetched, so concurrent requests fetch once.
    slots: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Option<Cached>>>>>,
}

/// A fetched token.
struct Cached {
    /// The provider it was fetched for (a reload that changes the provider fetches anew).
    plan: Arc<AuthPlan>,
    token: String,
    /// Until when it is used.
    fresh_until: Instant,
}

/// The header values of a request's providers, and the tokens they hold (to scrub from what
/// the request brings back).
pub(crate) struct Headers {
    /// Provider name → `Bearer <token>`: the `auth` variable of the request's templates.
    pub values: Map<String, Value>,
    /// The tokens in `values`.
    pub tokens: Vec<String>,
}

impl AuthTokens {
    /// The header value of each provider of `providers`, fetching the tokens it needs with
    /// `http`. `Err` says which provider failed and why (never with a credential).
    pub(crate) async fn headers(
        &self,
        http: &reqwest::Client,
        providers: &[(String, Arc<AuthPlan>)],
    ) -> Result<Headers, String> {
        let mut out = Headers {
            values: Map::new(),
            tokens: Vec::new(),
        };
        for (name, plan) in providers {
            let token = match &**plan {
                AuthPlan::Bearer { token } => token.clone(),
                AuthPlan::ClientCredentials { .. } => self.token(http, name, plan).await?,
            };
            out.values
                .insert(name.clone(), Value::String(format!("Bearer {token}")));
            out.tokens.push(token);
        }
        Ok(out)
    }

    /// Drops provider `name`'s cached token if it is `token` (a request made with it was
    /// answered 401).
    pub(crate) async fn forget(&self, name: &str, token: &str) {
        let slot = lock(&self.slots).get(name).cloned();
        if let Some(slot) = slot {
            let mut cached = slot.lock().await;
            if cached.as_ref().is_some_and(|c| c.token == token) {
                *cached = None;
            }
        }
    }

    /// Provider `name`'s token: the cached one while fresh, else a new one.
    async fn token(
        &self,
        http: &reqwest::Client,
        name: &str,
        plan: &Arc<AuthPlan>,
    ) -> Result<String, String> {
        let slot = Arc::clone(lock(&self.slots).entry(name.to_owned()).or_default());
        let mut cached = slot.lock().await;
        if let Some(c) = cached.as_ref()
            && Arc::ptr_eq(&c.plan, plan)
            && Instant::now() < c.fresh_until
        {
            return Ok(c.token.clone());
        }
        let fetched_at = Instant::now();
        let (token, lifetime) = fetch(http, name, plan).await?;
        *cached = Some(Cached {
            plan: Arc::clone(plan),
            token: token.clone(),
            fresh_until: fetched_at + fresh_for(lifetime),
        });
        Ok(token)
    }
}

/// How long a token that lives `lifetime` is used: until a tenth of its lifetime, or a minute,
/// whichever is less, remains.
pub(crate) fn fresh_for(lifetime: Option<Duration>) -> Duration {
    let lifetime = lifetime.unwrap_or(DEFAULT_LIFETIME);
    lifetime.saturating_sub((lifetime / 10).min(Duration::from_secs(60)))
}

/// Fetches a token of `plan` (a client-credentials provider): the token and its lifetime.
async fn fetch(
    http: &reqwest::Client,
    name: &str,
    plan: &AuthPlan,
) -> Result<(String, Option<Duration>), String> {
    let AuthPlan::ClientCredentials {
        token_url,
        client_id,
        client_secret,
        scopes,
        timeout,
    } = plan
    else {
        return Err(format!("auth provider `{name}` fetches no token"));
    };
    let fail = |why: String| format!("auth provider `{name}`: {why}");
    let mut form = String::from("grant_type=client_credentials");
    if !scopes.is_empty() {
        form.push_str("&scope=");
        form.push_str(&form_encoded(&scopes.join(" ")));
    }
    // RFC 6749 §2.3.1: the id and secret are form-encoded, then sent as HTTP Basic.
    let request = http
        .post(token_url)
        .timeout(*timeout)
        .basic_auth(form_encoded(client_id), Some(form_encoded(client_secret)))
        .header(reqwest::header::ACCEPT, "application/json")
        .header(
            reqwest::header::CONTENT_TYPE,
            "application/x-www-form-urlencoded",
        )
        .body(form);
    let response = match request.send().await {
        Ok(r) => r,
        Err(e) if e.is_timeout() => {
            return Err(fail(format!(
                "the token endpoint did not answer within {timeout:?}"
            )));
        }
        Err(e) if e.is_builder() => {
            return Err(fail(format!(
                "the token endpoint `{token_url}` is not usable: {e}"
            )));
        }
        Err(_) => return Err(fail("the token endpoint is unreachable".into())),
    };
    let status = response.status();
    let bytes = agentmesh_llm::read_capped(response, MAX_TOKEN_ANSWER)
        .await
        .map_err(|e| {
            fail(match e {
                agentmesh_llm::Capped::TooLarge => {
                    format!("the token endpoint's answer is larger than {MAX_TOKEN_ANSWER} bytes")
                }
                agentmesh_llm::Capped::Read(e) => {
                    format!("reading the token endpoint's answer: {e}")
                }
            })
        })?;
    let answer: Option<Value> = serde_json::from_slice(&bytes).ok();
    if !status.is_success() {
        // An OAuth error answer names its error code; its other fields are not shown.
        let code = answer
            .as_ref()
            .and_then(|a| a.get("error"))
            .and_then(Value::as_str)
            .map(|c| format!(" (`{}`)", c.chars().take(64).collect::<String>()))
            .unwrap_or_default();
        return Err(fail(format!(
            "the token endpoint answered HTTP {}{code}",
            status.as_u16()
        )));
    }
    token_of(answer.as_ref()).map_err(fail)
}

/// The access token and lifetime of a token answer.
fn token_of(answer: Option<&Value>) -> Result<(String, Option<Duration>), String> {
    let Some(answer) = answer else {
        return Err("the token endpoint's answer is not JSON".into());
    };
    let token = answer
        .get("access_token")
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty())
        .ok_or("the token endpoint's answer has no `access_token`")?;
    if let Some(kind) = answer.get("token_type").and_then(Value::as_str)
        && !kind.eq_ignore_ascii_case("bearer")
    {
        return Err(format!(
            "the token endpoint gave a `{}` token; only bearer tokens are used",
            kind.chars().take(32).collect::<String>()
        ));
    }
    let lifetime = match answer.get("expires_in") {
        None | Some(Value::Null) => None,
        Some(Value::Number(n)) => n.as_u64().map(Duration::from_secs),
        Some(Value::String(s)) => s.trim().parse().ok().map(Duration::from_secs),
        Some(_) => None,
    };
    if answer.get("expires_in").is_some_and(|v| !v.is_null()) && lifetime.is_none() {
        return Err("the token endpoint's `expires_in` is not a number of seconds".into());
    }
    Ok((token.to_owned(), lifetime))
}

/// `text` as `application/x-www-form-urlencoded` writes it.
fn form_encoded(text: &str) -> String {
    form_urlencoded::byte_serialize(text.as_bytes()).collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_token_is_used_until_a_tenth_of_its_life_or_a_minute_remains() {
        let secs = |s| Some(Duration::from_secs(s));
        assert_eq!(fresh_for(secs(3600)), Duration::from_secs(3540));
        assert_eq!(fresh_for(secs(100)), Duration::from_secs(90));
        assert_eq!(fresh_for(secs(0)), Duration::ZERO);
        assert_eq!(fresh_for(None), Duration::from_secs(3540));
    }

    #[test]
    fn token_answers_give_the_token_and_its_lifetime() {
        let ok = |v: Value| token_of(Some(&v)).unwrap();
        assert_eq!(
            ok(json!({"access_token": "t1", "token_type": "Bearer", "expires_in": 60})),
            ("t1".into(), Some(Duration::from_secs(60)))
        );
        assert_eq!(
            ok(json!({"access_token": "t2", "expires_in": "30"})),
            ("t2".into(), Some(Duration::from_secs(30)))
        );
        assert_eq!(ok(json!({"access_token": "t3"})), ("t3".into(), None));
        for bad in [
            json!({"token_type": "bearer"}),
            json!({"access_token": ""}),
            json!({"access_token": "t", "token_type": "mac"}),
            json!({"access_token": "t", "expires_in": "soon"}),
        ] {
            assert!(token_of(Some(&bad)).is_err(), "{bad}");
        }
        assert!(token_of(None).is_err());
    }

    #[tokio::test]
    async fn a_cached_token_is_reused_and_a_forgotten_one_fetched_again() {
        let tokens = AuthTokens::default();
        let plan = Arc::new(AuthPlan::ClientCredentials {
            token_url: "http://127.0.0.1:1/token".into(),
            client_id: "id".into(),
            client_secret: "secret".into(),
            scopes: Vec::new(),
            timeout: Duration::from_secs(1),
        });
        let slot = Arc::clone(lock(&tokens.slots).entry("crm".into()).or_default());
        *slot.lock().await = Some(Cached {
            plan: Arc::clone(&plan),
            token: "cached-token".into(),
            fresh_until: Instant::now() + Duration::from_secs(600),
        });
        let http = agentmesh_llm::http_client().build().unwrap();
        let providers = [("crm".to_owned(), Arc::clone(&plan))];
        let got = tokens.headers(&http, &providers).await.unwrap();
        assert_eq!(got.values["crm"], "Bearer cached-token");
        // Dropped after a 401: the next request fetches, here from an endpoint nobody serves.
        tokens.forget("crm", "cached-token").await;
        let err = tokens.headers(&http, &providers).await.err().unwrap();
        assert!(
            err.contains("auth provider `crm`") && err.contains("unreachable"),
            "{err}"
        );
        assert!(!err.contains("secret"), "{err}");
    }
}
