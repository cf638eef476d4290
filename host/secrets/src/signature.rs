//! Proving where an inbound request came from (CONTRACT §5, "Signatures"): GitHub's
//! `X-Hub-Signature-256` and [Standard Webhooks](https://www.standardwebhooks.com/) (bearer
//! tokens are [`crate::tokens`]).
//!
//! Signatures are checked on the raw body, before it is parsed, and every comparison that
//! involves secret material runs in constant time. Headers are [`Headers`] (built by whoever
//! received the request); their lookups ignore case.
//!
//! Secrets: a GitHub secret is used as its UTF-8 bytes. A Standard Webhooks secret is
//! `whsec_<base64 key>`; like the reference libraries (which strip an optional `whsec_`), a
//! secret without the prefix is read as the bare base64 key, never as raw bytes — so a secret
//! copied from any Standard Webhooks sender works with or without its prefix, and one that is
//! not base64 is a configuration error ([`Error::InvalidSecret`]) rather than a silently
//! different key.

use std::time::{SystemTime, UNIX_EPOCH};

use agentmesh_model::delivery::{Headers, Proof};
use base64::Engine as _;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use hmac::{Hmac, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;

/// Why an inbound request did not prove where it came from. Every variant except
/// [`Error::InvalidSecret`] is the sender's fault (the server answers 401);
/// [`Error::InvalidSecret`] is a configuration error of this host.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// A header the scheme needs is absent.
    #[error("missing {0} header")]
    MissingHeader(&'static str),
    /// A header is present but not in the scheme's format.
    #[error("malformed {header} header: {reason}")]
    MalformedHeader {
        /// The header, as the scheme's documentation spells it.
        header: &'static str,
        /// What is wrong with its value.
        reason: &'static str,
    },
    /// The signature was computed with another secret, or over another body.
    #[error("signature does not match")]
    SignatureMismatch,
    /// A Standard Webhooks timestamp too far from now: a replay, or a badly wrong clock.
    #[error("timestamp outside the ±5 minute window")]
    TimestampOutsideWindow,
    /// The configured Standard Webhooks secret is not `whsec_<base64>` (or bare base64).
    #[error("the Standard Webhooks secret is not base64 (expected `whsec_<base64 key>`)")]
    InvalidSecret,
}

/// The module's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// GitHub's signature header: `sha256=<hex HMAC-SHA256 of the body>`.
pub const GITHUB_SIGNATURE: &str = "X-Hub-Signature-256";
/// The Standard Webhooks message id, which the signature covers: a signed delivery's id (see
/// [`Proof::StandardWebhooks`]).
pub const WEBHOOK_ID: &str = "webhook-id";
/// The Standard Webhooks send time, in Unix seconds.
pub const WEBHOOK_TIMESTAMP: &str = "webhook-timestamp";
/// The Standard Webhooks signatures: space-separated `v1,<base64 HMAC-SHA256>` entries.
pub const WEBHOOK_SIGNATURE: &str = "webhook-signature";

/// How far a Standard Webhooks timestamp may be from now, in seconds. A captured request
/// replayed later than this is refused even though its signature is valid; the delivery-id
/// deduplication, on the signed `webhook-id`, covers replays inside the window.
pub const TIMESTAMP_TOLERANCE_SECS: u64 = 5 * 60;

/// The Standard Webhooks secret prefix.
const SECRET_PREFIX: &str = "whsec_";

/// Base64 as Standard Webhooks writes it: the standard alphabet, with padding optional on
/// input (the reference libraries accept unpadded secrets).
const BASE64: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

type HmacSha256 = Hmac<Sha256>;

/// A signature scheme for webhook payloads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scheme {
    /// GitHub: `X-Hub-Signature-256: sha256=<hex>`, no timestamp.
    GitHub,
    /// Standard Webhooks: `webhook-id`, `webhook-timestamp` and `webhook-signature`.
    StandardWebhooks,
}

impl Scheme {
    /// The scheme whose signature header `headers` carries (GitHub's when both are present),
    /// or `None` for an unsigned request.
    pub fn detect(headers: &Headers) -> Option<Scheme> {
        if headers.contains(GITHUB_SIGNATURE) {
            Some(Scheme::GitHub)
        } else if headers.contains(WEBHOOK_SIGNATURE) {
            Some(Scheme::StandardWebhooks)
        } else {
            None
        }
    }

    /// Checks that `body` was signed with `secret` under this scheme; `now` bounds the
    /// Standard Webhooks timestamp (GitHub signatures carry none).
    pub fn verify(
        self,
        secret: &str,
        headers: &Headers,
        body: &[u8],
        now: SystemTime,
    ) -> Result<()> {
        match self {
            Scheme::GitHub => verify_github(secret, headers, body),
            Scheme::StandardWebhooks => verify_standard_webhooks(secret, headers, body, now),
        }
    }
}

impl From<Scheme> for Proof {
    fn from(scheme: Scheme) -> Proof {
        match scheme {
            Scheme::GitHub => Proof::GitHub,
            Scheme::StandardWebhooks => Proof::StandardWebhooks,
        }
    }
}

/// Checks a signed webhook whatever its scheme, and says which scheme it was. A request with
/// no signature header is refused: call this only where a secret is configured.
pub fn verify(secret: &str, headers: &Headers, body: &[u8], now: SystemTime) -> Result<Scheme> {
    let scheme = Scheme::detect(headers).ok_or(Error::MissingHeader(
        "X-Hub-Signature-256 or webhook-signature",
    ))?;
    scheme.verify(secret, headers, body, now)?;
    Ok(scheme)
}

/// Checks GitHub's `X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of body>`.
pub fn verify_github(secret: &str, headers: &Headers, body: &[u8]) -> Result<()> {
    let value = header(headers, GITHUB_SIGNATURE)?;
    let hex_digest = value
        .strip_prefix("sha256=")
        .ok_or(Error::MalformedHeader {
            header: GITHUB_SIGNATURE,
            reason: "expected `sha256=<hex>`",
        })?;
    let provided = hex::decode(hex_digest).map_err(|_| Error::MalformedHeader {
        header: GITHUB_SIGNATURE,
        reason: "the digest is not hex",
    })?;
    let expected = hmac_sha256(secret.as_bytes(), &[body]);
    if bool::from(expected.as_slice().ct_eq(&provided)) {
        Ok(())
    } else {
        Err(Error::SignatureMismatch)
    }
}

/// The `X-Hub-Signature-256` value GitHub sends for `body` signed with `secret`.
pub fn sign_github(secret: &str, body: &[u8]) -> String {
    format!(
        "sha256={}",
        hex::encode(hmac_sha256(secret.as_bytes(), &[body]))
    )
}

/// Checks a Standard Webhooks request: the timestamp is within
/// [`TIMESTAMP_TOLERANCE_SECS`] of `now`, and one of the `v1` signatures is the HMAC-SHA256
/// of `{webhook-id}.{webhook-timestamp}.{body}` under the secret's key. Other signature
/// versions (`v1a`, asymmetric) are skipped.
pub fn verify_standard_webhooks(
    secret: &str,
    headers: &Headers,
    body: &[u8],
    now: SystemTime,
) -> Result<()> {
    let key = standard_webhooks_key(secret)?;
    let id = header(headers, WEBHOOK_ID)?;
    let timestamp = header(headers, WEBHOOK_TIMESTAMP)?;
    let signatures = header(headers, WEBHOOK_SIGNATURE)?;
    let sent: i64 = timestamp.parse().map_err(|_| Error::MalformedHeader {
        header: WEBHOOK_TIMESTAMP,
        reason: "expected Unix seconds",
    })?;
    if sent.abs_diff(unix_seconds(now)) > TIMESTAMP_TOLERANCE_SECS {
        return Err(Error::TimestampOutsideWindow);
    }
    // The header's own text is what the sender signed.
    let expected = hmac_sha256(
        &key,
        &[id.as_bytes(), b".", timestamp.as_bytes(), b".", body],
    );
    let matched = signatures
        .split_whitespace()
        .filter_map(|entry| entry.strip_prefix("v1,"))
        .filter_map(|b64| BASE64.decode(b64).ok())
        .any(|provided| bool::from(expected.as_slice().ct_eq(&provided)));
    if matched {
        Ok(())
    } else {
        Err(Error::SignatureMismatch)
    }
}

/// The `webhook-signature` value (one `v1,` entry) a Standard Webhooks sender sends.
pub fn sign_standard_webhooks(
    secret: &str,
    id: &str,
    timestamp: i64,
    body: &[u8],
) -> Result<String> {
    let key = standard_webhooks_key(secret)?;
    let timestamp = timestamp.to_string();
    let mac = hmac_sha256(
        &key,
        &[id.as_bytes(), b".", timestamp.as_bytes(), b".", body],
    );
    Ok(format!("v1,{}", BASE64.encode(mac)))
}

/// The key of a Standard Webhooks secret: `whsec_` (optional) then base64.
fn standard_webhooks_key(secret: &str) -> Result<Vec<u8>> {
    let encoded = secret.strip_prefix(SECRET_PREFIX).unwrap_or(secret);
    match BASE64.decode(encoded) {
        Ok(key) if !key.is_empty() => Ok(key),
        _ => Err(Error::InvalidSecret),
    }
}

/// HMAC-SHA256 of the concatenation of `parts`.
fn hmac_sha256(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    // HMAC takes keys of every length (a long one is hashed first), so this cannot fail; were
    // it to, the all-zero key would make every comparison fail — closed, not a panic.
    let mut mac =
        HmacSha256::new_from_slice(key).unwrap_or_else(|_| HmacSha256::new(&Default::default()));
    for part in parts {
        mac.update(part);
    }
    mac.finalize().into_bytes().into()
}

/// The value of header `name` as text.
fn header<'h>(headers: &'h Headers, name: &'static str) -> Result<&'h str> {
    headers
        .text(name)
        .ok_or(Error::MissingHeader(name))?
        .map_err(|()| Error::MalformedHeader {
            header: name,
            reason: "not visible ASCII",
        })
}

/// `now` as Unix seconds (negative before 1970, saturating far outside).
fn unix_seconds(now: SystemTime) -> i64 {
    match now.duration_since(UNIX_EPOCH) {
        Ok(after) => i64::try_from(after.as_secs()).unwrap_or(i64::MAX),
        Err(before) => i64::try_from(before.duration().as_secs()).map_or(i64::MIN, |s| -s),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // Tests unwrap what they just built.
mod tests {
    use std::time::Duration;

    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> Headers {
        pairs.iter().copied().collect()
    }

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    // From GitHub's "Validating webhook deliveries" documentation ("Testing the webhook
    // payload validation").
    const GITHUB_SECRET: &str = "It's a Secret to Everybody";
    const GITHUB_BODY: &[u8] = b"Hello, World!";
    const GITHUB_SIGNATURE_VALUE: &str =
        "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";

    #[test]
    fn github_documentation_vector_signs_and_verifies() {
        assert_eq!(
            sign_github(GITHUB_SECRET, GITHUB_BODY),
            GITHUB_SIGNATURE_VALUE
        );
        let h = headers(&[("X-Hub-Signature-256", GITHUB_SIGNATURE_VALUE)]);
        assert_eq!(verify_github(GITHUB_SECRET, &h, GITHUB_BODY), Ok(()));
        assert_eq!(
            verify(GITHUB_SECRET, &h, GITHUB_BODY, at(0)),
            Ok(Scheme::GitHub)
        );
    }

    #[test]
    fn github_wrong_secret_or_tampered_body_does_not_match() {
        let h = headers(&[("x-hub-signature-256", GITHUB_SIGNATURE_VALUE)]);
        assert_eq!(
            verify_github("another secret", &h, GITHUB_BODY),
            Err(Error::SignatureMismatch)
        );
        assert_eq!(
            verify_github(GITHUB_SECRET, &h, b"Hello, World?"),
            Err(Error::SignatureMismatch)
        );
    }

    #[test]
    fn github_missing_or_malformed_header_is_refused() {
        let err = verify_github(GITHUB_SECRET, &Headers::default(), GITHUB_BODY).unwrap_err();
        assert_eq!(err.to_string(), "missing X-Hub-Signature-256 header");
        for value in ["757107ea", "sha1=757107ea", "sha256=not-hex"] {
            let h = headers(&[("X-Hub-Signature-256", value)]);
            assert!(
                matches!(
                    verify_github(GITHUB_SECRET, &h, GITHUB_BODY),
                    Err(Error::MalformedHeader { .. })
                ),
                "{value}"
            );
        }
        let truncated = headers(&[("X-Hub-Signature-256", "sha256=757107ea")]);
        assert_eq!(
            verify_github(GITHUB_SECRET, &truncated, GITHUB_BODY),
            Err(Error::SignatureMismatch)
        );
    }

    // Standard Webhooks reference vectors. The first is `test_sign_function` in
    // standard-webhooks/standard-webhooks `libraries/python/tests/test_webhooks.py` (also the
    // PHP and JavaScript libraries' tests); the second is `test_sign` in
    // `libraries/rust/src/lib.rs` of the same repository.
    const SW_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const SW_ID: &str = "msg_p5jXN8AQM9LWM0D4loKWxJek";
    const SW_TIMESTAMP: u64 = 1_614_265_330;
    const SW_BODY: &[u8] = br#"{"test": 2432232314}"#;
    const SW_SIGNATURE: &str = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";

    fn sw_headers(signature: &str) -> Headers {
        headers(&[
            ("webhook-id", SW_ID),
            ("webhook-timestamp", &SW_TIMESTAMP.to_string()),
            ("webhook-signature", signature),
        ])
    }

    #[test]
    fn standard_webhooks_reference_vectors_sign() {
        assert_eq!(
            sign_standard_webhooks(SW_SECRET, SW_ID, 1_614_265_330, SW_BODY).unwrap(),
            SW_SIGNATURE
        );
        assert_eq!(
            sign_standard_webhooks(
                "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD",
                "msg_27UH4WbU6Z5A5EzD8u03UvzRbpk",
                1_649_367_553,
                br#"{"email":"test@example.com","username":"test_user"}"#,
            )
            .unwrap(),
            "v1,tZ1I4/hDygAJgO5TYxiSd6Sd0kDW6hPenDe+bTa3Kkw="
        );
    }

    #[test]
    fn standard_webhooks_reference_vector_verifies_with_or_without_prefix() {
        let h = sw_headers(SW_SIGNATURE);
        let now = at(SW_TIMESTAMP + 10);
        assert_eq!(
            verify_standard_webhooks(SW_SECRET, &h, SW_BODY, now),
            Ok(())
        );
        assert_eq!(
            verify_standard_webhooks("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", &h, SW_BODY, now),
            Ok(())
        );
        assert_eq!(
            verify(SW_SECRET, &h, SW_BODY, now),
            Ok(Scheme::StandardWebhooks)
        );
    }

    #[test]
    fn standard_webhooks_wrong_secret_or_tampered_body_does_not_match() {
        let h = sw_headers(SW_SIGNATURE);
        let now = at(SW_TIMESTAMP);
        assert_eq!(
            verify_standard_webhooks("whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD", &h, SW_BODY, now),
            Err(Error::SignatureMismatch)
        );
        assert_eq!(
            verify_standard_webhooks(SW_SECRET, &h, br#"{"test": 2432232315}"#, now),
            Err(Error::SignatureMismatch)
        );
        // The Python library's `test_invalid_signature_raises_error`: one character off.
        let off = sw_headers("v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OA=");
        assert_eq!(
            verify_standard_webhooks(SW_SECRET, &off, SW_BODY, now),
            Err(Error::SignatureMismatch)
        );
    }

    #[test]
    fn standard_webhooks_timestamp_must_be_within_five_minutes() {
        let h = sw_headers(SW_SIGNATURE);
        for now in [SW_TIMESTAMP - 300, SW_TIMESTAMP + 300] {
            assert_eq!(
                verify_standard_webhooks(SW_SECRET, &h, SW_BODY, at(now)),
                Ok(())
            );
        }
        for now in [SW_TIMESTAMP - 301, SW_TIMESTAMP + 301, 0] {
            let err = verify_standard_webhooks(SW_SECRET, &h, SW_BODY, at(now)).unwrap_err();
            assert_eq!(err.to_string(), "timestamp outside the ±5 minute window");
        }
    }

    #[test]
    fn standard_webhooks_missing_headers_are_named() {
        let timestamp = SW_TIMESTAMP.to_string();
        let all = [
            ("webhook-id", SW_ID),
            ("webhook-timestamp", timestamp.as_str()),
            ("webhook-signature", SW_SIGNATURE),
        ];
        for missing in ["webhook-id", "webhook-timestamp", "webhook-signature"] {
            let h: Headers = all.iter().copied().filter(|(n, _)| *n != missing).collect();
            let err = verify_standard_webhooks(SW_SECRET, &h, SW_BODY, at(SW_TIMESTAMP));
            assert_eq!(err, Err(Error::MissingHeader(missing)));
        }
        let h = headers(&[
            ("webhook-id", SW_ID),
            ("webhook-timestamp", "hello"),
            ("webhook-signature", SW_SIGNATURE),
        ]);
        assert!(matches!(
            verify_standard_webhooks(SW_SECRET, &h, SW_BODY, at(SW_TIMESTAMP)),
            Err(Error::MalformedHeader { .. })
        ));
    }

    #[test]
    fn standard_webhooks_any_v1_signature_may_match() {
        // As the reference libraries' multi-signature tests: other versions and wrong
        // signatures around the valid one.
        let list = format!(
            "v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc= v2,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc= {SW_SIGNATURE} v1,bm9wZQ=="
        );
        let now = at(SW_TIMESTAMP);
        assert_eq!(
            verify_standard_webhooks(SW_SECRET, &sw_headers(&list), SW_BODY, now),
            Ok(())
        );
        let without = "v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc= v1a,abc v1,%%%";
        assert_eq!(
            verify_standard_webhooks(SW_SECRET, &sw_headers(without), SW_BODY, now),
            Err(Error::SignatureMismatch)
        );
        let other_version = SW_SIGNATURE.replacen("v1,", "v2,", 1);
        assert_eq!(
            verify_standard_webhooks(SW_SECRET, &sw_headers(&other_version), SW_BODY, now),
            Err(Error::SignatureMismatch)
        );
    }

    #[test]
    fn standard_webhooks_secret_must_be_base64() {
        let h = sw_headers(SW_SIGNATURE);
        for secret in ["whsec_not base64!", "", "whsec_"] {
            assert_eq!(
                verify_standard_webhooks(secret, &h, SW_BODY, at(SW_TIMESTAMP)),
                Err(Error::InvalidSecret),
                "{secret}"
            );
        }
    }

    #[test]
    fn unsigned_request_is_refused_by_verify() {
        let err = verify("s", &Headers::default(), b"{}", at(0)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "missing X-Hub-Signature-256 or webhook-signature header"
        );
    }
}
