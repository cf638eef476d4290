//! Reading a config dir: every `*.yaml`/`*.yml` file below it, every document in each file,
//! dispatched on `kind`, shape-checked and deserialized.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::LazyLock;

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::diag::Diagnostic;
use crate::model::{Agent, BundleDescriptor, HostConfig, Kind, Schedule, Script, Tool, Trigger};
use crate::shape;
use crate::suggest::did_you_mean;
use crate::yaml::{self, Node, NodeValue, Pos};

/// The largest manifest file read. The spec recommends 2 MB for an uploaded bundle; a file far
/// past that is not a manifest, and reading it whole would only waste memory.
pub const MAX_FILE_BYTES: u64 = 4 * 1024 * 1024;

/// A document as loaded: its typed value and where it came from.
#[derive(Debug, Clone)]
pub struct Loaded<T> {
    /// The typed manifest.
    pub value: T,
    /// The file and the document's node tree, for positions.
    pub source: Source,
}

/// Where a document came from.
#[derive(Debug, Clone)]
pub struct Source {
    /// The file, as displayed in diagnostics.
    pub file: PathBuf,
    /// The directory relative paths in the document resolve against.
    pub base_dir: PathBuf,
    /// The document's node tree.
    pub node: Node,
}

/// Everything a config dir holds.
#[derive(Debug, Default)]
pub struct Config {
    /// The directory (or file) that was loaded.
    pub root: PathBuf,
    /// Agents.
    pub agents: Vec<Loaded<Agent>>,
    /// Tools.
    pub tools: Vec<Loaded<Tool>>,
    /// Triggers.
    pub triggers: Vec<Loaded<Trigger>>,
    /// Schedules.
    pub schedules: Vec<Loaded<Schedule>>,
    /// Bundle descriptors.
    pub bundles: Vec<Loaded<BundleDescriptor>>,
    /// The host config, if one was given.
    pub host: Option<Loaded<HostConfig>>,
    /// Model scripts (files named by `model: scripted/<path>`), by path inside the config dir.
    pub scripts: Vec<(String, Loaded<Script>)>,
    /// Documents without `kind`, kept until it is known whether they are scripts.
    unkinded: Vec<Source>,
}

impl Config {
    /// The host config, or the defaults.
    pub fn host_config(&self) -> HostConfig {
        self.host
            .as_ref()
            .map(|h| h.value.clone())
            .unwrap_or_default()
    }

    /// The directory model scripts and other config-relative paths resolve against.
    pub fn base_dir(&self) -> PathBuf {
        if self.root.is_dir() {
            self.root.clone()
        } else {
            self.root
                .parent()
                .map(Path::to_path_buf)
                .unwrap_or_default()
        }
    }

    /// The script of `scripted/<path>`.
    pub fn script(&self, path: &str) -> Option<&Loaded<Script>> {
        self.scripts.iter().find(|(p, _)| p == path).map(|(_, s)| s)
    }

    /// The agent `namespace/name`.
    pub fn agent(&self, namespace: &str, name: &str) -> Option<&Loaded<Agent>> {
        self.agents
            .iter()
            .find(|a| a.value.namespace == namespace && a.value.name == name)
    }

    /// The tool `namespace/name`.
    pub fn tool(&self, namespace: &str, name: &str) -> Option<&Loaded<Tool>> {
        self.tools
            .iter()
            .find(|t| t.value.namespace == namespace && t.value.name == name)
    }
}

static SCHEMAS: LazyLock<HashMap<Kind, Value>> = LazyLock::new(|| {
    Kind::ALL
        .into_iter()
        .map(|k| (k, k.schema().to_value()))
        .collect()
});

/// Loads `path` (a directory, searched recursively, or one file). Problems are returned beside
/// whatever loaded cleanly; a document with a problem is left out of the config.
/// `env` reads the variables of the host config's `{env: NAME}` scalars.
pub fn load(path: &Path, env: &dyn Fn(&str) -> Option<String>) -> (Config, Vec<Diagnostic>) {
    let mut config = Config {
        root: path.to_path_buf(),
        ..Config::default()
    };
    let mut diags = Vec::new();
    let files = if path.is_dir() {
        let mut files = Vec::new();
        collect_files(path, &mut files, &mut diags);
        files.sort();
        files
    } else if path.is_file() {
        vec![path.to_path_buf()]
    } else {
        diags.push(Diagnostic::error(
            path,
            Pos { line: 1, col: 1 },
            "no such file or directory",
        ));
        Vec::new()
    };
    for file in files {
        load_file(&file, env, &mut config, &mut diags);
    }
    load_scripts(&mut config, &mut diags);
    (config, diags)
}

/// Documents without `kind` are model scripts when a `scripted/<path>` model names their file,
/// OpenAPI documents when a tool's `openapi.url` names it (the engine reads those); otherwise
/// they are manifests missing their `kind`.
fn load_scripts(config: &mut Config, diags: &mut Vec<Diagnostic>) {
    let base = config.base_dir();
    let named = config
        .agents
        .iter()
        .filter_map(|a| a.value.model.clone())
        .chain(
            config
                .host
                .as_ref()
                .and_then(|h| h.value.default_model.clone()),
        );
    let mut scripts: Vec<(String, PathBuf)> = Vec::new();
    for model in named {
        if let Some(path) = model.strip_prefix("scripted/") {
            let full = base.join(path);
            let key = full.canonicalize().unwrap_or(full);
            scripts.push((path.to_owned(), key));
        }
    }
    // The OpenAPI documents `openapi.url`s name: read by the engine, not manifests.
    let documents: Vec<PathBuf> = config
        .tools
        .iter()
        .flat_map(|t| {
            let actions = t.value.actions.iter();
            let blocks = actions.filter_map(|a| a.execute.as_ref()?.openapi.as_ref());
            blocks
                .chain(t.value.openapi.as_ref())
                .filter_map(|b| b.url.as_deref())
                .filter(|u| !u.starts_with("http://") && !u.starts_with("https://"))
                .map(|u| {
                    let full = t.source.base_dir.join(u);
                    full.canonicalize().unwrap_or(full)
                })
                .collect::<Vec<_>>()
        })
        .collect();
    for source in std::mem::take(&mut config.unkinded) {
        let key = source
            .file
            .canonicalize()
            .unwrap_or_else(|_| source.file.clone());
        if documents.contains(&key) {
            continue;
        }
        // Every name of the file (`script.yaml`, `./script.yaml`, …) is a model that uses it.
        let names: Vec<&String> = scripts
            .iter()
            .filter(|(_, p)| *p == key)
            .map(|(name, _)| name)
            .collect();
        if names.is_empty() {
            let message = match source.node.get("responses") {
                Some(_) => {
                    "a model script (it has `responses`) that no agent names: an agent's \
                            `model: scripted/<path relative to the config dir>` (or the host's \
                            `default_model`) uses it; a manifest needs a `kind`"
                }
                None => "missing required field `kind`",
            };
            diags.push(Diagnostic::error(&source.file, source.node.pos, message));
            continue;
        }
        let schema = schemars::schema_for!(Script).to_value();
        let problems = shape::check(&source.node, &schema, "model script");
        if !problems.is_empty() {
            for p in problems {
                diags.push(Diagnostic::error(&source.file, p.pos, p.message));
            }
            continue;
        }
        let mut loaded = Vec::new();
        push(source, &mut loaded, diags);
        if let Some(script) = loaded.pop() {
            for name in names {
                if config.script(name).is_none() {
                    config.scripts.push((name.clone(), script.clone()));
                }
            }
        }
    }
}

fn collect_files(dir: &Path, files: &mut Vec<PathBuf>, diags: &mut Vec<Diagnostic>) {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) => {
            diags.push(Diagnostic::error(
                dir,
                Pos::default(),
                format!("cannot read directory: {e}"),
            ));
            return;
        }
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        // Hidden entries hold the data dir (`.agentmesh`), VCS metadata and editor state;
        // `target` and `node_modules` hold a component project's build tools and output.
        if name.starts_with('.') || name == "target" || name == "node_modules" {
            continue;
        }
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() {
            collect_files(&path, files, diags);
        } else if kind.is_file() && (name.ends_with(".yaml") || name.ends_with(".yml")) {
            files.push(path);
        }
    }
}

fn load_file(
    file: &Path,
    env: &dyn Fn(&str) -> Option<String>,
    config: &mut Config,
    diags: &mut Vec<Diagnostic>,
) {
    let start = Pos { line: 1, col: 1 };
    match std::fs::metadata(file) {
        Ok(m) if m.len() > MAX_FILE_BYTES => {
            diags.push(Diagnostic::error(
                file,
                start,
                format!(
                    "file is {} bytes; manifests are limited to {MAX_FILE_BYTES}",
                    m.len()
                ),
            ));
            return;
        }
        Ok(_) => {}
        Err(e) => {
            diags.push(Diagnostic::error(file, start, format!("cannot read: {e}")));
            return;
        }
    }
    let text = match std::fs::read(file).map(String::from_utf8) {
        Ok(Ok(t)) => t,
        Ok(Err(_)) => {
            diags.push(Diagnostic::error(file, start, "not UTF-8 text"));
            return;
        }
        Err(e) => {
            diags.push(Diagnostic::error(file, start, format!("cannot read: {e}")));
            return;
        }
    };
    let base_dir = file.parent().map(Path::to_path_buf).unwrap_or_default();
    load_text(&text, (file, &base_dir), env, config, diags);
}

/// Loads the documents of one file's text: `(file, base_dir)` name it and where its relative
/// paths start; `env` reads the variables of the host config's `{env: NAME}` scalars.
pub fn load_text(
    text: &str,
    (file, base_dir): (&Path, &Path),
    env: &dyn Fn(&str) -> Option<String>,
    config: &mut Config,
    diags: &mut Vec<Diagnostic>,
) {
    let (docs, errors) = yaml::parse(text);
    for e in errors {
        diags.push(Diagnostic::error(file, e.pos, e.message));
    }
    for (index, node) in docs.into_iter().enumerate() {
        if matches!(node.value, NodeValue::Null) {
            continue;
        }
        let source = Source {
            file: file.to_path_buf(),
            base_dir: base_dir.to_path_buf(),
            node,
        };
        load_doc(index, source, env, config, diags);
    }
}

fn load_doc(
    index: usize,
    mut source: Source,
    env: &dyn Fn(&str) -> Option<String>,
    config: &mut Config,
    diags: &mut Vec<Diagnostic>,
) {
    let file = source.file.clone();
    let node = &source.node;
    if node.as_map().is_none() {
        diags.push(Diagnostic::error(
            &file,
            node.pos,
            format!(
                "a manifest must be a map with a `kind`, found {}",
                node.kind_name()
            ),
        ));
        return;
    }
    let Some(kind_node) = node.get("kind") else {
        config.unkinded.push(source);
        return;
    };
    let Some(kind_text) = kind_node.as_str() else {
        diags.push(Diagnostic::error(
            &file,
            kind_node.pos,
            format!("`kind` must be a string, found {}", kind_node.kind_name()),
        ));
        return;
    };
    let Some(kind) = Kind::ALL.into_iter().find(|k| k.api_name() == kind_text) else {
        unknown_kind(kind_text, kind_node.pos, &file, diags);
        return;
    };
    if kind == Kind::Bundle && index != 0 {
        diags.push(Diagnostic::error(
            &file,
            kind_node.pos,
            "a bundle descriptor must be the first document of its file",
        ));
        return;
    }
    let Some(schema) = SCHEMAS.get(&kind) else {
        return;
    };
    let mut env_reads = Vec::new();
    if kind == Kind::Host {
        let unset;
        (env_reads, unset) = crate::env::resolve(&mut source.node, schema, env);
        for u in unset {
            let message = format!("environment variable `{}` is not set", u.name);
            diags.push(Diagnostic::error(&file, u.pos, message));
        }
    }
    let node = &source.node;
    let problems = shape::check(node, schema, kind.short_name());
    if !problems.is_empty() {
        for p in problems {
            diags.push(Diagnostic::error(&file, p.pos, p.message));
        }
        return;
    }
    match kind {
        Kind::Agent => push(source, &mut config.agents, diags),
        Kind::Tool => push(source, &mut config.tools, diags),
        Kind::Trigger => push(source, &mut config.triggers, diags),
        Kind::Schedule => push(source, &mut config.schedules, diags),
        Kind::Bundle => push(source, &mut config.bundles, diags),
        Kind::Host => {
            if let Some(first) = &config.host {
                diags.push(Diagnostic::error(
                    &file,
                    source.node.pos,
                    format!(
                        "a second host config; the first is in {}:{}",
                        first.source.file.display(),
                        first.source.node.pos.line
                    ),
                ));
                return;
            }
            let mut hosts = Vec::new();
            push(source, &mut hosts, diags);
            config.host = hosts.pop().map(|mut host: Loaded<HostConfig>| {
                host.value.env_reads = env_reads;
                host
            });
        }
    }
}

fn push<T: DeserializeOwned>(
    source: Source,
    into: &mut Vec<Loaded<T>>,
    diags: &mut Vec<Diagnostic>,
) {
    match serde_json::from_value::<T>(source.node.to_json()) {
        Ok(value) => into.push(Loaded { value, source }),
        Err(e) => diags.push(Diagnostic::error(
            &source.file,
            source.node.pos,
            e.to_string(),
        )),
    }
}

/// A kind the host does not load: an error when it is evidently a misspelt known kind (or a
/// spec kind of another version), otherwise a warning that the document is skipped.
fn unknown_kind(text: &str, pos: Pos, file: &Path, diags: &mut Vec<Diagnostic>) {
    let names: Vec<&str> = Kind::ALL.iter().map(|k| k.api_name()).collect();
    let last = text.rsplit('/').next().unwrap_or(text);
    let same_kind_other_version = Kind::ALL.iter().find(|k| {
        text.starts_with("commonagents.info/") && k.api_name().ends_with(&format!("/{last}"))
    });
    if let Some(k) = same_kind_other_version {
        diags.push(Diagnostic::error(
            file,
            pos,
            format!(
                "unsupported kind `{text}`; this host reads `{}`",
                k.api_name()
            ),
        ));
    } else if let Some(s) = did_you_mean(text, names.iter().copied()) {
        diags.push(Diagnostic::error(
            file,
            pos,
            format!("unknown kind `{text}`; did you mean `{s}`?"),
        ));
    } else if text.starts_with("commonagents.info/") || text.starts_with("agentmesh/") {
        diags.push(Diagnostic::error(
            file,
            pos,
            format!(
                "unknown kind `{text}` (expected one of: {})",
                names.join(", ")
            ),
        ));
    } else {
        diags.push(Diagnostic::warning(
            file,
            pos,
            format!("skipped a document of unknown kind `{text}`"),
        ));
    }
}
