//! A stand-in for a remote service: a small HTTP/1.1 server on loopback that answers as the
//! test says and records what it receives.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long a server waits for its requests before it stops by itself.
const SERVE_FOR: Duration = Duration::from_secs(20);

/// A request the server received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// `METHOD PATH HTTP/1.1`.
    pub request_line: String,
    /// Header names in lower case, values trimmed, in order.
    pub headers: Vec<(String, String)>,
    /// The body (by `content-length`), as text.
    pub body: String,
}

impl Request {
    /// The first value of header `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Reads an HTTP message head: the first line (trimmed) and the headers (names in lower
/// case, values trimmed) up to the blank line.
pub fn read_head(reader: &mut impl BufRead) -> std::io::Result<(String, Vec<(String, String)>)> {
    let mut first = String::new();
    reader.read_line(&mut first)?;
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            break;
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            headers.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
        }
    }
    Ok((first.trim_end().to_owned(), headers))
}

/// Serves up to `requests` requests on 127.0.0.1 (one per connection, `connection: close`),
/// answering each with `answer(request)`: a status (`"201 Created"`) and a JSON body. Each
/// request is sent on the returned channel once answered. The server stops after `requests`
/// or 20 s, whichever comes first. Returns its port.
pub fn serve(
    requests: usize,
    answer: impl Fn(&Request) -> (&'static str, String) + Send + 'static,
) -> (u16, mpsc::Receiver<Request>) {
    serve_for(requests, SERVE_FOR, answer)
}

/// [`serve`] for up to `limit` rather than 20 s (for a test that restarts the host between
/// requests); it also stops at the first request after the channel's receiver is dropped.
pub fn serve_for(
    requests: usize,
    limit: Duration,
    answer: impl Fn(&Request) -> (&'static str, String) + Send + 'static,
) -> (u16, mpsc::Receiver<Request>) {
    serve_with(requests, limit, move |request| {
        let (status, json) = answer(request);
        (status, None, json)
    })
}

/// [`serve`] with a `Location` header: `answer` gives each request's status, the URL its
/// `Location` names (none: no such header) and its JSON body.
pub fn serve_located(
    requests: usize,
    answer: impl Fn(&Request) -> (&'static str, Option<String>, String) + Send + 'static,
) -> (u16, mpsc::Receiver<Request>) {
    serve_with(requests, SERVE_FOR, answer)
}

/// The server of [`serve_for`] and [`serve_located`].
fn serve_with(
    requests: usize,
    limit: Duration,
    answer: impl Fn(&Request) -> (&'static str, Option<String>, String) + Send + 'static,
) -> (u16, mpsc::Receiver<Request>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    listener
        .set_nonblocking(true)
        .expect("non-blocking listener");
    let port = listener.local_addr().map(|a| a.port()).unwrap_or_default();
    let (sent, received) = mpsc::channel();
    std::thread::spawn(move || {
        let deadline = Instant::now() + limit;
        let mut served = 0;
        while served < requests && Instant::now() < deadline {
            match listener.accept() {
                Ok((stream, _)) => {
                    if let Ok(request) = exchange(stream, &answer) {
                        served += 1;
                        if sent.send(request).is_err() {
                            return;
                        }
                    }
                }
                Err(_) => std::thread::sleep(Duration::from_millis(5)),
            }
        }
    });
    (port, received)
}

/// Reads one request (its head, and a body by `content-length`) from `stream`, which it
/// makes blocking with a read timeout: the request, and the stream to answer on.
pub(crate) fn read_request(stream: TcpStream) -> std::io::Result<(Request, TcpStream)> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut reader = BufReader::new(stream);
    let (request_line, headers) = read_head(&mut reader)?;
    let length = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; length];
    reader.read_exact(&mut body)?;
    let request = Request {
        request_line,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    };
    Ok((request, reader.into_inner()))
}

/// Reads one request from `stream` and writes the answer.
fn exchange(
    stream: TcpStream,
    answer: &impl Fn(&Request) -> (&'static str, Option<String>, String),
) -> std::io::Result<Request> {
    let (request, mut stream) = read_request(stream)?;
    let (status, location, json) = answer(&request);
    let location = location.map(|l| format!("location: {l}\r\n"));
    write!(
        stream,
        "HTTP/1.1 {status}\r\n{}content-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{json}",
        location.unwrap_or_default(),
        json.len()
    )?;
    Ok(request)
}
