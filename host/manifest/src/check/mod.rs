//! Semantic validation: what the shape check cannot see — references between documents,
//! expressions, exactly-one rules, durations compared, files that must exist.

mod agent;
mod auth;
mod host;
mod mcp;
mod openapi;
mod schema;
pub mod scopes;
mod session;
mod steps;
mod tool;
mod triggers;

pub use mcp::mcp_program;

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use agentmesh_expr::{Expression, Scope, Template};

use crate::diag::Diagnostic;
use crate::load::{Config, Source};
use crate::model::Tool;
use crate::yaml::{Node, NodeValue, Pos};

/// What `validate` counts in its `ok:` line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    /// Agents loaded.
    pub agents: usize,
    /// Tools loaded.
    pub tools: usize,
    /// Triggers loaded.
    pub triggers: usize,
    /// Schedules loaded.
    pub schedules: usize,
    /// Distinct Wasm components referenced.
    pub components: usize,
}

/// The world a referenced component must implement, by where it is referenced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ComponentWorld {
    /// A tool's or an action's `wasm.component`.
    Tool,
    /// A middleware `wasm` step.
    Middleware,
    /// A webhook's `filter_component`.
    EventFilter,
}

impl ComponentWorld {
    /// The world's WIT name (`tool-plugin`, …).
    pub fn wit_name(self) -> &'static str {
        match self {
            ComponentWorld::Tool => "tool-plugin",
            ComponentWorld::Middleware => "middleware-plugin",
            ComponentWorld::EventFilter => "event-filter-plugin",
        }
    }
}

/// A reference to a Wasm component: what compiling it needs, and where to report a problem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ComponentUse {
    /// The component file, resolved (canonical when it exists).
    pub path: PathBuf,
    /// The path as written in the manifest.
    pub written: String,
    /// The world the reference needs.
    pub world: ComponentWorld,
    /// The manifest file and the position of the reference in it.
    pub file: PathBuf,
    /// See `file`.
    pub pos: Pos,
}

/// Checks a loaded config. `env` reads environment variables (injected so tests control it).
/// Returns the summary, the problems, and every reference to a component that looked usable
/// (a Wasm component file), for a caller that can compile them.
pub fn validate(
    config: &Config,
    env: &dyn Fn(&str) -> Option<String>,
) -> (Summary, Vec<Diagnostic>, Vec<ComponentUse>) {
    let mut c = Checker {
        config,
        env,
        diags: Vec::new(),
        uses: Vec::new(),
    };
    c.duplicates();
    host::check(&mut c);
    for tool in &config.tools {
        tool::check(&mut c, tool);
    }
    for agent in &config.agents {
        agent::check(&mut c, agent);
    }
    for trigger in &config.triggers {
        triggers::check_trigger(&mut c, trigger);
    }
    for schedule in &config.schedules {
        triggers::check_schedule(&mut c, schedule);
    }
    let summary = Summary {
        agents: config.agents.len(),
        tools: config.tools.len(),
        triggers: config.triggers.len(),
        schedules: config.schedules.len(),
        components: c
            .uses
            .iter()
            .map(|u| &u.path)
            .collect::<BTreeSet<_>>()
            .len(),
    };
    (summary, c.diags, c.uses)
}

/// A document's identity: namespace, name, and where it is.
type Identity<'a> = (&'a str, &'a str, &'a Source);

/// One step of a path into a document.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Seg<'a> {
    /// A map key.
    K(&'a str),
    /// A sequence index.
    I(usize),
}

pub(crate) use Seg::{I, K};

/// What a capability's `include` and a step's `match` may name in `tool`: its actions, then
/// its events.
pub(crate) fn member_names(tool: &Tool) -> Vec<&str> {
    tool.actions
        .iter()
        .map(|a| a.name.as_str())
        .chain(tool.events.iter().map(|e| e.name.as_str()))
        .collect()
}

/// How a `model` reference is written, for [`Checker::split_ref`].
pub(crate) const MODEL_REF: (char, &str) = ('/', "<provider>/<name>");

pub(crate) struct Checker<'a> {
    pub config: &'a Config,
    env: &'a dyn Fn(&str) -> Option<String>,
    pub diags: Vec<Diagnostic>,
    uses: Vec<ComponentUse>,
}

/// The node at `path`, or `None` where the path leaves the tree.
pub(crate) fn node_at<'n>(node: &'n Node, path: &[Seg]) -> Option<&'n Node> {
    let mut n = node;
    for seg in path {
        n = match seg {
            K(k) => n.get(k)?,
            I(i) => n.index(*i)?,
        };
    }
    Some(n)
}

/// The position of the node at `path`, or of the deepest node on the way to it.
pub(crate) fn pos_at(node: &Node, path: &[Seg]) -> Pos {
    let mut n = node;
    for seg in path {
        let next = match seg {
            K(k) => n.get(k),
            I(i) => n.index(*i),
        };
        match next {
            Some(x) => n = x,
            None => break,
        }
    }
    n.pos
}

/// The position of the key at the end of `path` (the value's position if it is an index).
pub(crate) fn key_pos(node: &Node, path: &[Seg]) -> Pos {
    let Some((K(last), parent)) = path.split_last() else {
        return pos_at(node, path);
    };
    node_at(node, parent)
        .and_then(|p| p.entry(last))
        .map_or_else(|| pos_at(node, path), |(k, _)| k.pos)
}

impl Checker<'_> {
    pub fn error(&mut self, source: &Source, pos: Pos, message: impl Into<String>) {
        self.diags
            .push(Diagnostic::error(&source.file, pos, message));
    }

    pub fn warning(&mut self, source: &Source, pos: Pos, message: impl Into<String>) {
        self.diags
            .push(Diagnostic::warning(&source.file, pos, message));
    }

    /// `value`, the reference in `field` (at `pos`), split at the first `separator` of its
    /// `form` (`<provider>/<name>`); an error when it has none.
    pub fn split_ref<'v>(
        &mut self,
        source: &Source,
        pos: Pos,
        field: &str,
        value: &'v str,
        (separator, form): (char, &str),
    ) -> Option<(&'v str, &'v str)> {
        let split = value.split_once(separator);
        if split.is_none() {
            self.error(
                source,
                pos,
                format!("`{field}` must be `{form}`, found `{value}`"),
            );
        }
        split
    }

    /// The file of model `scripted/<name>` (named at `pos` of `source`) exists and holds a
    /// model script. A script with errors of its own is reported where it is loaded.
    pub fn scripted_model(&mut self, source: &Source, pos: Pos, name: &str) {
        if self.config.script(name).is_some() {
            return;
        }
        let root = &self.config.root;
        let dir = if root.is_dir() {
            root.clone()
        } else {
            source.base_dir.clone()
        };
        let file = dir.join(name);
        if !file.is_file() {
            self.error(
                source,
                pos,
                format!("scripted model file `{name}` does not exist (paths are relative to the config dir)"),
            );
            return;
        }
        // Not loaded as a script: empty (no YAML document), or a manifest (it has a `kind`).
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        let blank = text.lines().all(|l| {
            let l = l.trim();
            l.is_empty() || l.starts_with('#') || l == "---"
        });
        if blank {
            self.error(
                source,
                pos,
                format!("scripted model file `{name}` is empty: a model script is a YAML document with `responses:`"),
            );
        } else if text.lines().any(|l| l.starts_with("kind:")) {
            self.error(
                source,
                pos,
                format!("scripted model file `{name}` holds a manifest (it has a `kind`), not a model script"),
            );
        }
    }

    pub fn env_var(&self, name: &str) -> Option<String> {
        (self.env)(name)
    }

    /// The `namespace/name` of every tool of the configuration, in load order.
    pub fn tool_ids(&self) -> Vec<String> {
        let tools = self.config.tools.iter();
        tools
            .map(|t| format!("{}/{}", t.value.namespace, t.value.name))
            .collect()
    }

    /// Compiles the CEL at `path` and checks its references against `scope`; returns it when
    /// it compiled. `hint` is appended to every message (e.g. the quoted-literal suggestion).
    pub fn expr(
        &mut self,
        source: &Source,
        path: &[Seg],
        scope: &Scope,
        hint: &str,
    ) -> Option<Expression> {
        let node = node_at(&source.node, path)?;
        let text = node.as_str()?;
        match Expression::compile(text) {
            Ok(expr) => {
                for e in scope.check(&expr) {
                    self.error(
                        source,
                        node.pos_at(e.offset),
                        format!("{}{hint}", e.message),
                    );
                }
                Some(expr)
            }
            Err(e) => {
                self.error(
                    source,
                    node.pos_at(e.offset),
                    format!("invalid CEL: {}{hint}", e.message),
                );
                None
            }
        }
    }

    /// Parses the `{…}` template at `path` and checks each hole against `scope`.
    pub fn template(&mut self, source: &Source, path: &[Seg], scope: &Scope) -> Option<Template> {
        let node = node_at(&source.node, path)?;
        let text = node.as_str()?;
        match Template::parse(text) {
            Ok(t) => {
                for e in scope.check_template(&t) {
                    self.error(source, node.pos_at(e.offset), e.message);
                }
                self.auth_providers(source, node, &t, scope);
                Some(t)
            }
            Err(e) => {
                self.error(
                    source,
                    node.pos_at(e.offset),
                    format!("invalid template: {}", e.message),
                );
                None
            }
        }
    }

    /// Checks every string leaf of the JSON-ish value at `path` as a template.
    pub fn templates_in(&mut self, source: &Source, path: &[Seg], scope: &Scope) {
        let Some(node) = node_at(&source.node, path) else {
            return;
        };
        let mut leaves = Vec::new();
        string_leaves(node, &mut leaves);
        for leaf in leaves {
            let Some(text) = leaf.as_str() else { continue };
            if let Err(e) = Template::parse(text) {
                self.error(
                    source,
                    leaf.pos_at(e.offset),
                    format!("invalid template: {}", e.message),
                );
            } else if let Ok(t) = Template::parse(text) {
                for e in scope.check_template(&t) {
                    self.error(source, leaf.pos_at(e.offset), e.message);
                }
                self.auth_providers(source, leaf, &t, scope);
            }
        }
    }

    /// Checks that the component at `path` (relative to the manifest) exists and is a Wasm
    /// component, and records the reference (it must implement `world`).
    pub fn component(&mut self, source: &Source, path: &[Seg], world: ComponentWorld) {
        let Some(node) = node_at(&source.node, path) else {
            return;
        };
        let Some(rel) = node.as_str() else { return };
        let full = source.base_dir.join(rel);
        match component_problem(&full) {
            Some(problem) => self.error(source, node.pos, format!("component `{rel}` {problem}")),
            None => {
                self.uses.push(ComponentUse {
                    path: full.canonicalize().unwrap_or(full),
                    written: rel.to_owned(),
                    world,
                    file: source.file.clone(),
                    pos: node.pos,
                });
            }
        }
    }

    /// Reports documents of one kind that share `namespace/name`, naming both files.
    fn duplicates(&mut self) {
        let config = self.config;
        let mut groups: Vec<(&str, Vec<Identity>)> = vec![
            (
                "agent",
                config
                    .agents
                    .iter()
                    .map(|d| (d.value.namespace.as_str(), d.value.name.as_str(), &d.source))
                    .collect(),
            ),
            (
                "tool",
                config
                    .tools
                    .iter()
                    .map(|d| (d.value.namespace.as_str(), d.value.name.as_str(), &d.source))
                    .collect(),
            ),
            (
                "trigger",
                config
                    .triggers
                    .iter()
                    .map(|d| (d.value.namespace.as_str(), d.value.name.as_str(), &d.source))
                    .collect(),
            ),
            (
                "schedule",
                config
                    .schedules
                    .iter()
                    .map(|d| (d.value.namespace.as_str(), d.value.name.as_str(), &d.source))
                    .collect(),
            ),
        ];
        for (kind, docs) in &mut groups {
            let mut first: HashMap<(&str, &str), &Source> = HashMap::new();
            for (ns, name, source) in docs.iter() {
                match first.get(&(*ns, *name)) {
                    Some(earlier) => {
                        let at = key_pos(&earlier.node, &[K("name")]);
                        let message = format!(
                            "duplicate {kind} `{ns}/{name}`: also defined in {}:{}:{}",
                            earlier.file.display(),
                            at.line,
                            at.col
                        );
                        let pos = pos_at(&source.node, &[K("name")]);
                        self.error(source, pos, message);
                    }
                    None => {
                        first.insert((*ns, *name), source);
                    }
                }
            }
        }
    }
}

fn string_leaves<'n>(node: &'n Node, out: &mut Vec<&'n Node>) {
    match &node.value {
        NodeValue::Str(..) => out.push(node),
        NodeValue::Seq(items) => items.iter().for_each(|n| string_leaves(n, out)),
        NodeValue::Map(entries) => entries.iter().for_each(|(_, v)| string_leaves(v, out)),
        _ => {}
    }
}

/// Why `path` is not a usable component, or `None` when it is one.
fn component_problem(path: &Path) -> Option<String> {
    use std::io::Read;
    let mut header = [0u8; 8];
    let read = std::fs::File::open(path).and_then(|mut f| f.read_exact(&mut header));
    match read {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Some("does not exist".into()),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            Some("is not a Wasm component (the file is too short)".into())
        }
        Err(e) => Some(format!("cannot be read: {e}")),
        Ok(()) if &header[..4] != b"\0asm" => Some("is not a Wasm component (no `\\0asm` header)".into()),
        Ok(()) if header[4..] == [1, 0, 0, 0] => Some(
            "is a core Wasm module, not a component (build for wasm32-wasip2, or wrap it with `wasm-tools component new`)".into(),
        ),
        Ok(()) if header[6..] == [1, 0] => None,
        Ok(()) => Some("is not a Wasm component (unknown binary version)".into()),
    }
}
