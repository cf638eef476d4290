//! A host without `api_tokens` treats every caller as an admin, so it may listen only on a
//! loopback address. A web page the user opens can still reach that address: through DNS
//! rebinding (a name of the page's own that resolves to 127.0.0.1, so the browser lets the
//! page read what the host answers), or through a cross-site form or `fetch` whose answer it
//! cannot read but whose effect happens. Such a host therefore answers only requests whose
//! `Host` is a loopback name and whose `Origin`, when a browser sends one, is a loopback
//! origin. The webhook entrances and `/healthz` are left as they are: webhooks never take a
//! token (their senders are checked by signatures), and the health answer says nothing.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::AppState;
use crate::error::ApiError;

/// Refuses, with a 403 saying why, a request to a token-less host that does not come from
/// this machine's own pages and tools (see the module's docs).
pub async fn only_local_callers(
    State(state): State<Arc<AppState>>,
    request: Request,
    next: Next,
) -> Response {
    let path = request.uri().path();
    let exempt = path.starts_with("/v1/webhooks/") || path == "/healthz";
    if !exempt && state.auth().is_open() {
        if !loopback_host(request.headers()) {
            return ApiError::forbidden(
                "this host has no api_tokens: it answers only requests whose Host is a \
                 loopback name (localhost, 127.0.0.1, [::1])",
            )
            .into_response();
        }
        if !loopback_origin(request.headers()) {
            return ApiError::forbidden(
                "this host has no api_tokens: it answers no request from a web page of \
                 another origin than a loopback one",
            )
            .into_response();
        }
    }
    next.run(request).await
}

/// Whether the request's `Host` is a loopback name (`localhost`, `127.0.0.1`, `[::1]`, with
/// any port).
fn loopback_host(headers: &HeaderMap) -> bool {
    headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .is_some_and(loopback_authority)
}

/// Whether the request has no `Origin`, or one whose host is a loopback name (`http` or
/// `https`, any port). `null` (a sandboxed frame, a local file) is not.
fn loopback_origin(headers: &HeaderMap) -> bool {
    let Some(origin) = headers.get(header::ORIGIN) else {
        return true;
    };
    origin
        .to_str()
        .ok()
        .and_then(|o| {
            o.strip_prefix("http://")
                .or_else(|| o.strip_prefix("https://"))
        })
        .is_some_and(loopback_authority)
}

/// Whether `authority` (`name` or `name:port`) names a loopback host.
fn loopback_authority(authority: &str) -> bool {
    let name = match authority.strip_prefix('[') {
        Some(v6) => match v6.split_once(']') {
            Some((name, "")) => name,
            Some((name, port)) if port.starts_with(':') => name,
            _ => return false,
        },
        None => authority
            .rsplit_once(':')
            .map_or(authority, |(name, _)| name),
    };
    matches!(name, "localhost" | "127.0.0.1" | "::1")
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn with(name: header::HeaderName, value: &'static str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(name, HeaderValue::from_static(value));
        headers
    }

    #[test]
    fn only_loopback_names_are_loopback_hosts() {
        for name in [
            "localhost",
            "localhost:8080",
            "127.0.0.1:1",
            "[::1]:80",
            "[::1]",
        ] {
            assert!(loopback_host(&with(header::HOST, name)), "{name}");
        }
        for name in [
            "evil.example",
            "evil.example:80",
            "127.0.0.2",
            "localhost.evil:80",
            "[::1]evil",
            "127.0.0.1.evil.example:80",
        ] {
            assert!(!loopback_host(&with(header::HOST, name)), "{name}");
        }
        assert!(!loopback_host(&HeaderMap::new()));
    }

    #[test]
    fn only_loopback_pages_are_loopback_origins() {
        assert!(loopback_origin(&HeaderMap::new()));
        for origin in [
            "http://127.0.0.1:8080",
            "http://localhost:3000",
            "https://localhost",
            "http://[::1]:9",
        ] {
            assert!(loopback_origin(&with(header::ORIGIN, origin)), "{origin}");
        }
        for origin in [
            "null",
            "http://evil.example",
            "http://localhost.evil.example:80",
            "file://",
            "127.0.0.1:8080",
        ] {
            assert!(!loopback_origin(&with(header::ORIGIN, origin)), "{origin}");
        }
    }
}
