//! Secrets: the values the host must never show (CONTRACT §1) — tool settings whose schema
//! says `format: password`, every value the host config reads from `{env: …}`, model API
//! keys, API and source tokens — and the scrubbing of text by value.
//!
//! The set is collected once, when a configuration is compiled (the engine's plan), and
//! applied where text leaves the host: events as they are logged (so the event log, the API,
//! SSE and every message the LLM is sent hold no secret), the API's answers, the log output
//! and what the command line prints. A secret found there is replaced by [`REDACTED`].
//!
//! - [`Secrets`]: one set, searched for every secret at once (Aho-Corasick);
//! - [`SharedSecrets`]: the set in force, for output that outlives one configuration (the
//!   log writer of a host that reloads);
//! - [`Scrubbed`]: an [`std::io::Write`] that scrubs what passes through it;
//! - [`signature`]: proofs that a request comes from a holder of a shared secret (GitHub's
//!   `X-Hub-Signature-256`, Standard Webhooks), checked on the raw body in constant time;
//! - [`tokens`]: bearer tokens ([`BearerTokens`]), kept only as digests.
//!
//! ```
//! use agentmesh_secrets::Secrets;
//! let secrets = Secrets::new(["sk-live-1234"])?;
//! assert_eq!(secrets.scrub("GET /v1?key=sk-live-1234 failed"), "GET /v1?key=*** failed");
//! assert_eq!(secrets.scrub("nothing to hide"), "nothing to hide");
//! # Ok::<(), agentmesh_secrets::Error>(())
//! ```

pub mod signature;
pub mod tokens;

pub use tokens::{BearerTokens, TokenError};

use std::borrow::Cow;
use std::io::Write;
use std::sync::{Arc, PoisonError, RwLock};

use aho_corasick::{AhoCorasick, MatchKind};
use percent_encoding::{AsciiSet, CONTROLS, NON_ALPHANUMERIC, utf8_percent_encode};
use serde_json::Value;

/// The secrets cannot be searched for (too many or too long for the automaton). Refusing the
/// configuration is the only safe answer: running without scrubbing would show them.
#[derive(Debug, thiserror::Error)]
#[error("the secrets of the configuration cannot be searched for: {0}")]
pub struct Error(#[from] aho_corasick::BuildError);

/// What stands where a secret was.
pub const REDACTED: &str = "***";

/// Values shorter than this many bytes are not treated as secrets. Replacing a one- to
/// three-byte value (a port, `yes`, a digit) everywhere it occurs would turn ordinary text —
/// numbers, words, JSON — into `***` and make logs and answers unreadable, while a secret that
/// short is found by trying every value anyway: hiding it protects nothing.
pub const MIN_SECRET_BYTES: usize = 4;

/// Lines of a multi-line secret (a PEM key) at least this long are secrets of their own: text
/// that leaves the host line by line (a component's stderr, a log line) holds one line of it
/// at a time. Shorter lines (a PEM key's short last line) are not, for the reason of
/// [`MIN_SECRET_BYTES`], with a margin: such lines are more often ordinary text.
pub const MIN_SECRET_LINE_BYTES: usize = 8;

/// A set of secret values, and the scrubbing of text by them.
///
/// Each secret is searched for as written and in the forms it takes in the host's output:
/// escaped in JSON (a secret holding `"` or `\`), escaped in HTML as text or inside JSON (the
/// inspector's pages), and percent-encoded as in a URL or a form's query (an error about a
/// request shows its URL). An empty set costs one branch per scrub.
#[derive(Debug, Default)]
pub struct Secrets {
    /// Every form of every secret; `None` when there is no secret.
    matcher: Option<AhoCorasick>,
    /// How many distinct secret values the set holds.
    count: usize,
}

impl Secrets {
    /// The set of `values`; values shorter than [`MIN_SECRET_BYTES`] are left out. Fails only
    /// when the values are too many or too long to search for at all.
    pub fn new<I, S>(values: I) -> Result<Secrets, Error>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut secrets: Vec<String> = values
            .into_iter()
            .map(|v| v.as_ref().to_owned())
            .filter(|v| v.len() >= MIN_SECRET_BYTES)
            .collect();
        let count = {
            let mut distinct = secrets.clone();
            distinct.sort();
            distinct.dedup();
            distinct.len()
        };
        let lines: Vec<String> = secrets
            .iter()
            .filter(|v| v.contains('\n'))
            .flat_map(|v| v.lines().map(str::trim).map(str::to_owned))
            .filter(|line| line.len() >= MIN_SECRET_LINE_BYTES)
            .collect();
        secrets.extend(lines);
        secrets.sort();
        secrets.dedup();
        let mut patterns = Vec::with_capacity(secrets.len());
        for secret in &secrets {
            let json = json_escaped(secret);
            let forms = [
                html_escaped(secret),
                html_escaped(&json),
                json,
                percent_encoded(secret, NOT_UNRESERVED),
                percent_encoded(secret, URL_ESCAPED),
                form_encoded(secret),
            ];
            patterns.push(secret.clone());
            for form in forms {
                if !patterns.contains(&form) {
                    patterns.push(form);
                }
            }
        }
        // Leftmost-longest: of two secrets where one begins the other, the longer is hidden
        // whole rather than leaving its tail.
        let matcher = if patterns.is_empty() {
            None
        } else {
            Some(
                AhoCorasick::builder()
                    .match_kind(MatchKind::LeftmostLongest)
                    .build(&patterns)?,
            )
        };
        Ok(Secrets { matcher, count })
    }

    /// Whether the set holds no secret (then every scrub returns its input).
    pub fn is_empty(&self) -> bool {
        self.matcher.is_none()
    }

    /// The length in bytes of the longest text [`Secrets::scrub`] replaces (a secret in its
    /// longest form; 0 for an empty set). Text about to be cut at some length is scrubbed
    /// with this much more of it first, so that a secret across the cut is replaced whole.
    pub fn longest(&self) -> usize {
        self.matcher
            .as_ref()
            .map_or(0, AhoCorasick::max_pattern_len)
    }

    /// How many distinct secret values the set holds.
    pub fn len(&self) -> usize {
        self.count
    }

    /// `text` with every secret replaced by [`REDACTED`]; borrowed when there was none.
    pub fn scrub<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let Some(matcher) = &self.matcher else {
            return Cow::Borrowed(text);
        };
        if !matcher.is_match(text) {
            return Cow::Borrowed(text);
        }
        let mut out = String::with_capacity(text.len());
        matcher.replace_all_with(text, &mut out, |_, _, dst| {
            dst.push_str(REDACTED);
            true
        });
        Cow::Owned(out)
    }

    /// The first `max` bytes of `text` (cut at a char boundary), scrubbed, and whether it was
    /// cut. A secret that begins before the cut is replaced whole, so no start of one is left
    /// at the end; only `max` + [`Secrets::longest`] bytes of `text` are looked at, so a
    /// caller reading a long text may stop there. (Scrubbing, then cutting the scrubbed text,
    /// is not the same: each secret replaced before the cut draws later text in, and with it
    /// the start of a secret the window cut short.)
    pub fn scrub_prefix<'a>(&self, text: &'a str, max: usize) -> (Cow<'a, str>, bool) {
        let cut = text.floor_char_boundary(max);
        let cut_short = cut < text.len();
        let Some(matcher) = &self.matcher else {
            return (Cow::Borrowed(&text[..cut]), cut_short);
        };
        let window = &text[..text.floor_char_boundary(max.saturating_add(self.longest()))];
        let mut out = String::new();
        let mut kept = 0;
        for found in matcher.find_iter(window) {
            if found.start() >= cut {
                break;
            }
            out.push_str(&text[kept..found.start()]);
            out.push_str(REDACTED);
            kept = found.end();
        }
        if kept == 0 {
            return (Cow::Borrowed(&text[..cut]), cut_short);
        }
        if kept < cut {
            out.push_str(&text[kept..cut]);
        }
        (Cow::Owned(out), cut_short)
    }

    /// Replaces every secret in `text` by [`REDACTED`], in place.
    pub fn scrub_string(&self, text: &mut String) {
        if let Cow::Owned(clean) = self.scrub(text) {
            *text = clean;
        }
    }

    /// `bytes` with every secret replaced by [`REDACTED`]; borrowed when there was none.
    pub fn scrub_bytes<'a>(&self, bytes: &'a [u8]) -> Cow<'a, [u8]> {
        let Some(matcher) = &self.matcher else {
            return Cow::Borrowed(bytes);
        };
        if !matcher.is_match(bytes) {
            return Cow::Borrowed(bytes);
        }
        let mut out = Vec::with_capacity(bytes.len());
        matcher.replace_all_with_bytes(bytes, &mut out, |_, _, dst| {
            dst.extend_from_slice(REDACTED.as_bytes());
            true
        });
        Cow::Owned(out)
    }

    /// Replaces every secret in the strings of `value` (object keys too) by [`REDACTED`]; a
    /// number whose digits hold a secret (a numeric PIN or key) becomes the string its
    /// scrubbed digits make, so the value stays JSON and shows no secret.
    pub fn scrub_json(&self, value: &mut Value) {
        if self.is_empty() {
            return;
        }
        match value {
            Value::String(s) => self.scrub_string(s),
            Value::Array(items) => items.iter_mut().for_each(|v| self.scrub_json(v)),
            Value::Object(map) => {
                map.values_mut().for_each(|v| self.scrub_json(v));
                if map.keys().any(|k| matches!(self.scrub(k), Cow::Owned(_))) {
                    *map = std::mem::take(map)
                        .into_iter()
                        .map(|(k, v)| (self.scrub(&k).into_owned(), v))
                        .collect();
                }
            }
            Value::Number(n) => {
                if let Cow::Owned(clean) = self.scrub(&n.to_string()) {
                    *value = Value::String(clean);
                }
            }
            Value::Null | Value::Bool(_) => {}
        }
    }
}

/// `secret` as it stands inside a JSON string.
fn json_escaped(secret: &str) -> String {
    let quoted = Value::String(secret.to_owned()).to_string();
    quoted[1..quoted.len() - 1].to_owned()
}

/// `text` as the inspector's pages show it (maud escapes `&`, `<`, `>` and `"`): a secret
/// holding one of them, shown as text or inside JSON, is found in the page.
fn html_escaped(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            c => out.push(c),
        }
    }
    out
}

/// Every byte but RFC 3986's unreserved ones (ASCII letters, digits and `-._~`), which no
/// encoder escapes.
const NOT_UNRESERVED: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// The bytes a URL parser escapes in a path or query (the WHATWG sets): controls, space,
/// non-ASCII and `"#<>'`{}`.
const URL_ESCAPED: &AsciiSet = &CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'#')
    .add(b'<')
    .add(b'>')
    .add(b'\'')
    .add(b'`')
    .add(b'{')
    .add(b'}');

/// `secret` as a form encodes it (`application/x-www-form-urlencoded`, as
/// `url::form_urlencoded` and `Url::query_pairs_mut` write a query, e.g. an `openapi` key in
/// the query): a space as `+`, every byte but ASCII letters, digits and `*-._` as `%XX`.
fn form_encoded(secret: &str) -> String {
    form_urlencoded::byte_serialize(secret.as_bytes()).collect()
}

/// `secret` with the bytes of `set` (and every non-ASCII byte) as `%XX`.
fn percent_encoded(secret: &str, set: &'static AsciiSet) -> String {
    utf8_percent_encode(secret, set).to_string()
}

/// The secrets in force, shared between whoever replaces them (the engine, when a
/// configuration is loaded or reloaded) and output that outlives one configuration (the log
/// writer). Cheap to clone: clones share the set.
#[derive(Debug, Clone, Default)]
pub struct SharedSecrets(Arc<RwLock<Arc<Secrets>>>);

impl SharedSecrets {
    /// Makes `secrets` the set in force.
    pub fn set(&self, secrets: Arc<Secrets>) {
        *self.0.write().unwrap_or_else(PoisonError::into_inner) = secrets;
    }

    /// The set in force.
    pub fn get(&self) -> Arc<Secrets> {
        Arc::clone(&self.0.read().unwrap_or_else(PoisonError::into_inner))
    }
}

/// A writer that scrubs each write with a set of secrets before passing it on. Each `write`
/// is scrubbed whole, so a secret is found when it lies within one write (a log line is
/// written in one).
pub struct Scrubbed<W> {
    inner: W,
    secrets: Arc<Secrets>,
}

impl<W: Write> Scrubbed<W> {
    /// `inner`, scrubbed with `secrets`.
    pub fn new(inner: W, secrets: Arc<Secrets>) -> Self {
        Scrubbed { inner, secrets }
    }
}

impl<W: Write> Write for Scrubbed<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self.secrets.scrub_bytes(buf) {
            Cow::Borrowed(_) => self.inner.write(buf),
            Cow::Owned(clean) => {
                self.inner.write_all(&clean)?;
                Ok(buf.len())
            }
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_secret_is_replaced_and_other_text_is_kept() {
        let s = Secrets::new(["alpha-secret", "beta-secret"]).unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!(
            s.scrub("a alpha-secret b beta-secret c alpha-secret"),
            "a *** b *** c ***"
        );
        assert!(matches!(s.scrub("clean text"), Cow::Borrowed(_)));
    }

    #[test]
    fn a_number_holding_a_secret_is_hidden_and_the_value_stays_json() {
        let s = Secrets::new(["48151623", "2342.5"]).unwrap();
        let mut value = json!({"pin": 48151623, "in": 9_048_151_623_u64, "f": 2342.5, "n": 7});
        s.scrub_json(&mut value);
        assert_eq!(
            value,
            json!({"pin": "***", "in": "90***", "f": "***", "n": 7})
        );
    }

    #[test]
    fn short_values_are_not_secrets() {
        let s = Secrets::new(["", "abc", "8080"]).unwrap();
        assert_eq!(s.len(), 1);
        assert_eq!(s.scrub("abc on 8080"), "abc on ***");
        assert!(Secrets::new(["abc"]).unwrap().is_empty());
    }

    #[test]
    fn each_line_of_a_multi_line_secret_is_hidden_alone() {
        let key = "-----BEGIN PRIVATE KEY-----\r\nMIIEvQIBADANBgkqhkiG9w0BAQEF\r\nAASCBKcwggSjAgEAAoIBAQ\r\nZm9v\r\n-----END PRIVATE KEY-----\r\n";
        let s = Secrets::new([key]).unwrap();
        assert_eq!(s.len(), 1);
        assert_eq!(s.scrub(key), "***");
        // As a component's stderr gives it, line by line.
        assert_eq!(s.scrub("key: MIIEvQIBADANBgkqhkiG9w0BAQEF"), "key: ***");
        assert_eq!(s.scrub("AASCBKcwggSjAgEAAoIBAQ\n"), "***\n");
        // A line too short to hide without hiding ordinary text is left.
        assert_eq!(s.scrub("Zm9v"), "Zm9v");
    }

    #[test]
    fn the_longer_of_two_overlapping_secrets_is_hidden_whole() {
        let s = Secrets::new(["token", "token-with-tail"]).unwrap();
        assert_eq!(s.scrub("x token-with-tail y token"), "x *** y ***");
    }

    #[test]
    fn escaped_forms_in_json_and_urls_are_found() {
        let s = Secrets::new(["pa\"ss wörd/1"]).unwrap();
        let json = json!({"e": "pa\"ss wörd/1"}).to_string();
        assert_eq!(s.scrub(&json), r#"{"e":"***"}"#);
        assert_eq!(s.scrub("GET /x?k=pa%22ss%20w%C3%B6rd/1"), "GET /x?k=***");
        assert_eq!(s.scrub("k=pa%22ss%20w%C3%B6rd%2F1"), "k=***");
    }

    #[test]
    fn form_encoded_forms_in_a_query_are_found() {
        // As `url::form_urlencoded` and `Url::query_pairs_mut` write a query: `+` for a space,
        // `%7E` for `~`, `*` kept.
        let s = Secrets::new(["a b~c*d/e"]).unwrap();
        assert_eq!(s.scrub("GET /x?k=a+b%7Ec*d%2Fe&n=1"), "GET /x?k=***&n=1");
    }

    #[test]
    fn html_escaped_forms_are_found_as_text_and_inside_json() {
        let s = Secrets::new([r#"sk-<&>"'-9"#]).unwrap();
        assert_eq!(s.scrub("<p>sk-&lt;&amp;&gt;&quot;'-9</p>"), "<p>***</p>");
        assert_eq!(
            s.scrub(r#"<pre>"sk-&lt;&amp;&gt;\&quot;'-9"</pre>"#),
            r#"<pre>"***"</pre>"#
        );
    }

    #[test]
    fn a_prefix_hides_whole_every_secret_that_begins_before_its_cut() {
        let s = Secrets::new(["0123456789abcdefghij", "SECRET-TWO-XYZ"]).unwrap();
        assert_eq!(s.longest(), 20);
        // A secret across the cut goes whole, not its start.
        let text = format!("{}0123456789abcdefghij tail", "x".repeat(10));
        assert_eq!(
            s.scrub_prefix(&text, 15),
            (Cow::Owned("x".repeat(10) + "***"), true)
        );
        // A secret replaced early draws later text in: the cut stays where the text was cut,
        // so the start of the secret the window cut short never reaches what is kept.
        let text = format!(
            "0123456789abcdefghij{}SECRET-TWO-XYZ and on",
            "y".repeat(30)
        );
        let window = &text[..40 + s.longest()];
        assert!(
            s.scrub(window)[..40].ends_with("SECRET-"),
            "scrubbed, then cut"
        );
        assert_eq!(
            s.scrub_prefix(window, 40),
            (Cow::Owned(format!("***{}", "y".repeat(20))), true)
        );
        // Nothing to hide, a text within `max`, a cut inside a character.
        assert!(matches!(
            s.scrub_prefix("short", 10),
            (Cow::Borrowed("short"), false)
        ));
        assert_eq!(s.scrub_prefix("aé", 2), (Cow::Borrowed("a"), true));
    }

    #[test]
    fn json_values_are_scrubbed_in_strings_and_keys() {
        let s = Secrets::new(["hunter22"]).unwrap();
        let mut v = json!({"a": ["x hunter22", 1, null], "hunter22": {"b": "hunter22"}});
        s.scrub_json(&mut v);
        assert_eq!(v, json!({"a": ["x ***", 1, null], "***": {"b": "***"}}));
    }

    #[test]
    fn a_scrubbed_writer_passes_on_clean_text() {
        let mut out = Vec::new();
        let mut w = Scrubbed::new(&mut out, Arc::new(Secrets::new(["hunter22"]).unwrap()));
        w.write_all(b"login with hunter22\n").unwrap();
        w.write_all(b"plain\n").unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "login with ***\nplain\n");
    }

    #[test]
    fn shared_secrets_are_replaced_for_every_holder() {
        let shared = SharedSecrets::default();
        let held = shared.clone();
        assert!(held.get().is_empty());
        shared.set(Arc::new(Secrets::new(["hunter22"]).unwrap()));
        assert_eq!(held.get().scrub("hunter22"), "***");
    }
}
