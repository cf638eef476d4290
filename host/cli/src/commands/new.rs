//! `agentmesh new tool NAME --lang rust|python|js [--dir DIR]`: writes a ready tool project —
//! the component's source with one example action and its build file, the tool manifest, an
//! agent on a scripted model that calls the action, a README with the commands to build,
//! check and run it, and the WIT package the component is built against.
//!
//! The templates live in `host/cli/templates/new-tool/` (`common/` for every language, then
//! one folder per language) and are compiled into the binary, with the WIT of `wit/` and, for
//! Rust, the guest SDK of `guests/sdk/` — so a project builds without this repository.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};

/// Arguments of `new`.
#[derive(clap::Args)]
pub struct Args {
    /// What to create: `tool`.
    what: What,
    /// The tool's name: lowercase letters, digits and `-`, starting with a letter.
    name: String,
    /// The language of the component.
    #[arg(long)]
    lang: Lang,
    /// Where to write the project (default: `./NAME`); it must not exist or be empty.
    #[arg(long)]
    dir: Option<PathBuf>,
}

/// What `new` creates.
#[derive(Clone, Copy, clap::ValueEnum)]
enum What {
    /// A tool: a component of the `tool-plugin` world, its manifest and an agent to try it.
    Tool,
}

/// A component language.
#[derive(Clone, Copy, clap::ValueEnum)]
enum Lang {
    /// Rust, with the guest SDK (`cargo build --target wasm32-wasip2`).
    Rust,
    /// Python, with `componentize-py`.
    Python,
    /// JavaScript, with `componentize-js` (through npm).
    Js,
}

/// A file of a project: its path in the project and its text.
type File = (&'static str, &'static str);

/// Declares the files of a template folder: `files!("rust"; "src/lib.rs", …)` is the list of
/// `(path, text)` of `templates/new-tool/rust/…`.
macro_rules! files {
    ($folder:literal; $($path:literal),+ $(,)?) => {
        &[$(($path, include_str!(concat!("../../templates/new-tool/", $folder, "/", $path)))),+]
    };
}

/// The files every project gets, placeholders and all.
const COMMON: &[File] = files!("common"; "agent.yaml", "script.yaml");

/// The Rust project's own files.
const RUST: &[File] = files!("rust";
    "Cargo.toml", "src/lib.rs", "tool.yaml", "README.md", ".gitignore", ".cargo/config.toml",
);

/// The Python project's own files.
const PYTHON: &[File] = files!("python";
    "app.py", "tool.py", "tool.yaml", "build.sh", "README.md", ".gitignore",
);

/// The JavaScript project's own files.
const JS: &[File] = files!("js";
    "app.js", "package.json", "tool.yaml", "README.md", ".gitignore",
);

/// The guest SDK as the Rust project vendors it, copied as is.
const RUST_SDK: &[File] = &[
    (
        "vendor/agentmesh-guest/Cargo.toml",
        include_str!("../../templates/new-tool/rust/vendor/Cargo.toml"),
    ),
    (
        "vendor/agentmesh-guest/src/lib.rs",
        include_str!("../../../../guests/sdk/src/lib.rs"),
    ),
    (
        "vendor/agentmesh-guest/src/actions.rs",
        include_str!("../../../../guests/sdk/src/actions.rs"),
    ),
    (
        "vendor/agentmesh-guest/src/http.rs",
        include_str!("../../../../guests/sdk/src/http.rs"),
    ),
    (
        "vendor/agentmesh-guest/src/kv.rs",
        include_str!("../../../../guests/sdk/src/kv.rs"),
    ),
    (
        "vendor/agentmesh-guest/src/log.rs",
        include_str!("../../../../guests/sdk/src/log.rs"),
    ),
];

/// The WIT package `agentmesh:plugin` and the WASI packages it uses, copied as is.
const WIT: &[File] = &[
    ("wit/worlds.wit", include_str!("../../../../wit/worlds.wit")),
    ("wit/types.wit", include_str!("../../../../wit/types.wit")),
    ("wit/host.wit", include_str!("../../../../wit/host.wit")),
    ("wit/tool.wit", include_str!("../../../../wit/tool.wit")),
    (
        "wit/middleware.wit",
        include_str!("../../../../wit/middleware.wit"),
    ),
    (
        "wit/event-filter.wit",
        include_str!("../../../../wit/event-filter.wit"),
    ),
    (
        "wit/deps/cli.wit",
        include_str!("../../../../wit/deps/cli.wit"),
    ),
    (
        "wit/deps/clocks.wit",
        include_str!("../../../../wit/deps/clocks.wit"),
    ),
    (
        "wit/deps/filesystem.wit",
        include_str!("../../../../wit/deps/filesystem.wit"),
    ),
    (
        "wit/deps/http.wit",
        include_str!("../../../../wit/deps/http.wit"),
    ),
    (
        "wit/deps/io.wit",
        include_str!("../../../../wit/deps/io.wit"),
    ),
    (
        "wit/deps/random.wit",
        include_str!("../../../../wit/deps/random.wit"),
    ),
    (
        "wit/deps/sockets.wit",
        include_str!("../../../../wit/deps/sockets.wit"),
    ),
];

/// Writes the project and says what to do next: exit 0; an error (bad name, a directory in
/// the way) writes nothing.
pub fn execute(args: &Args) -> anyhow::Result<ExitCode> {
    let What::Tool = args.what;
    let names = Names::of(&args.name)?;
    let dir = args
        .dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(&args.name));
    let in_the_way = std::fs::read_dir(&dir).map(|mut entries| entries.next().is_some());
    if in_the_way.unwrap_or(dir.exists()) {
        bail!(
            "{} exists and is not an empty directory; give another --dir",
            dir.display()
        );
    }
    let (own, build): (&[&[File]], &str) = match args.lang {
        Lang::Rust => (
            &[RUST, RUST_SDK],
            "cargo build --release --target wasm32-wasip2",
        ),
        Lang::Python => (&[PYTHON], "bash build.sh"),
        Lang::Js => (&[JS], "npm install && npm run build"),
    };
    for (path, text) in COMMON.iter().chain(own.iter().copied().flatten()) {
        write(&dir, path, &names.fill(text))?;
    }
    for (path, text) in WIT {
        write(&dir, path, text)?;
    }
    println!(
        "wrote {} (tool dev/{}); next:\n  cd {}\n  {build}\n  agentmesh validate .\n  agentmesh run . --agent dev/demo -m \"Say hello to Ada\"",
        dir.display(),
        args.name,
        dir.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// Writes `text` to `dir/path`, making the folders it needs.
fn write(dir: &Path, path: &str, text: &str) -> anyhow::Result<()> {
    let file = dir.join(path);
    if let Some(parent) = file.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("cannot create {}", parent.display()))?;
    }
    std::fs::write(&file, text).with_context(|| format!("cannot write {}", file.display()))
}

/// The tool's name in the forms the templates use.
struct Names {
    /// `{{name}}`: as given, `word-count`.
    name: String,
    /// `{{snake}}`: `word_count` (the Rust crate's file name, the LLM's function name).
    snake: String,
    /// `{{Camel}}`: `WordCount` (a Rust type or a class).
    camel: String,
}

impl Names {
    /// Checks `name`: lowercase ASCII letters, digits and single `-` between them, starting
    /// with a letter, at most 64 characters — a valid manifest name, crate name and npm name.
    fn of(name: &str) -> anyhow::Result<Names> {
        let valid = name.len() <= 64
            && name.starts_with(|c: char| c.is_ascii_lowercase())
            && !name.ends_with('-')
            && !name.contains("--")
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
        if !valid {
            bail!(
                "`{name}` is not a tool name: use lowercase letters, digits and single `-`, \
                 starting with a letter (e.g. `word-count`)"
            );
        }
        let camel = name
            .split('-')
            .map(|part| {
                let mut chars = part.chars();
                chars.next().map_or_else(String::new, |first| {
                    first.to_ascii_uppercase().to_string() + chars.as_str()
                })
            })
            .collect();
        Ok(Names {
            name: name.to_owned(),
            snake: name.replace('-', "_"),
            camel,
        })
    }

    /// `text` with the placeholders filled in.
    fn fill(&self, text: &str) -> String {
        text.replace("{{name}}", &self.name)
            .replace("{{snake}}", &self.snake)
            .replace("{{Camel}}", &self.camel)
    }
}
