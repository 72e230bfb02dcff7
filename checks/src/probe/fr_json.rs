//! A JSON dump into the same plain values as a pickle ([`PVal`]), straight
//! from the bytes: strings borrowed from the input where they hold no
//! escape, and the values of the keys the caller leaves unread (a stack's
//! `frames`) checked as JSON by serde_json but never built
//! ([`PVal::Skipped`]). serde_json bounds the nesting to 128.

use std::borrow::Cow;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use crate::probe::fr_pickle::PVal;

/// One JSON document, leaving the values of the keys in `skip` unread.
pub fn decode<'a>(bytes: &'a [u8], skip: &[&str]) -> Result<PVal<'a>, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let v = Value { skip }.deserialize(&mut de)?;
    de.end()?;
    Ok(v)
}

/// A value, with the keys to leave unread.
#[derive(Clone, Copy)]
struct Value<'s> {
    skip: &'s [&'s str],
}

impl<'de> DeserializeSeed<'de> for Value<'_> {
    type Value = PVal<'de>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<PVal<'de>, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Value<'_> {
    type Value = PVal<'de>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, b: bool) -> Result<PVal<'de>, E> {
        Ok(PVal::Bool(b))
    }

    fn visit_i64<E>(self, n: i64) -> Result<PVal<'de>, E> {
        Ok(PVal::Int(n))
    }

    fn visit_u64<E>(self, n: u64) -> Result<PVal<'de>, E> {
        Ok(i64::try_from(n).map_or(PVal::Float(n as f64), PVal::Int))
    }

    fn visit_f64<E>(self, n: f64) -> Result<PVal<'de>, E> {
        Ok(PVal::Float(n))
    }

    fn visit_borrowed_str<E>(self, s: &'de str) -> Result<PVal<'de>, E> {
        Ok(PVal::Str(Cow::Borrowed(s)))
    }

    fn visit_str<E>(self, s: &str) -> Result<PVal<'de>, E> {
        Ok(PVal::Str(Cow::Owned(s.to_string())))
    }

    fn visit_unit<E>(self) -> Result<PVal<'de>, E> {
        Ok(PVal::None)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<PVal<'de>, A::Error> {
        let mut list = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
        while let Some(v) = seq.next_element_seed(self)? {
            list.push(v);
        }
        Ok(PVal::List(list))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<PVal<'de>, A::Error> {
        let mut pairs = Vec::new();
        while let Some(key) = map.next_key_seed(Key)? {
            let value = if self.skip.contains(&&*key) {
                map.next_value::<IgnoredAny>()?;
                PVal::Skipped
            } else {
                map.next_value_seed(self)?
            };
            pairs.push((key, value));
        }
        Ok(PVal::Dict(pairs))
    }
}

/// A dict key, borrowed where it holds no escape.
struct Key;

impl<'de> DeserializeSeed<'de> for Key {
    type Value = Cow<'de, str>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Cow<'de, str>, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Key {
    type Value = Cow<'de, str>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Cow<'de, str>, E> {
        Ok(Cow::Borrowed(s))
    }

    fn visit_str<E>(self, s: &str) -> Result<Cow<'de, str>, E> {
        Ok(Cow::Owned(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_as_serde_json_does_and_borrows_plain_strings() {
        let text = r#"{"a": [1, -2, 1.5, 18446744073709551615, null, true, "x\"y"],
                       "b": {"c": "plain"}}"#;
        let v = decode(text.as_bytes(), &[]).expect("decodes");
        let json: serde_json::Value = serde_json::from_str(text).expect("json");
        assert_eq!(v, PVal::from_json(json));
        let PVal::Dict(top) = &v else {
            panic!("a dict")
        };
        let PVal::Dict(b) = &top[1].1 else {
            panic!("a dict")
        };
        assert!(matches!(&b[0].1, PVal::Str(Cow::Borrowed("plain"))));
    }

    #[test]
    fn unread_keys_are_checked_but_not_built() {
        let text = br#"{"frames": [{"name": "f", "line": 3}], "k": 1}"#;
        let v = decode(text, &["frames"]).expect("decodes");
        let PVal::Dict(top) = v else { panic!("a dict") };
        assert_eq!(top[0].1, PVal::Skipped);
        assert_eq!(top[1].1, PVal::Int(1));
        assert!(decode(br#"{"frames": [{"name": ]}"#, &["frames"]).is_err());
    }

    #[test]
    fn nesting_and_trailing_bytes_are_refused() {
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        assert!(decode(deep.as_bytes(), &[]).is_err());
        // An unread value is walked without recursion: deep is no danger.
        let deep = format!(
            "{{\"frames\": {}{}}}",
            "[".repeat(100_000),
            "]".repeat(100_000)
        );
        let v = decode(deep.as_bytes(), &["frames"]).expect("walked");
        assert_eq!(v, PVal::Dict(vec![("frames".into(), PVal::Skipped)]));
        assert!(decode(b"{} {}", &[]).is_err());
    }
}
