//! An `openapi` action compiled: the operation its `operation` names in the OpenAPI 3.0/3.1
//! document at `url`, loaded once when the plan is built (validate, serve start, reload;
//! never per call), with `$ref`s resolved, where each parameter goes (path, query, header,
//! cookie, JSON body), the parameters the LLM sees when the manifest declares none, the base
//! URL and the credentials of its security schemes.
//!
//! A problem of the document (unreachable, too large, not OpenAPI 3, an unknown operation, a
//! `$ref` cycle) is an error of the manifest at the `url` or `operation` that names it
//! ([`EngineError::Manifest`]), so `agentmesh validate` shows it with its position and a
//! reload that meets it keeps the configuration in force.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use agentmesh_expr::Template;
use agentmesh_manifest::load::Source;
use agentmesh_manifest::model::common::{Property, PropertyType};
use agentmesh_manifest::model::tool::OpenApi;
use agentmesh_manifest::yaml::Node;
use agentmesh_manifest::{Diagnostic, Severity};
use indexmap::IndexMap;
use serde_json::{Map, Value};

use super::auth::AuthPlan;
use super::template;
use crate::EngineError;

/// The largest document read. A document is parsed whole into memory when the config loads;
/// an endpoint (or a file) that serves gigabytes stops here instead of exhausting the host.
/// Public API documents run to a few hundred KiB; the largest known are under 10 MiB.
pub const MAX_DOCUMENT: usize = 16 * 1024 * 1024;

/// How long fetching an `http(s)` document may take: a validate or reload never hangs on a
/// server that does not answer.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(15);

/// How deep `$ref`s may nest while a schema is resolved: bounds the work (and the size of
/// the schema the LLM is sent) a document can cause with chains of references.
pub const MAX_REF_DEPTH: usize = 32;

/// A request's timeout when the manifest gives none.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// An `openapi` action (its block completed from the tool's shared one), compiled.
pub struct OpenApiPlan {
    /// The `operationId`.
    pub operation: String,
    /// The HTTP method, upper case.
    pub method: String,
    /// The base URL: the manifest's `base_url` (a template over `settings`), else the
    /// document's first server.
    pub base_url: Template,
    /// The path template of the document (`/pets/{petId}`).
    pub path: String,
    /// The operation's parameters: name and where it goes.
    pub params: Vec<(String, Place)>,
    /// The JSON request body, when the operation has one.
    pub body: Option<Body>,
    /// The credentials sent with each request.
    pub security: Vec<Credential>,
    /// The auth providers its credentials (or `base_url`) name (`{auth.<provider>()}`).
    pub auth: Vec<(String, Arc<AuthPlan>)>,
    /// Per-request timeout.
    pub timeout: Duration,
    /// Whether the operation's responses are JSON: a body that does not parse is then a
    /// malformed answer.
    pub json_response: bool,
    /// The parameters derived from the operation: what the LLM sees when the action declares
    /// none.
    pub derived: IndexMap<String, Property>,
}

/// Where a parameter goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// Into the path template.
    Path,
    /// A query parameter.
    Query,
    /// A header.
    Header,
    /// A cookie.
    Cookie,
}

/// The JSON request body.
pub enum Body {
    /// An object body whose properties are parameters of their own (these names).
    Fields(Vec<String>),
    /// The whole body is the parameter `body`.
    Whole,
}

/// A security scheme's credential and where it goes.
pub struct Credential {
    /// The scheme's name in the document.
    pub scheme: String,
    /// Where the credential goes.
    pub kind: CredentialKind,
    /// The credential (a template over `settings` and `auth`), rendered by
    /// `runtime::openapi::credential`.
    pub template: Template,
}

/// How a credential is sent.
pub enum CredentialKind {
    /// `apiKey` in a header of this name.
    Header(String),
    /// `apiKey` in a query parameter of this name.
    Query(String),
    /// `apiKey` in a cookie of this name.
    Cookie(String),
    /// `Authorization: Bearer …` (`http` bearer, `oauth2`, `openIdConnect`).
    Bearer,
    /// `Authorization: Basic …` of the `user:password` the credential renders to.
    Basic,
}

/// What `Authorization: Basic` carries for `user_password` (`user:password`): its base64
/// (RFC 7617), as this host sends it and reqwest sends a URL's user info.
pub(crate) fn basic_credential(user_password: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(user_password)
}

/// A loaded document: its JSON and where it came from (a relative server URL resolves
/// against an `http(s)` location).
pub struct Document {
    json: Value,
    location: String,
}

/// The documents a plan loaded, by location: each is read once however many actions use it.
#[derive(Default)]
pub struct Documents {
    loaded: HashMap<String, Result<Arc<Document>, String>>,
}

impl Documents {
    /// The document at `url` (a path is relative to `base_dir`), loading it the first time.
    fn get(&mut self, url: &str, base_dir: &Path) -> Result<Arc<Document>, String> {
        let location = if is_http(url) {
            url.to_owned()
        } else {
            base_dir.join(url).display().to_string()
        };
        self.loaded
            .entry(location.clone())
            .or_insert_with(|| load(&location).map(Arc::new))
            .clone()
    }
}

fn is_http(url: &str) -> bool {
    url.starts_with("http://") || url.starts_with("https://")
}

/// Reads and parses the document at `location` (a URL or a path), checks it is OpenAPI 3.
fn load(location: &str) -> Result<Document, String> {
    let bytes = if is_http(location) {
        fetch(location)?
    } else {
        read_file(Path::new(location))?
    };
    let text = String::from_utf8(bytes).map_err(|_| "is not UTF-8 text".to_owned())?;
    let json = parse(&text)?;
    match json.get("openapi").and_then(Value::as_str) {
        Some(v) if v.starts_with("3.") => {}
        Some(v) => {
            return Err(format!(
                "is OpenAPI {v}; this host reads OpenAPI 3.0 and 3.1"
            ));
        }
        None => return Err("is not an OpenAPI 3 document (it has no `openapi` version)".into()),
    }
    Ok(Document {
        json,
        location: location.to_owned(),
    })
}

fn read_file(path: &Path) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|e| format!("cannot be read: {e}"))?;
    let mut bytes = Vec::new();
    file.take(MAX_DOCUMENT as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot be read: {e}"))?;
    if bytes.len() > MAX_DOCUMENT {
        return Err(format!("is larger than {MAX_DOCUMENT} bytes"));
    }
    Ok(bytes)
}

/// GETs `url` with [`FETCH_TIMEOUT`] and [`MAX_DOCUMENT`], on a thread of its own with its
/// own runtime: the plan is built synchronously, from the CLI or inside the server's runtime.
fn fetch(url: &str) -> Result<Vec<u8>, String> {
    let url = url.to_owned();
    let worker = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("cannot be fetched: {e}"))?;
        runtime.block_on(async {
            let client = agentmesh_llm::http_client()
                .timeout(FETCH_TIMEOUT)
                .build()
                .map_err(|e| format!("cannot be fetched: {e}"))?;
            let response = client.get(&url).send().await.map_err(|e| match e {
                e if e.is_timeout() => format!("did not answer within {FETCH_TIMEOUT:?}"),
                e => format!("is unreachable: {e}"),
            })?;
            let status = response.status();
            if !status.is_success() {
                return Err(format!("answered HTTP {}", status.as_u16()));
            }
            agentmesh_llm::read_capped(response, MAX_DOCUMENT)
                .await
                .map_err(|e| match e {
                    agentmesh_llm::Capped::TooLarge => {
                        format!("is larger than {MAX_DOCUMENT} bytes")
                    }
                    agentmesh_llm::Capped::Read(e) => format!("cannot be read: {e}"),
                })
        })
    });
    worker
        .join()
        .map_err(|_| "cannot be fetched: the fetching thread failed".to_owned())?
}

/// JSON, or YAML through the manifest's bounded parser.
fn parse(text: &str) -> Result<Value, String> {
    if text.trim_start().starts_with('{') {
        return serde_json::from_str(text).map_err(|e| format!("is not valid JSON: {e}"));
    }
    let (nodes, errors) = agentmesh_manifest::yaml::parse(text);
    if let Some(e) = errors.first() {
        return Err(format!(
            "does not parse (line {}, column {}): {}",
            e.pos.line, e.pos.col, e.message
        ));
    }
    match nodes.as_slice() {
        [node] => Ok(node.to_json()),
        [] => Err("is empty".into()),
        _ => Err("holds several YAML documents".into()),
    }
}

/// What an action's block is compiled with: the action's index and name, and the manifest
/// that declares it (for the position of an error).
pub(super) struct At<'a> {
    pub source: &'a Source,
    pub index: usize,
    pub action: &'a str,
}

impl At<'_> {
    /// An error at `field` of the action's `openapi` block, else of the tool's shared one,
    /// else at the action's block, else at the action.
    fn error(&self, field: &str, message: impl Into<String>) -> EngineError {
        let root = &self.source.node;
        let action = root.get("actions").and_then(|a| a.index(self.index));
        let own = action
            .and_then(|a| a.get("execute"))
            .and_then(|e| e.get("openapi"));
        let value = |block: Option<&Node>| block.and_then(|b| b.get(field)).map(|n| n.pos);
        let pos = value(own)
            .or_else(|| value(root.get("openapi")))
            .or(own.map(|n| n.pos))
            .or(action.map(|a| a.pos))
            .unwrap_or_default();
        EngineError::Manifest(Diagnostic {
            file: self.source.file.clone(),
            pos,
            severity: Severity::Error,
            message: format!("action `{}`: {}", self.action, message.into()),
        })
    }
}

/// Compiles `block` (completed from the tool's shared one) of the action `at` names.
pub(super) fn openapi_plan(
    block: &OpenApi,
    at: &At,
    docs: &mut Documents,
    auth: &HashMap<String, Arc<AuthPlan>>,
) -> Result<OpenApiPlan, EngineError> {
    let url = block
        .url
        .as_deref()
        .ok_or_else(|| at.error("url", "`openapi` has no `url`"))?;
    let operation = block
        .operation()
        .ok_or_else(|| at.error("operation", "`openapi` names no `operation`"))?;
    let doc = docs
        .get(url, &at.source.base_dir)
        .map_err(|e| at.error("url", format!("the OpenAPI document `{url}` {e}")))?;
    let op_field = if block.operation.is_some() {
        "operation"
    } else {
        "operation_id"
    };
    let found = find_operation(&doc.json, operation)
        .map_err(|e| at.error(op_field, format!("in `{url}`: {e}")))?;
    let Some((path, method, path_item, op)) = found else {
        let known = operation_ids(&doc.json);
        let hint = agentmesh_manifest::suggest::did_you_mean_hint(
            operation,
            known.iter().map(String::as_str),
        );
        return Err(at.error(
            op_field,
            format!("`{url}` has no operation `{operation}`{hint}"),
        ));
    };
    let in_doc = |e: String| at.error(op_field, format!("operation `{operation}` in `{url}`: {e}"));
    let mut derived = IndexMap::new();
    let mut params: Vec<(String, Place)> = Vec::new();
    // Path-level parameters, then the operation's (which replace same-named ones).
    let listed = [path_item.get("parameters"), op.get("parameters")];
    let mut declared: IndexMap<(String, String), Value> = IndexMap::new();
    for list in listed.into_iter().flatten() {
        let list = resolve(&doc.json, list, 0, &mut Vec::new()).map_err(in_doc)?;
        for p in list.as_array().into_iter().flatten() {
            let name = p.get("name").and_then(Value::as_str).unwrap_or_default();
            let place = p.get("in").and_then(Value::as_str).unwrap_or_default();
            declared.insert((name.to_owned(), place.to_owned()), p.clone());
        }
    }
    for ((name, place), p) in &declared {
        let place = match place.as_str() {
            "path" => Place::Path,
            "query" => Place::Query,
            "header" => Place::Header,
            "cookie" => Place::Cookie,
            other => return Err(in_doc(format!("parameter `{name}` is `in: {other}`"))),
        };
        let schema = p
            .get("schema")
            .or_else(|| first_json(p.get("content")))
            .cloned()
            .unwrap_or(Value::Object(Map::new()));
        let mut prop = property_of(&schema);
        if let Some(d) = p.get("description").and_then(Value::as_str) {
            prop.description = Some(d.to_owned());
        }
        let required = place == Place::Path || p.get("required") == Some(&Value::Bool(true));
        optional_unless(&mut prop, required);
        params.push((name.clone(), place));
        derived.insert(name.clone(), prop);
    }
    let body = match op.get("requestBody") {
        None => None,
        Some(body) => {
            let body = resolve(&doc.json, body, 0, &mut Vec::new()).map_err(in_doc)?;
            let Some(schema) = first_json(body.get("content")) else {
                return Err(in_doc(
                    "its request body is not JSON; this host sends JSON bodies only".into(),
                ));
            };
            let required = body.get("required") == Some(&Value::Bool(true));
            Some(body_params(schema, required, &mut derived))
        }
    };
    let json_response = op
        .get("responses")
        .and_then(Value::as_object)
        .is_some_and(|r| {
            r.values().any(|resp| {
                resolve(&doc.json, resp, 0, &mut Vec::new())
                    .ok()
                    .is_some_and(|resp| first_json(resp.get("content")).is_some())
            })
        });
    let base_url = match &block.base_url {
        Some(b) => template(b)?,
        None => template(&server_url(&doc).map_err(|e| at.error("url", e))?)?,
    };
    let requirements = op.get("security").or_else(|| doc.json.get("security"));
    let security = credentials(&doc.json, requirements, block)
        .map_err(|e| at.error("security", format!("operation `{operation}`: {e}")))?;
    let mut templates = vec![&base_url];
    templates.extend(security.iter().map(|c| &c.template));
    let auth = super::providers_of(&templates, auth, operation)?;
    Ok(OpenApiPlan {
        auth,
        operation: operation.to_owned(),
        method,
        base_url,
        path,
        params,
        body,
        security,
        timeout: block.timeout.map_or(DEFAULT_TIMEOUT, |d| d.0),
        json_response,
        derived,
    })
}

/// The methods a path item may hold operations under.
const METHODS: [&str; 8] = [
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];

/// The operation `id`: its path, method (upper case), path item and the operation, with
/// `$ref`s resolved; `None` when the document has none of that id.
fn find_operation(doc: &Value, id: &str) -> Result<Option<(String, String, Value, Value)>, String> {
    let Some(paths) = doc.get("paths").and_then(Value::as_object) else {
        return Ok(None);
    };
    for (path, item) in paths {
        let item = resolve(doc, item, 0, &mut Vec::new())?;
        for method in METHODS {
            let Some(op) = item.get(method) else { continue };
            if op.get("operationId").and_then(Value::as_str) == Some(id) {
                let op = op.clone();
                return Ok(Some((path.clone(), method.to_uppercase(), item, op)));
            }
        }
    }
    Ok(None)
}

/// Every `operationId` of the document, for a "did you mean".
fn operation_ids(doc: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for item in doc
        .get("paths")
        .and_then(Value::as_object)
        .into_iter()
        .flat_map(|p| p.values())
    {
        for method in METHODS {
            if let Some(id) = item
                .get(method)
                .and_then(|op| op.get("operationId"))
                .and_then(Value::as_str)
            {
                out.push(id.to_owned());
            }
        }
    }
    out
}

/// `value` with every `#/…` `$ref` replaced by what it points at (sibling keywords of a
/// `$ref` kept over the target's, as OpenAPI 3.1 allows). `stack` holds the references being
/// resolved: meeting one again is a cycle, refused, as is nesting deeper than
/// [`MAX_REF_DEPTH`] or a reference outside the document.
fn resolve(
    doc: &Value,
    value: &Value,
    depth: usize,
    stack: &mut Vec<String>,
) -> Result<Value, String> {
    match value {
        Value::Object(map) => {
            if let Some(Value::String(reference)) = map.get("$ref") {
                if stack.contains(reference) {
                    return Err(format!(
                        "`$ref` `{reference}` refers to itself (through {}); recursive schemas \
                         cannot be given to the LLM",
                        stack.join(" → ")
                    ));
                }
                if depth >= MAX_REF_DEPTH {
                    return Err(format!(
                        "`$ref`s nest deeper than {MAX_REF_DEPTH} at `{reference}`"
                    ));
                }
                let target = pointer(doc, reference)?;
                stack.push(reference.clone());
                let mut resolved = resolve(doc, target, depth + 1, stack)?;
                stack.pop();
                if let Value::Object(out) = &mut resolved {
                    for (k, v) in map.iter().filter(|(k, _)| *k != "$ref") {
                        out.insert(k.clone(), resolve(doc, v, depth, stack)?);
                    }
                }
                return Ok(resolved);
            }
            let mut out = Map::new();
            for (k, v) in map {
                // Examples are data, not schemas: a `$ref` key in one is left alone.
                let v = if k == "example" || k == "examples" {
                    v.clone()
                } else {
                    resolve(doc, v, depth, stack)?
                };
                out.insert(k.clone(), v);
            }
            Ok(Value::Object(out))
        }
        Value::Array(items) => Ok(Value::Array(
            items
                .iter()
                .map(|i| resolve(doc, i, depth, stack))
                .collect::<Result<_, _>>()?,
        )),
        other => Ok(other.clone()),
    }
}

/// What the local reference `reference` (`#/components/schemas/Pet`) points at.
fn pointer<'a>(doc: &'a Value, reference: &str) -> Result<&'a Value, String> {
    let Some(path) = reference.strip_prefix('#') else {
        return Err(format!(
            "`$ref` `{reference}` points outside the document; this host resolves only `#/…` \
             references"
        ));
    };
    doc.pointer(path)
        .ok_or_else(|| format!("`$ref` `{reference}` points at nothing"))
}

/// The schema of the first JSON media type (`application/json`, `…+json`) of a `content` map.
fn first_json(content: Option<&Value>) -> Option<&Value> {
    let content = content?.as_object()?;
    content
        .iter()
        .find(|(media, _)| {
            let media = media.split(';').next().unwrap_or_default().trim();
            media == "application/json" || media.ends_with("+json") || media == "*/*"
        })
        .map(|(_, m)| m.get("schema").unwrap_or(&Value::Null))
}

/// A property that is optional when not `required`: a `null` default, which the engine
/// leaves out of the call instead of sending (see `ActionPlan::complete`).
fn optional_unless(prop: &mut Property, required: bool) {
    if !required && prop.default.is_none() {
        prop.default = Some(Value::Null);
    }
    if required {
        prop.default = None;
    }
}

/// The request body's parameters, added to `derived`: an object body's properties each a
/// parameter (the body's `required` ones required), unless one has the name of a parameter
/// already there; else (or for any other body) one parameter `body`.
fn body_params(schema: &Value, required: bool, derived: &mut IndexMap<String, Property>) -> Body {
    let fields = schema.get("properties").and_then(Value::as_object);
    if let Some(fields) = fields.filter(|f| !f.keys().any(|k| derived.contains_key(k))) {
        let needed: Vec<&str> = schema
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        for (name, field) in fields {
            let mut prop = property_of(field);
            optional_unless(&mut prop, required && needed.contains(&name.as_str()));
            derived.insert(name.clone(), prop);
        }
        return Body::Fields(fields.keys().cloned().collect());
    }
    let mut prop = property_of(schema);
    if prop.description.is_none() {
        prop.description = Some("The JSON request body.".into());
    }
    optional_unless(&mut prop, required);
    derived.insert("body".into(), prop);
    Body::Whole
}

/// A resolved JSON Schema as a parameter [`Property`]: the keywords a property has are kept,
/// the others dropped (the LLM is told less, the server still checks). A 3.1 type list keeps
/// its first non-`null` type; `allOf` members are merged into one object.
fn property_of(schema: &Value) -> Property {
    let Some(map) = schema.as_object() else {
        return Property::default();
    };
    let mut merged;
    let map = match map.get("allOf").and_then(Value::as_array) {
        Some(parts) => {
            merged = map.clone();
            let mut props = Map::new();
            let mut required = Vec::new();
            for part in parts {
                if let Some(p) = part.get("properties").and_then(Value::as_object) {
                    props.extend(p.clone());
                }
                if let Some(r) = part.get("required").and_then(Value::as_array) {
                    required.extend(r.clone());
                }
                if let Some(t) = part.get("type") {
                    merged.entry("type").or_insert(t.clone());
                }
            }
            merged.entry("properties").or_insert(Value::Object(props));
            merged.entry("required").or_insert(Value::Array(required));
            &merged
        }
        None => map,
    };
    let text = |k: &str| map.get(k).and_then(Value::as_str).map(str::to_owned);
    let number = |k: &str| map.get(k).and_then(Value::as_f64);
    let count = |k: &str| map.get(k).and_then(Value::as_u64);
    let schema_type = match map.get("type") {
        Some(Value::String(t)) => type_of(t),
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).find_map(type_of),
        _ => None,
    };
    let examples = match (map.get("examples"), map.get("example")) {
        (Some(Value::Array(e)), _) => Some(e.clone()),
        (_, Some(e)) => Some(vec![e.clone()]),
        _ => None,
    };
    Property {
        schema_type,
        description: text("description"),
        title: text("title"),
        default: map.get("default").cloned(),
        require_binding: false,
        format: text("format"),
        allowed: map.get("enum").and_then(Value::as_array).cloned(),
        constant: map.get("const").cloned(),
        items: map.get("items").map(|i| Box::new(property_of(i))),
        properties: map
            .get("properties")
            .and_then(Value::as_object)
            .map(|p| p.iter().map(|(k, v)| (k.clone(), property_of(v))).collect()),
        required: map.get("required").and_then(Value::as_array).map(|r| {
            r.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        }),
        additional_properties: map
            .get("additionalProperties")
            .filter(|v| v.is_boolean())
            .cloned(),
        minimum: number("minimum"),
        maximum: number("maximum"),
        min_length: count("minLength"),
        max_length: count("maxLength"),
        min_items: count("minItems"),
        max_items: count("maxItems"),
        pattern: text("pattern"),
        examples,
    }
}

fn type_of(name: &str) -> Option<PropertyType> {
    Some(match name {
        "string" => PropertyType::String,
        "number" => PropertyType::Number,
        "integer" => PropertyType::Integer,
        "boolean" => PropertyType::Boolean,
        "object" => PropertyType::Object,
        "array" => PropertyType::Array,
        _ => return None,
    })
}

/// The document's first server (its variables at their defaults); a relative one resolves
/// against an `http(s)` document's location.
fn server_url(doc: &Document) -> Result<String, String> {
    let server = doc
        .json
        .get("servers")
        .and_then(Value::as_array)
        .and_then(|s| s.first());
    let mut url = server
        .and_then(|s| s.get("url"))
        .and_then(Value::as_str)
        .unwrap_or("/")
        .to_owned();
    if let Some(vars) = server
        .and_then(|s| s.get("variables"))
        .and_then(Value::as_object)
    {
        for (name, var) in vars {
            let default = var
                .get("default")
                .and_then(Value::as_str)
                .unwrap_or_default();
            url = url.replace(&format!("{{{name}}}"), default);
        }
    }
    if is_http(&url) {
        return Ok(url);
    }
    if is_http(&doc.location) {
        return reqwest::Url::parse(&doc.location)
            .and_then(|base| base.join(&url))
            .map(|u| u.to_string())
            .map_err(|e| format!("the document's server `{url}` does not resolve: {e}"));
    }
    Err(format!(
        "the document's server `{url}` is not an http(s) URL and the document is a file: set \
         `base_url`"
    ))
}

/// The credentials of the first alternative of `requirements` whose schemes the manifest's
/// `security` all gives; none when the operation needs no security (absent, empty, or an
/// empty alternative `{}`) and the manifest gives none that fits. A scheme the manifest names
/// that the document does not declare is an error, as is a required one it does not give.
fn credentials(
    doc: &Value,
    requirements: Option<&Value>,
    block: &OpenApi,
) -> Result<Vec<Credential>, String> {
    let given = block.security.clone().unwrap_or_default();
    let schemes = doc
        .pointer("/components/securitySchemes")
        .cloned()
        .unwrap_or(Value::Object(Map::new()));
    for name in given.keys() {
        if schemes.get(name).is_none() {
            let known: Vec<&str> = schemes
                .as_object()
                .into_iter()
                .flat_map(|m| m.keys().map(String::as_str))
                .collect();
            return Err(format!(
                "`security` names scheme `{name}`, which the document does not declare (it \
                 declares: {})",
                if known.is_empty() {
                    "none".into()
                } else {
                    known.join(", ")
                }
            ));
        }
    }
    let alternatives: Vec<Vec<String>> = requirements
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|alt| {
            alt.as_object()
                .map(|m| m.keys().cloned().collect())
                .unwrap_or_default()
        })
        .collect();
    let optional = alternatives.is_empty() || alternatives.iter().any(Vec::is_empty);
    let chosen = alternatives
        .iter()
        .find(|alt| !alt.is_empty() && alt.iter().all(|s| given.contains_key(s)));
    let Some(chosen) = chosen else {
        if optional {
            return Ok(Vec::new());
        }
        let wanted: Vec<String> = alternatives.iter().map(|a| a.join(" + ")).collect();
        return Err(format!(
            "it requires security scheme {}; give its credential in `openapi.security`",
            wanted.join(" or ")
        ));
    };
    chosen
        .iter()
        .map(|name| {
            let scheme = resolve(doc, &schemes[name.as_str()], 0, &mut Vec::new())?;
            let text = |k: &str| scheme.get(k).and_then(Value::as_str).unwrap_or_default();
            let kind = match (
                text("type"),
                text("in"),
                text("scheme").to_ascii_lowercase(),
            ) {
                ("apiKey", "header", _) => CredentialKind::Header(text("name").to_owned()),
                ("apiKey", "query", _) => CredentialKind::Query(text("name").to_owned()),
                ("apiKey", "cookie", _) => CredentialKind::Cookie(text("name").to_owned()),
                ("http", _, s) if s == "bearer" => CredentialKind::Bearer,
                ("http", _, s) if s == "basic" => CredentialKind::Basic,
                ("oauth2" | "openIdConnect", _, _) => CredentialKind::Bearer,
                (kind, _, _) => {
                    return Err(format!(
                        "security scheme `{name}` (type `{kind}`) is not one this host sends \
                         (apiKey, http bearer or basic, oauth2 and openIdConnect tokens)"
                    ));
                }
            };
            let source = &given[name.as_str()];
            let template = template(source).map_err(|e| e.to_string())?;
            Ok(Credential {
                scheme: name.clone(),
                kind,
                template,
            })
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // Tests fail loudly.
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn refs_resolve_with_their_siblings_and_cycles_are_refused() {
        let doc = json!({"components": {"schemas": {
            "Pet": {"type": "object", "properties": {"name": {"type": "string"}}},
            "Node": {"type": "object", "properties": {"next": {"$ref": "#/components/schemas/Node"}}},
        }}});
        let pet = json!({"$ref": "#/components/schemas/Pet", "description": "A pet."});
        let resolved = resolve(&doc, &pet, 0, &mut Vec::new()).unwrap();
        assert_eq!(resolved["properties"]["name"]["type"], "string");
        assert_eq!(resolved["description"], "A pet.");
        let node = json!({"$ref": "#/components/schemas/Node"});
        let err = resolve(&doc, &node, 0, &mut Vec::new()).unwrap_err();
        assert!(err.contains("refers to itself"), "{err}");
        let outside = json!({"$ref": "other.yaml#/Pet"});
        let err = resolve(&doc, &outside, 0, &mut Vec::new()).unwrap_err();
        assert!(err.contains("outside the document"), "{err}");
        let dangling = json!({"$ref": "#/components/schemas/Cat"});
        let err = resolve(&doc, &dangling, 0, &mut Vec::new()).unwrap_err();
        assert!(err.contains("points at nothing"), "{err}");
    }

    #[test]
    fn a_chain_of_refs_deeper_than_the_bound_is_refused() {
        let mut schemas = Map::new();
        for i in 0..=MAX_REF_DEPTH {
            let next = json!({"$ref": format!("#/components/schemas/S{}", i + 1)});
            schemas.insert(format!("S{i}"), next);
        }
        schemas.insert(format!("S{}", MAX_REF_DEPTH + 1), json!({"type": "string"}));
        let doc = json!({"components": {"schemas": schemas}});
        let start = json!({"$ref": "#/components/schemas/S0"});
        let err = resolve(&doc, &start, 0, &mut Vec::new()).unwrap_err();
        assert!(err.contains("nest deeper"), "{err}");
    }

    #[test]
    fn a_type_list_keeps_its_first_non_null_type_and_all_of_merges() {
        let prop = property_of(&json!({"type": ["null", "integer"], "example": 3}));
        assert_eq!(prop.schema_type, Some(PropertyType::Integer));
        assert_eq!(prop.examples, Some(vec![json!(3)]));
        let prop = property_of(&json!({"allOf": [
            {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
            {"properties": {"b": {"type": "number"}}},
        ]}));
        assert_eq!(prop.schema_type, Some(PropertyType::Object));
        let names: Vec<&String> = prop.properties.iter().flatten().map(|(k, _)| k).collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(prop.required, Some(vec!["a".to_owned()]));
    }

    #[test]
    fn a_body_property_named_as_a_parameter_makes_the_body_one_parameter() {
        let mut derived = IndexMap::new();
        derived.insert("id".to_owned(), Property::default());
        let schema = json!({"type": "object", "properties": {"id": {"type": "integer"}}});
        assert!(matches!(
            body_params(&schema, true, &mut derived),
            Body::Whole
        ));
        assert!(
            derived["body"].default.is_none(),
            "a required body is required"
        );
        let mut derived = IndexMap::new();
        let schema = json!({"type": "object", "required": ["a"],
            "properties": {"a": {"type": "string"}, "b": {"type": "string"}}});
        assert!(matches!(
            body_params(&schema, true, &mut derived),
            Body::Fields(_)
        ));
        assert_eq!(derived["a"].default, None);
        assert_eq!(derived["b"].default, Some(Value::Null));
    }
}
