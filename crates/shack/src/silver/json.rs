//! A JSON value that borrows its strings from the line it was parsed from.
//!
//! The boil reads every payments and orders line as a JSON object and looks up a handful of
//! fields. `serde_json::Value` copies every key and string into its own allocation and builds a
//! `BTreeMap` per object; this tree keeps each key and string as a slice of the line (an owned
//! copy only when it holds escapes) and each object as its entries in line order. The same
//! parser (`serde_json::from_str`) reads it, so what is JSON, the nesting limit and every error are
//! exactly serde_json's; lookups answer as `Value`'s do (a repeated key: the last one wins, as
//! `Value`'s map keeps it; an integer outside `i64` and any non-integer number are not `i64`).
//! The boil does not let that rule decide: a line that repeats a key in any object
//! ([`Json::repeated_key`]) is quarantined before anything is looked up in it.

use std::borrow::Cow;
use std::fmt;

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

/// One JSON value, borrowing from the text it was parsed from.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Json<'a> {
    Null,
    Bool(bool),
    /// An integer that fits in `i64`.
    Int(i64),
    /// Any other number: one with a fraction or an exponent, or an integer outside `i64`.
    OtherNumber,
    Str(Cow<'a, str>),
    Array(Vec<Json<'a>>),
    /// The object's entries in the order the text has them, repeated keys included.
    Object(Vec<(Cow<'a, str>, Json<'a>)>),
}

/// Parse one JSON text (trailing whitespace allowed, anything else after the value refused).
pub(crate) fn parse(raw: &str) -> Result<Json<'_>, serde_json::Error> {
    serde_json::from_str(raw)
}

impl<'a> Json<'a> {
    /// The value under `key` when this is an object that has it (the last, if repeated).
    pub(crate) fn get(&self, key: &str) -> Option<&Json<'a>> {
        match self {
            Json::Object(entries) => entries.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    pub(crate) fn as_str(&self) -> Option<&str> {
        match self {
            Json::Str(s) => Some(s),
            _ => None,
        }
    }

    pub(crate) fn as_i64(&self) -> Option<i64> {
        match self {
            Json::Int(i) => Some(*i),
            _ => None,
        }
    }

    /// A key that some object in this value holds more than once, at any depth (`None`: the
    /// keys of every object are distinct). Keys compare as decoded (`"a\u0062"` is `"ab"`).
    /// A small object is checked pair by pair, a large one sorted: a line of many keys costs
    /// `n log n`, not `n²`.
    pub(crate) fn repeated_key(&self) -> Option<&str> {
        match self {
            Json::Array(items) => items.iter().find_map(Json::repeated_key),
            Json::Object(entries) => {
                let repeated = if entries.len() <= 16 {
                    entries.iter().enumerate().find_map(|(i, (k, _))| {
                        entries[..i]
                            .iter()
                            .any(|(e, _)| e == k)
                            .then_some(k.as_ref())
                    })
                } else {
                    let mut keys: Vec<&str> = entries.iter().map(|(k, _)| k.as_ref()).collect();
                    keys.sort_unstable();
                    keys.windows(2).find(|w| w[0] == w[1]).map(|w| w[0])
                };
                repeated.or_else(|| entries.iter().find_map(|(_, v)| v.repeated_key()))
            }
            _ => None,
        }
    }

    pub(crate) fn is_null(&self) -> bool {
        matches!(self, Json::Null)
    }

    pub(crate) fn is_object(&self) -> bool {
        matches!(self, Json::Object(_))
    }
}

impl<'de> Deserialize<'de> for Json<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ValueVisitor)
    }
}

struct ValueVisitor;

impl<'de> Visitor<'de> for ValueVisitor {
    type Value = Json<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Json<'de>, E> {
        Ok(Json::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Json<'de>, E> {
        Ok(Json::Int(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Json<'de>, E> {
        Ok(i64::try_from(v).map_or(Json::OtherNumber, Json::Int))
    }

    fn visit_f64<E>(self, _: f64) -> Result<Json<'de>, E> {
        Ok(Json::OtherNumber)
    }

    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Json<'de>, E> {
        Ok(Json::Str(Cow::Borrowed(v)))
    }

    fn visit_str<E>(self, v: &str) -> Result<Json<'de>, E> {
        Ok(Json::Str(Cow::Owned(v.to_owned())))
    }

    fn visit_string<E>(self, v: String) -> Result<Json<'de>, E> {
        Ok(Json::Str(Cow::Owned(v)))
    }

    fn visit_unit<E>(self) -> Result<Json<'de>, E> {
        Ok(Json::Null)
    }

    fn visit_none<E>(self) -> Result<Json<'de>, E> {
        Ok(Json::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Json<'de>, D::Error> {
        Json::deserialize(d)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Json<'de>, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Json::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Json<'de>, A::Error> {
        let mut entries = Vec::new();
        while let Some((Key(k), v)) = map.next_entry::<Key<'de>, Json<'de>>()? {
            entries.push((k, v));
        }
        Ok(Json::Object(entries))
    }
}

/// An object key, borrowed from the text unless it holds escapes.
struct Key<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_str(KeyVisitor)
    }
}

struct KeyVisitor;

impl<'de> Visitor<'de> for KeyVisitor {
    type Value = Key<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object key")
    }

    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Key<'de>, E> {
        Ok(Key(Cow::Borrowed(v)))
    }

    fn visit_str<E>(self, v: &str) -> Result<Key<'de>, E> {
        Ok(Key(Cow::Owned(v.to_owned())))
    }

    fn visit_string<E>(self, v: String) -> Result<Key<'de>, E> {
        Ok(Key(Cow::Owned(v)))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::Value;

    /// Whether `j` answers every lookup as `v` does.
    pub(crate) fn same(j: &Json<'_>, v: &Value) -> bool {
        match (j, v) {
            (Json::Null, Value::Null) => true,
            (Json::Bool(a), Value::Bool(b)) => a == b,
            (Json::Int(i), Value::Number(n)) => n.as_i64() == Some(*i),
            (Json::OtherNumber, Value::Number(n)) => n.as_i64().is_none(),
            (Json::Str(a), Value::String(b)) => a == b,
            (Json::Array(a), Value::Array(b)) => {
                a.len() == b.len() && a.iter().zip(b).all(|(x, y)| same(x, y))
            }
            (Json::Object(entries), Value::Object(m)) => {
                let keys: std::collections::BTreeSet<&str> =
                    entries.iter().map(|(k, _)| k.as_ref()).collect();
                keys.len() == m.len()
                    && m.iter()
                        .all(|(k, val)| j.get(k).is_some_and(|jv| same(jv, val)))
            }
            _ => false,
        }
    }

    #[test]
    fn reads_what_serde_json_values_read() {
        for raw in [
            r#"{"a":1,"b":"x","c":null,"d":[1,2.5,"y",{"e":false}],"f":{"g":-3}}"#,
            r#"{"k":1,"k":2}"#,
            r#"{"esc\"aped":"line\nbreak \u00e9"}"#,
            r#"{"big":18446744073709551615,"max":9223372036854775807,"min":-9223372036854775808}"#,
            r#"{"f":1.0,"e":1e2,"neg0":-0,"huge":99999999999999999999}"#,
            "  [ ]  ",
            "\"a string\"",
            "true",
        ] {
            let j = parse(raw).unwrap();
            let v: Value = serde_json::from_str(raw).unwrap();
            assert!(same(&j, &v), "{raw}: {j:?} vs {v:?}");
        }
        let dup = parse(r#"{"k":1,"k":2}"#).unwrap();
        assert_eq!(dup.get("k").and_then(Json::as_i64), Some(2));
        assert_eq!(dup.repeated_key(), Some("k"));
        let nums = parse(r#"{"u":18446744073709551615,"f":2.0,"i":-7}"#).unwrap();
        assert_eq!(nums.get("u").and_then(Json::as_i64), None);
        assert_eq!(nums.get("f").and_then(Json::as_i64), None);
        assert_eq!(nums.get("i").and_then(Json::as_i64), Some(-7));
        let esc = parse(r#"{"a\u0062":"\"q\""}"#).unwrap();
        assert_eq!(esc.get("ab").and_then(Json::as_str), Some("\"q\""));
        for bad in [
            "",
            "{",
            r#"{"a":1,}"#,
            r#"{"a":1} x"#,
            r#"{"a":"\ud800"}"#,
            "1e400",
            &format!("{}{}", "[".repeat(200), "]".repeat(200)),
        ] {
            assert!(parse(bad).is_err(), "{bad}");
            assert!(serde_json::from_str::<Value>(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn finds_a_key_repeated_at_any_depth() {
        for (raw, repeated) in [
            (r#"{"a":1,"b":{"c":2,"d":[{"e":3},{"e":4}]}}"#, None),
            (r#"{"a":1,"b":2,"a":3}"#, Some("a")),
            (r#"{"a":{"x":1,"y":2,"x":3}}"#, Some("x")),
            (r#"[1,{"a":[{"q":1,"q":1}]}]"#, Some("q")),
            (r#"{"a\u0062":1,"ab":2}"#, Some("ab")),
            (r#"{"A":1,"a":2}"#, None),
            (r#"[{"a":1},{"a":2}]"#, None),
            ("\"s\"", None),
        ] {
            assert_eq!(parse(raw).unwrap().repeated_key(), repeated, "{raw}");
        }
        // Large objects are sorted, not compared pair by pair: 100,000 distinct keys, then the
        // same with the first key again at the end.
        let keys: Vec<String> = (0..100_000).map(|i| format!("\"k{i}\":{i}")).collect();
        let distinct = format!("{{{}}}", keys.join(","));
        assert_eq!(parse(&distinct).unwrap().repeated_key(), None);
        let again = format!("{{{},\"k0\":0}}", keys.join(","));
        assert_eq!(parse(&again).unwrap().repeated_key(), Some("k0"));
    }
}
