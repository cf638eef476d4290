//! A real headless Chromium driven over WebDriver: `chromedriver` (Debian's `chromium-driver`)
//! started on a free loopback port, one browser session per [`Browser`], both ended when it
//! is dropped. The WebDriver calls are plain JSON over HTTP/1.1, each answer read by its
//! `Content-Length` (chromedriver keeps a connection open after answering).
//!
//! A machine without `chromium` or `chromedriver` fails the test that asks for a browser, with
//! a message saying what to install: a browser test never passes without a browser.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::read_head;

/// The W3C name of an element reference in WebDriver answers.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// How long one WebDriver command may take (starting Chromium included).
const COMMAND_WITHIN: Duration = Duration::from_secs(60);

/// The Debian packages a browser test needs.
const INSTALL: &str = "install them with `apt-get install -y chromium chromium-driver`";

/// One browser at a time in a test process: a Chromium takes most of a core while it loads a
/// page, and tests that wait for a page within a bound should not race each other's browsers.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// A Chromium session.
pub struct Browser {
    _turn: MutexGuard<'static, ()>,
    driver: Child,
    addr: SocketAddr,
    session: String,
    _profile: tempfile::TempDir,
}

/// `METHOD PATH` with a JSON `body` to the driver at `addr`: the status and the JSON answer.
fn exchange(addr: SocketAddr, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
    let what = format!("WebDriver {method} {path}");
    let fail = |e: std::io::Error| -> ! { panic!("{what}: {e}") };
    let mut stream = TcpStream::connect(addr).unwrap_or_else(|e| fail(e));
    stream.set_read_timeout(Some(COMMAND_WITHIN)).unwrap();
    let body = body.map(Value::to_string).unwrap_or_default();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream
        .write_all([head.as_bytes(), body.as_bytes()].concat().as_slice())
        .unwrap_or_else(|e| fail(e));
    let mut reader = BufReader::new(stream);
    let (status_line, headers) = read_head(&mut reader).unwrap_or_else(|e| fail(e));
    let status = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("{what}: bad status line `{status_line}`"));
    let length = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut answer = vec![0; length];
    reader.read_exact(&mut answer).unwrap_or_else(|e| fail(e));
    let value = serde_json::from_slice::<Value>(&answer)
        .unwrap_or_else(|e| panic!("{what}: not JSON ({e})"))["value"]
        .take();
    (status, value)
}

/// The path of `program` in `PATH`, if it runs.
fn found(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

impl Browser {
    /// Starts `chromedriver` and a headless Chromium with a window of 1280×900, once no other
    /// [`Browser`] of this process is alive.
    pub fn start() -> Browser {
        let turn = ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner);
        assert!(
            found("chromedriver"),
            "the browser tests need `chromedriver`, which is not installed: {INSTALL}"
        );
        assert!(
            found("chromium"),
            "the browser tests need `chromium`, which is not installed: {INSTALL}"
        );
        let mut driver = Command::new("chromedriver")
            .args(["--port=0", "--allowed-ips=127.0.0.1"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start chromedriver: {e}"));
        let stdout = driver.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if let Some(port) = line
                    .split("started successfully on port ")
                    .nth(1)
                    .and_then(|p| p.trim().trim_end_matches('.').parse::<u16>().ok())
                {
                    let _ = tx.send(port);
                }
            }
        });
        let port = rx
            .recv_timeout(Duration::from_secs(20))
            .unwrap_or_else(|_| panic!("chromedriver did not say which port it listens on"));
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let profile = tempfile::tempdir().unwrap();
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": which("chromium"),
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                         "--window-size=1280,900", "--no-first-run",
                         format!("--user-data-dir={}", profile.path().display())],
            },
        }}});
        let (_, value) = exchange(addr, "POST", "/session", Some(&caps));
        let session = value["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("chromedriver refused a session: {value}"))
            .to_owned();
        Browser {
            _turn: turn,
            driver,
            addr,
            session,
            _profile: profile,
        }
    }

    /// A WebDriver command of this session: its `value`, or a panic with the driver's error.
    fn call(&self, method: &str, path: &str, body: Option<&Value>) -> Value {
        let path = format!("/session/{}{path}", self.session);
        let (status, value) = exchange(self.addr, method, &path, body);
        assert!(status == 200, "WebDriver {method} {path}: {status} {value}");
        value
    }

    /// Opens `url` and waits for it to load.
    pub fn goto(&self, url: &str) {
        self.call("POST", "/url", Some(&json!({"url": url})));
    }

    /// The URL shown.
    pub fn url(&self) -> String {
        self.call("GET", "/url", None)
            .as_str()
            .unwrap_or("")
            .to_owned()
    }

    /// The first element matching `css`, if any.
    pub fn try_find(&self, css: &str) -> Option<String> {
        let path = format!("/session/{}/element", self.session);
        let body = json!({"using": "css selector", "value": css});
        let (status, value) = exchange(self.addr, "POST", &path, Some(&body));
        (status == 200)
            .then(|| value[ELEMENT].as_str().map(str::to_owned))
            .flatten()
    }

    /// The first element matching `css`.
    pub fn find(&self, css: &str) -> String {
        self.try_find(css).unwrap_or_else(|| {
            panic!(
                "no element `{css}` on {}:\n{}",
                self.url(),
                self.text_of_page()
            )
        })
    }

    /// The text of element `id`, as rendered.
    pub fn text(&self, id: &str) -> String {
        self.call("GET", &format!("/element/{id}/text"), None)
            .as_str()
            .unwrap_or("")
            .to_owned()
    }

    /// The visible text of the page's body.
    pub fn text_of_page(&self) -> String {
        // A script, not an element reference: a page that is being replaced has no stale one.
        self.execute("return document.body ? document.body.innerText : '';")
            .as_str()
            .unwrap_or("")
            .to_owned()
    }

    /// Clicks element `id` (a button that submits a form waits for the next page).
    pub fn click(&self, id: &str) {
        self.call("POST", &format!("/element/{id}/click"), Some(&json!({})));
    }

    /// Types `text` into element `id`.
    pub fn type_into(&self, id: &str, text: &str) {
        self.call(
            "POST",
            &format!("/element/{id}/value"),
            Some(&json!({"text": text})),
        );
    }

    /// Runs `script` in the page (its `return` value).
    pub fn execute(&self, script: &str) -> Value {
        self.call(
            "POST",
            "/execute/sync",
            Some(&json!({"script": script, "args": []})),
        )
    }

    /// Waits up to `limit` for the page's text to contain `needle`.
    pub fn wait_for_text(&self, needle: &str, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        loop {
            if self.text_of_page().contains(needle) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits up to `limit` for the URL shown to end with `suffix` (a click that submits a
    /// form may return before the next page is there): the URL then shown.
    pub fn wait_for_url(&self, suffix: &str, limit: Duration) -> String {
        let deadline = Instant::now() + limit;
        loop {
            let url = self.url();
            if url.ends_with(suffix) || Instant::now() >= deadline {
                return url;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Sets the window's size.
    pub fn resize(&self, width: u32, height: u32) {
        self.call(
            "POST",
            "/window/rect",
            Some(&json!({"width": width, "height": height})),
        );
    }

    /// Saves a PNG of the whole page (Chromium's full-page capture) at `path`.
    pub fn screenshot(&self, path: &Path) {
        let height = self
            .execute("return document.documentElement.scrollHeight;")
            .as_u64()
            .unwrap_or(900)
            .clamp(400, 4000);
        self.resize(1280, u32::try_from(height).unwrap_or(900) + 140);
        let png = self.call("GET", "/screenshot", None);
        let bytes = base64::Engine::decode(
            &base64::engine::general_purpose::STANDARD,
            png.as_str().unwrap_or(""),
        )
        .unwrap();
        std::fs::write(path, bytes).unwrap();
        self.resize(1280, 900);
    }
}

/// The full path of `program` in `PATH`.
fn which(program: &str) -> String {
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join(program))
        .find(|p| p.is_file())
        .map_or_else(|| program.to_owned(), |p| p.display().to_string())
}

impl Drop for Browser {
    fn drop(&mut self) {
        // Ending the session closes the browser; then the driver goes.
        let (addr, path) = (self.addr, format!("/session/{}", self.session));
        let _ = std::thread::spawn(move || exchange(addr, "DELETE", &path, None)).join();
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}
