//! `agentmesh`: the command line. Each subcommand lives in `commands` (`commands/`, one file
//! each) with an `execute()`; the work itself is done by the `agentmesh-*` library crates.

mod commands;

use std::process::ExitCode;

use agentmesh_secrets::{Scrubbed, SharedSecrets};
use clap::{Parser, Subcommand};
use tracing_subscriber::fmt::MakeWriter;

/// A turn allocates many small, short-lived values (JSON, CEL values, events); mimalloc
/// serves them several times faster than the system allocator (BENCHMARKS.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// A host for Common Agent Specification agents, with tools as sandboxed Wasm components.
#[derive(Parser)]
#[command(name = "agentmesh", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Load and check every manifest, expression and component of a config dir.
    Validate(commands::validate::Args),
    /// Run one task in-process to idle or termination and print its answer.
    Run(commands::run::Args),
    /// Serve the HTTP API, webhooks and schedules, reloading the config dir on change.
    Serve(commands::serve::Args),
    /// Call one action of a tool as a task would, and print its result and timings.
    Call(commands::call::Args),
    /// Print a task's event log, one JSON object a line.
    Events(commands::events::Args),
    /// List tasks, newest first, as a table or JSON lines.
    Tasks(commands::tasks::Args),
    /// Approve or deny a review a running host waits for.
    Review(commands::review::Args),
    /// Serve an agent's functions as MCP tools on stdin/stdout until stdin closes.
    Mcp(commands::mcp::Args),
    /// Print the JSON Schema of a manifest kind.
    Schema(commands::schema::Args),
    /// Write a ready project: `new tool NAME --lang rust|python|js`.
    New(commands::new::Args),
    /// The PostgreSQL store: `store migrate` applies its schema without serving.
    Store(commands::store::Args),
}

fn main() -> ExitCode {
    // The secrets of the configuration in force: the engine publishes them when it starts
    // and at every reload; the log writer and the last error line scrub with them.
    let secrets = SharedSecrets::default();
    init_logging(secrets.clone());
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Validate(args) => commands::validate::execute(&args),
        Command::Run(args) => commands::run::execute(&args, &secrets),
        Command::Serve(args) => commands::serve::execute(&args, &secrets),
        Command::Call(args) => commands::call::execute(&args, &secrets),
        Command::Events(args) => commands::events::execute(&args),
        Command::Tasks(args) => commands::tasks::execute(&args),
        Command::Review(args) => commands::review::execute(&args),
        Command::Mcp(args) => commands::mcp::execute(&args, &secrets),
        Command::Schema(args) => commands::schema::execute(&args),
        Command::New(args) => commands::new::execute(&args),
        Command::Store(args) => commands::store::execute(&args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {}", secrets.get().scrub(&format!("{e:#}")));
            ExitCode::from(1)
        }
    }
}

/// Logs go to stderr, filtered by `AGENTMESH_LOG` (tracing env-filter syntax; default `warn`,
/// `error` for the MCP library), with every secret of the configuration in force replaced by
/// `***`.
fn init_logging(secrets: SharedSecrets) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("AGENTMESH_LOG")
        // An MCP client probing for a protocol revision the host does not serve is routine.
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,rmcp=error"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        // Colours only for a terminal: a log file or a collector gets plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(LogWriter(secrets))
        .init();
}

/// Stderr, scrubbed. The formatter writes each log line in one write, so a secret in a line
/// is always seen whole.
struct LogWriter(SharedSecrets);

impl<'a> MakeWriter<'a> for LogWriter {
    type Writer = Scrubbed<std::io::Stderr>;

    fn make_writer(&'a self) -> Self::Writer {
        Scrubbed::new(std::io::stderr(), self.0.get())
    }
}
