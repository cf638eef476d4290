//! Every answer leaves scrubbed: the bytes of each response body — JSON answers, errors,
//! `/metrics`, the inspector, each SSE frame — with every secret of the plan in force
//! replaced by `***` (CONTRACT §1). Events are scrubbed when they are logged; this covers what
//! the API builds from elsewhere (task records, trigger status, error messages).

use std::borrow::Cow;
use std::sync::Arc;

use agentmesh_secrets::Secrets;
use axum::body::{Body, Bytes, HttpBody};
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use http_body_util::BodyExt;

use crate::AppState;

/// The middleware: answers pass through untouched while the plan has no secrets.
pub(crate) async fn answers(
    State(state): State<Arc<AppState>>,
    request: Request,
    next: Next,
) -> Response {
    let response = next.run(request).await;
    let secrets = Arc::clone(&state.engine().plan().secrets);
    if secrets.is_empty() {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    // A scrubbed body may be shorter; its length is known again only when it is whole.
    parts.headers.remove(http::header::CONTENT_LENGTH);
    let whole = body.size_hint().exact().is_some();
    let body = if whole {
        // A buffered answer: scrubbed whole, so a secret is found wherever it lies.
        match body.collect().await {
            Ok(collected) => Body::from(scrubbed(&secrets, collected.to_bytes())),
            Err(e) => Body::from(format!("error reading the answer: {e}")),
        }
    } else {
        // A stream (SSE): each frame is scrubbed as it goes; a frame is one whole event.
        Body::new(body.map_frame(move |frame| frame.map_data(|data| scrubbed(&secrets, data))))
    };
    Response::from_parts(parts, body)
}

fn scrubbed(secrets: &Secrets, data: Bytes) -> Bytes {
    match secrets.scrub_bytes(&data) {
        Cow::Borrowed(_) => data,
        Cow::Owned(clean) => Bytes::from(clean),
    }
}
