//! JSON records written straight to BSON bytes as the parser reads them, for `import`:
//! no `serde_json::Value`, no `Bson`, no `Document` in between.
//!
//! It takes the common subset of Extended JSON: objects, arrays, strings, numbers (an integer
//! that fits 32 bits as Int32, a larger one as Int64, others as Double, as relaxed Extended
//! JSON reads them), booleans, null, and `$date`, `$numberLong`, `$numberInt` and `$oid`
//! objects of one key. Anything else (another `$` key anywhere, a field name repeated or
//! holding a NUL, nesting deeper than a stored document may) gives `None`, and the record is
//! read by [`crate::json::parse_doc`] instead, which gives the same document or says what
//! is wrong with it.

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use std::fmt;
use tsbucket::bson::oid::ObjectId;
use tsbucket::bson::DateTime;
use tsbucket::depth::MAX_NESTING;

/// The BSON bytes of the JSON object `text` into `out` (cleared first); `None` when the
/// record is outside the subset this writer takes (see the module's comment).
pub fn transcode(text: &str, out: &mut Vec<u8>) -> Option<()> {
    out.clear();
    let mut de = serde_json::Deserializer::from_str(text);
    let doc = Doc { out, depth: 1 };
    de.deserialize_map(doc).ok()?;
    de.end().ok()
}

/// The reason this writer gives up on a record; the message is never shown.
#[derive(Debug)]
struct Other;

impl fmt::Display for Other {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("outside the subset")
    }
}

impl std::error::Error for Other {}

impl de::Error for Other {
    fn custom<T: fmt::Display>(_: T) -> Self {
        Other
    }
}

/// A document whose fields sit `depth` levels deep.
struct Doc<'a> {
    out: &'a mut Vec<u8>,
    depth: usize,
}

impl<'de> Visitor<'de> for Doc<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        entries(self.out, self.depth, None, &mut map)
    }
}

/// Writes a document: the length, the entries of `map` (after `first`, already read), the
/// end. Its fields sit `depth` levels deep.
fn entries<'de, A: MapAccess<'de>>(
    out: &mut Vec<u8>,
    depth: usize,
    first: Option<String>,
    map: &mut A,
) -> Result<(), A::Error> {
    if depth > MAX_NESTING {
        return Err(de::Error::custom(Other));
    }
    let start = out.len();
    out.extend_from_slice(&[0; 4]);
    // Where each key's bytes are, to find a repeated one.
    let mut keys: Vec<(usize, usize)> = Vec::new();
    let mut pending = first;
    loop {
        let key = match pending.take() {
            Some(k) => k,
            None => match map.next_key::<String>()? {
                Some(k) => k,
                None => break,
            },
        };
        if key.starts_with('$') || key.contains('\0') {
            return Err(de::Error::custom(Other));
        }
        let type_at = out.len();
        out.push(0);
        let key_at = out.len();
        out.extend_from_slice(key.as_bytes());
        let bytes = key.as_bytes();
        let repeated = keys
            .iter()
            .any(|&(at, len)| out.get(at..at + len) == Some(bytes));
        if repeated {
            return Err(de::Error::custom(Other));
        }
        keys.push((key_at, bytes.len()));
        out.push(0);
        map.next_value_seed(Value {
            out,
            type_at,
            depth,
        })?;
    }
    out.push(0);
    close(out, start).map_err(de::Error::custom)
}

/// Writes the length of the document or array that starts at `start` and ends at the end of
/// `out`.
fn close(out: &mut [u8], start: usize) -> Result<(), Other> {
    let len = i32::try_from(out.len() - start).map_err(|_| Other)?;
    out.get_mut(start..start + 4)
        .ok_or(Other)?
        .copy_from_slice(&len.to_le_bytes());
    Ok(())
}

/// A value whose type byte is at `type_at` (written when the value's type is known), in a
/// document whose fields sit `depth` levels deep.
struct Value<'a> {
    out: &'a mut Vec<u8>,
    type_at: usize,
    depth: usize,
}

impl Value<'_> {
    fn typed(&mut self, tag: u8) {
        if let Some(t) = self.out.get_mut(self.type_at) {
            *t = tag;
        }
    }

    fn int(mut self, i: i64) {
        match i32::try_from(i) {
            Ok(small) => {
                self.typed(0x10);
                self.out.extend_from_slice(&small.to_le_bytes());
            }
            Err(_) => {
                self.typed(0x12);
                self.out.extend_from_slice(&i.to_le_bytes());
            }
        }
    }
}

impl<'de> DeserializeSeed<'de> for Value<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Value<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E: de::Error>(mut self, v: bool) -> Result<(), E> {
        self.typed(0x08);
        self.out.push(u8::from(v));
        Ok(())
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<(), E> {
        self.int(v);
        Ok(())
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<(), E> {
        match i64::try_from(v) {
            Ok(i) => self.int(i),
            Err(_) => return self.visit_f64(v as f64),
        }
        Ok(())
    }

    fn visit_f64<E: de::Error>(mut self, v: f64) -> Result<(), E> {
        self.typed(0x01);
        self.out.extend_from_slice(&v.to_le_bytes());
        Ok(())
    }

    fn visit_str<E: de::Error>(mut self, v: &str) -> Result<(), E> {
        self.typed(0x02);
        let len = i32::try_from(v.len() + 1).map_err(|_| E::custom(Other))?;
        self.out.extend_from_slice(&len.to_le_bytes());
        self.out.extend_from_slice(v.as_bytes());
        self.out.push(0);
        Ok(())
    }

    fn visit_unit<E: de::Error>(mut self) -> Result<(), E> {
        self.typed(0x0A);
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<(), A::Error> {
        // An array is a document keyed "0", "1", ... one level deeper.
        if self.depth + 1 > MAX_NESTING {
            return Err(de::Error::custom(Other));
        }
        self.typed(0x04);
        let start = self.out.len();
        self.out.extend_from_slice(&[0; 4]);
        let mut i = 0usize;
        loop {
            let type_at = self.out.len();
            self.out.push(0);
            self.out.extend_from_slice(i.to_string().as_bytes());
            self.out.push(0);
            let v = Value {
                out: &mut *self.out,
                type_at,
                depth: self.depth + 1,
            };
            if seq.next_element_seed(v)?.is_none() {
                self.out.truncate(type_at);
                break;
            }
            i += 1;
        }
        self.out.push(0);
        close(self.out, start).map_err(de::Error::custom)
    }

    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<(), A::Error> {
        let first = map.next_key::<String>()?;
        // The value of a one-key wrapper, as a string parsed into `T`.
        fn parsed<'de, T: std::str::FromStr, A: MapAccess<'de>>(
            map: &mut A,
        ) -> Result<T, A::Error> {
            let s: String = map.next_value()?;
            s.parse().map_err(|_| de::Error::custom(Other))
        }
        // The value's type and bytes: at most 12, an ObjectId's.
        let mut bytes = [0u8; 12];
        let mut put = |b: &[u8]| {
            bytes.iter_mut().zip(b).for_each(|(d, s)| *d = *s);
            b.len()
        };
        let (tag, len) = match first.as_deref() {
            Some("$date") => {
                let ms = date(map.next_value::<serde_json::Value>()?)?;
                (0x09, put(&ms.to_le_bytes()))
            }
            Some("$numberLong") => (0x12, put(&parsed::<i64, A>(&mut map)?.to_le_bytes())),
            Some("$numberInt") => (0x10, put(&parsed::<i32, A>(&mut map)?.to_le_bytes())),
            Some("$oid") => (0x07, put(&parsed::<ObjectId, A>(&mut map)?.bytes())),
            _ => (0, 0),
        };
        if tag != 0 {
            self.typed(tag);
            self.out
                .extend_from_slice(bytes.get(..len).unwrap_or_default());
            // One key only: more would make another type, or an error, in Extended JSON.
            return match map.next_key::<de::IgnoredAny>()? {
                None => Ok(()),
                Some(_) => Err(de::Error::custom(Other)),
            };
        }
        self.typed(0x03);
        entries(self.out, self.depth + 1, first, &mut map)
    }
}

/// The milliseconds of a `$date`'s value: RFC 3339 text, `{"$numberLong": "<ms>"}`, or an
/// integer (the legacy form).
fn date<E: de::Error>(v: serde_json::Value) -> Result<i64, E> {
    use serde_json::Value as J;
    let ms = match v {
        J::String(s) => DateTime::parse_rfc3339_str(&s)
            .ok()
            .map(|d| d.timestamp_millis()),
        J::Number(n) => n.as_i64(),
        J::Object(o) if o.len() == 1 => match o.get("$numberLong") {
            Some(J::String(s)) => s.parse().ok(),
            _ => None,
        },
        _ => None,
    };
    ms.ok_or_else(|| E::custom(Other))
}
