//! InfluxDB line protocol (`measurement,tag=v,... field=v,... timestamp`) as documents: the
//! timestamp becomes the time field, the measurement and the tags the meta document (tags
//! sorted by key, as InfluxDB keys a series), and the fields the measurement's fields.
//! Field values follow the protocol: `12i` an Int64, `12u` an unsigned integer (an Int64 when
//! it fits), `t`/`true`/`f`/`false` (any case InfluxDB takes) a boolean, `"..."` a string,
//! anything else a double. Lines starting with `#` and empty lines are passed over.

use crate::times::TimeRead;
use std::borrow::Cow;

/// How lines become documents.
pub struct LineSchema {
    /// The collection's time field.
    pub time_field: String,
    /// The collection's meta field.
    pub meta_field: String,
    /// The unit of the timestamps (`--precision`).
    pub times: TimeRead,
}

/// A field's value.
#[derive(Debug, PartialEq)]
enum Field {
    Float(f64),
    Int(i64),
    Bool(bool),
    Str(String),
}

/// One parsed line. Names and tag values borrow the line's text unless they hold escapes.
#[derive(Debug, PartialEq)]
struct Line<'a> {
    measurement: Cow<'a, str>,
    tags: Vec<(Cow<'a, str>, Cow<'a, str>)>,
    fields: Vec<(Cow<'a, str>, Field)>,
    timestamp: Option<i64>,
}

impl LineSchema {
    /// The document of `line` as BSON bytes into `out` (cleared first); `Ok(false)` for a
    /// line that holds no point (a comment or blank).
    pub fn line_bson(&self, line: &str, out: &mut Vec<u8>) -> Result<bool, String> {
        out.clear();
        let text = line.trim_end_matches(['\n', '\r']);
        if text.trim().is_empty() || text.trim_start().starts_with('#') {
            return Ok(false);
        }
        let mut p = parse(text)?;
        let ts = p
            .timestamp
            .ok_or("the line has no timestamp (tsbucket does not stamp points itself)")?;
        let t = self.times.integer(ts)?;
        p.tags.sort_by(|a, b| a.0.cmp(&b.0));
        if let Some((k, _)) = p
            .tags
            .iter()
            .zip(p.tags.iter().skip(1))
            .find_map(|(a, b)| (a.0 == b.0).then_some(a))
        {
            return Err(format!("tag '{k}' appears twice"));
        }
        if p.tags.iter().any(|(k, _)| k.as_ref() == "measurement") {
            return Err("a tag named 'measurement' clashes with the measurement's name".into());
        }
        let start = begin(out);
        key(out, 0x09, &self.time_field)?;
        out.extend_from_slice(&t.timestamp_millis().to_le_bytes());
        key(out, 0x03, &self.meta_field)?;
        let meta = begin(out);
        string(out, "measurement", &p.measurement)?;
        for (k, v) in &p.tags {
            string(out, k, v)?;
        }
        end(out, meta)?;
        let mut seen: Vec<&str> = Vec::new();
        for (k, v) in &p.fields {
            if *k == self.time_field || *k == self.meta_field || seen.contains(&k.as_ref()) {
                return Err(format!(
                    "field '{k}' appears twice or names the time or meta field"
                ));
            }
            seen.push(k);
            match v {
                Field::Float(f) => {
                    key(out, 0x01, k)?;
                    out.extend_from_slice(&f.to_le_bytes());
                }
                Field::Int(i) => {
                    key(out, 0x12, k)?;
                    out.extend_from_slice(&i.to_le_bytes());
                }
                Field::Bool(b) => {
                    key(out, 0x08, k)?;
                    out.push(u8::from(*b));
                }
                Field::Str(s) => string(out, k, s)?,
            }
        }
        end(out, start)?;
        Ok(true)
    }
}

/// Starts a document; returns where.
fn begin(out: &mut Vec<u8>) -> usize {
    let at = out.len();
    out.extend_from_slice(&[0; 4]);
    at
}

/// Ends the document that starts at `start`.
fn end(out: &mut Vec<u8>, start: usize) -> Result<(), String> {
    out.push(0);
    let len = i32::try_from(out.len() - start).map_err(|_| "the line is too long".to_string())?;
    if let Some(head) = out.get_mut(start..start + 4) {
        head.copy_from_slice(&len.to_le_bytes());
    }
    Ok(())
}

/// Starts an element of type `tag` named `name`.
fn key(out: &mut Vec<u8>, tag: u8, name: &str) -> Result<(), String> {
    if name.contains('\0') {
        return Err(format!("the name {name:?} holds a NUL character"));
    }
    out.push(tag);
    out.extend_from_slice(name.as_bytes());
    out.push(0);
    Ok(())
}

/// A string element.
fn string(out: &mut Vec<u8>, name: &str, s: &str) -> Result<(), String> {
    key(out, 0x02, name)?;
    let len = i32::try_from(s.len() + 1).map_err(|_| "a string is too long".to_string())?;
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(s.as_bytes());
    out.push(0);
    Ok(())
}

/// Reads text up to one of `stops` (ASCII) that no backslash escapes, unescaping `\<stop>`,
/// `\\` and `\"`; any other backslash stays. Returns the text, borrowed from `s` unless it
/// held an escape, and the stop found (`None` at the end of the line), and moves `s` past it.
fn token<'a>(s: &mut &'a str, stops: &[u8]) -> (Cow<'a, str>, Option<char>) {
    let text: &'a str = s;
    let b = text.as_bytes();
    let mut owned: Option<String> = None;
    let (mut from, mut i) = (0, 0);
    // Every stop and escape is ASCII, so each cut below falls between characters.
    let piece = |from: usize, to: usize| text.get(from..to).unwrap_or_default();
    while let Some(&c) = b.get(i) {
        if c == b'\\' {
            match b.get(i + 1) {
                Some(&n) if stops.contains(&n) || n == b'\\' || n == b'"' => {
                    let o = owned.get_or_insert_with(String::new);
                    o.push_str(piece(from, i));
                    o.push(char::from(n));
                    i += 2;
                    from = i;
                }
                _ => i += 1,
            }
            continue;
        }
        if stops.contains(&c) {
            *s = text.get(i + 1..).unwrap_or_default();
            return (done(owned, piece(from, i)), Some(char::from(c)));
        }
        i += 1;
    }
    *s = "";
    (done(owned, piece(from, b.len())), None)
}

/// A token: the unescaped text so far and the rest, or the borrowed text.
fn done(owned: Option<String>, rest: &str) -> Cow<'_, str> {
    match owned {
        Some(mut o) => {
            o.push_str(rest);
            Cow::Owned(o)
        }
        None => Cow::Borrowed(rest),
    }
}

fn parse(text: &str) -> Result<Line<'_>, String> {
    let mut s = text;
    let (measurement, mut stop) = token(&mut s, b", ");
    if measurement.is_empty() {
        return Err("the line has no measurement".into());
    }
    let mut tags = Vec::new();
    while stop == Some(',') {
        let (k, eq) = token(&mut s, b"= ,");
        if eq != Some('=') || k.is_empty() {
            return Err(format!("tag '{k}' has no value (tags are key=value)"));
        }
        let (v, next) = token(&mut s, b", =");
        if v.is_empty() || next == Some('=') {
            return Err(format!("tag '{k}' has no value, or an unescaped '='"));
        }
        tags.push((k, v));
        stop = next;
    }
    if stop != Some(' ') {
        return Err("the line has no fields".into());
    }
    let mut fields = Vec::new();
    loop {
        let (k, eq) = token(&mut s, b"= ,");
        if eq != Some('=') || k.is_empty() {
            return Err(format!("field '{k}' has no value (fields are key=value)"));
        }
        let (v, next) = field_value(&mut s)?;
        fields.push((k, v));
        match next {
            Some(',') => continue,
            _ => {
                stop = next;
                break;
            }
        }
    }
    let timestamp = match stop {
        Some(' ') => {
            let rest = s.trim();
            match rest.is_empty() {
                true => None,
                false => Some(
                    rest.parse::<i64>()
                        .map_err(|_| format!("the timestamp '{rest}' is not an integer"))?,
                ),
            }
        }
        _ => None,
    };
    Ok(Line {
        measurement,
        tags,
        fields,
        timestamp,
    })
}

/// A field's value, and the character after it (`,`, a space, or `None` at the end).
fn field_value(s: &mut &str) -> Result<(Field, Option<char>), String> {
    if let Some(quoted) = s.strip_prefix('"') {
        let mut chars = quoted.chars();
        let mut out = String::new();
        loop {
            match chars.next() {
                None => return Err("a string field has no closing quote".into()),
                Some('\\') => match chars.next() {
                    Some(c @ ('"' | '\\')) => out.push(c),
                    Some(c) => {
                        out.push('\\');
                        out.push(c);
                    }
                    None => return Err("a string field has no closing quote".into()),
                },
                Some('"') => break,
                Some(c) => out.push(c),
            }
        }
        let next = chars.next();
        if !matches!(next, None | Some(',' | ' ')) {
            return Err("text after a string field's closing quote".into());
        }
        *s = chars.as_str();
        return Ok((Field::Str(out), next));
    }
    let (v, next) = token(s, b", ");
    let bad = || format!("the field value '{v}' is not a number, boolean or string");
    let field = match v.as_ref() {
        "t" | "T" | "true" | "True" | "TRUE" => Field::Bool(true),
        "f" | "F" | "false" | "False" | "FALSE" => Field::Bool(false),
        _ if v.ends_with('i') => Field::Int(v.trim_end_matches('i').parse().map_err(|_| bad())?),
        _ if v.ends_with('u') => {
            let u: u64 = v.trim_end_matches('u').parse().map_err(|_| bad())?;
            Field::Int(i64::try_from(u).map_err(|_| {
                format!("the unsigned field value '{v}' is beyond the largest Int64")
            })?)
        }
        _ => Field::Float(v.parse().map_err(|_| bad())?),
    };
    Ok((field, next))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::times::TimeUnit;
    use tsbucket::bson::{doc, DateTime, Document};

    fn schema(unit: TimeUnit) -> LineSchema {
        LineSchema {
            time_field: "time".into(),
            meta_field: "tags".into(),
            times: TimeRead {
                unit: Some(unit),
                format: None,
            },
        }
    }

    fn doc_of(s: &LineSchema, line: &str) -> Result<Option<Document>, String> {
        let mut out = Vec::new();
        Ok(match s.line_bson(line, &mut out)? {
            true => Some(Document::from_reader(out.as_slice()).unwrap()),
            false => None,
        })
    }

    #[test]
    fn points_become_documents() {
        let s = schema(TimeUnit::Ns);
        let got = doc_of(
            &s,
            "cpu,region=us-west,host=a usage_user=12.5,n=3i,u=7u,ok=t,note=\"x \\\"y\\\", z\" \
             1451606400000000000\n",
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            got,
            doc! {
                "time": DateTime::from_millis(1_451_606_400_000),
                "tags": {"measurement": "cpu", "host": "a", "region": "us-west"},
                "usage_user": 12.5, "n": 3_i64, "u": 7_i64, "ok": true, "note": "x \"y\", z",
            }
        );
        // Escaped commas, spaces and equals signs in names and tag values.
        let got = doc_of(
            &schema(TimeUnit::S),
            r"disk\ io,path=/a\,b\ c\=d read\ ops=1 5",
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            got,
            doc! {
                "time": DateTime::from_millis(5000),
                "tags": {"measurement": "disk io", "path": "/a,b c=d"},
                "read ops": 1.0,
            }
        );
        assert_eq!(doc_of(&s, "# a comment").unwrap(), None);
        assert_eq!(doc_of(&s, "   ").unwrap(), None);
    }

    #[test]
    fn malformed_lines_say_what_is_wrong() {
        let s = schema(TimeUnit::Ns);
        for (line, says) in [
            ("cpu", "no fields"),
            ("cpu,host a=1 1", "no value"),
            ("cpu a=1", "no timestamp"),
            ("cpu a=x 1", "not a number"),
            ("cpu a=\"x 1", "closing quote"),
            ("cpu a=1 now", "not an integer"),
            ("cpu,h=a,h=b a=1 1", "appears twice"),
            ("cpu a=1,a=2 1", "appears twice"),
            ("cpu a=18446744073709551615u 1", "largest Int64"),
            (",h=a a=1 1", "no measurement"),
        ] {
            let e = doc_of(&s, line).unwrap_err();
            assert!(e.contains(says), "{line}: {e}");
        }
    }
}
