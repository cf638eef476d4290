//! A real PostgreSQL server for a test: `initdb` into a temp dir, started on a free loopback
//! port, stopped (immediate shutdown) and removed when dropped. The server binaries come from
//! the Debian package `postgresql` (`/usr/lib/postgresql/<version>/bin`); without them a test
//! fails with what to install. As root the server runs as the package's `postgres` user, which
//! `initdb` requires.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A running server, stopped when dropped.
pub struct Postgres {
    bin: PathBuf,
    dir: tempfile::TempDir,
    port: u16,
    /// The user the server runs as, when the test runs as root.
    run_as: Option<String>,
}

/// The superuser `initdb` creates, which tests connect as (trust authentication on loopback).
const USER: &str = "agentmesh";

/// The directory of the newest installed server version's binaries.
fn server_binaries() -> PathBuf {
    let root = Path::new("/usr/lib/postgresql");
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir(root)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let version = e.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").exists().then_some((version, bin))
        })
        .collect();
    versions.sort();
    match versions.pop() {
        Some((_, bin)) => bin,
        None => panic!(
            "PostgreSQL server binaries not found (/usr/lib/postgresql/<version>/bin/initdb): \
             install the Debian package `postgresql` (apt-get install -y postgresql); \
             `.ci/run` installs it"
        ),
    }
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap()
}

fn check(what: &str, output: std::io::Result<Output>) -> Output {
    let output = output.unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        output.status.success(),
        "{what} failed ({}):\n{}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

impl Postgres {
    /// Initializes and starts a server.
    pub fn start() -> Postgres {
        let bin = server_binaries();
        let dir = tempfile::Builder::new()
            .prefix("agentmesh-pg-")
            .tempdir()
            .unwrap();
        let run_as = is_root().then(|| "postgres".to_owned());
        if let Some(user) = &run_as {
            // The server's user owns its directory.
            check(
                "chown of the PostgreSQL test dir",
                Command::new("chown")
                    .arg(format!("{user}:"))
                    .arg(dir.path())
                    .output(),
            );
            std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        }
        let pg = Postgres {
            bin,
            dir,
            port: free_port(),
            run_as,
        };
        let data = pg.data();
        check(
            "initdb",
            pg.command("initdb")
                .args(["--auth=trust", "--username", USER, "--encoding=UTF8", "-D"])
                .arg(&data)
                .output(),
        );
        let options = format!(
            "-c listen_addresses=127.0.0.1 -p {} -k {} -c fsync=on -c max_connections=200",
            pg.port,
            pg.dir.path().display()
        );
        check(
            "pg_ctl start",
            pg.command("pg_ctl")
                .args(["-w", "-t", "60", "-D"])
                .arg(&data)
                .args(["-o", &options, "-l"])
                .arg(pg.dir.path().join("server.log"))
                .arg("start")
                .output(),
        );
        pg
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// `program` of the server's binaries, as the server's user.
    fn command(&self, program: &str) -> Command {
        let path = self.bin.join(program);
        match &self.run_as {
            Some(user) => {
                let mut c = Command::new("runuser");
                c.args(["-u", user, "--"]).arg(path);
                c
            }
            None => Command::new(path),
        }
    }

    /// The server's port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Creates database `name` (letters, digits and `_`).
    pub fn create_database(&self, name: &str) {
        check(
            "createdb",
            self.command("createdb")
                .args(["-h", "127.0.0.1", "-p", &self.port.to_string(), "-U", USER])
                .arg(name)
                .output(),
        );
    }

    /// The URL of database `name`.
    pub fn url(&self, name: &str) -> String {
        format!("postgres://{USER}@127.0.0.1:{}/{name}", self.port)
    }

    /// A new database, by a name of its own, and its URL.
    pub fn new_database(&self) -> String {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let name = format!("db_{}", NEXT.fetch_add(1, Ordering::SeqCst));
        self.create_database(&name);
        self.url(&name)
    }

    /// Runs `sql` in database `name` with `psql`, returning what it printed (unaligned,
    /// tuples only).
    pub fn psql(&self, name: &str, sql: &str) -> String {
        let out = check(
            "psql",
            self.command("psql")
                .args(["-h", "127.0.0.1", "-p", &self.port.to_string(), "-U", USER])
                .args(["-v", "ON_ERROR_STOP=1", "-At", "-d", name, "-c", sql])
                .output(),
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// Listens on `channel` of database `name` for `secs` seconds from a `psql` session of
    /// its own; returns once the session listens. [`Listening::heard`] gives the payloads.
    pub fn listen(&self, name: &str, channel: &str, secs: u32) -> Listening {
        let child = self
            .command("psql")
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string(), "-U", USER])
            .args(["-v", "ON_ERROR_STOP=1", "-At", "-d", name])
            .args(["-c", &format!("LISTEN {channel}")])
            .args(["-c", &format!("SELECT pg_sleep({secs}) AS listening")])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("psql: {e}"));
        // Its LISTEN has committed once its sleep runs.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while self.psql(
            name,
            "SELECT count(*) FROM pg_stat_activity \
             WHERE state = 'active' AND query LIKE 'SELECT pg_sleep(% AS listening'",
        ) != "1"
        {
            assert!(
                std::time::Instant::now() < deadline,
                "psql did not start listening"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        Listening(child)
    }
}

/// A `psql` session listening on a channel (see [`Postgres::listen`]).
pub struct Listening(std::process::Child);

impl Listening {
    /// Waits for the session to end; the payloads of the notices it heard, in order.
    pub fn heard(self) -> Vec<String> {
        let out = check("psql", self.0.wait_with_output());
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|line| {
                let rest = line.strip_prefix("Asynchronous notification ")?;
                let (_, rest) = rest.split_once(" with payload \"")?;
                let (payload, _) = rest.rsplit_once("\" received from server process")?;
                Some(payload.to_owned())
            })
            .collect()
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let _ = self
            .command("pg_ctl")
            .args(["-m", "immediate", "-D"])
            .arg(self.data())
            .arg("stop")
            .output();
    }
}
