//! Documents as BSON bytes written straight to compact relaxed Extended JSON, as
//! [`crate::json::to_relaxed`] prints them, without building a `Document` or a
//! `serde_json::Value`: what `find` and `export` write for every returned measurement.
//! Numbers, strings, booleans, null, dates, ObjectIds, documents and arrays are written
//! here, walking the bytes; any other value goes through [`crate::extjson::relaxed`].

use crate::extjson::{relaxed, YEAR_10000_MS};
use std::io::Write;
use tsbucket::bson::{Bson, DateTime, RawDocument};

thread_local! {
    /// The last date written, and its text.
    static LAST_DATE: std::cell::RefCell<(Option<i64>, String)> =
        const { std::cell::RefCell::new((None, String::new())) };
}

fn bad() -> String {
    "a returned document is not well-formed BSON".to_string()
}

/// Appends the document `doc` to `out` as one line of compact relaxed Extended JSON (no
/// newline). Fails only on malformed bytes.
pub fn write_relaxed(doc: &RawDocument, out: &mut Vec<u8>) -> Result<(), String> {
    document(doc.as_bytes(), false, out)
}

/// Reads `n` bytes at `at`.
fn take<'a>(b: &'a [u8], at: &mut usize, n: usize) -> Result<&'a [u8], String> {
    let s = b.get(*at..*at + n).ok_or_else(bad)?;
    *at += n;
    Ok(s)
}

fn le<const N: usize>(b: &[u8], at: &mut usize) -> Result<[u8; N], String> {
    take(b, at, N)?.try_into().map_err(|_| bad())
}

/// A document's (or, as `array`, an array's) bytes, length and terminator included.
fn document(b: &[u8], array: bool, out: &mut Vec<u8>) -> Result<(), String> {
    out.push(if array { b'[' } else { b'{' });
    let mut at = 4;
    let mut first = true;
    loop {
        let tag = *b.get(at).ok_or_else(bad)?;
        at += 1;
        if tag == 0 {
            break;
        }
        let key_len = b
            .get(at..)
            .and_then(|r| r.iter().position(|&c| c == 0))
            .ok_or_else(bad)?;
        let key = take(b, &mut at, key_len)?;
        at += 1;
        if !first {
            out.push(b',');
        }
        first = false;
        if !array {
            string(key, out)?;
            out.push(b':');
        }
        value(tag, b, &mut at, out)?;
    }
    out.push(if array { b']' } else { b'}' });
    Ok(())
}

/// A JSON string of UTF-8 bytes: quotes, backslashes and control characters escaped as
/// serde_json escapes them.
fn string(s: &[u8], out: &mut Vec<u8>) -> Result<(), String> {
    // Most names and values are ASCII and need no escape: one pass, which the compiler
    // vectorises, finds both, and only other text is checked as UTF-8.
    let (mut plain, mut ascii) = (true, true);
    for &c in s {
        plain &= c >= 0x20 && c != b'"' && c != b'\\';
        ascii &= c < 0x80;
    }
    if !ascii {
        std::str::from_utf8(s).map_err(|_| bad())?;
    }
    out.push(b'"');
    if plain {
        out.extend_from_slice(s);
        out.push(b'"');
        return Ok(());
    }
    let mut start = 0;
    for (i, &c) in s.iter().enumerate() {
        let esc: &[u8] = match c {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0x08 => b"\\b",
            0x0c => b"\\f",
            0..=0x1f => b"",
            _ => continue,
        };
        out.extend_from_slice(s.get(start..i).unwrap_or_default());
        match esc.is_empty() {
            true => write!(out, "\\u{c:04x}").map_err(|e| e.to_string())?,
            false => out.extend_from_slice(esc),
        }
        start = i + 1;
    }
    out.extend_from_slice(s.get(start..).unwrap_or_default());
    out.push(b'"');
    Ok(())
}

/// The value of type `tag` at `at`; moves `at` past it.
fn value(tag: u8, b: &[u8], at: &mut usize, out: &mut Vec<u8>) -> Result<(), String> {
    match tag {
        0x01 => {
            let f = f64::from_le_bytes(le(b, at)?);
            match f.is_finite() {
                true => serde_json::to_writer(&mut *out, &f).map_err(|e| e.to_string())?,
                false => other(Bson::Double(f), out)?,
            }
        }
        0x02 => {
            let n = i32::from_le_bytes(le(b, at)?);
            let n = usize::try_from(n)
                .ok()
                .filter(|&n| n >= 1)
                .ok_or_else(bad)?;
            let s = take(b, at, n)?;
            string(s.get(..n - 1).ok_or_else(bad)?, out)?;
        }
        0x03 | 0x04 => {
            let n = i32::from_le_bytes(le(b, &mut at.clone())?);
            let n = usize::try_from(n)
                .ok()
                .filter(|&n| n >= 5)
                .ok_or_else(bad)?;
            document(take(b, at, n)?, tag == 0x04, out)?;
        }
        0x07 => {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            out.extend_from_slice(b"{\"$oid\":\"");
            let digit = |d: u8| HEX.get(usize::from(d)).copied().unwrap_or(b'0');
            for &x in take(b, at, 12)? {
                out.push(digit(x >> 4));
                out.push(digit(x & 15));
            }
            out.extend_from_slice(b"\"}");
        }
        0x08 => match take(b, at, 1)? {
            [0] => out.extend_from_slice(b"false"),
            _ => out.extend_from_slice(b"true"),
        },
        0x09 => {
            let ms = i64::from_le_bytes(le(b, at)?);
            // Measurements that follow each other often share their time: the text of the
            // last date is kept.
            LAST_DATE.with(|last| {
                let mut last = last.borrow_mut();
                if last.0 != Some(ms) {
                    let t = DateTime::from_millis(ms);
                    let iso = (0..YEAR_10000_MS)
                        .contains(&ms)
                        .then(|| t.try_to_rfc3339_string().ok())
                        .flatten();
                    last.1 = match iso {
                        Some(iso) => format!("{{\"$date\":\"{iso}\"}}"),
                        None => format!("{{\"$date\":{{\"$numberLong\":\"{ms}\"}}}}"),
                    };
                    last.0 = Some(ms);
                }
                out.extend_from_slice(last.1.as_bytes());
            });
        }
        0x0A => out.extend_from_slice(b"null"),
        0x10 => serde_json::to_writer(&mut *out, &i32::from_le_bytes(le(b, at)?))
            .map_err(|e| e.to_string())?,
        0x12 => serde_json::to_writer(&mut *out, &i64::from_le_bytes(le(b, at)?))
            .map_err(|e| e.to_string())?,
        _ => {
            let n = value_len(tag, b, *at)?;
            // The value alone in a document, for the bson crate to read.
            let mut one = vec![0u8; 4];
            one.push(tag);
            one.extend_from_slice(b"v\0");
            one.extend_from_slice(take(b, at, n)?);
            one.push(0);
            let len = i32::try_from(one.len()).map_err(|_| bad())?;
            one.get_mut(..4)
                .ok_or_else(bad)?
                .copy_from_slice(&len.to_le_bytes());
            let v = RawDocument::from_bytes(&one)
                .ok()
                .and_then(|d| d.get("v").ok().flatten())
                .and_then(|v| Bson::try_from(v).ok())
                .ok_or_else(bad)?;
            other(v, out)?;
        }
    }
    Ok(())
}

/// The length of the value of type `tag` at `at`, for the types [`value`] does not write
/// itself.
fn value_len(tag: u8, b: &[u8], at: usize) -> Result<usize, String> {
    let i32_at = |at: usize| -> Result<usize, String> {
        let n = i32::from_le_bytes(le(b, &mut at.clone())?);
        usize::try_from(n).map_err(|_| bad())
    };
    let cstring_at = |at: usize| -> Result<usize, String> {
        b.get(at..)
            .and_then(|r| r.iter().position(|&c| c == 0))
            .map(|n| n + 1)
            .ok_or_else(bad)
    };
    Ok(match tag {
        // Binary: length, subtype, bytes.
        0x05 => 4 + 1 + i32_at(at)?,
        // Undefined, MinKey, MaxKey.
        0x06 | 0xFF | 0x7F => 0,
        // Regular expression: two C strings.
        0x0B => {
            let p = cstring_at(at)?;
            p + cstring_at(at + p)?
        }
        // DBPointer: a string and an ObjectId.
        0x0C => 4 + i32_at(at)? + 12,
        // Code, symbol: a string.
        0x0D | 0x0E => 4 + i32_at(at)?,
        // Code with scope: its total length first.
        0x0F => i32_at(at)?,
        // Timestamp.
        0x11 => 8,
        // Decimal128.
        0x13 => 16,
        _ => return Err(bad()),
    })
}

/// A value the walker leaves to the `Bson` path.
fn other(v: Bson, out: &mut Vec<u8>) -> Result<(), String> {
    serde_json::to_writer(&mut *out, &relaxed(v)).map_err(|e| e.to_string())
}
