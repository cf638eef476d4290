//! A fake OpenAI-compatible endpoint on 127.0.0.1: answers canned replies in order and records
//! what it was sent. It runs on the test's runtime and stops with it.

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::HeaderMap;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::net::TcpListener;

/// More connections than any test makes: the accept loop ends after them.
const MAX_CONNECTIONS: usize = 64;

/// One canned answer.
#[derive(Clone)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(&'static str, String)>,
    pub body: Value,
    /// Waited before answering (to provoke client timeouts).
    pub delay: Duration,
}

impl Reply {
    /// A 200 with a JSON body.
    pub fn ok(body: Value) -> Self {
        Reply::status(200, body)
    }

    /// Any status with a JSON body.
    pub fn status(status: u16, body: Value) -> Self {
        Reply {
            status,
            headers: vec![("content-type", "application/json".into())],
            body,
            delay: Duration::ZERO,
        }
    }

    pub fn header(mut self, name: &'static str, value: &str) -> Self {
        self.headers.push((name, value.into()));
        self
    }

    pub fn delayed(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }
}

/// What the server was sent.
#[derive(Clone, Debug)]
pub struct Recorded {
    pub path: String,
    pub headers: HeaderMap,
    pub body: Value,
}

pub struct FakeServer {
    /// `http://127.0.0.1:PORT/v1`
    pub base_url: String,
    requests: Arc<Mutex<Vec<Recorded>>>,
}

impl FakeServer {
    /// Starts a server answering `replies` in order (the last one again once they run out).
    pub async fn start(replies: Vec<Reply>) -> FakeServer {
        assert!(!replies.is_empty());
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let replies = Arc::new(replies);
        let next = Arc::new(AtomicUsize::new(0));
        let recorded = Arc::clone(&requests);
        tokio::spawn(async move {
            for _ in 0..MAX_CONNECTIONS {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let (replies, next, recorded) = (
                    Arc::clone(&replies),
                    Arc::clone(&next),
                    Arc::clone(&recorded),
                );
                let service = service_fn(move |request: Request<Incoming>| {
                    let (replies, next, recorded) = (
                        Arc::clone(&replies),
                        Arc::clone(&next),
                        Arc::clone(&recorded),
                    );
                    async move {
                        let path = request.uri().path().to_owned();
                        let headers = request.headers().clone();
                        let bytes = request.into_body().collect().await.unwrap().to_bytes();
                        let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
                        recorded.lock().unwrap().push(Recorded {
                            path,
                            headers,
                            body,
                        });
                        let index = next.fetch_add(1, Ordering::SeqCst).min(replies.len() - 1);
                        let reply = replies[index].clone();
                        tokio::time::sleep(reply.delay).await;
                        let mut response =
                            Response::new(Full::new(Bytes::from(reply.body.to_string())));
                        *response.status_mut() = StatusCode::from_u16(reply.status).unwrap();
                        for (name, value) in reply.headers {
                            response.headers_mut().insert(name, value.parse().unwrap());
                        }
                        Ok::<_, Infallible>(response)
                    }
                });
                tokio::spawn(async move {
                    // A client that gives up mid-answer (the timeout test) ends the connection.
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        FakeServer {
            base_url: format!("http://127.0.0.1:{port}/v1"),
            requests,
        }
    }

    /// The requests received so far.
    pub fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().unwrap().clone()
    }
}
