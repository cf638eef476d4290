//! What the host takes from an inbound request's headers besides its signature: the
//! delivery id that makes redelivery idempotent, and the headers an agent may see.

use http::HeaderMap;
use serde_json::{Map, Value as Json};

/// The headers that carry a delivery id, in the order they are consulted (CONTRACT §5,
/// "Idempotency"): GitHub's, Standard Webhooks', then the generic one.
pub const DELIVERY_ID_HEADERS: [&str; 3] = ["X-GitHub-Delivery", "webhook-id", "X-Delivery-Id"];

/// Headers never shown to an agent whatever their name says: credentials and cookies.
const SECRET_HEADERS: [&str; 4] = [
    "authorization",
    "proxy-authorization",
    "cookie",
    "set-cookie",
];

/// Fragments of a header name that mark it as secret material (`x-api-key`,
/// `x-gitlab-token`, `x-hub-signature-256`, `webhook-signature`, `x-auth-user`, …).
const SECRET_FRAGMENTS: [&str; 5] = ["secret", "token", "key", "auth", "signature"];

/// The delivery id of a request: the first non-empty of [`DELIVERY_ID_HEADERS`].
pub fn delivery_id(headers: &HeaderMap) -> Option<&str> {
    DELIVERY_ID_HEADERS.iter().find_map(|name| {
        headers
            .get(*name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|id| !id.is_empty())
    })
}

/// Whether a header may be shown to an agent (in `event.headers` and the trigger envelope):
/// not a credential, cookie or signature, and nothing whose name mentions a secret, token,
/// key or auth. Deciding by name errs on the side of hiding: a platform's new signature or
/// token header is hidden without anyone listing it.
pub fn is_safe_header(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    !SECRET_HEADERS.contains(&name.as_str())
        && !SECRET_FRAGMENTS
            .iter()
            .any(|fragment| name.contains(fragment))
}

/// The headers an agent may see, as a JSON object with lower-case names. A header sent
/// several times has its values joined with `, ` (as HTTP allows); bytes that are not UTF-8
/// are replaced.
pub fn safe_headers(headers: &HeaderMap) -> Map<String, Json> {
    let mut out = Map::new();
    for name in headers.keys() {
        if !is_safe_header(name.as_str()) {
            continue;
        }
        let values: Vec<String> = headers
            .get_all(name)
            .iter()
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .collect();
        out.insert(name.as_str().to_owned(), Json::String(values.join(", ")));
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // Tests unwrap what they just built.
mod tests {
    use http::{HeaderName, HeaderValue};
    use serde_json::json;

    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        map
    }

    #[test]
    fn delivery_id_prefers_github_then_standard_webhooks_then_generic() {
        let all = headers(&[
            ("X-Delivery-Id", "generic"),
            ("webhook-id", "msg_1"),
            ("X-GitHub-Delivery", "72d3162e"),
        ]);
        assert_eq!(delivery_id(&all), Some("72d3162e"));
        let two = headers(&[("x-delivery-id", "generic"), ("Webhook-Id", "msg_1")]);
        assert_eq!(delivery_id(&two), Some("msg_1"));
        assert_eq!(delivery_id(&headers(&[("X-Delivery-Id", "g")])), Some("g"));
    }

    #[test]
    fn empty_delivery_id_is_no_delivery_id() {
        assert_eq!(delivery_id(&headers(&[("X-GitHub-Delivery", " ")])), None);
        assert_eq!(delivery_id(&HeaderMap::new()), None);
    }

    #[test]
    fn safe_headers_drop_credentials_signatures_and_secrets() {
        let h = headers(&[
            ("Authorization", "Bearer x"),
            ("Cookie", "a=b"),
            ("X-Hub-Signature", "sha1=00"),
            ("X-Hub-Signature-256", "sha256=00"),
            ("webhook-signature", "v1,AA=="),
            ("X-Gitlab-Token", "t"),
            ("X-Api-Key", "k"),
            ("X-Shared-Secret", "s"),
            ("X-Auth-User", "u"),
            ("X-GitHub-Event", "issue_comment"),
            ("X-GitHub-Delivery", "72d3162e"),
            ("User-Agent", "GitHub-Hookshot/abc"),
            ("Content-Type", "application/json"),
            ("Accept", "a"),
            ("Accept", "b"),
        ]);
        assert_eq!(
            Json::Object(safe_headers(&h)),
            json!({
                "x-github-event": "issue_comment",
                "x-github-delivery": "72d3162e",
                "user-agent": "GitHub-Hookshot/abc",
                "content-type": "application/json",
                "accept": "a, b",
            })
        );
    }
}
