//! API errors: `{"error": {"code": "...", "message": "..."}}` with a fitting status.

use std::sync::Arc;

use agentmesh_engine::EngineError;
use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::AppState;
use crate::memory::{Refused, json_cost, room_for};

/// An error answer of the API.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
    /// Seconds after which the request may pass (`Retry-After`).
    retry_after: Option<u32>,
}

/// How long a caller should wait before retrying a request the store could not take.
const STORE_RETRY_AFTER_SECS: u32 = 5;

/// How long a caller should wait before retrying a body the host had no memory for: bodies
/// are handled in milliseconds, so room is soon given back.
const BUSY_RETRY_AFTER_SECS: u32 = 1;

impl ApiError {
    /// An error with `status`, a stable `code` and a message for people.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
            retry_after: None,
        }
    }

    /// 503: the store cannot write now (a full or failing disk); the request may pass later.
    pub fn store_unavailable(message: impl std::fmt::Display) -> Self {
        tracing::error!("the store cannot write: {message}");
        ApiError {
            retry_after: Some(STORE_RETRY_AFTER_SECS),
            ..Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
                "the host cannot write its store now; retry later",
            )
        }
    }

    /// 400: the request is malformed.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }

    /// 401: no or a wrong credential.
    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
    }

    /// 403: the credential does not allow this.
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "forbidden", message)
    }

    /// 404.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    /// The status it answers with.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The message for people.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// 500: the host failed; the message is logged, the caller gets a generic one.
    pub fn internal(message: impl std::fmt::Display) -> Self {
        tracing::error!("internal error: {message}");
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "the host failed to handle the request; see its log",
        )
    }
}

impl From<EngineError> for ApiError {
    fn from(e: EngineError) -> Self {
        match e {
            EngineError::NotFound(m) => ApiError::not_found(format!("not found: {m}")),
            EngineError::Input(m) => {
                ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_input", m)
            }
            EngineError::Conflict(m) => ApiError::new(StatusCode::CONFLICT, "conflict", m),
            EngineError::Forbidden(m) => ApiError::forbidden(m),
            EngineError::Config(m) => {
                ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "configuration", m)
            }
            EngineError::Manifest(d) => ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "configuration",
                d.to_string(),
            ),
            EngineError::Internal(m) => ApiError::internal(m),
            EngineError::Store(e) if e.is_io() => ApiError::store_unavailable(e),
            EngineError::Store(e) => ApiError::internal(e),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = Json(json!({"error": {"code": self.code, "message": self.message}}));
        let mut response = (self.status, body).into_response();
        if let Some(secs) = self.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        if self.status == StatusCode::REQUEST_TIMEOUT {
            // The rest of a late body is never read: the connection cannot carry another request.
            response
                .headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        response
    }
}

/// The API's result.
pub type ApiResult<T> = Result<T, ApiError>;

/// A raw request body; a body over the size cap in force (`policy.max_body_bytes`, which a
/// reload may change) is a JSON 413, like every other error, and one that does not arrive
/// within `policy.body_timeout` a JSON 408 (a client announcing more than it sends would
/// otherwise hold its connection and its handler for as long as it likes).
pub struct Body(pub axum::body::Bytes);

impl axum::extract::FromRequest<Arc<AppState>> for Body {
    type Rejection = ApiError;

    async fn from_request(
        req: axum::extract::Request,
        state: &Arc<AppState>,
    ) -> Result<Self, ApiError> {
        read_body(req.into_body(), state).await.map(Body)
    }
}

/// Reads a request body within the size cap and the time in force (see [`Body`]).
pub async fn read_body(
    body: axum::body::Body,
    state: &AppState,
) -> Result<axum::body::Bytes, ApiError> {
    let cap = state.max_body_bytes();
    read_body_within(body, state, (cap, "the host's max_body_bytes")).await
}

/// Reads a request body of at most `limit` bytes (`what` names the bound in the 413) within
/// the time in force; a body announcing more is refused before any of it is read. What the
/// body takes is charged to the host's `max_body_memory` as it arrives, and then what its JSON
/// would take once parsed (see `memory`): the returned bytes hold the charge until they are
/// dropped. A body that does not fit beside the others is a 503 `busy`; one that never fits,
/// a 413.
pub async fn read_body_within(
    body: axum::body::Body,
    state: &AppState,
    (limit, what): (usize, &str),
) -> Result<axum::body::Bytes, ApiError> {
    let too_large = || {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
            format!("the body is larger than {what} ({limit} bytes)"),
        )
    };
    let announced = axum::body::HttpBody::size_hint(&body).lower();
    let Some(announced) = usize::try_from(announced).ok().filter(|&n| n <= limit) else {
        return Err(too_large());
    };
    let mut charge = state.body_memory.charge();
    let refused = |refused: Refused| match refused {
        Refused::Busy => ApiError {
            retry_after: Some(BUSY_RETRY_AFTER_SECS),
            ..ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "busy",
                "the host holds as many request bodies as its max_body_memory allows; retry later",
            )
        },
        Refused::TooLarge => ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
            format!(
                "the body, with the JSON it parses into, would take more than the host's \
                 max_body_memory ({} bytes)",
                state.body_memory.limit()
            ),
        ),
    };
    let read = async {
        let mut body = body;
        let mut bytes: Vec<u8> = Vec::new();
        while let Some(frame) = http_body_util::BodyExt::frame(&mut body).await {
            let frame =
                frame.map_err(|e| ApiError::bad_request(format!("cannot read the body: {e}")))?;
            let Ok(data) = frame.into_data() else {
                continue; // trailers
            };
            let needed = bytes.len() + data.len();
            if needed > limit {
                return Err(too_large());
            }
            if needed > bytes.capacity() {
                // What is allocated is charged, before it is.
                let capacity = room_for(bytes.capacity(), needed, announced, limit);
                charge.grow(capacity - bytes.capacity()).map_err(refused)?;
                bytes.reserve_exact(capacity - bytes.len());
            }
            bytes.extend_from_slice(&data);
        }
        charge.grow(json_cost(&bytes)).map_err(refused)?;
        Ok(bytes)
    };
    let within = state.body_timeout;
    match tokio::time::timeout(within, read).await {
        Ok(read) => Ok(charge.attach(axum::body::Bytes::from(read?))),
        Err(_) => Err(ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "body_timeout",
            format!("the body did not arrive within the host's body_timeout ({within:?})"),
        )),
    }
}

/// A query string, with the API's JSON 400 when it does not parse (an unknown parameter, a
/// value of the wrong type) instead of axum's plain-text one.
pub struct ApiQuery<T>(pub T);

impl<S: Send + Sync, T: serde::de::DeserializeOwned> axum::extract::FromRequestParts<S>
    for ApiQuery<T>
{
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &S,
    ) -> Result<Self, ApiError> {
        match axum::extract::Query::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Query(query)) => Ok(ApiQuery(query)),
            Err(e) => Err(ApiError::bad_request(format!(
                "the query string is not as expected: {}",
                // "Failed to deserialize query string: limit: unknown field …": the cause.
                e.body_text()
                    .trim_start_matches("Failed to deserialize query string: ")
            ))),
        }
    }
}

/// 405 for a route that exists with other methods, in the API's error shape.
pub async fn method_not_allowed(method: axum::http::Method, uri: axum::http::Uri) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!("{method} is not allowed on {}", uri.path()),
    )
}

/// Path parameters, with the API's JSON 400 when they do not decode (e.g. a percent-encoded
/// byte that is not UTF-8) instead of axum's plain-text one.
pub struct ApiPath<T>(pub T);

impl<S: Send + Sync, T: serde::de::DeserializeOwned + Send> axum::extract::FromRequestParts<S>
    for ApiPath<T>
{
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &S,
    ) -> Result<Self, ApiError> {
        match axum::extract::Path::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Path(params)) => Ok(ApiPath(params)),
            Err(e) => Err(ApiError::bad_request(format!(
                "the path is not as expected: {}",
                e.body_text()
            ))),
        }
    }
}
