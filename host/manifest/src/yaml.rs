//! YAML to a tree that remembers where every node was written.
//!
//! serde's YAML deserializers stop at the first problem and forget positions; `validate` must
//! report every problem at its line and column. So files are parsed with `yaml-rust2`'s event
//! API into [`Node`]s (YAML 1.2 core schema for plain scalars), and the typed models are
//! deserialized from those nodes once their shape has been checked.

use std::collections::HashMap;

use serde_json::{Map, Number, Value};
use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser, Tag};
use yaml_rust2::scanner::{Marker, TScalarStyle};

/// The deepest nesting a manifest may have. Real manifests stay under 15 levels; the bound keeps
/// hostile input from exhausting the stack in the recursive passes that follow parsing.
pub const MAX_DEPTH: usize = 64;

/// The most nodes one file may expand to. Aliases copy the node they name, so a few lines of
/// nested aliases (a "billion laughs") could otherwise expand to gigabytes.
pub const MAX_NODES: usize = 200_000;

/// A place in a file: 1-based line and column (columns count characters).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Pos {
    /// 1-based line.
    pub line: usize,
    /// 1-based column, in characters.
    pub col: usize,
}

/// How a scalar was written; decides how offsets inside it map back to the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// A plain (unquoted) scalar.
    Plain,
    /// `'…'` or `"…"`.
    Quoted,
    /// `|` block: each line of the value is a line of the file.
    Literal,
    /// `>` block: lines are folded, offsets map to the first line only.
    Folded,
}

/// A YAML node with its position.
#[derive(Debug, Clone)]
pub struct Node {
    /// Where the node's text starts (for a map: its first key).
    pub pos: Pos,
    /// The node's value.
    pub value: NodeValue,
}

/// The value of a node.
#[derive(Debug, Clone)]
pub enum NodeValue {
    /// `~`, `null` or an empty value.
    Null,
    /// `true` or `false`.
    Bool(bool),
    /// An integer or float.
    Number(Number),
    /// A string, with how it was written.
    Str(String, Style),
    /// A sequence.
    Seq(Vec<Node>),
    /// A mapping, keys in order.
    Map(Vec<(Node, Node)>),
}

/// A parse problem at a position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct YamlError {
    /// Where.
    pub pos: Pos,
    /// What.
    pub message: String,
}

impl Node {
    /// The string value, if this is a string scalar.
    pub fn as_str(&self) -> Option<&str> {
        match &self.value {
            NodeValue::Str(s, _) => Some(s),
            _ => None,
        }
    }

    /// The entries, if this is a mapping.
    pub fn as_map(&self) -> Option<&[(Node, Node)]> {
        match &self.value {
            NodeValue::Map(m) => Some(m),
            _ => None,
        }
    }

    /// The value under `key`, if this is a mapping that has it.
    pub fn get(&self, key: &str) -> Option<&Node> {
        self.entry(key).map(|(_, v)| v)
    }

    /// The key node and value under `key`.
    pub fn entry(&self, key: &str) -> Option<(&Node, &Node)> {
        self.as_map()?
            .iter()
            .find(|(k, _)| k.as_str() == Some(key))
            .map(|(k, v)| (k, v))
    }

    /// The element at `index`, if this is a sequence that long.
    pub fn index(&self, index: usize) -> Option<&Node> {
        match &self.value {
            NodeValue::Seq(s) => s.get(index),
            _ => None,
        }
    }

    /// A short name of the node's type, for messages ("a string", "a map").
    pub fn kind_name(&self) -> &'static str {
        match &self.value {
            NodeValue::Null => "null",
            NodeValue::Bool(_) => "a boolean",
            NodeValue::Number(n) if n.is_f64() => "a number",
            NodeValue::Number(_) => "an integer",
            NodeValue::Str(..) => "a string",
            NodeValue::Seq(_) => "a list",
            NodeValue::Map(_) => "a map",
        }
    }

    /// The position of the character `offset` (in characters) of this scalar's value: exact for
    /// one-line and `|` scalars, the scalar's start line otherwise.
    pub fn pos_at(&self, offset: usize) -> Pos {
        let NodeValue::Str(s, style) = &self.value else {
            return self.pos;
        };
        let before: String = s.chars().take(offset).collect();
        let line_in_value = before.matches('\n').count();
        let col_in_line = before.rsplit('\n').next().map_or(0, |l| l.chars().count());
        match style {
            Style::Plain if line_in_value == 0 => Pos {
                line: self.pos.line,
                col: self.pos.col + col_in_line,
            },
            Style::Quoted if line_in_value == 0 => Pos {
                line: self.pos.line,
                col: self.pos.col + 1 + col_in_line,
            },
            Style::Literal => Pos {
                line: self.pos.line + line_in_value,
                col: self.pos.col + col_in_line,
            },
            _ => self.pos,
        }
    }

    /// Converts to JSON (keys of any scalar type become strings).
    pub fn to_json(&self) -> Value {
        match &self.value {
            NodeValue::Null => Value::Null,
            NodeValue::Bool(b) => Value::Bool(*b),
            NodeValue::Number(n) => Value::Number(n.clone()),
            NodeValue::Str(s, _) => Value::String(s.clone()),
            NodeValue::Seq(items) => Value::Array(items.iter().map(Node::to_json).collect()),
            NodeValue::Map(entries) => {
                let mut map = Map::new();
                for (k, v) in entries {
                    map.insert(k.key_text(), v.to_json());
                }
                Value::Object(map)
            }
        }
    }

    /// The text of a scalar used as a map key.
    pub fn key_text(&self) -> String {
        match &self.value {
            NodeValue::Str(s, _) => s.clone(),
            NodeValue::Null => "null".into(),
            NodeValue::Bool(b) => b.to_string(),
            NodeValue::Number(n) => n.to_string(),
            NodeValue::Seq(_) | NodeValue::Map(_) => "<complex key>".into(),
        }
    }
}

/// Parses every document of `source`. On a syntax error, the documents before it are kept
/// and the error is returned beside them.
pub fn parse(source: &str) -> (Vec<Node>, Vec<YamlError>) {
    let mut builder = Builder::default();
    let mut parser = Parser::new_from_str(source);
    let result = parser.load(&mut builder, true);
    let mut errors = builder.errors;
    if let Err(e) = result {
        errors.push(YamlError {
            pos: marker_pos(e.marker()),
            message: format!("YAML syntax: {}", e.info()),
        });
    }
    (builder.docs, errors)
}

fn marker_pos(m: &Marker) -> Pos {
    Pos {
        line: m.line(),
        col: m.col() + 1,
    }
}

enum Frame {
    Seq(Pos, Vec<Node>, usize),
    Map(Option<Pos>, Vec<(Node, Node)>, Option<Node>, usize),
}

#[derive(Default)]
struct Builder {
    docs: Vec<Node>,
    stack: Vec<Frame>,
    anchors: HashMap<usize, Node>,
    errors: Vec<YamlError>,
    nodes: usize,
    /// Documents begun so far.
    started: usize,
    /// Set once a limit is hit: the rest of the file is skipped.
    poisoned: bool,
}

impl Builder {
    fn push_node(&mut self, node: Node, anchor: usize) {
        if anchor > 0 {
            self.anchors.insert(anchor, node.clone());
        }
        match self.stack.last_mut() {
            None => self.docs.push(node),
            Some(Frame::Seq(_, items, _)) => items.push(node),
            Some(Frame::Map(first, entries, key, _)) => match key.take() {
                None => {
                    if first.is_none() {
                        *first = Some(node.pos);
                    }
                    *key = Some(node);
                }
                Some(k) => {
                    let text = k.key_text();
                    if entries.iter().any(|(e, _)| e.key_text() == text) {
                        self.errors.push(YamlError {
                            pos: k.pos,
                            message: format!("duplicate key `{text}`"),
                        });
                    } else {
                        entries.push((k, node));
                    }
                }
            },
        }
    }

    fn count(&mut self, n: usize, pos: Pos) -> bool {
        self.nodes += n;
        if self.nodes > MAX_NODES {
            self.fail(
                pos,
                format!("the file expands to more than {MAX_NODES} nodes"),
            );
            return false;
        }
        true
    }

    fn fail(&mut self, pos: Pos, message: String) {
        self.errors.push(YamlError { pos, message });
        self.poisoned = true;
        self.stack.clear();
    }
}

impl MarkedEventReceiver for Builder {
    fn on_event(&mut self, ev: Event, mark: Marker) {
        if self.poisoned {
            return;
        }
        let pos = marker_pos(&mark);
        match ev {
            Event::Scalar(text, style, anchor, tag) => {
                if !self.count(1, pos) {
                    return;
                }
                let value = scalar(text, style, tag.as_ref());
                self.push_node(Node { pos, value }, anchor);
            }
            Event::SequenceStart(anchor, _) => {
                if self.stack.len() >= MAX_DEPTH {
                    self.fail(pos, format!("nesting deeper than {MAX_DEPTH} levels"));
                    return;
                }
                self.stack.push(Frame::Seq(pos, Vec::new(), anchor));
            }
            Event::MappingStart(anchor, _) => {
                if self.stack.len() >= MAX_DEPTH {
                    self.fail(pos, format!("nesting deeper than {MAX_DEPTH} levels"));
                    return;
                }
                self.stack.push(Frame::Map(None, Vec::new(), None, anchor));
            }
            Event::SequenceEnd => {
                if let Some(Frame::Seq(start, items, anchor)) = self.stack.pop() {
                    let pos = items.first().map_or(start, |n| n.pos);
                    self.push_node(
                        Node {
                            pos,
                            value: NodeValue::Seq(items),
                        },
                        anchor,
                    );
                }
            }
            Event::MappingEnd => {
                if let Some(Frame::Map(first, entries, _, anchor)) = self.stack.pop() {
                    self.push_node(
                        Node {
                            pos: first.unwrap_or(pos),
                            value: NodeValue::Map(entries),
                        },
                        anchor,
                    );
                }
            }
            Event::Alias(id) => match self.anchors.get(&id).cloned() {
                Some(node) => {
                    let size = node_count(&node);
                    if self.count(size, pos) {
                        self.push_node(Node { pos, ..node }, 0);
                    }
                }
                None => self.fail(pos, "alias names no anchor".into()),
            },
            Event::DocumentEnd => {
                if self.docs.len() < self.started {
                    // An empty document: keep its place so document numbers stay right.
                    self.docs.push(Node {
                        pos,
                        value: NodeValue::Null,
                    });
                }
            }
            Event::DocumentStart => self.started += 1,
            Event::StreamStart | Event::StreamEnd | Event::Nothing => {}
        }
    }
}

fn node_count(node: &Node) -> usize {
    match &node.value {
        NodeValue::Seq(items) => 1 + items.iter().map(node_count).sum::<usize>(),
        NodeValue::Map(entries) => {
            1 + entries
                .iter()
                .map(|(k, v)| node_count(k) + node_count(v))
                .sum::<usize>()
        }
        _ => 1,
    }
}

/// Resolves a scalar per the YAML 1.2 core schema; quoted and block scalars are strings.
fn scalar(text: String, style: TScalarStyle, tag: Option<&Tag>) -> NodeValue {
    let tagged_str = tag.is_some_and(|t| t.suffix == "str");
    match style {
        TScalarStyle::SingleQuoted | TScalarStyle::DoubleQuoted => {
            return NodeValue::Str(text, Style::Quoted);
        }
        TScalarStyle::Literal => return NodeValue::Str(text, Style::Literal),
        TScalarStyle::Folded => return NodeValue::Str(text, Style::Folded),
        TScalarStyle::Plain => {}
    }
    if tagged_str {
        return NodeValue::Str(text, Style::Plain);
    }
    match text.as_str() {
        "" | "~" | "null" | "Null" | "NULL" => return NodeValue::Null,
        "true" | "True" | "TRUE" => return NodeValue::Bool(true),
        "false" | "False" | "FALSE" => return NodeValue::Bool(false),
        _ => {}
    }
    if let Some(n) = parse_int(&text) {
        return NodeValue::Number(n);
    }
    if looks_like_float(&text)
        && let Some(n) = text.parse::<f64>().ok().and_then(Number::from_f64)
    {
        return NodeValue::Number(n);
    }
    NodeValue::Str(text, Style::Plain)
}

fn parse_int(text: &str) -> Option<Number> {
    let (neg, digits) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    let (radix, digits) = if let Some(hex) = digits.strip_prefix("0x") {
        (16, hex)
    } else if let Some(oct) = digits.strip_prefix("0o") {
        (8, oct)
    } else {
        (10, digits)
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    let magnitude = u64::from_str_radix(digits, radix).ok()?;
    if neg {
        let n = 0i64.checked_sub_unsigned(magnitude)?;
        Some(Number::from(n))
    } else {
        Some(Number::from(magnitude))
    }
}

fn looks_like_float(text: &str) -> bool {
    let body = text.trim_start_matches(['-', '+']);
    !body.is_empty()
        && body
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_digit() || c == '.')
        && body
            .chars()
            .all(|c| c.is_ascii_digit() || matches!(c, '.' | 'e' | 'E' | '-' | '+'))
}
