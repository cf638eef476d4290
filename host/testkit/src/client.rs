//! HTTP/1.1 clients of a server on loopback: a [`Request`] is sent on a connection of its own
//! and its answer read to the end (what tests use); a [`Connection`] sends many requests over
//! one keep-alive connection (what load generators use).

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use serde_json::Value;

use crate::read_head;

/// How long [`Request::send`] waits for an answer.
const SEND_WITHIN: Duration = Duration::from_secs(20);

/// An HTTP request being built.
pub struct Request {
    addr: SocketAddr,
    method: String,
    path: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

/// An HTTP response.
#[derive(Debug)]
pub struct Response {
    /// The status code.
    pub status: u16,
    /// The headers, names in lower case.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl Response {
    /// The body as JSON.
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "not JSON ({e}): {} {}",
                self.status,
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    /// The body as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

impl Request {
    /// `METHOD PATH` to the server at `addr`, without headers or body yet.
    pub fn new(addr: SocketAddr, method: &str, path: &str) -> Request {
        Request {
            addr,
            method: method.to_owned(),
            path: path.to_owned(),
            headers: Vec::new(),
            body: Vec::new(),
        }
    }

    /// Adds a header.
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Sets a JSON body.
    pub fn json(self, value: &Value) -> Self {
        self.header("Content-Type", "application/json")
            .body(value.to_string().into_bytes())
    }

    /// Sets raw body bytes.
    pub fn body(mut self, body: Vec<u8>) -> Self {
        self.body = body;
        self
    }

    /// Sends it and reads the whole response (chunked or up to the close); panics when
    /// nothing answers within 20 s.
    pub fn send(self) -> Response {
        let what = format!("{} {}", self.method, self.path);
        self.read_all(SEND_WITHIN)
            .unwrap_or_else(|e| panic!("{what}: no answer: {e}"))
    }

    /// Sends it and reads the whole response, or `None` when it does not all arrive within
    /// `limit` per read (the server is down, stuck, or died mid-request).
    pub fn try_send(self, limit: Duration) -> Option<Response> {
        self.read_all(limit).ok()
    }

    fn read_all(self, limit: Duration) -> io::Result<Response> {
        let (mut response, mut reader) = self.exchange(limit)?;
        let chunked = response
            .headers
            .iter()
            .any(|(k, v)| k == "transfer-encoding" && v.contains("chunked"));
        if chunked {
            loop {
                let mut size = String::new();
                reader.read_line(&mut size)?;
                let size = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
                if size == 0 {
                    break;
                }
                let mut chunk = vec![0; size + 2];
                reader.read_exact(&mut chunk)?;
                response.body.extend_from_slice(&chunk[..size]);
            }
        } else {
            reader.read_to_end(&mut response.body)?;
        }
        Ok(response)
    }

    /// Sends it and reads the response's head (the body is left unread, empty), or `None` when
    /// nothing answers within `limit` (the server is down, stuck, or died mid-request).
    pub fn send_head(self, limit: Duration) -> Option<Response> {
        self.exchange(limit).ok().map(|(head, _)| head)
    }

    /// Sends it over a fresh connection and reads the response's head, waiting at most `limit`
    /// for each read: the response without its body, and the reader positioned at the body.
    fn exchange(&self, limit: Duration) -> io::Result<(Response, BufReader<TcpStream>)> {
        let mut stream = TcpStream::connect(self.addr)?;
        stream.set_read_timeout(Some(limit))?;
        let target = (self.method.as_str(), self.path.as_str());
        write_request(
            &mut stream,
            self.addr,
            target,
            false,
            &self.headers,
            &self.body,
        )?;
        let mut reader = BufReader::new(stream);
        let head = read_response_head(&mut reader)?;
        Ok((head, reader))
    }
}

/// One keep-alive connection: requests are sent one after the other, each answer read by its
/// `content-length`.
pub struct Connection {
    addr: SocketAddr,
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Connection {
    /// Connects to `addr` (no delay: each request is sent as soon as it is written).
    pub fn open(addr: SocketAddr) -> Connection {
        let stream = TcpStream::connect(addr).unwrap();
        stream.set_nodelay(true).unwrap();
        Connection {
            addr,
            reader: BufReader::new(stream.try_clone().unwrap()),
            writer: stream,
        }
    }

    /// Sends one request with a JSON `body` and `headers`, and reads its answer: status and
    /// body.
    pub fn send(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> (u16, Vec<u8>) {
        let headers = [&[("Content-Type", "application/json")], headers].concat();
        write_request(
            &mut self.writer,
            self.addr,
            (method, path),
            true,
            &headers,
            body,
        )
        .unwrap();
        let head = read_response_head(&mut self.reader).unwrap();
        let length = head
            .headers
            .iter()
            .find(|(k, _)| k == "content-length")
            .map_or(0, |(_, v)| v.parse().unwrap());
        let mut body = vec![0; length];
        self.reader.read_exact(&mut body).unwrap();
        (head.status, body)
    }

    /// `GET path`, answered 200 with JSON.
    pub fn get_json(&mut self, path: &str) -> Value {
        let (status, body) = self.send("GET", path, &[], b"");
        assert_eq!(
            status,
            200,
            "GET {path}: {}",
            String::from_utf8_lossy(&body)
        );
        serde_json::from_slice(&body).unwrap()
    }
}

/// Writes a request to `host`: the request line, `Host`, `Connection: close` unless
/// `keep_alive`, `Content-Length`, `headers` in order, and the body.
fn write_request(
    stream: &mut impl Write,
    host: SocketAddr,
    (method, path): (&str, &str),
    keep_alive: bool,
    headers: &[(impl AsRef<str>, impl AsRef<str>)],
    body: &[u8],
) -> io::Result<()> {
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\n");
    if !keep_alive {
        head.push_str("Connection: close\r\n");
    }
    head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    for (name, value) in headers {
        head.push_str(&format!("{}: {}\r\n", name.as_ref(), value.as_ref()));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes())?;
    stream.write_all(body)
}

/// Reads a response's head (see [`read_head`]): the response without its body.
fn read_response_head(reader: &mut impl BufRead) -> io::Result<Response> {
    let (status_line, headers) = read_head(reader)?;
    let status = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("bad status line `{status_line}`"),
            )
        })?;
    Ok(Response {
        status,
        headers,
        body: Vec::new(),
    })
}
