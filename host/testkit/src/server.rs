//! `agentmesh serve` as a child process on loopback.
//!
//! [`Server::start`] runs `BINARY serve DIR --listen 127.0.0.1:0 --data DATA`: the host binds a
//! free port itself and names it on stderr (`listening on http://ADDR`), which is where the
//! server is waited for — no port is picked by the test and then raced for. Its stderr is read
//! on a thread for the whole run: the lines before that one are [`Server::startup`], the later
//! ones are printed when a test panics with the server up, or returned by
//! [`Server::terminate_with_log`].

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::client::Request;

/// How long a server may take to start listening (parsing and compiling its config included).
const START_WITHIN: Duration = Duration::from_secs(120);

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

/// The environment under which a server's peak resident memory ([`Server::peak_rss_kib`]) is
/// the most it held at once: its allocator (mimalloc) gives memory back to the system as soon
/// as it is freed, not after its purge delay (10 ms), so a block freed just before another is
/// allocated does not count twice. What a body's charge bounds is memory held.
pub const RETURN_FREED_MEMORY: (&str, &str) = ("MIMALLOC_PURGE_DELAY", "0");

impl Server {
    /// Starts `BINARY serve DIR --listen 127.0.0.1:0 --data DATA` with extra environment
    /// variables, and waits until it listens. It logs at `info` unless `env` sets
    /// `AGENTMESH_LOG`.
    pub fn start(binary: &str, dir: &Path, data: &Path, env: &[(&str, &str)]) -> Server {
        Self::start_under(&[], binary, dir, data, env)
    }

    /// [`Server::start`] with the command run by `wrapper` (e.g. `setpriv --reuid=nobody`).
    pub fn start_under(
        wrapper: &[&str],
        binary: &str,
        dir: &Path,
        data: &Path,
        env: &[(&str, &str)],
    ) -> Server {
        let mut command = match wrapper.split_first() {
            Some((program, args)) => {
                let mut c = Command::new(program);
                c.args(args).arg(binary);
                c
            }
            None => Command::new(binary),
        };
        command
            .args(["serve", dir.to_str().unwrap(), "--listen", "127.0.0.1:0"])
            .args(["--data", data.to_str().unwrap()])
            .env("AGENTMESH_LOG", "info")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        Self::spawn(command)
    }

    /// [`Server::start`] under a file-descriptor limit of `soft` and `hard` (set by
    /// `prlimit`, from util-linux, which must be installed).
    pub fn start_with_nofile(
        binary: &str,
        dir: &Path,
        data: &Path,
        soft: u64,
        hard: u64,
    ) -> Server {
        let found = Command::new("prlimit").arg("--version").output();
        assert!(
            found.is_ok_and(|o| o.status.success()),
            "`prlimit` is needed to lower the server's descriptor limit: install util-linux"
        );
        let nofile = format!("--nofile={soft}:{hard}");
        Self::start_under(&["prlimit", &nofile], binary, dir, data, &[])
    }

    /// Runs `command` and waits until it names the address it listens on.
    fn spawn(mut command: Command) -> Server {
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
        let deadline = Instant::now() + START_WITHIN;
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
                // It exited (its stderr closed), or it is still not listening.
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
        Request::new(self.addr, method, path)
    }

    /// Creates a task (`POST /v1/tasks` with `body`) and returns its id.
    pub fn create_task(&self, body: &Value) -> String {
        Self::created(self.request("POST", "/v1/tasks").json(body))
    }

    /// Creates a task (`POST /v1/tasks` with `body`) as `token`'s holder and returns its id.
    pub fn create_task_as(&self, token: &str, body: &Value) -> String {
        let request = self.request("POST", "/v1/tasks");
        Self::created(
            request
                .header("Authorization", &format!("Bearer {token}"))
                .json(body),
        )
    }

    /// The id of the task `request` creates (answered 201).
    fn created(request: Request) -> String {
        let r = request.send();
        assert_eq!(r.status, 201, "{}", r.text());
        r.json()["id"].as_str().unwrap().to_owned()
    }

    /// The texts of the user's messages in task `id`'s log, in order.
    pub fn user_texts(&self, id: &str) -> Vec<Value> {
        let log = self
            .request("GET", &format!("/v1/tasks/{id}/events"))
            .send()
            .json();
        log["events"]
            .as_array()
            .unwrap_or_else(|| panic!("no events in {log}"))
            .iter()
            .filter(|e| e["kind"] == "MessageEvent" && e["source"] == "user")
            .map(|e| e["content"][0]["text"].clone())
            .collect()
    }

    /// Queues `text` as task `id`'s next input (`POST /v1/tasks/{id}/input`), checking the 202.
    pub fn send_input(&self, id: &str, text: &str) {
        let r = self
            .request("POST", &format!("/v1/tasks/{id}/input"))
            .json(&serde_json::json!({"message": [{"mimeType": "text/plain", "text": text}]}))
            .send();
        assert_eq!(r.status, 202, "{}", r.text());
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

    /// Task `id` (`GET /v1/tasks/{id}`).
    pub fn task(&self, id: &str) -> Value {
        self.request("GET", &format!("/v1/tasks/{id}"))
            .send()
            .json()
    }

    /// Task `id` once its status is `status` (at most 30 s); panics when it does not get there.
    pub fn wait_for_status(&self, id: &str, status: &str) -> Value {
        wait_for(Duration::from_secs(30), || {
            let task = self.task(id);
            (task["status"] == status).then_some(task)
        })
        .unwrap_or_else(|| panic!("task {id} never became {status}"))
    }

    /// Waits until task `id` is idle with an answer (at most `limit`); panics saying `what`
    /// when it is not.
    pub fn wait_answered(&self, id: &str, limit: Duration, what: &str) {
        wait_for(limit, || {
            let t = self.task(id);
            (t["status"] == "idle" && t["output"].as_array().is_some_and(|o| !o.is_empty()))
                .then_some(())
        })
        .unwrap_or_else(|| panic!("{what}: task {id} never answered"));
    }

    /// Opens task `id`'s live event stream (`Accept: text/event-stream`): the response head
    /// and the reader positioned at the first frame.
    pub fn open_sse(&self, id: &str) -> (String, BufReader<TcpStream>) {
        self.open_sse_with(id, "")
    }

    /// [`Server::open_sse`] as the holder of `token`, on a connection that closes when the
    /// stream ends.
    pub fn open_sse_as(&self, id: &str, token: &str) -> (String, BufReader<TcpStream>) {
        self.open_sse_with(
            id,
            &format!("Authorization: Bearer {token}\r\nConnection: close\r\n"),
        )
    }

    /// Opens task `id`'s live event stream with `headers` (each line ending in CRLF) added.
    fn open_sse_with(&self, id: &str, headers: &str) -> (String, BufReader<TcpStream>) {
        let mut stream = TcpStream::connect(self.addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        write!(
            stream,
            "GET /v1/tasks/{id}/events HTTP/1.1\r\nHost: {}\r\nAccept: text/event-stream\r\n{headers}\r\n",
            self.addr
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

    /// The server's resident memory (VmRSS), KiB.
    pub fn rss_kib(&self) -> u64 {
        self.status_kib("VmRSS")
    }

    /// The most resident memory the server has had (VmHWM), KiB.
    pub fn peak_rss_kib(&self) -> u64 {
        self.status_kib("VmHWM")
    }

    /// Resets the server's peak resident memory to what it holds now (`/proc/PID/clear_refs`),
    /// and returns that, KiB: what the peak then grows by is the growth from here.
    pub fn reset_peak_rss(&self) -> u64 {
        std::fs::write(format!("/proc/{}/clear_refs", self.child.id()), "5").unwrap();
        self.peak_rss_kib()
    }

    /// Runs `f` (requests to the server), and panics unless the server's peak resident
    /// memory grew by less than `kib` KiB meanwhile: what `f` returned.
    pub fn grows_less_than<T>(&self, kib: u64, f: impl FnOnce() -> T) -> T {
        let before = self.reset_peak_rss();
        let out = f();
        let grew = self.peak_rss_kib().saturating_sub(before);
        assert!(
            grew < kib,
            "the host's peak memory grew by {grew} KiB, not less than {kib} KiB"
        );
        out
    }

    /// A figure in KiB of the server's `/proc/PID/status`.
    fn status_kib(&self, field: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or_else(|| panic!("{field} in /proc/PID/status"))
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

    /// Freezes the server (SIGSTOP) until [`resume`](Self::resume), as a stalled machine
    /// would.
    pub fn pause(&self) {
        self.signal("STOP");
    }

    /// Lets a [paused](Self::pause) server run again (SIGCONT).
    pub fn resume(&self) {
        self.signal("CONT");
    }

    /// Sends signal `name` (`TERM`, `STOP`, …) to the server.
    fn signal(&self, name: &str) {
        let _ = Command::new("kill")
            .args([format!("-{name}"), self.child.id().to_string()])
            .status();
    }

    /// Sends SIGTERM and waits for the exit; returns its exit code.
    pub fn terminate(mut self) -> Option<i32> {
        self.sigterm()
    }

    /// Sends SIGTERM and waits up to `limit` for the exit (then kills it, and prints what it
    /// wrote on stderr): the exit code.
    pub fn stop_within(&mut self, limit: Duration) -> Option<i32> {
        self.signal("TERM");
        let code = self.wait_exit(limit);
        if code.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
            for line in self.log.try_iter() {
                eprintln!("server: {line}");
            }
        }
        code
    }

    /// Sends SIGTERM and waits up to 30 s for the exit (then kills it): the exit code.
    fn sigterm(&mut self) -> Option<i32> {
        self.signal("TERM");
        let code = self.wait_exit(Duration::from_secs(30));
        if code.is_none() {
            let _ = self.child.kill();
        }
        code
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
