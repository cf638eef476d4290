//! `agentmesh serve` as a child process, and a small HTTP/1.1 client over loopback.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

/// A running `agentmesh serve`; killed (SIGKILL) when dropped unless stopped before.
pub struct Server {
    child: Child,
    /// Where it listens.
    pub addr: SocketAddr,
    /// Its stderr lines, as they come.
    log: mpsc::Receiver<String>,
    /// Its stderr lines before the one that names the address.
    pub startup: Vec<String>,
}

impl Server {
    /// Starts `agentmesh serve DIR --listen 127.0.0.1:0 --data DATA` with extra environment
    /// variables, and waits until it listens.
    pub fn start(dir: &Path, data: &Path, env: &[(&str, &str)]) -> Server {
        Self::spawn(
            Command::new(env!("CARGO_BIN_EXE_agentmesh")),
            dir,
            data,
            env,
        )
    }

    /// [`Server::start`] with the command run by `wrapper` (e.g. `setpriv --reuid=nobody`).
    pub fn start_under(wrapper: &[&str], dir: &Path, data: &Path, env: &[(&str, &str)]) -> Server {
        let binary = env!("CARGO_BIN_EXE_agentmesh");
        let command = match wrapper.split_first() {
            Some((program, args)) => {
                let mut c = Command::new(program);
                c.args(args).arg(binary);
                c
            }
            None => Command::new(binary),
        };
        Self::spawn(command, dir, data, env)
    }

    /// [`Server::start`] under a file-descriptor limit of `soft` and `hard` (set by
    /// `prlimit`, from util-linux, which must be installed).
    pub fn start_with_nofile(dir: &Path, data: &Path, soft: u64, hard: u64) -> Server {
        let found = Command::new("prlimit").arg("--version").output();
        assert!(
            found.is_ok_and(|o| o.status.success()),
            "`prlimit` is needed to lower the server's descriptor limit: install util-linux"
        );
        let nofile = format!("--nofile={soft}:{hard}");
        Self::start_under(&["prlimit", &nofile], dir, data, &[])
    }

    /// Runs `COMMAND serve DIR …` and waits until it listens.
    fn spawn(mut command: Command, dir: &Path, data: &Path, env: &[(&str, &str)]) -> Server {
        command
            .args(["serve", dir.to_str().unwrap(), "--listen", "127.0.0.1:0"])
            .args(["--data", data.to_str().unwrap()])
            .env("AGENTMESH_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (k, v) in env {
            command.env(k, v);
        }
        let mut child = command.spawn().unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        let deadline = Instant::now() + Duration::from_secs(120);
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) => {
                    if let Some(addr) = line.split("listening on http://").nth(1) {
                        let addr = addr.trim().parse().unwrap();
                        return Server {
                            child,
                            addr,
                            log: rx,
                            startup: seen,
                        };
                    }
                    seen.push(line);
                }
                Err(_) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!("agentmesh serve did not start:\n{}", seen.join("\n"));
                }
            }
        }
    }

    /// A request to this server.
    pub fn request(&self, method: &str, path: &str) -> Request {
        Request {
            addr: self.addr,
            method: method.to_owned(),
            path: path.to_owned(),
            headers: Vec::new(),
            body: Vec::new(),
        }
    }

    /// Creates a task (`POST /v1/tasks` with `body`) and returns its id.
    pub fn create_task(&self, body: &Value) -> String {
        let r = self.request("POST", "/v1/tasks").json(body).send();
        assert_eq!(r.status, 201, "{}", r.text());
        r.json()["id"].as_str().unwrap().to_owned()
    }

    /// The first event of `kind` in task `id`'s log, once there is one (at most 30 s).
    pub fn wait_for_event(&self, id: &str, kind: &str) -> Value {
        wait_for(Duration::from_secs(30), || {
            let events = self
                .request("GET", &format!("/v1/tasks/{id}/events"))
                .send()
                .json();
            events["events"]
                .as_array()?
                .iter()
                .find(|e| e["kind"] == kind)
                .cloned()
        })
        .unwrap_or_else(|| panic!("no {kind} in task {id}'s log"))
    }

    /// Opens task `id`'s live event stream (`Accept: text/event-stream`): the response head
    /// and the reader positioned at the first frame.
    pub fn open_sse(&self, id: &str) -> (String, BufReader<TcpStream>) {
        let mut stream = TcpStream::connect(self.addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        write!(
            stream,
            "GET /v1/tasks/{id}/events HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n"
        )
        .unwrap();
        let mut sse = BufReader::new(stream);
        let mut head = String::new();
        loop {
            let mut line = String::new();
            sse.read_line(&mut line).unwrap();
            if line.trim().is_empty() {
                return (head, sse);
            }
            head.push_str(&line);
        }
    }

    /// Kills the server at once (SIGKILL), as a crash would.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Sends SIGTERM, waits for the exit and returns everything it wrote on stderr after it
    /// started listening.
    pub fn terminate_with_log(mut self) -> String {
        self.sigterm();
        // The reader thread ends, dropping its sender, at the end of the exited child's stderr.
        let lines: Vec<String> = self.log.iter().collect();
        lines.join("\n")
    }

    /// Waits up to `limit` for the server to exit by itself; its exit code (`None`: it still
    /// runs, or a signal ended it).
    pub fn wait_exit(&mut self, limit: Duration) -> Option<i32> {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }

    /// Sends SIGTERM and waits for the exit; returns its exit code.
    pub fn terminate(mut self) -> Option<i32> {
        self.sigterm()
    }

    fn sigterm(&mut self) -> Option<i32> {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        None
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for line in self.log.try_iter() {
                eprintln!("server: {line}");
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

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

    /// Sends it and reads the whole response.
    pub fn send(self) -> Response {
        let mut stream = TcpStream::connect(self.addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        let mut head = format!(
            "{} {} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nContent-Length: {}\r\n",
            self.method,
            self.path,
            self.addr,
            self.body.len()
        );
        for (k, v) in &self.headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str("\r\n");
        stream.write_all(head.as_bytes()).unwrap();
        stream.write_all(&self.body).unwrap();
        let mut reader = BufReader::new(stream);
        let (status_line, headers) = agentmesh_testkit::read_head(&mut reader)
            .unwrap_or_else(|e| panic!("{} {}: no answer: {e}", self.method, self.path));
        let status = status_line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("bad status line `{status_line}`"));
        let chunked = headers
            .iter()
            .any(|(k, v)| k == "transfer-encoding" && v.contains("chunked"));
        let mut body = Vec::new();
        if chunked {
            loop {
                let mut size = String::new();
                reader.read_line(&mut size).unwrap();
                let size = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
                if size == 0 {
                    break;
                }
                let mut chunk = vec![0; size + 2];
                reader.read_exact(&mut chunk).unwrap();
                body.extend_from_slice(&chunk[..size]);
            }
        } else {
            reader.read_to_end(&mut body).unwrap();
        }
        Response {
            status,
            headers,
            body,
        }
    }
}

/// Polls `check` every 50 ms until it returns `Some`, for at most `limit`.
pub fn wait_for<T>(limit: Duration, mut check: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = check() {
            return Some(v);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Posts `body` with `headers` over a fresh connection; the status, or `None` when the server
/// does not answer (it is down or died mid-request).
pub fn post_raw(
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Option<u16> {
    let mut stream = TcpStream::connect(addr).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .ok()?;
    let mut head = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).ok()?;
    stream.write_all(body).ok()?;
    let mut status_line = String::new();
    BufReader::new(stream).read_line(&mut status_line).ok()?;
    status_line.split_whitespace().nth(1)?.parse().ok()
}
