//! A delivery as it arrived, without HTTP ([`Inbound`]: its raw body and its [`Headers`]),
//! and what the host takes from its headers besides its signature: the delivery id that
//! makes redelivery idempotent (read from the header its signature covers, see [`Proof`]), and
//! the headers an agent may see.

use serde_json::{Map, Value as Json};

/// A request's headers: names in lower case, values as sent (bytes), in order; a name sent
/// several times has several entries. Built by whoever received the request (the server from
/// its HTTP headers, a test from pairs).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Headers(Vec<(String, Vec<u8>)>);

impl Headers {
    /// The first value of header `name` (any case).
    pub fn get(&self, name: &str) -> Option<&[u8]> {
        self.all(name).next()
    }

    /// Every value of header `name` (any case), in order.
    pub fn all<'h, 'n>(&'h self, name: &'n str) -> impl Iterator<Item = &'h [u8]> + use<'h, 'n> {
        self.0
            .iter()
            .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_slice())
    }

    /// The first value of header `name` as text: `None` when absent, `Some(Err(()))` when it
    /// is not visible ASCII (HTTP's rule for a value read as text).
    pub fn text(&self, name: &str) -> Option<Result<&str, ()>> {
        self.get(name).map(|v| visible_ascii(v).ok_or(()))
    }

    /// Whether header `name` (any case) was sent.
    pub fn contains(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    /// The distinct names, lower case, in the order first sent.
    fn names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = Vec::new();
        for (name, _) in &self.0 {
            if !names.contains(&name.as_str()) {
                names.push(name);
            }
        }
        names
    }
}

/// A header value as text, if it is visible ASCII (tabs allowed), as HTTP reads one.
pub fn visible_ascii(value: &[u8]) -> Option<&str> {
    if value
        .iter()
        .all(|&b| b == b'\t' || (0x20..0x7f).contains(&b))
    {
        std::str::from_utf8(value).ok()
    } else {
        None
    }
}

impl<N: AsRef<str>, V: AsRef<[u8]>> FromIterator<(N, V)> for Headers {
    fn from_iter<I: IntoIterator<Item = (N, V)>>(pairs: I) -> Self {
        Headers(
            pairs
                .into_iter()
                .map(|(n, v)| (n.as_ref().to_ascii_lowercase(), v.as_ref().to_vec()))
                .collect(),
        )
    }
}

/// A delivery to a webhook endpoint (a tool's events, a trigger source, an API fire) as it
/// arrived: checks read its headers, signatures are computed over its raw body.
#[derive(Debug, Clone, Copy)]
pub struct Inbound<'a> {
    /// The request's headers.
    pub headers: &'a Headers,
    /// The body, byte for byte as received.
    pub body: &'a [u8],
}

/// The headers that carry a delivery id, in the order an unsigned delivery's are consulted
/// (CONTRACT §5, "Idempotency"): GitHub's, Standard Webhooks', then the generic one.
pub const DELIVERY_ID_HEADERS: [&str; 3] = ["X-GitHub-Delivery", "webhook-id", "X-Delivery-Id"];

/// What proved where a delivery came from, which decides the header its delivery id is read
/// from. The id is what dedupe trusts: an id read from a header the signature does not cover
/// would let anyone holding a signed request send it again under a new id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proof {
    /// A Standard Webhooks signature, which covers `webhook-id` (with the timestamp and the
    /// body): the id is `webhook-id` and nothing else.
    StandardWebhooks,
    /// A GitHub signature, which covers the body only: the id is GitHub's own
    /// `X-GitHub-Delivery`. No signature covers it, so dedupe takes GitHub's redeliveries
    /// once but cannot stop a replay of a captured request (GitHub signs no time either).
    GitHub,
    /// No signature: a bearer token's holder (trusted to name its own ids) or an unsigned
    /// event (whose sender anyone may be). The id is the first non-empty of
    /// [`DELIVERY_ID_HEADERS`].
    Unsigned,
}

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

/// The delivery id of a request proved by `proof`: the non-empty value of the header it
/// names (see [`Proof`]).
pub fn delivery_id(headers: &Headers, proof: Proof) -> Option<&str> {
    let names: &[&str] = match proof {
        Proof::StandardWebhooks => &["webhook-id"],
        Proof::GitHub => &["X-GitHub-Delivery"],
        Proof::Unsigned => &DELIVERY_ID_HEADERS,
    };
    names.iter().find_map(|name| {
        headers
            .text(name)
            .and_then(Result::ok)
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
pub fn safe_headers(headers: &Headers) -> Map<String, Json> {
    let mut out = Map::new();
    for name in headers.names() {
        if !is_safe_header(name) {
            continue;
        }
        let values: Vec<String> = headers
            .all(name)
            .map(|v| String::from_utf8_lossy(v).into_owned())
            .collect();
        out.insert(name.to_owned(), Json::String(values.join(", ")));
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // Tests unwrap what they just built.
mod tests {
    use serde_json::json;

    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> Headers {
        pairs.iter().copied().collect()
    }

    #[test]
    fn an_unsigned_delivery_id_prefers_github_then_standard_webhooks_then_generic() {
        let all = headers(&[
            ("X-Delivery-Id", "generic"),
            ("webhook-id", "msg_1"),
            ("X-GitHub-Delivery", "72d3162e"),
        ]);
        assert_eq!(delivery_id(&all, Proof::Unsigned), Some("72d3162e"));
        let two = headers(&[("x-delivery-id", "generic"), ("Webhook-Id", "msg_1")]);
        assert_eq!(delivery_id(&two, Proof::Unsigned), Some("msg_1"));
        let one = headers(&[("X-Delivery-Id", "g")]);
        assert_eq!(delivery_id(&one, Proof::Unsigned), Some("g"));
    }

    #[test]
    fn a_signed_delivery_id_is_read_from_its_schemes_header_only() {
        let all = headers(&[
            ("X-GitHub-Delivery", "sent-by-anyone"),
            ("webhook-id", "msg_1"),
            ("X-Delivery-Id", "generic"),
        ]);
        assert_eq!(delivery_id(&all, Proof::StandardWebhooks), Some("msg_1"));
        let github = headers(&[("webhook-id", "msg_1"), ("X-Delivery-Id", "generic")]);
        assert_eq!(delivery_id(&github, Proof::GitHub), None);
        assert_eq!(delivery_id(&all, Proof::GitHub), Some("sent-by-anyone"));
    }

    #[test]
    fn a_value_that_is_not_visible_ascii_is_not_text() {
        let h: Headers = [("X-GitHub-Delivery", b"caf\xc3\xa9".as_slice())]
            .into_iter()
            .collect();
        assert_eq!(h.text("x-github-delivery"), Some(Err(())));
        assert_eq!(delivery_id(&h, Proof::Unsigned), None);
        assert_eq!(h.text("webhook-id"), None);
        let h = headers(&[("X-GitHub-Delivery", "d\t1")]);
        assert_eq!(h.text("X-GITHUB-DELIVERY"), Some(Ok("d\t1")));
    }

    #[test]
    fn empty_delivery_id_is_no_delivery_id() {
        let blank = headers(&[("X-GitHub-Delivery", " ")]);
        assert_eq!(delivery_id(&blank, Proof::Unsigned), None);
        assert_eq!(delivery_id(&blank, Proof::GitHub), None);
        assert_eq!(delivery_id(&Headers::default(), Proof::Unsigned), None);
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
