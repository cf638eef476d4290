//! Pieces shared by several kinds: durations, JSON-Schema parameters, middleware steps,
//! component references and values read from the environment.

use std::borrow::Cow;
use std::fmt;

use indexmap::IndexMap;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

/// A value that does not parse as the scalar it should be: the message says what it should
/// look like (e.g. "`5x` is not a duration (write e.g. 30s, …)").
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ParseError(pub String);

/// A duration written as whole numbers with units, e.g. `30s`, `15m`, `2h`, `1h30m`, `7d`,
/// `500ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(into = "String")]
pub struct Duration(pub std::time::Duration);

impl Duration {
    /// Parses `30s`, `2h`, `1h30m`, `500ms`, `7d`.
    pub fn parse(text: &str) -> Result<Duration, ParseError> {
        let bad = || {
            ParseError(format!(
                "`{text}` is not a duration (write e.g. 30s, 15m, 2h, 1h30m, 7d)"
            ))
        };
        let mut total: u64 = 0;
        let mut rest = text.trim();
        if rest.is_empty() {
            return Err(bad());
        }
        while !rest.is_empty() {
            let digits = rest.chars().take_while(char::is_ascii_digit).count();
            if digits == 0 {
                return Err(bad());
            }
            let n: u64 = rest[..digits].parse().map_err(|_| bad())?;
            rest = &rest[digits..];
            let unit_len = rest.chars().take_while(char::is_ascii_alphabetic).count();
            let millis: u64 = match &rest[..unit_len] {
                "ms" => 1,
                "s" => 1_000,
                "m" => 60_000,
                "h" => 3_600_000,
                "d" => 86_400_000,
                _ => return Err(bad()),
            };
            rest = &rest[unit_len..];
            total = n
                .checked_mul(millis)
                .and_then(|v| total.checked_add(v))
                .ok_or_else(bad)?;
        }
        Ok(Duration(std::time::Duration::from_millis(total)))
    }
}

impl fmt::Display for Duration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.0.as_millis();
        match ms {
            0 => f.write_str("0s"),
            _ if ms.is_multiple_of(3_600_000) => write!(f, "{}h", ms / 3_600_000),
            _ if ms.is_multiple_of(60_000) => write!(f, "{}m", ms / 60_000),
            _ if ms.is_multiple_of(1_000) => write!(f, "{}s", ms / 1_000),
            _ => write!(f, "{ms}ms"),
        }
    }
}

impl From<Duration> for String {
    fn from(d: Duration) -> String {
        d.to_string()
    }
}

impl<'de> Deserialize<'de> for Duration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Duration::parse(&text).map_err(serde::de::Error::custom)
    }
}

impl JsonSchema for Duration {
    fn schema_name() -> Cow<'static, str> {
        "Duration".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "string",
            "format": "duration",
            "description": "A duration: whole numbers with units ms, s, m, h, d, e.g. `30s`, `2h`, `1h30m`.",
            "pattern": "^([0-9]+(ms|s|m|h|d))+$"
        })
    }
}

/// A byte size: a whole number of bytes, or a number with a unit (`64MiB`, `512KiB`, `1GiB`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(into = "u64")]
pub struct ByteSize(pub u64);

impl From<ByteSize> for u64 {
    fn from(b: ByteSize) -> u64 {
        b.0
    }
}

impl ByteSize {
    /// Parses `64MiB`, `512KiB`, `1GiB`, `1000`, `10MB`.
    pub fn parse(text: &str) -> Result<ByteSize, ParseError> {
        let bad = || ParseError(format!("`{text}` is not a size (write e.g. 64MiB)"));
        let t = text.trim();
        let digits = t.chars().take_while(char::is_ascii_digit).count();
        let n: u64 = t[..digits].parse().map_err(|_| bad())?;
        let mult: u64 = match t[digits..].trim() {
            "" | "B" => 1,
            "KiB" => 1 << 10,
            "MiB" => 1 << 20,
            "GiB" => 1 << 30,
            "KB" | "kB" => 1_000,
            "MB" => 1_000_000,
            "GB" => 1_000_000_000,
            _ => return Err(bad()),
        };
        n.checked_mul(mult)
            .map(ByteSize)
            .ok_or_else(|| ParseError(format!("`{text}` is too large")))
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match Value::deserialize(d)? {
            Value::Number(n) => n
                .as_u64()
                .map(ByteSize)
                .ok_or_else(|| serde::de::Error::custom("a size is a whole number of bytes")),
            Value::String(s) => ByteSize::parse(&s).map_err(serde::de::Error::custom),
            _ => Err(serde::de::Error::custom(
                "a size is a number or a string like 64MiB",
            )),
        }
    }
}

impl JsonSchema for ByteSize {
    fn schema_name() -> Cow<'static, str> {
        "ByteSize".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": ["integer", "string"],
            "format": "byte-size",
            "description": "A size in bytes, or with a unit: `64MiB`, `512KiB`, `1GiB`."
        })
    }
}

/// A JSON Schema describing parameters or settings:
/// ```yaml
/// parameters:
///   type: object
///   properties:
///     owner: {type: string, require_binding: true}
///     branch: {type: string, default: main}
/// ```
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ParameterSchema {
    /// Always `object` when present.
    #[serde(rename = "type")]
    pub schema_type: Option<String>,
    /// Shown in UIs.
    pub description: Option<String>,
    /// The parameters, in order.
    #[serde(default)]
    pub properties: IndexMap<String, Property>,
    /// JSON Schema's own list of required names; a property without a `default` is required
    /// anyway.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub required: Vec<String>,
}

/// One parameter or setting. A property without `default` is required.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Property {
    /// `string`, `number`, `integer`, `boolean`, `object` or `array`.
    #[serde(rename = "type")]
    pub schema_type: Option<PropertyType>,
    /// What the parameter means; the LLM sees it for action parameters.
    pub description: Option<String>,
    /// A label for UIs.
    pub title: Option<String>,
    /// The value used when none is given; its presence makes the property optional.
    pub default: Option<Value>,
    /// Every agent using the tool must bind this parameter.
    #[serde(default, rename = "require_binding")]
    pub require_binding: bool,
    /// `password` (masked in UIs), `uri`, `date-time`, …
    pub format: Option<String>,
    /// The allowed values.
    #[serde(rename = "enum")]
    pub allowed: Option<Vec<Value>>,
    /// The only allowed value.
    #[serde(rename = "const")]
    pub constant: Option<Value>,
    /// Element schema, for arrays.
    pub items: Option<Box<Property>>,
    /// Member schemas, for objects.
    pub properties: Option<IndexMap<String, Property>>,
    /// Required member names, for objects.
    pub required: Option<Vec<String>>,
    /// Whether objects may carry other members.
    pub additional_properties: Option<Value>,
    /// Numeric bounds.
    pub minimum: Option<f64>,
    /// Numeric bounds.
    pub maximum: Option<f64>,
    /// String length bounds.
    pub min_length: Option<u64>,
    /// String length bounds.
    pub max_length: Option<u64>,
    /// Array length bounds.
    pub min_items: Option<u64>,
    /// Array length bounds.
    pub max_items: Option<u64>,
    /// A regular expression strings must match.
    pub pattern: Option<String>,
    /// Example values, for documentation.
    pub examples: Option<Vec<Value>>,
}

impl Property {
    /// The property as plain JSON Schema: as written, without the host's own
    /// `require_binding` (which no validator or LLM needs to see).
    pub fn json_schema(&self) -> Value {
        let mut schema = serde_json::to_value(self).unwrap_or(Value::Null);
        if let Value::Object(m) = &mut schema {
            m.remove("require_binding");
        }
        schema
    }

    /// A setting's value as this property reads it. A value from the environment is text:
    /// where the property wants a number, a flag, an object or a list, the text is read as
    /// JSON of that type (`{env: RETRIES}` holding `3` is 3), and stays text when it is not
    /// one, for the schema to refuse. An unquoted number or flag written where the property
    /// wants text is its text (a numeric key, a PIN): a template would write it so anyway.
    pub fn setting(&self, value: Value, from_env: bool) -> Value {
        match (self.schema_type, value) {
            (Some(PropertyType::String), v @ (Value::Number(_) | Value::Bool(_))) if !from_env => {
                Value::String(v.to_string())
            }
            (Some(want), Value::String(text)) if from_env && want != PropertyType::String => {
                match serde_json::from_str::<Value>(&text) {
                    Ok(parsed) if want.admits(&parsed) => parsed,
                    _ => Value::String(text),
                }
            }
            (_, v) => v,
        }
    }

    /// A `format: password` property: a secret, whose values no message or log shows.
    pub fn is_secret(&self) -> bool {
        self.format.as_deref() == Some("password")
    }
}

/// A JSON Schema type name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum PropertyType {
    /// Text.
    String,
    /// Any number.
    Number,
    /// A whole number.
    Integer,
    /// true or false.
    Boolean,
    /// A map.
    Object,
    /// A list.
    Array,
    /// null.
    Null,
}

impl PropertyType {
    /// Whether `value` is of this type, as JSON Schema says (an integer is a number).
    fn admits(self, value: &Value) -> bool {
        match self {
            PropertyType::String => value.is_string(),
            PropertyType::Number => value.is_number(),
            PropertyType::Integer => value.is_i64() || value.is_u64(),
            PropertyType::Boolean => value.is_boolean(),
            PropertyType::Object => value.is_object(),
            PropertyType::Array => value.is_array(),
            PropertyType::Null => value.is_null(),
        }
    }
}

impl ParameterSchema {
    /// Whether `name` is one of the properties.
    pub fn has(&self, name: &str) -> bool {
        self.properties.contains_key(name)
    }
}

/// One middleware or guardrail step: exactly one of `assert`, `invoke`, `transform`, `wasm`.
/// ```yaml
/// - assert: "context.capabilities['github_pr'].count_successful < 20"
///   error_message: "Action limit reached for this session."
/// ```
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MiddlewareStep {
    /// CEL that must be true.
    #[serde(rename = "assert")]
    pub assert_expr: Option<String>,
    /// `"<tool>:<action>"`: call another tool's action (no middleware runs on it).
    pub invoke: Option<String>,
    /// CEL whose value replaces what the LLM sees (or the event's input).
    pub transform: Option<String>,
    /// A custom middleware component (this host's extension).
    pub wasm: Option<WasmStep>,
    /// Only run for this action name.
    #[serde(rename = "match")]
    pub match_action: Option<String>,
    /// CEL: skip the step unless true.
    pub condition: Option<String>,
    /// `{…}` template returned to the LLM when the step fails.
    pub error_message: Option<String>,
    /// What a failure does; defaults to `block` for capability middleware and `lock_task` for
    /// guardrails.
    pub on_fail: Option<OnFail>,
    /// Parameters of an `invoke` step: name → CEL.
    pub bindings: Option<IndexMap<String, String>>,
}

/// A custom middleware step run by a component of the `middleware-plugin` world.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WasmStep {
    /// Path of the component, relative to the manifest.
    pub component: String,
    /// Passed to the component as JSON.
    pub config: Option<Value>,
    /// Memory limit for the component.
    pub memory_limit: Option<ByteSize>,
    /// Wall-clock limit per call.
    pub timeout: Option<Duration>,
}

/// The failure policy of a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum OnFail {
    /// Return the error to the LLM; the call does not run.
    Block,
    /// Ignore the failure and go on.
    Continue,
    /// Terminate the task.
    LockTask,
}

/// A value given literally or read from an environment variable at start:
/// `secret: {env: GITHUB_WEBHOOK_SECRET}`.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum EnvValue {
    /// Read from this environment variable.
    Env {
        /// The variable's name.
        env: String,
    },
    /// The value itself.
    Literal(Value),
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::json;

    use super::*;

    fn of(schema: Value) -> Property {
        serde_json::from_value(schema).unwrap()
    }

    #[test]
    fn a_setting_from_the_environment_takes_its_type_when_its_text_is_of_it() {
        let env = |schema: Value, text: &str| of(schema).setting(json!(text), true);
        assert_eq!(env(json!({"type": "integer"}), " 3 "), json!(3));
        assert_eq!(env(json!({"type": "number"}), "0.5"), json!(0.5));
        assert_eq!(env(json!({"type": "number"}), "2"), json!(2));
        assert_eq!(env(json!({"type": "boolean"}), "false"), json!(false));
        assert_eq!(env(json!({"type": "array"}), "[1, 2]"), json!([1, 2]));
        assert_eq!(
            env(json!({"type": "object"}), r#"{"a": 1}"#),
            json!({"a": 1})
        );
        // Text of another type stays text, for the schema to refuse.
        assert_eq!(env(json!({"type": "integer"}), "3.5"), json!("3.5"));
        assert_eq!(env(json!({"type": "integer"}), "three"), json!("three"));
        assert_eq!(env(json!({"type": "boolean"}), "1"), json!("1"));
        assert_eq!(env(json!({"type": "object"}), "[]"), json!("[]"));
        // Text wanted, or no type: the text as it is, quotes and all.
        assert_eq!(
            env(json!({"type": "string"}), r#""quoted""#),
            json!(r#""quoted""#)
        );
        assert_eq!(env(json!({"type": "string"}), "42"), json!("42"));
        assert_eq!(env(json!({}), "42"), json!("42"));
    }

    #[test]
    fn a_written_number_or_flag_is_text_only_where_text_is_wanted() {
        let text = of(json!({"type": "string"}));
        assert_eq!(text.setting(json!(1234), false), json!("1234"));
        assert_eq!(text.setting(json!(true), false), json!("true"));
        assert_eq!(text.setting(json!([1]), false), json!([1]));
        // A written string is not read as JSON: `"3"` for an integer is refused, not taken.
        let integer = of(json!({"type": "integer"}));
        assert_eq!(integer.setting(json!("3"), false), json!("3"));
        assert_eq!(integer.setting(json!(3), false), json!(3));
    }
}
