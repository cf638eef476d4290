//! The crate's error type: why an inbound request was refused.

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
    /// A bearer token that none of the configured tokens equals.
    #[error("bearer token not recognised")]
    UnknownToken,
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
