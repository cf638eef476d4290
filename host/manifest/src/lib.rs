//! Manifests of agentmesh: typed models of every kind, the config-dir loader and the validator.
//!
//! - [`model`]: strict serde models of the agent, tool, trigger, schedule, bundle-descriptor
//!   and host-config kinds, each with a JSON Schema ([`model::Kind::schema`]);
//! - [`load`]: reads a config dir (every `*.yaml`/`*.yml`, several documents per file) into a
//!   [`Config`], checking each document's shape against its schema first so that every problem
//!   is reported with its line and column ([`yaml`] keeps the positions);
//! - [`resolve`]: capability resolution, done once — the tool or agent each capability key
//!   names and the functions the LLM sees for it; [`check`] reports its errors, the engine's
//!   plan compiles its result;
//! - [`credentials`]: how each host source lets deliveries in (a signature's secret, bearer
//!   tokens, or MCP updates) and what each auth provider gives requests, resolved once;
//!   [`check`] reports their errors, the plan compiles them;
//! - [`check`]: everything the shape cannot show — references between documents, CEL and
//!   templates compiled and scope-checked, exactly-one rules, files that must exist;
//! - [`validate`]: both, as `agentmesh validate` runs them;
//! - `shape`: the shape check of a document against its kind's schema; `env`: `{env: …}`
//!   values read from the environment; `diag`: [`Diagnostic`]s with file and position;
//! - [`suggest`]: "did you mean" for misspelt names (the CLI's MCP probe uses it too).
//!
//! ```no_run
//! let report = agentmesh_manifest::validate(std::path::Path::new("examples/quickstart"));
//! for d in &report.diagnostics {
//!     eprintln!("{d}");
//! }
//! ```

pub mod check;
pub mod credentials;
mod diag;
mod env;
pub mod load;
pub mod model;
pub mod resolve;
mod shape;
pub mod suggest;
pub mod yaml;

use std::path::Path;

pub use check::{ComponentUse, ComponentWorld, Summary};
pub use diag::{Diagnostic, Severity};
pub use load::{Config, Loaded, Source};

/// The outcome of validating a config dir.
#[derive(Debug)]
pub struct Report {
    /// What loaded cleanly.
    pub config: Config,
    /// Counts for the `ok:` line.
    pub summary: Summary,
    /// Every problem, sorted by file and position.
    pub diagnostics: Vec<Diagnostic>,
    /// Every reference to a component file, with the world it must implement, for a caller
    /// that compiles them (the manifest crate only reads their headers) and reports with
    /// [`Report::add_diagnostics`].
    pub components: Vec<ComponentUse>,
}

impl Report {
    /// Whether any diagnostic is an error.
    pub fn has_errors(&self) -> bool {
        self.diagnostics.iter().any(Diagnostic::is_error)
    }

    /// Adds problems found after loading (e.g. by compiling the components), keeping the
    /// diagnostics sorted by file and position.
    pub fn add_diagnostics(&mut self, more: impl IntoIterator<Item = Diagnostic>) {
        self.diagnostics.extend(more);
        self.diagnostics
            .sort_by(|a, b| (&a.file, a.pos).cmp(&(&b.file, b.pos)));
        self.diagnostics.dedup();
    }
}

/// Loads and checks `path` (a config dir or one file), reading environment variables from the
/// process.
pub fn validate(path: &Path) -> Report {
    validate_with_env(path, &|name| std::env::var(name).ok())
}

/// Loads and checks the text of one manifest file, as [`validate`] does for each file of a
/// config dir (no file is read; relative paths resolve against the current directory). For
/// editors, fuzzing and property tests.
pub fn validate_text(
    text: &str,
    file: &Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> Vec<Diagnostic> {
    let mut config = Config::default();
    let mut diagnostics = Vec::new();
    let place = (file, Path::new("."));
    load::load_text(text, place, env, &mut config, &mut diagnostics);
    let (_, more, _) = check::validate(&config, env);
    diagnostics.extend(more);
    diagnostics
}

/// [`validate`] with an injected environment.
pub fn validate_with_env(path: &Path, env: &dyn Fn(&str) -> Option<String>) -> Report {
    let (config, diagnostics) = load::load(path, env);
    let (summary, more, components) = check::validate(&config, env);
    let mut report = Report {
        config,
        summary,
        diagnostics,
        components,
    };
    report.add_diagnostics(more);
    report
}
