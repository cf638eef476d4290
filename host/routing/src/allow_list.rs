//! Allow lists as routing reads them: the values a stored entry (its text form is
//! [`allow_value`]) stands for, and the keys under which equal values meet in the index.

use serde_json::Value as Json;

pub use agentmesh_model::allow_list::{AllowLists, allow_value};

/// A value a stored entry may stand for, with its [`value_key`].
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Reading {
    pub(crate) value: Json,
    pub(crate) key: String,
}

/// The values a stored entry stands for. The stored text does not say whether `42` came
/// from the number 42 or from the string "42" (both are stored as `42`), so an entry whose
/// text is non-string JSON stands for both: the string first, then the parsed value. A filter
/// then matches `payload.number == parameters.number` for a number, and a repository named
/// `"42"` for a string; the price is that the string "42" and the number 42 are
/// interchangeable in an allow list.
pub(crate) fn readings(stored: &str) -> impl Iterator<Item = Reading> {
    let text = Reading {
        value: Json::String(stored.to_owned()),
        key: stored.to_owned(),
    };
    let parsed = serde_json::from_str::<Json>(stored)
        .ok()
        .filter(|value| !value.is_string())
        .map(|value| Reading {
            key: value_key(&value),
            value,
        });
    std::iter::once(text).chain(parsed)
}

/// The keys of the values `stored` stands for ([`readings`]), each once, without building
/// the values.
pub(crate) fn keys(stored: &str) -> impl Iterator<Item = String> {
    let parsed = serde_json::from_str::<Json>(stored)
        .ok()
        .filter(|value| !value.is_string())
        .map(|value| value_key(&value))
        .filter(|key| key != stored);
    std::iter::once(stored.to_owned()).chain(parsed)
}

/// The key of a value in the subscription index. Values that CEL's `==` calls equal have the
/// same key, so looking up an event value's key finds every allow-list value equal to it:
/// a string is its own text; anything else is canonical JSON in which numbers are written
/// from their `f64` (so `1`, `1.0` and `1u` meet) and map keys are sorted. Distinct values
/// may share a key (the string "1" and the number 1): the full filter tells them apart.
pub(crate) fn value_key(value: &Json) -> String {
    match value {
        Json::String(s) => s.clone(),
        other => {
            let mut out = String::new();
            write_canonical(other, &mut out);
            out
        }
    }
}

fn write_canonical(value: &Json, out: &mut String) {
    match value {
        Json::Null => out.push_str("null"),
        Json::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Json::Number(n) => {
            let f = n.as_f64().unwrap_or(f64::NAN);
            // -0.0 == 0.0, and must share its key.
            let f = if f == 0.0 { 0.0 } else { f };
            out.push_str(&f.to_string());
        }
        Json::String(s) => out.push_str(&Json::String(s.clone()).to_string()),
        Json::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        Json::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_by_key(|(k, _)| *k);
            out.push('{');
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Json::String(k.clone()).to_string());
                out.push(':');
                write_canonical(v, out);
            }
            out.push('}');
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn json_text_reads_as_the_string_and_the_value() {
        let values: Vec<Json> = readings("42").map(|r| r.value).collect();
        assert_eq!(values, [json!("42"), json!(42)]);
        let values: Vec<Json> = readings("alice").map(|r| r.value).collect();
        assert_eq!(values, [json!("alice")]);
        // The text of a JSON string is a string whose content has quotes, nothing more.
        let values: Vec<Json> = readings(r#""x""#).map(|r| r.value).collect();
        assert_eq!(values, [json!(r#""x""#)]);
    }

    #[test]
    fn equal_values_share_a_key() {
        assert_eq!(value_key(&json!(1)), value_key(&json!(1.0)));
        assert_eq!(value_key(&json!(-0.0)), value_key(&json!(0)));
        assert_eq!(
            value_key(&json!({"b": 1, "a": [2.0]})),
            value_key(&json!({"a": [2], "b": 1.0}))
        );
        assert_ne!(value_key(&json!(1)), value_key(&json!(2)));
        assert_eq!(value_key(&json!("1e2")), "1e2");
        let from_readings: Vec<String> = readings("1e2").map(|r| r.key).collect();
        assert_eq!(from_readings, ["1e2", "100"]);
        assert_eq!(keys("1e2").collect::<Vec<_>>(), ["1e2", "100"]);
        assert_eq!(keys("1").collect::<Vec<_>>(), ["1"]);
        assert_eq!(keys("alice").collect::<Vec<_>>(), ["alice"]);
    }
}
