//! The `openai/<model>` provider: any OpenAI-compatible `POST {base_url}/chat/completions`
//! endpoint (OpenAI, vLLM, llama.cpp, Ollama, … differ only by `base_url`).
//!
//! Each attempt has the configured timeout. A 429, a 408, a 5xx, a timeout or a broken
//! connection is retried up to `max_retries` times, after the answer's `Retry-After` (seconds,
//! at most [`MAX_RETRY_AFTER`]) or an exponential backoff with jitter; running out of retries
//! is [`LlmError::Exhausted`], except when the endpoint could never be reached, which is
//! [`LlmError::Fatal`] like any other 4xx answer or an invalid configuration.
//!
//! The api key is sent as `Authorization: Bearer …` and appears nowhere else: not in errors,
//! logs or `Debug` output.

mod wire;

use std::fmt;
use std::hash::{BuildHasher, RandomState};
use std::time::Duration;

use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue, RETRY_AFTER};
use reqwest::{StatusCode, Url};

use crate::{BoxFuture, ChatRequest, ChatResponse, LlmError, LlmProvider, Result};

/// The longest `Retry-After` honoured: a misbehaving endpoint asking for an hour would otherwise
/// hold the task (and its queued input) that long; past this the wait is cut to it.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

/// The first backoff delay; it doubles with every retry.
const INITIAL_BACKOFF: Duration = Duration::from_millis(500);

/// The longest backoff delay.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// The largest answer read from an endpoint. A completion is text and a few tool calls; a
/// larger answer is a misbehaving server, and reading it whole would only exhaust memory.
pub const MAX_ANSWER: usize = 32 * 1024 * 1024;

/// Why [`read_capped`] stopped.
#[derive(Debug)]
pub enum Capped {
    /// Reading the body failed.
    Read(reqwest::Error),
    /// The body is longer than the cap.
    TooLarge,
}

/// Reads a response body of at most `max` bytes, stopping as soon as it is longer: a
/// misbehaving server cannot make the host buffer more. (Also the engine's `stateless_http`.)
pub async fn read_capped(
    mut response: reqwest::Response,
    max: usize,
) -> std::result::Result<Vec<u8>, Capped> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(Capped::Read)? {
        if body.len() + chunk.len() > max {
            return Err(Capped::TooLarge);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// Where and how to reach an OpenAI-compatible endpoint (`models.openai` of the host config).
#[derive(Clone)]
pub struct OpenAiConfig {
    /// The API root, e.g. `https://api.openai.com/v1` or `http://127.0.0.1:8000/v1`;
    /// requests go to `{base_url}/chat/completions`.
    pub base_url: String,
    /// Sent as a bearer token when set (local servers usually need none).
    pub api_key: Option<String>,
    /// The limit of one attempt, from connecting to the end of the answer.
    pub timeout: Duration,
    /// How many times a failed attempt is retried (0: one attempt only).
    pub max_retries: u32,
}

impl OpenAiConfig {
    /// The timeout when the host config names none: long answers from slow local models fit.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);
    /// The retries when the host config names none.
    pub const DEFAULT_MAX_RETRIES: u32 = 3;

    /// A config for `base_url` without an api key, with the default timeout and retries.
    pub fn new(base_url: impl Into<String>) -> Self {
        OpenAiConfig {
            base_url: base_url.into(),
            api_key: None,
            timeout: Self::DEFAULT_TIMEOUT,
            max_retries: Self::DEFAULT_MAX_RETRIES,
        }
    }
}

/// Never shows the api key.
impl fmt::Debug for OpenAiConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiConfig")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("timeout", &self.timeout)
            .field("max_retries", &self.max_retries)
            .finish()
    }
}

/// A client of one OpenAI-compatible endpoint, shared by every task using it.
pub struct OpenAiProvider {
    /// The client, or why the configuration is unusable (reported by every call).
    client: std::result::Result<Client, String>,
    timeout: Duration,
    max_retries: u32,
    backoff: Backoff,
}

/// What a usable configuration becomes.
struct Client {
    http: reqwest::Client,
    endpoint: Url,
    /// `Bearer <key>`, marked sensitive.
    authorization: Option<HeaderValue>,
}

impl OpenAiProvider {
    /// A provider for `config`. An invalid configuration (a `base_url` that is not an http(s)
    /// URL, an api key that cannot be a header) does not fail here: every call then fails with
    /// [`LlmError::Fatal`], ending the task that uses it. [`try_new`](Self::try_new) reports it
    /// at once.
    pub fn new(config: OpenAiConfig) -> Self {
        let OpenAiConfig {
            base_url,
            api_key,
            timeout,
            max_retries,
        } = config;
        OpenAiProvider {
            client: Client::new(&base_url, api_key.as_deref(), timeout),
            timeout,
            max_retries,
            backoff: Backoff {
                initial: INITIAL_BACKOFF,
                max: MAX_BACKOFF,
            },
        }
    }

    /// A provider for `config`, or [`LlmError::Fatal`] when the configuration is invalid (for
    /// `validate` and start-up checks).
    pub fn try_new(config: OpenAiConfig) -> Result<Self> {
        let provider = Self::new(config);
        if let Err(problem) = &provider.client {
            return Err(LlmError::Fatal(problem.clone()));
        }
        Ok(provider)
    }

    /// Replaces the backoff between retries (first delay `initial`, doubling up to `max`, with
    /// jitter); for tests and impatient deployments. A `Retry-After` answer still wins.
    pub fn with_backoff(mut self, initial: Duration, max: Duration) -> Self {
        self.backoff = Backoff { initial, max };
        self
    }

    async fn call(&self, request: &ChatRequest) -> Result<ChatResponse> {
        let client = self
            .client
            .as_ref()
            .map_err(|problem| LlmError::Fatal(problem.clone()))?;
        let body = serde_json::to_vec(&wire::request_body(request))
            .map_err(|e| LlmError::Fatal(format!("cannot encode the request: {e}")))?;
        let mut retries = 0;
        loop {
            let failure = match self.attempt(client, &body, request).await {
                Ok(response) => {
                    tracing::debug!(
                        task.id = %request.task_id,
                        llm.response_id = %response.id,
                        llm.tool_calls = response.tool_calls.len(),
                        llm.prompt_tokens = response.usage.prompt_tokens,
                        llm.completion_tokens = response.usage.completion_tokens,
                        "LLM response"
                    );
                    return Ok(response);
                }
                Err(Failure::Fatal(message)) => return Err(LlmError::Fatal(message)),
                Err(Failure::Retry(failure)) => failure,
            };
            if retries >= self.max_retries {
                let attempts = retries + 1;
                return Err(if failure.unreachable {
                    LlmError::Fatal(format!(
                        "cannot reach {} ({attempts} attempts): {}",
                        client.endpoint, failure.message
                    ))
                } else {
                    LlmError::Exhausted(format!("{} ({attempts} attempts)", failure.message))
                });
            }
            let delay = retry_delay(failure.retry_after, self.backoff, retries);
            retries += 1;
            tracing::warn!(
                task.id = %request.task_id,
                llm.endpoint = %client.endpoint,
                llm.retry = retries,
                llm.delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                "LLM call failed, retrying: {}",
                failure.message
            );
            tokio::time::sleep(delay).await;
        }
    }

    /// One request and its answer.
    async fn attempt(
        &self,
        client: &Client,
        body: &[u8],
        request: &ChatRequest,
    ) -> std::result::Result<ChatResponse, Failure> {
        let mut builder = client
            .http
            .post(client.endpoint.clone())
            .timeout(self.timeout)
            .header(CONTENT_TYPE, "application/json")
            .body(body.to_vec());
        if let Some(authorization) = &client.authorization {
            builder = builder.header(AUTHORIZATION, authorization.clone());
        }
        let response = builder.send().await.map_err(|e| self.transport(&e))?;
        let status = response.status();
        let retry_after = response
            .headers()
            .get(RETRY_AFTER)
            .and_then(|value| value.to_str().ok())
            .and_then(parse_retry_after);
        let answer = match read_capped(response, MAX_ANSWER).await {
            Ok(answer) => answer,
            Err(Capped::Read(e)) => return Err(self.transport(&e)),
            Err(Capped::TooLarge) => {
                return Err(Failure::Fatal(format!(
                    "the endpoint's answer is larger than {MAX_ANSWER} bytes"
                )));
            }
        };
        if status.is_success() {
            return wire::parse_response(&answer, request).map_err(Failure::Fatal);
        }
        let message = format!("{status}: {}", wire::error_message(&answer));
        if status == StatusCode::TOO_MANY_REQUESTS
            || status == StatusCode::REQUEST_TIMEOUT
            || status.is_server_error()
        {
            Err(Failure::Retry(Retryable {
                message,
                retry_after,
                unreachable: false,
            }))
        } else {
            Err(Failure::Fatal(message))
        }
    }

    /// Classifies an error below HTTP: timeouts and broken connections are retried.
    fn transport(&self, error: &reqwest::Error) -> Failure {
        if error.is_builder() {
            return Failure::Fatal(error_chain(error));
        }
        let (message, unreachable) = if error.is_timeout() {
            (format!("no answer within {:?}", self.timeout), false)
        } else {
            (error_chain(error), error.is_connect())
        };
        Failure::Retry(Retryable {
            message,
            retry_after: None,
            unreachable,
        })
    }
}

impl fmt::Debug for OpenAiProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let endpoint = match &self.client {
            Ok(client) => client.endpoint.as_str(),
            Err(problem) => problem.as_str(),
        };
        f.debug_struct("OpenAiProvider")
            .field("endpoint", &endpoint)
            .field("timeout", &self.timeout)
            .field("max_retries", &self.max_retries)
            .finish_non_exhaustive()
    }
}

impl LlmProvider for OpenAiProvider {
    fn complete<'a>(&'a self, request: &'a ChatRequest) -> BoxFuture<'a, Result<ChatResponse>> {
        Box::pin(self.call(request))
    }
}

impl Client {
    fn new(
        base_url: &str,
        api_key: Option<&str>,
        timeout: Duration,
    ) -> std::result::Result<Self, String> {
        let base = base_url.trim_end_matches('/');
        let endpoint = Url::parse(&format!("{base}/chat/completions"))
            .map_err(|e| format!("invalid base_url {base_url:?}: {e}"))?;
        if !matches!(endpoint.scheme(), "http" | "https") {
            return Err(format!(
                "invalid base_url {base_url:?}: not an http or https URL"
            ));
        }
        let authorization = match api_key {
            Some(key) => {
                // The key is not in the error: it is a secret even when malformed.
                let mut value = HeaderValue::from_str(&format!("Bearer {key}"))
                    .map_err(|_| "the api key contains characters a header cannot hold")?;
                value.set_sensitive(true);
                Some(value)
            }
            None => None,
        };
        let http = crate::http_client()
            .connect_timeout(timeout)
            .build()
            .map_err(|e| format!("cannot build the HTTP client: {}", error_chain(&e)))?;
        Ok(Client {
            http,
            endpoint,
            authorization,
        })
    }
}

/// Why an attempt failed.
enum Failure {
    /// Not worth retrying: ends the call.
    Fatal(String),
    /// Possibly transient.
    Retry(Retryable),
}

struct Retryable {
    message: String,
    /// The answer's `Retry-After`.
    retry_after: Option<Duration>,
    /// No connection could be made.
    unreachable: bool,
}

/// `Retry-After` in seconds (an HTTP date is ignored: the backoff applies instead).
fn parse_retry_after(value: &str) -> Option<Duration> {
    let seconds = value.trim().parse::<f64>().ok()?;
    Duration::try_from_secs_f64(seconds).ok()
}

/// The wait before retry `retry + 1`: the answer's `Retry-After` (capped), else the backoff.
fn retry_delay(retry_after: Option<Duration>, backoff: Backoff, retry: u32) -> Duration {
    match retry_after {
        Some(wait) => wait.min(MAX_RETRY_AFTER),
        None => backoff.delay(retry),
    }
}

/// Exponential backoff with "equal jitter": half the delay is fixed, half random, so tasks that
/// failed together do not retry together.
#[derive(Debug, Clone, Copy)]
struct Backoff {
    initial: Duration,
    max: Duration,
}

impl Backoff {
    /// The delay before retry `retry + 1`.
    fn delay(self, retry: u32) -> Duration {
        let exponential = self
            .initial
            .saturating_mul(2u32.saturating_pow(retry))
            .min(self.max);
        let half = exponential / 2;
        half + half.mul_f64(random_fraction())
    }
}

/// A number in `[0, 1)`, random enough for jitter: std's hasher keys are seeded per process and
/// per `RandomState`, which spares a random-number dependency.
fn random_fraction() -> f64 {
    let bits = RandomState::new().hash_one(std::time::Instant::now());
    // The top 53 bits fill an f64 mantissa exactly.
    (bits >> 11) as f64 / (1u64 << 53) as f64
}

/// An error and its sources, `: `-separated (reqwest's own message names only the URL).
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut message = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    message
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // Tests fail loudly.
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_its_cap_with_at_most_half_jitter() {
        let backoff = Backoff {
            initial: Duration::from_millis(100),
            max: Duration::from_millis(350),
        };
        for (retry, full) in [(0, 100), (1, 200), (2, 350), (30, 350)] {
            let delay = backoff.delay(retry);
            let full = Duration::from_millis(full);
            assert!(delay >= full / 2 && delay <= full, "{retry}: {delay:?}");
        }
    }

    #[test]
    fn retry_after_is_honoured_up_to_its_cap() {
        assert_eq!(parse_retry_after(" 2 "), Some(Duration::from_secs(2)));
        assert_eq!(parse_retry_after("0.5"), Some(Duration::from_millis(500)));
        assert_eq!(parse_retry_after("-1"), None);
        assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"), None);
        let backoff = Backoff {
            initial: Duration::from_millis(100),
            max: Duration::from_secs(1),
        };
        let asked = |seconds| retry_delay(Some(Duration::from_secs(seconds)), backoff, 0);
        assert_eq!(asked(2), Duration::from_secs(2));
        assert_eq!(asked(3600), MAX_RETRY_AFTER);
        assert!(retry_delay(None, backoff, 0) <= Duration::from_millis(100));
    }

    #[test]
    fn invalid_configurations_are_fatal() {
        let bad_url = OpenAiProvider::try_new(OpenAiConfig::new("ftp://example.invalid"));
        assert!(matches!(bad_url, Err(LlmError::Fatal(m)) if m.contains("not an http")));
        let bad_key = OpenAiProvider::try_new(OpenAiConfig {
            api_key: Some("sk-secret\nvalue".into()),
            ..OpenAiConfig::new("http://127.0.0.1:1/v1")
        });
        assert!(matches!(bad_key, Err(LlmError::Fatal(m)) if !m.contains("sk-secret")));
    }

    #[test]
    fn debug_output_hides_the_api_key() {
        let config = OpenAiConfig {
            api_key: Some("sk-secret".into()),
            ..OpenAiConfig::new("https://api.openai.com/v1/")
        };
        assert!(!format!("{config:?}").contains("sk-secret"));
        let provider = OpenAiProvider::new(config);
        let shown = format!("{provider:?}");
        assert!(!shown.contains("sk-secret"));
        assert!(shown.contains("https://api.openai.com/v1/chat/completions"));
    }
}
