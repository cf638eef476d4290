//! JSON as CEL values, converted as expressions reach it.
//!
//! Binding a variable wraps its JSON without converting it. A JSON object becomes a
//! [`JsonMap`] and an array a [`JsonList`]: on first use, each turns into the `cel` crate's own
//! map or list one level deep (the entries are moved, not copied), and its entries that are
//! objects or arrays stay wrapped until they are used in turn. The assert
//! `context.user.id != ''` thus converts the context's first level and `user`, not the
//! inputs, outputs and call history beside them. What is converted stays converted, shared by
//! every evaluation and every clone of the value, so an activation's later evaluations convert
//! nothing.
//!
//! A wrapper answers every question about it as the built-in container it converts to,
//! including the downcasts the `cel` crate makes, so CEL sees no difference from values
//! converted up front. That is also why a wrapper converts at all rather than reading its
//! JSON on every access: the interpreter downcasts the operand of every field selection (is it
//! an optional?) and the right operand of `==` (`[1] == x` asks whether `x` is a built-in
//! list), so a container must be able to show a built-in one at any time, cheaply. Only
//! turning a result back into JSON skips the conversion: an object or array nothing has
//! converted is copied as it is.
//!
//! A JSON number converts as `cel::to_value` converts it: a non-negative integer is a `uint`,
//! a negative one an `int`, any other number a `double`.

use std::any::Any;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use cel::ExecutionError;
use cel::common::traits::{Adder, Container, Indexer, Iterable, Sizer, Zeroer};
use cel::common::types::{
    CelBool, CelDouble, CelInt, CelList, CelMap, CelMapKey, CelNull, CelString, CelUInt, Kind,
    LIST_TYPE, MAP_TYPE, Type,
};
use cel::common::value::{Builtin, BuiltinRef, CowVal, StaticVal, Val};
use serde::ser::{Error as _, SerializeMap, SerializeSeq};
use serde::{Serialize, Serializer};
use serde_json::{Map, Number, Value as Json};

/// `json` as a CEL value: scalars converted, objects and arrays wrapped.
pub(crate) fn to_val(json: Json) -> Box<dyn Val> {
    match json {
        Json::Null => Box::new(CelNull),
        Json::Bool(b) => Box::new(CelBool::from(b)),
        Json::Number(n) => number(&n),
        Json::String(s) => Box::new(CelString::from(s)),
        Json::Array(items) => Box::new(JsonList::new(items)),
        Json::Object(entries) => Box::new(JsonMap::new(entries)),
    }
}

/// A JSON integer is a CEL `int` (so `input.n + 1` and `count < 10` need no conversion), a
/// `uint` only past `int`'s range; any other number a `double`.
fn number(n: &Number) -> Box<dyn Val> {
    if let Some(i) = n.as_i64() {
        Box::new(CelInt::from(i))
    } else if let Some(u) = n.as_u64() {
        Box::new(CelUInt::from(u))
    } else {
        Box::new(CelDouble::from(n.as_f64().unwrap_or(f64::NAN)))
    }
}

/// A CEL value as JSON. An object or array nothing has converted yet is copied as it is; any
/// other value is converted as `cel::Value::json` converts it.
pub(crate) fn to_json(value: &dyn Val) -> Result<Json, String> {
    if let Some(map) = value.downcast_ref::<JsonMap>()
        && let Some(entries) = map.0.unconverted()
    {
        return Ok(Json::Object(entries));
    }
    if let Some(list) = value.downcast_ref::<JsonList>()
        && let Some(items) = list.0.unconverted()
    {
        return Ok(Json::Array(items));
    }
    let json = match value.get_type().kind() {
        Kind::NullType => Some(Json::Null),
        Kind::Boolean => value
            .downcast_ref::<CelBool>()
            .map(|b| Json::Bool(*b.inner())),
        Kind::Int => value
            .downcast_ref::<CelInt>()
            .map(|i| Json::from(*i.inner())),
        Kind::UInt => value
            .downcast_ref::<CelUInt>()
            .map(|u| Json::from(*u.inner())),
        // NaN and the infinities become null, as in `cel::Value::json`.
        Kind::Double => value
            .downcast_ref::<CelDouble>()
            .map(|d| Json::from(*d.inner())),
        Kind::String => value
            .downcast_ref::<CelString>()
            .map(|s| Json::String(s.inner().to_owned())),
        Kind::List => value.as_iterable().map(list_json).transpose()?,
        Kind::Map => match (value.as_iterable(), value.as_indexer()) {
            (Some(keys), Some(map)) => Some(map_json(keys, map)?),
            _ => None,
        },
        _ => None,
    };
    match json {
        Some(json) => Ok(json),
        None => cel::Value::try_from(value)
            .map_err(|e| e.to_string())?
            .json()
            .map_err(|e| e.to_string()),
    }
}

/// `value` as JSON, taken out of it where it is `owned` (nothing else can reach it): an
/// object or array nothing has converted is moved out of its wrapper, not copied (the
/// wrapper is left empty), and what expressions converted is turned back into JSON, its
/// maps' keys sorted. What is shared, another holder may still read: it is copied, as
/// [`to_json`] copies it.
pub(crate) fn take_json(value: &dyn Val, owned: bool) -> Result<Json, String> {
    if let Some(map) = value.downcast_ref::<JsonMap>() {
        if !(owned && Arc::strong_count(&map.0) == 1) {
            return to_json(value);
        }
        if let Some(entries) = map.0.json().take() {
            return Ok(Json::Object(entries));
        }
        let map = map.map();
        let mut out = Map::new();
        for (text, key) in sorted_keys(map) {
            let entry = map.get(key).map_err(|e| e.to_string())?;
            out.insert(text, take_json(entry.as_ref(), true)?);
        }
        return Ok(Json::Object(out));
    }
    if let Some(list) = value.downcast_ref::<JsonList>() {
        if !(owned && Arc::strong_count(&list.0) == 1) {
            return to_json(value);
        }
        if let Some(items) = list.0.json().take() {
            return Ok(Json::Array(items));
        }
        let items = list.list().inner().iter();
        return items
            .map(|item| take_json(item.as_ref(), true))
            .collect::<Result<_, _>>()
            .map(Json::Array);
    }
    to_json(value)
}

fn list_json(list: &dyn Iterable) -> Result<Json, String> {
    let mut items = list.iter();
    let mut out = Vec::new();
    while let Some(item) = items.next() {
        out.push(to_json(item)?);
    }
    Ok(Json::Array(out))
}

fn map_json(keys: &dyn Iterable, map: &dyn Indexer) -> Result<Json, String> {
    let mut keys = keys.iter();
    let mut out = Map::new();
    while let Some(key) = keys.next() {
        let value = map.get(key).map_err(|e| e.to_string())?;
        out.insert(key_text(key), to_json(value.as_ref())?);
    }
    Ok(Json::Object(out))
}

/// A map key as a JSON object key: strings as they are, numbers and booleans written out.
fn key_text(key: &dyn Val) -> String {
    if let Some(s) = key.downcast_ref::<CelString>() {
        s.inner().to_owned()
    } else if let Some(i) = key.downcast_ref::<CelInt>() {
        i.inner().to_string()
    } else if let Some(u) = key.downcast_ref::<CelUInt>() {
        u.inner().to_string()
    } else if let Some(b) = key.downcast_ref::<CelBool>() {
        b.inner().to_string()
    } else {
        String::new()
    }
}

/// A CEL value written as JSON by serde, from the value itself: an object or array nothing has
/// converted is written from its JSON as it is (keys in their order, nothing copied), a list or
/// map converted for CEL entry by entry (a map's keys sorted: a hash map's order is no order),
/// a string in place, any other value as [`to_json`] converts it.
pub(crate) struct AsJson<'a>(pub(crate) &'a dyn Val);

impl Serialize for AsJson<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let value = self.0;
        if let Some(map) = value.downcast_ref::<JsonMap>() {
            if let Some(entries) = map.0.json().as_ref() {
                return entries.serialize(s);
            }
            return AsJson(map.map()).serialize(s);
        }
        if let Some(list) = value.downcast_ref::<JsonList>() {
            if let Some(items) = list.0.json().as_ref() {
                return items.serialize(s);
            }
            return AsJson(list.list()).serialize(s);
        }
        // A scalar other than a string is small: `to_json` below converts it.
        match value.get_type().kind() {
            Kind::String => {
                if let Some(text) = value.downcast_ref::<CelString>() {
                    return s.serialize_str(text.inner());
                }
            }
            Kind::List => {
                if let Some(items) = value.as_iterable() {
                    let mut seq = s.serialize_seq(None)?;
                    let mut items = items.iter();
                    while let Some(item) = items.next() {
                        seq.serialize_element(&AsJson(item))?;
                    }
                    return seq.end();
                }
            }
            Kind::Map => {
                if let (Some(keys), Some(map)) = (value.as_iterable(), value.as_indexer()) {
                    return sorted_map(keys, map, s);
                }
            }
            _ => {}
        }
        to_json(value).map_err(S::Error::custom)?.serialize(s)
    }
}

/// A CEL map's entries, written with their keys sorted.
fn sorted_map<S: Serializer>(
    keys: &dyn Iterable,
    map: &dyn Indexer,
    s: S,
) -> Result<S::Ok, S::Error> {
    let sorted = sorted_keys(keys);
    let mut out = s.serialize_map(Some(sorted.len()))?;
    for (text, key) in sorted {
        let entry = map.get(key).map_err(|e| S::Error::custom(e.to_string()))?;
        out.serialize_entry(&text, &AsJson(entry.as_ref()))?;
    }
    out.end()
}

/// A CEL map's keys with their JSON texts, in the texts' order: a hash map's order is no order.
fn sorted_keys(keys: &dyn Iterable) -> Vec<(String, &dyn Val)> {
    let mut sorted = Vec::new();
    let mut keys = keys.iter();
    while let Some(key) = keys.next() {
        sorted.push((key_text(key), key));
    }
    sorted.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    sorted
}

/// How a value is named in messages ("expected a boolean, got a map").
pub(crate) fn kind_of(value: &dyn Val) -> String {
    match value.get_type().kind() {
        Kind::NullType => "null".into(),
        Kind::Boolean => "a boolean".into(),
        Kind::Int | Kind::UInt | Kind::Double => "a number".into(),
        Kind::String => "a string".into(),
        Kind::List => "a list".into(),
        Kind::Map => "a map".into(),
        _ => format!("a value of type {}", value.get_type().name()),
    }
}

/// JSON `J` until its first use, then the CEL value `C` built from it.
#[derive(Debug)]
struct Deferred<J, C> {
    /// The JSON, until `converted` takes it.
    json: Mutex<Option<J>>,
    converted: OnceLock<C>,
}

impl<J: Clone + Default, C> Deferred<J, C> {
    fn new(json: J) -> Self {
        Deferred {
            json: Mutex::new(Some(json)),
            converted: OnceLock::new(),
        }
    }

    /// The converted value, converting the JSON with `convert` on the first call.
    fn get(&self, convert: impl FnOnce(J) -> C) -> &C {
        self.converted.get_or_init(|| {
            // The JSON is only taken here, and this runs once (a conversion does not panic),
            // so it is there.
            let json = self
                .json
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take();
            convert(json.unwrap_or_default())
        })
    }

    /// The JSON, while it is not converted (`None` once it is, or while it is being
    /// converted: [`Deferred::get`] then waits for the conversion).
    fn json(&self) -> std::sync::MutexGuard<'_, Option<J>> {
        self.json.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A copy of the JSON, if it is not converted yet.
    fn unconverted(&self) -> Option<J> {
        self.json
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// A JSON object as a CEL map (string keys), converted on first use.
#[derive(Debug, Clone)]
pub(crate) struct JsonMap(Arc<Deferred<Map<String, Json>, CelMap<'static>>>);

impl JsonMap {
    fn new(entries: Map<String, Json>) -> Self {
        JsonMap(Arc::new(Deferred::new(entries)))
    }

    fn map(&self) -> &CelMap<'static> {
        self.0.get(|entries| {
            let entries: HashMap<CelMapKey, Box<dyn Val>> = entries
                .into_iter()
                .map(|(k, v)| (CelMapKey::String(CelString::from(k)), to_val(v)))
                .collect();
            CelMap::from(entries)
        })
    }
}

/// The `Val`, `StaticVal` and `Indexer` impls of a deferred container: everything delegates to
/// the converted CEL value (`$inner`), which is what the interpreter's downcasts must see.
macro_rules! deferred_container {
    ($ty:ident, $inner:ident, $type:ident, $builtin:ident $(, $extra:item)*) => {
        impl Val for $ty {
            fn get_type(&self) -> &Type {
                &$type
            }

            fn cel_type() -> &'static Type {
                &$type
            }

            $($extra)*

            fn as_container(&self) -> Option<&dyn Container> {
                Some(self.$inner())
            }

            fn as_indexer<'b, 'w>(&'b self) -> Option<&'b (dyn Indexer + 'w)>
            where
                Self: 'w,
            {
                Some(self.$inner())
            }

            fn into_indexer<'w>(self: Box<Self>) -> Option<Box<dyn Indexer + 'w>>
            where
                Self: 'w,
            {
                Some(self)
            }

            fn as_iterable<'b, 'w>(&'b self) -> Option<&'b (dyn Iterable + 'w)>
            where
                Self: 'w,
            {
                Some(self.$inner())
            }

            fn as_sizer(&self) -> Option<&dyn Sizer> {
                Some(self.$inner())
            }

            fn as_zeroer(&self) -> Option<&dyn Zeroer> {
                Some(self.$inner())
            }

            fn equals(&self, other: &dyn Val) -> bool {
                self.$inner().equals(other)
            }

            fn clone_as_boxed<'w>(&self) -> Box<dyn Val + 'w>
            where
                Self: 'w,
            {
                Box::new(self.clone())
            }

            fn as_any(&self) -> Option<&dyn Any> {
                Some(self)
            }

            fn as_builtin<'b, 'w>(&'b self) -> BuiltinRef<'b, 'w>
            where
                Self: 'w,
            {
                BuiltinRef::$builtin(self.$inner())
            }

            fn into_builtin<'w>(self: Box<Self>) -> Option<Builtin<'w>>
            where
                Self: 'w,
            {
                Some(Builtin::$builtin(self.$inner().clone()))
            }
        }

        impl StaticVal for $ty {}

        /// Indexing a wrapper the interpreter owns (`[x][0].k`) copies out the entry, not the
        /// whole container.
        impl Indexer for $ty {
            fn get<'b, 'w>(&'b self, index: &dyn Val) -> Result<CowVal<'b, 'w>, ExecutionError>
            where
                Self: 'w,
            {
                self.$inner().get(index)
            }

            fn steal<'w>(
                self: Box<Self>,
                index: &dyn Val,
            ) -> Result<Box<dyn Val + 'w>, ExecutionError>
            where
                Self: 'w,
            {
                self.$inner().get(index).map(CowVal::into_owned)
            }
        }
    };
}

deferred_container!(JsonMap, map, MAP_TYPE, Map);

/// A JSON array as a CEL list, converted on first use.
#[derive(Debug, Clone)]
pub(crate) struct JsonList(Arc<Deferred<Vec<Json>, CelList<'static>>>);

impl JsonList {
    fn new(items: Vec<Json>) -> Self {
        JsonList(Arc::new(Deferred::new(items)))
    }

    fn list(&self) -> &CelList<'static> {
        self.0.get(|items| {
            // Into a `Vec` of its own size: collected, the boxes would reuse the JSON's
            // buffer in place, holding the array's 72-byte slots for its 16-byte boxes.
            let mut values = Vec::with_capacity(items.len());
            values.extend(items.into_iter().map(to_val));
            CelList::from(values)
        })
    }
}

deferred_container!(
    JsonList,
    list,
    LIST_TYPE,
    List,
    fn as_adder<'b, 'w>(&'b self) -> Option<&'b (dyn Adder + 'w)>
    where
        Self: 'w,
    {
        Some(self.list())
    }
);

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::{Activation, Bound, Expression};
    use serde_json::json;

    fn input() -> Activation {
        let mut act = Activation::new();
        act.set(
            "input",
            json!({
                "user": {"login": "alice", "teams": ["core", "infra"], "id": 7},
                "labels": [{"name": "bug"}, {"name": "p1"}],
                "count": 3, "delta": -2, "ratio": 0.5, "max": u64::MAX,
                "empty": {}, "none": null,
            }),
        );
        act
    }

    fn eval(src: &str, act: &Activation) -> Result<Json, String> {
        Expression::compile(src)
            .unwrap()
            .evaluate(act)
            .map_err(|e| e.message)
    }

    fn holds(src: &str, act: &Activation) -> bool {
        Expression::compile(src)
            .unwrap()
            .evaluate_bool(act)
            .unwrap()
    }

    /// Whether the object at `path` under a bound value is still unconverted JSON.
    fn unconverted(bound: &Bound, path: &[&str]) -> bool {
        let mut map = bound.value().downcast_ref::<JsonMap>().unwrap().clone();
        for key in path {
            let entry = map.map().get(&CelString::from(*key)).unwrap();
            map = entry.downcast_ref::<JsonMap>().unwrap().clone();
        }
        map.0.unconverted().is_some()
    }

    #[test]
    fn nested_maps_and_lists_are_read_in_place() {
        let act = input();
        assert_eq!(eval("input.user.login", &act).unwrap(), json!("alice"));
        assert_eq!(eval("input.user.teams[1]", &act).unwrap(), json!("infra"));
        assert_eq!(eval("input.labels[0].name", &act).unwrap(), json!("bug"));
        assert_eq!(eval("input['user']['id']", &act).unwrap(), json!(7));
        assert_eq!(eval("input.labels[1u].name", &act).unwrap(), json!("p1"));
        // Wrappers the interpreter owns (copied into a list literal) index the same way.
        assert_eq!(eval("[input.user][0].login", &act).unwrap(), json!("alice"));
        assert_eq!(
            eval("[input.labels][0][1].name", &act).unwrap(),
            json!("p1")
        );
        assert!(eval("[input.user][0].email", &act).is_err());
    }

    #[test]
    fn only_what_an_expression_reads_is_converted() {
        let bound = Bound::new(json!({"user": {"id": "u1"}, "input": {"message": "hi"}}));
        let mut act = Activation::new();
        act.set_bound("context", "c", &bound);
        assert!(unconverted(&bound, &[]));
        assert!(holds("c.user.id == 'u1'", &act));
        assert!(!unconverted(&bound, &["user"]));
        assert!(unconverted(&bound, &["input"]));
        // A second activation sharing the binding finds `user` converted and still reads it.
        let mut other = Activation::new();
        other.set_bound("context", "c", &bound);
        assert!(holds("context.user.id == 'u1'", &other));
    }

    #[test]
    fn has_event_does_not_convert_the_event() {
        let bound = Bound::new(json!({"payload": {"big": [1, 2, 3]}}));
        let mut act = Activation::new();
        act.set_bound("event", "e", &bound);
        assert!(holds("has(event)", &act));
        assert!(unconverted(&bound, &["payload"]));
    }

    #[test]
    fn missing_keys_and_indexes_are_errors() {
        let act = input();
        assert!(
            eval("input.user.email", &act)
                .unwrap_err()
                .contains("email")
        );
        assert!(eval("input.nothing.at.all == 1", &act).is_err());
        assert!(eval("input.labels[2]", &act).is_err());
        assert!(eval("input.labels[-1]", &act).is_err());
        assert!(eval("input.user[1]", &act).is_err());
        assert!(eval("input.labels['name']", &act).is_err());
        assert!(eval("input.none.field", &act).is_err());
    }

    #[test]
    fn has_tests_presence_on_json_maps() {
        let act = input();
        assert!(holds("has(input.user)", &act));
        assert!(holds("has(input.user.login)", &act));
        assert!(!holds("has(input.user.email)", &act));
        assert!(
            holds("has(input.none)", &act),
            "a key bound to null is present"
        );
        assert!(eval("has(input.missing.x)", &act).is_err());
        assert_eq!(
            eval("input.?user.?email.orValue('none')", &act).unwrap(),
            json!("none")
        );
    }

    #[test]
    fn size_and_in_work_on_json_containers() {
        let act = input();
        assert_eq!(eval("size(input.labels)", &act).unwrap(), json!(2));
        assert_eq!(eval("input.user.size()", &act).unwrap(), json!(3));
        assert_eq!(eval("size(input.empty)", &act).unwrap(), json!(0));
        assert_eq!(eval("size(input.user.login)", &act).unwrap(), json!(5));
        assert!(holds("'infra' in input.user.teams", &act));
        assert!(!holds("'ops' in input.user.teams", &act));
        assert!(holds("'login' in input.user", &act));
        assert!(!holds("'email' in input.user", &act));
        assert!(!holds("1 in input.user", &act));
        assert!(holds("{'name': 'p1'} in input.labels", &act));
    }

    #[test]
    fn json_values_compare_with_literals_either_way() {
        let act = input();
        for src in [
            "input.count == 3",
            "3 == input.count",
            "input.count == 3.0",
            "input.count < 4 && input.count > 2u",
            "input.delta == -2",
            "input.ratio == 0.5",
            "input.user.login == 'alice'",
            "'alice' == input.user.login",
            "input.user.teams == ['core', 'infra']",
            "['core', 'infra'] == input.user.teams",
            "input.labels[0] == {'name': 'bug'}",
            "{'name': 'bug'} == input.labels[0]",
            "input.labels == [{'name': 'bug'}, {'name': 'p1'}]",
            "[{'name': 'bug'}, {'name': 'p1'}] == input.labels",
            "input.user == input.user",
            "input.labels != input.user.teams",
            "input.none == null",
            "input.empty == {}",
        ] {
            assert!(holds(src, &act), "{src}");
        }
        assert!(!holds("input.user.teams == ['core']", &act));
        assert!(!holds("['infra', 'core'] == input.user.teams", &act));
    }

    #[test]
    fn json_integers_are_ints_unless_too_big() {
        let act = input();
        assert_eq!(eval("type(input.count)", &act).unwrap(), json!("int"));
        assert_eq!(eval("type(input.delta)", &act).unwrap(), json!("int"));
        assert_eq!(eval("type(input.ratio)", &act).unwrap(), json!("double"));
        assert_eq!(eval("type(input.max)", &act).unwrap(), json!("uint"));
        // Arithmetic with literals needs no conversion.
        assert_eq!(eval("input.count + 1", &act).unwrap(), json!(4));
        assert_eq!(eval("input.count + input.count", &act).unwrap(), json!(6));
        assert_eq!(eval("input.delta + 1", &act).unwrap(), json!(-1));
        assert_eq!(eval("input.user.id * 2", &act).unwrap(), json!(14));
        assert_eq!(eval("input.max", &act).unwrap(), json!(u64::MAX));
        assert!(eval("input.max + 1", &act).is_err(), "uint + int");
    }

    #[test]
    fn comprehensions_iterate_json_containers() {
        let act = input();
        assert_eq!(
            eval("input.labels.map(l, l.name)", &act).unwrap(),
            json!(["bug", "p1"])
        );
        assert_eq!(
            eval("input.user.teams.filter(t, t.startsWith('i'))", &act).unwrap(),
            json!(["infra"])
        );
        assert!(holds("input.labels.exists(l, l.name == 'p1')", &act));
        assert!(holds("input.user.all(k, k.size() > 1)", &act));
        assert_eq!(
            eval("input.user.teams.join('+')", &act).unwrap(),
            json!("core+infra")
        );
    }

    #[test]
    fn json_lists_concatenate_either_way() {
        let act = input();
        assert_eq!(
            eval("input.user.teams + ['ops']", &act).unwrap(),
            json!(["core", "infra", "ops"])
        );
        assert_eq!(
            eval("['ops'] + input.user.teams", &act).unwrap(),
            json!(["ops", "core", "infra"])
        );
    }

    #[test]
    fn json_sub_trees_come_back_as_json() {
        let act = input();
        // Unconverted: copied as it is, key order kept.
        assert_eq!(
            serde_json::to_string(&eval("input.labels[0]", &act).unwrap()).unwrap(),
            r#"{"name":"bug"}"#
        );
        let user = json!({"login": "alice", "teams": ["core", "infra"], "id": 7});
        assert_eq!(eval("input.user", &act).unwrap(), user);
        // Converted by an earlier read of the same binding: the same value.
        let bound = Bound::new(json!({"user": user}));
        let mut act = Activation::new();
        act.set_bound("input", "i", &bound);
        assert!(holds("i.user.login == 'alice'", &act));
        assert_eq!(eval("input.user", &act).unwrap(), user);
        assert_eq!(eval("[input.user, 1]", &act).unwrap(), json!([user, 1]));
        assert_eq!(
            eval("{'u': input.user}.u.teams", &act).unwrap(),
            json!(["core", "infra"])
        );
    }

    #[test]
    fn put_on_a_json_map_leaves_it_unchanged() {
        let act = input();
        assert_eq!(
            eval("[input.user.put('id', 8).id, input.user.id]", &act).unwrap(),
            json!([8, 7])
        );
        assert_eq!(
            eval("input.empty.put('k', input.labels[1])", &act).unwrap(),
            json!({"k": {"name": "p1"}})
        );
    }

    #[test]
    fn evaluations_on_one_activation_may_run_in_parallel() {
        let act = input();
        let expr =
            Expression::compile("input.labels[1].name == 'p1' && input.user.id == 7u").unwrap();
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..100 {
                        assert!(expr.evaluate_bool(&act).unwrap());
                    }
                });
            }
        });
    }

    fn payload() -> Json {
        json!({
            "zeta": {"list": [1, -2, 0.5, u64::MAX, "é\"", null, true], "b": {}, "a": []},
            "alpha": [{"y": 1, "x": 2}],
        })
    }

    #[test]
    fn a_bound_value_is_written_as_its_json_in_its_order_until_it_is_read() {
        let bound = Bound::new(payload());
        assert_eq!(
            bound.to_json_string(),
            serde_json::to_string(&payload()).unwrap()
        );
    }

    #[test]
    fn a_bound_value_read_by_an_expression_is_written_with_its_read_maps_sorted() {
        let bound = Bound::new(payload());
        let mut act = Activation::new();
        act.bind("v", bound.clone());
        assert!(holds("size(v.zeta.list) == 7 && v.alpha[0].y == 1", &act));
        assert!(!unconverted(&bound, &[]));
        assert!(!unconverted(&bound, &["zeta"]));
        assert!(unconverted(&bound, &["zeta", "b"]));
        let text = bound.to_json_string();
        // The same JSON, the maps that were read in key order.
        assert_eq!(serde_json::from_str::<Json>(&text).unwrap(), payload());
        assert!(
            text.starts_with(r#"{"alpha":[{"x":2,"y":1}],"zeta":{"a":[],"b":{},"list":"#),
            "{text}"
        );
        assert!(
            text.contains(r#"[1,-2,0.5,18446744073709551615,"é\"",null,true]"#),
            "{text}"
        );
    }

    #[test]
    fn an_object_of_bound_values_shares_them() {
        let inner = Bound::new(json!({"n": {"deep": 1}, "m": 2}));
        let object = Bound::object([("name", Bound::new(json!("x"))), ("payload", inner.clone())]);
        let mut act = Activation::new();
        act.bind("event", object.clone());
        assert!(holds(
            "event.payload.n.deep == 1 && event.name == 'x'",
            &act
        ));
        // What the object's evaluation converted is converted in the value it shares.
        assert!(!unconverted(&inner, &[]));
        assert!(!unconverted(&inner, &["n"]));
        assert_eq!(
            object.to_json_string(),
            r#"{"name":"x","payload":{"m":2,"n":{"deep":1}}}"#
        );
    }

    #[test]
    fn a_bound_value_taken_back_moves_what_was_not_read() {
        let json = payload();
        let unread = json["zeta"]["list"].as_array().unwrap().as_ptr();
        let bound = Bound::new(json);
        let mut act = Activation::new();
        act.bind("v", bound.clone());
        assert!(holds("v.alpha[0].y == 1 && has(v.zeta.b)", &act));
        drop(act);
        let taken = bound.into_json().unwrap();
        assert_eq!(taken, payload());
        // The list no expression read is the one that was bound, not a copy of it.
        assert_eq!(taken["zeta"]["list"].as_array().unwrap().as_ptr(), unread);
        // The maps that were read come back with their keys sorted.
        let keys: Vec<&String> = taken["zeta"].as_object().unwrap().keys().collect();
        assert_eq!(keys, ["a", "b", "list"]);
    }

    #[test]
    fn a_bound_value_still_shared_is_copied_when_taken() {
        let bound = Bound::new(payload());
        let object = Bound::object([("payload", bound.clone())]);
        let mut act = Activation::new();
        act.bind("event", object.clone());
        assert!(holds("event.payload.alpha[0].x == 2", &act));
        assert_eq!(bound.into_json().unwrap(), payload());
        // What still shares the value reads all of it, read and unread parts alike.
        assert!(holds(
            "size(event.payload.zeta.list) == 7 && event.payload.alpha[0].y == 1",
            &act
        ));
        let text = object.to_json_string();
        assert_eq!(
            serde_json::from_str::<Json>(&text).unwrap(),
            json!({"payload": payload()})
        );
    }
}
