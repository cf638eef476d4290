//! The legacy HTTP+SSE transport of MCP (protocol 2024-11-05; `transport: sse`), which rmcp has
//! no client of: the client GETs the server's SSE stream, whose first event (`endpoint`) names
//! where to POST messages; every message of the server comes as a `message` event of that
//! stream.
//!
//! The endpoint must have the URL's own origin (a server cannot send the session's messages,
//! and their headers, elsewhere); an event of the stream larger than `max_output` ends the
//! session (see [`Events`]), as an oversized stdio line does.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::{Sink, Stream, StreamExt};
use reqwest::Url;
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderValue};
use rmcp::RoleClient;
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};

/// What rmcp speaks over: messages to the server, messages from it.
pub(crate) type Transport = (
    Pin<Box<dyn Sink<TxJsonRpcMessage<RoleClient>, Error = io::Error> + Send>>,
    Pin<Box<dyn Stream<Item = RxJsonRpcMessage<RoleClient>> + Send>>,
);

/// Opens the SSE stream at `url` with `headers` and waits for its `endpoint` event. Why it
/// could not, in words.
pub(crate) async fn connect(
    http: &reqwest::Client,
    url: &str,
    headers: HeaderMap,
    max_output: usize,
    oversized: Arc<AtomicBool>,
) -> Result<Transport, String> {
    let base = Url::parse(url).map_err(|e| format!("`{url}` is not a URL: {e}"))?;
    let answer = http
        .get(base.clone())
        .headers(headers.clone())
        .header(ACCEPT, "text/event-stream")
        .send()
        .await
        .map_err(|e| format!("cannot reach the MCP server at `{url}`: {e}"))?;
    let status = answer.status();
    let is_sse = answer
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    if !status.is_success() || !is_sse {
        return Err(format!(
            "the MCP server at `{url}` answered {status} without an event stream to a GET: not the legacy SSE transport's endpoint (a streamable-HTTP server is `transport: http`)"
        ));
    }
    let mut events = Events::new(answer, max_output, oversized);
    let endpoint = loop {
        match events.next().await {
            Ok(Some((name, data))) if name == "endpoint" => break data,
            Ok(Some(_)) => continue,
            Ok(None) => {
                return Err(format!(
                    "the MCP server at `{url}` closed its event stream before naming its message endpoint"
                ));
            }
            Err(e) => {
                return Err(format!(
                    "the event stream of the MCP server at `{url}`: {e}"
                ));
            }
        }
    };
    let post = base.join(endpoint.trim()).map_err(|e| {
        format!("the message endpoint `{endpoint}` of the MCP server at `{url}`: {e}")
    })?;
    if post.origin() != base.origin() {
        return Err(format!(
            "the MCP server at `{url}` named a message endpoint on another origin (`{post}`): refused"
        ));
    }
    let incoming = futures::stream::unfold(events, |mut events| async move {
        loop {
            match events.next().await {
                Ok(Some((name, data))) if name == "message" || name.is_empty() => {
                    match serde_json::from_str(&data) {
                        Ok(message) => return Some((message, events)),
                        Err(e) => {
                            tracing::warn!("an MCP server sent a message that is not JSON-RPC: {e}")
                        }
                    }
                }
                Ok(Some(_)) => {}
                Ok(None) => return None,
                Err(e) => {
                    tracing::warn!("the MCP server's event stream ended: {e}");
                    return None;
                }
            }
        }
    });
    let outgoing = futures::sink::unfold(
        (http.clone(), post, headers),
        |(http, post, headers), message: TxJsonRpcMessage<RoleClient>| async move {
            let body = serde_json::to_vec(&message).map_err(io::Error::other)?;
            let answer = http
                .post(post.clone())
                .headers(headers.clone())
                .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
                .body(body)
                .send()
                .await
                .map_err(io::Error::other)?;
            if !answer.status().is_success() {
                return Err(io::Error::other(format!(
                    "the MCP server answered {} to a message",
                    answer.status()
                )));
            }
            Ok((http, post, headers))
        },
    );
    Ok((Box::pin(outgoing), Box::pin(incoming)))
}

/// The events of an SSE stream, each `(event, data)` (`event` empty when not named; `data`
/// lines joined by line breaks). An event whose lines add up to more than `max` bytes ends
/// the stream with an error and sets `oversized`.
struct Events {
    body: Pin<Box<dyn Stream<Item = reqwest::Result<Vec<u8>>> + Send>>,
    /// Bytes read but not yet split into lines.
    buf: Vec<u8>,
    max: usize,
    oversized: Arc<AtomicBool>,
    /// The event being read: its name, data and size so far.
    name: String,
    data: Option<String>,
    size: usize,
}

impl Events {
    fn new(answer: reqwest::Response, max: usize, oversized: Arc<AtomicBool>) -> Events {
        let body = answer.bytes_stream().map(|chunk| chunk.map(|b| b.to_vec()));
        Events::of(Box::pin(body), max, oversized)
    }

    fn of(
        body: Pin<Box<dyn Stream<Item = reqwest::Result<Vec<u8>>> + Send>>,
        max: usize,
        oversized: Arc<AtomicBool>,
    ) -> Events {
        Events {
            body,
            buf: Vec::new(),
            max,
            oversized,
            name: String::new(),
            data: None,
            size: 0,
        }
    }

    /// The next event; `None` at the end of the stream.
    async fn next(&mut self) -> Result<Option<(String, String)>, String> {
        loop {
            while let Some(end) = self.buf.iter().position(|b| *b == b'\n') {
                let mut line: Vec<u8> = self.buf.drain(..=end).collect();
                line.pop();
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                if let Some(event) = self.line(&line)? {
                    return Ok(Some(event));
                }
            }
            if self.size + self.buf.len() > self.max {
                return Err(self.too_large());
            }
            match self.body.next().await {
                Some(Ok(chunk)) => self.buf.extend_from_slice(&chunk),
                Some(Err(e)) => return Err(e.to_string()),
                None => return Ok(None),
            }
        }
    }

    /// Takes one line of the stream; a blank one ends the event being read.
    fn line(&mut self, line: &[u8]) -> Result<Option<(String, String)>, String> {
        if line.is_empty() {
            self.size = 0;
            let name = std::mem::take(&mut self.name);
            return Ok(self.data.take().map(|data| (name, data)));
        }
        self.size += line.len() + 1;
        if self.size > self.max {
            return Err(self.too_large());
        }
        let line = String::from_utf8_lossy(line);
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (&*line, ""),
        };
        match field {
            "event" => self.name = value.to_owned(),
            "data" => match &mut self.data {
                Some(data) => {
                    data.push('\n');
                    data.push_str(value);
                }
                None => self.data = Some(value.to_owned()),
            },
            // Comments (`:`), `id`, `retry` and unknown fields.
            _ => {}
        }
        Ok(None)
    }

    fn too_large(&self) -> String {
        self.oversized.store(true, Ordering::Relaxed);
        format!("an event larger than {} bytes (max_output)", self.max)
    }
}

#[cfg(test)]
mod tests {
    // Test code may panic: a panic is a failed test.
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn events(chunks: &[&str], max: usize) -> (Events, Arc<AtomicBool>) {
        let chunks: Vec<reqwest::Result<Vec<u8>>> =
            chunks.iter().map(|c| Ok(c.as_bytes().to_vec())).collect();
        let oversized = Arc::new(AtomicBool::new(false));
        let body = Box::pin(futures::stream::iter(chunks));
        (Events::of(body, max, Arc::clone(&oversized)), oversized)
    }

    /// A server on loopback that answers one GET with an event stream whose `endpoint` event
    /// names `endpoint`, then closes.
    fn sse_server(endpoint: &'static str) -> String {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            let mut request = [0u8; 4096];
            let _ = stream.read(&mut request);
            let body = format!("event: endpoint\ndata: {endpoint}\n\n");
            let answer = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(answer.as_bytes());
        });
        format!("http://{addr}/sse")
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_message_endpoint_on_another_origin_is_refused() {
        let http = agentmesh_llm::http_client().build().unwrap();
        let oversized = Arc::new(AtomicBool::new(false));
        let url = sse_server("http://127.0.0.2:9/messages?session=1");
        let refused = connect(&http, &url, HeaderMap::new(), 1024, Arc::clone(&oversized)).await;
        let error = refused.err().unwrap();
        assert!(
            error.contains("named a message endpoint on another origin (`http://127.0.0.2:9/messages?session=1`): refused"),
            "{error}"
        );
        // The same path on the URL's own origin is taken.
        let url = sse_server("/messages?session=1");
        assert!(
            connect(&http, &url, HeaderMap::new(), 1024, oversized)
                .await
                .is_ok()
        );
    }

    #[tokio::test]
    async fn events_are_read_across_chunks_and_a_large_one_ends_the_stream() {
        let stream = [
            "event: endpoint\r\ndata: /messages?session=1\r\n\r\n: a comment\n",
            "id: 7\ndata: {\"a\"\nda",
            "ta: :1}\n\nevent: message\ndata: last\n\n",
        ];
        let (mut read, oversized) = events(&stream, 1024);
        let mut seen = Vec::new();
        while let Some(event) = read.next().await.unwrap() {
            seen.push(event);
        }
        let pair = |a: &str, b: &str| (a.to_owned(), b.to_owned());
        assert_eq!(
            seen,
            [
                pair("endpoint", "/messages?session=1"),
                pair("", "{\"a\"\n:1}"),
                pair("message", "last"),
            ]
        );
        assert!(!oversized.load(Ordering::Relaxed));

        // 40 bytes of data in one event, 32 allowed: whether split over lines or not.
        let long = format!("data: {}\n\n", "x".repeat(40));
        let lines = format!("data: {0}\ndata: {0}\n\n", "x".repeat(20));
        for stream in [long, lines] {
            let (mut read, oversized) = events(&[&stream], 32);
            let error = read.next().await.unwrap_err();
            assert!(error.contains("larger than 32 bytes"), "{error}");
            assert!(oversized.load(Ordering::Relaxed));
        }
        // A line that never ends is cut too.
        let endless = "data: ".to_owned() + &"y".repeat(100);
        let (mut read, _) = events(&[&endless], 32);
        assert!(read.next().await.is_err());
    }
}
