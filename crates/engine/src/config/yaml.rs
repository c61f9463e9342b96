//! YAML text to a small tree that remembers the line of every key and value.
//!
//! serde-saphyr deserializes into any serde type; we deserialize into this tree (through
//! [`Spanned`]) rather than straight into the configuration structs, so that the schema walk
//! in `schema.rs` knows the full dotted path and the line of every key it rejects, which
//! `#[serde(deny_unknown_fields)]` alone cannot tell.

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_saphyr::Spanned;

use super::error::ConfigError;

/// One YAML node with its 1-based line.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Node {
    pub(crate) value: Value,
    pub(crate) line: usize,
}

/// A YAML value, as far as the configuration cares.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Value {
    /// Absent, `~` or `null`.
    Null,
    Bool(bool),
    /// Any integer YAML can write (`i128` covers both `i64` and `u64`).
    Int(i128),
    Float(f64),
    Str(String),
    /// A sequence (e.g. `redis.cluster`'s seed URLs), items in file order.
    Seq(Vec<Node>),
    /// Entries in file order, each key with its own line.
    Map(Vec<(Key, Node)>),
}

/// A mapping key with its 1-based line.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Key {
    pub(crate) name: String,
    pub(crate) line: usize,
}

impl Value {
    /// The value as it would be written, for error messages.
    pub(crate) fn describe(&self) -> String {
        match self {
            Value::Null => "null".to_owned(),
            Value::Bool(value) => value.to_string(),
            Value::Int(value) => value.to_string(),
            Value::Float(value) => value.to_string(),
            Value::Str(value) => value.clone(),
            Value::Seq(_) => "[...]".to_owned(),
            Value::Map(_) => "{...}".to_owned(),
        }
    }
}

/// Parses `text` into a tree; `source_name` names the text in errors.
pub(crate) fn parse(text: &str, source_name: &str) -> Result<Node, ConfigError> {
    let root: Spanned<SpannedValue> =
        serde_saphyr::from_str(text).map_err(|error| parse_error(&error, source_name))?;
    Ok(into_node(root))
}

fn parse_error(error: &serde_saphyr::Error, source_name: &str) -> ConfigError {
    let error = error.without_snippet();
    let (line, column) = error
        .location()
        .map_or((0, 0), |at| (to_usize(at.line()), to_usize(at.column())));
    // The library's own wording of these two suggests options of its API; ours names the fix.
    let message = match error {
        serde_saphyr::Error::DuplicateMappingKey { key: Some(key), .. } => {
            format!("duplicate key `{key}`: each key may appear once in a mapping")
        }
        serde_saphyr::Error::MultipleDocuments { .. } => {
            "more than one YAML document (`---`): the configuration is a single document".to_owned()
        }
        _ => {
            // The plain rendering ends with the position, which our message puts up front.
            let message = error.to_string();
            let suffix = format!(" at line {line}, column {column}");
            message
                .strip_suffix(&suffix)
                .map_or(message.clone(), str::to_owned)
        }
    };
    ConfigError::Parse {
        source_name: source_name.to_owned(),
        line,
        column,
        message,
    }
}

fn to_usize(value: u64) -> usize {
    usize::try_from(value).unwrap_or(usize::MAX)
}

fn into_node(spanned: Spanned<SpannedValue>) -> Node {
    Node {
        value: spanned.value.0,
        line: to_usize(spanned.referenced.line()),
    }
}

/// The serde side of [`Value`]: maps keep their keys' and values' spans.
struct SpannedValue(Value);

impl<'de> Deserialize<'de> for SpannedValue {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ValueVisitor).map(SpannedValue)
    }
}

struct ValueVisitor;

impl<'de> Visitor<'de> for ValueVisitor {
    type Value = Value;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("any YAML value")
    }

    fn visit_bool<E: de::Error>(self, value: bool) -> Result<Value, E> {
        Ok(Value::Bool(value))
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<Value, E> {
        Ok(Value::Int(value.into()))
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<Value, E> {
        Ok(Value::Int(value.into()))
    }

    fn visit_i128<E: de::Error>(self, value: i128) -> Result<Value, E> {
        Ok(Value::Int(value))
    }

    fn visit_u128<E: de::Error>(self, value: u128) -> Result<Value, E> {
        Ok(i128::try_from(value).map_or(Value::Float(value as f64), Value::Int))
    }

    fn visit_f64<E: de::Error>(self, value: f64) -> Result<Value, E> {
        Ok(Value::Float(value))
    }

    fn visit_str<E: de::Error>(self, value: &str) -> Result<Value, E> {
        Ok(Value::Str(value.to_owned()))
    }

    fn visit_string<E: de::Error>(self, value: String) -> Result<Value, E> {
        Ok(Value::Str(value))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<Spanned<SpannedValue>>()? {
            items.push(into_node(item));
        }
        Ok(Value::Seq(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut entries = Vec::new();
        while let Some(key) = map.next_key::<Spanned<String>>()? {
            let value = map.next_value::<Spanned<SpannedValue>>()?;
            let key = Key {
                name: key.value,
                line: to_usize(key.referenced.line()),
            };
            entries.push((key, into_node(value)));
        }
        Ok(Value::Map(entries))
    }
}
