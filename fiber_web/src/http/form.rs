//! A query string (or any `application/x-www-form-urlencoded` text) into a typed
//! struct through serde: `Request::query::<T>()`.
//!
//! The text is a flat map of names to text values; each field's value is parsed as
//! the field's type asks (`u64`, `f64`, `bool`, `String`, an `Option`, a unit enum),
//! and an error names the field and the value sent, so the 400 a client gets says
//! what to change (`query parameter 'limit': 'ten' is not a u32`). A name given twice
//! keeps its first value, as [`query_param`](crate::http::query::query_param) does.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, DeserializeOwned, IntoDeserializer, MapAccess, Visitor};

use crate::http::problem::echo;

/// Why a form did not fit the type asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FormError {
    message: String,
    /// The parameter it is about, when one is known.
    field: Option<String>,
}

impl FormError {
    fn new(message: String) -> FormError {
        FormError {
            message,
            field: None,
        }
    }

    /// About parameter `name`: the message names it, and so does the field.
    fn about(name: &str, message: impl fmt::Display) -> FormError {
        FormError {
            message: format!("query parameter '{}': {message}", echo(name)),
            field: Some(name.to_string()),
        }
    }

    /// The parameter the error is about.
    pub(crate) fn field(&self) -> Option<&str> {
        self.field.as_deref()
    }
}

impl fmt::Display for FormError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for FormError {}

impl de::Error for FormError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        FormError::new(msg.to_string())
    }

    fn missing_field(field: &'static str) -> Self {
        FormError::about(field, "missing: send it")
    }
}

/// `text` (the part after `?`) as a `T`.
pub(crate) fn from_query<T: DeserializeOwned>(text: &str) -> Result<T, FormError> {
    let mut pairs: Vec<(Cow<'_, str>, Cow<'_, str>)> = Vec::new();
    for (k, v) in form_urlencoded::parse(text.as_bytes()) {
        if !pairs.iter().any(|(seen, _)| *seen == k) {
            pairs.push((k, v));
        }
    }
    T::deserialize(Pairs {
        pairs: pairs.into_iter(),
        value: None,
    })
}

/// The whole form, as a map.
struct Pairs<'a, I: Iterator<Item = (Cow<'a, str>, Cow<'a, str>)>> {
    pairs: I,
    /// The value of the key just given to the visitor, with its key.
    value: Option<(Cow<'a, str>, Cow<'a, str>)>,
}

impl<'de, 'a, I> de::Deserializer<'de> for Pairs<'a, I>
where
    I: Iterator<Item = (Cow<'a, str>, Cow<'a, str>)>,
{
    type Error = FormError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, FormError> {
        visitor.visit_map(self)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map struct enum identifier ignored_any
    }
}

impl<'de, 'a, I> MapAccess<'de> for Pairs<'a, I>
where
    I: Iterator<Item = (Cow<'a, str>, Cow<'a, str>)>,
{
    type Error = FormError;

    fn next_key_seed<K: de::DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, FormError> {
        let Some((k, v)) = self.pairs.next() else {
            return Ok(None);
        };
        let key = seed.deserialize(k.as_ref().into_deserializer())?;
        self.value = Some((k, v));
        Ok(Some(key))
    }

    fn next_value_seed<V: de::DeserializeSeed<'de>>(
        &mut self,
        seed: V,
    ) -> Result<V::Value, FormError> {
        let (name, value) = self
            .value
            .take()
            .ok_or_else(|| FormError::new("a value without its name".into()))?;
        seed.deserialize(Text {
            name: &name,
            value: &value,
        })
    }
}

/// One value, parsed as the field's type asks.
struct Text<'t> {
    name: &'t str,
    value: &'t str,
}

impl Text<'_> {
    fn parse<T: std::str::FromStr>(&self, what: &str) -> Result<T, FormError> {
        self.value.parse().map_err(|_| {
            FormError::about(self.name, format!("'{}' is not {what}", echo(self.value)))
        })
    }
}

macro_rules! parsed {
    ($($method:ident => $visit:ident $ty:ty, $what:literal;)*) => {
        $(fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, FormError> {
            visitor.$visit(self.parse::<$ty>($what)?)
        })*
    };
}

impl<'de> de::Deserializer<'de> for Text<'_> {
    type Error = FormError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, FormError> {
        visitor.visit_string(self.value.to_string())
    }

    parsed! {
        deserialize_u8 => visit_u8 u8, "a u8 (a whole number from 0 to 255)";
        deserialize_u16 => visit_u16 u16, "a u16 (a whole number from 0 to 65535)";
        deserialize_u32 => visit_u32 u32, "a u32 (a whole number from 0 to 4294967295)";
        deserialize_u64 => visit_u64 u64, "a u64 (a whole number, 0 or more)";
        deserialize_i8 => visit_i8 i8, "an i8 (a whole number from -128 to 127)";
        deserialize_i16 => visit_i16 i16, "an i16 (a whole number)";
        deserialize_i32 => visit_i32 i32, "an i32 (a whole number)";
        deserialize_i64 => visit_i64 i64, "an i64 (a whole number)";
        deserialize_f32 => visit_f32 f32, "a number";
        deserialize_f64 => visit_f64 f64, "a number";
        deserialize_char => visit_char char, "one character";
    }

    fn deserialize_bool<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, FormError> {
        match self.value {
            "true" | "1" | "on" | "yes" => visitor.visit_bool(true),
            "false" | "0" | "off" | "no" => visitor.visit_bool(false),
            other => Err(FormError::about(
                self.name,
                format!("'{}' is not true or false", echo(other)),
            )),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, FormError> {
        visitor.visit_some(self)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, FormError> {
        let name = self.name;
        visitor
            .visit_enum(self.value.into_deserializer())
            .map_err(|e: FormError| FormError::about(name, e))
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, FormError> {
        visitor.visit_newtype_struct(self)
    }

    serde::forward_to_deserialize_any! {
        i128 u128 str string bytes byte_buf unit unit_struct seq tuple
        tuple_struct map struct identifier ignored_any
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize, Debug, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Page {
        q: String,
        limit: Option<u32>,
        #[serde(default)]
        desc: bool,
        order: Option<Order>,
    }

    #[derive(serde::Deserialize, Debug, PartialEq)]
    #[serde(rename_all = "lowercase")]
    enum Order {
        Title,
        Id,
    }

    #[test]
    fn fields_take_their_types_and_repeats_keep_the_first() {
        let p: Page = from_query("q=rails+3&limit=10&desc=true&order=title&q=again").unwrap();
        assert_eq!(
            p,
            Page {
                q: "rails 3".into(),
                limit: Some(10),
                desc: true,
                order: Some(Order::Title)
            }
        );
        let p: Page = from_query("q=%41").unwrap();
        assert_eq!(
            (p.q.as_str(), p.limit, p.desc, p.order),
            ("A", None, false, None)
        );
    }

    #[test]
    fn errors_name_the_field_and_the_value() {
        let e = |q| from_query::<Page>(q).unwrap_err().to_string();
        assert_eq!(
            e("q=x&limit=ten"),
            "query parameter 'limit': 'ten' is not a u32 (a whole number from 0 to 4294967295)"
        );
        assert_eq!(
            e("q=x&desc=maybe"),
            "query parameter 'desc': 'maybe' is not true or false"
        );
        assert_eq!(e("limit=1"), "query parameter 'q': missing: send it");
        let long = format!("q=x&limit={}", "9".repeat(10_000));
        assert!(e(&long).len() < 200, "the value sent is cut: {}", e(&long));
        assert!(
            e("q=x&order=size").contains("'order'"),
            "{}",
            e("q=x&order=size")
        );
        assert!(
            e("q=x&extra=1").contains("unknown field `extra`"),
            "{}",
            e("q=x&extra=1")
        );
    }
}
