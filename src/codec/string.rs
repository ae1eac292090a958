//! String columns: a dictionary of distinct values plus an index sequence (repeats and runs
//! then cost a fraction of a bit each), or the raw strings when most values are unique.
#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

use std::collections::HashMap;

use super::bits::{put_varint, Reader};
use super::{int, CodecError};

const MODE_DICT: u8 = 0;
const MODE_RAW: u8 = 1;

fn put_str(out: &mut Vec<u8>, s: &str) {
    put_varint(out, s.len() as u64);
    out.extend_from_slice(s.as_bytes());
}

/// Appends a STRING body for `vals`, whichever of DICT and RAW is smaller. `last`: nothing
/// follows the body.
pub(crate) fn encode(vals: &[&str], out: &mut Vec<u8>, last: bool) {
    let mut ids: HashMap<&str, i64> = HashMap::new();
    let mut dict: Vec<&str> = Vec::new();
    let idx: Vec<i64> = vals
        .iter()
        .map(|s| {
            *ids.entry(s).or_insert_with(|| {
                dict.push(s);
                dict.len() as i64 - 1
            })
        })
        .collect();
    let mut raw = vec![MODE_RAW];
    for s in vals {
        put_str(&mut raw, s);
    }
    if dict.len() < vals.len() {
        let mut d = vec![MODE_DICT];
        put_varint(&mut d, dict.len() as u64);
        for s in &dict {
            put_str(&mut d, s);
        }
        if last {
            int::encode_last(&idx, &mut d);
        } else {
            int::encode(&idx, &mut d);
        }
        if d.len() < raw.len() {
            out.extend_from_slice(&d);
            return;
        }
    }
    out.extend_from_slice(&raw);
}

fn get_str(r: &mut Reader) -> Result<String, CodecError> {
    let at = r.offset();
    let len = r.len(r.remaining(), "string length")?;
    let b = r.bytes(len)?;
    String::from_utf8(b.to_vec()).map_err(|_| CodecError::new(at, "string is not UTF-8"))
}

/// Decodes a STRING body of `n` values.
pub(crate) fn decode(r: &mut Reader, n: usize) -> Result<Vec<String>, CodecError> {
    if n == 0 {
        return Ok(Vec::new());
    }
    let at = r.offset();
    match r.u8()? {
        MODE_RAW => {
            if n > r.remaining() {
                return Err(r.err("more strings than bytes"));
            }
            (0..n).map(|_| get_str(r)).collect()
        }
        MODE_DICT => {
            let d = r.len(n.min(r.remaining()), "dictionary size")?;
            let dict: Vec<String> = (0..d).map(|_| get_str(r)).collect::<Result<_, _>>()?;
            let idx_at = r.offset();
            let idx = int::decode(r, n)?;
            idx.into_iter()
                .map(|i| {
                    usize::try_from(i)
                        .ok()
                        .and_then(|i| dict.get(i))
                        .cloned()
                        .ok_or_else(|| {
                            CodecError::new(idx_at, format!("dictionary index {i} out of range"))
                        })
                })
                .collect()
        }
        m => Err(CodecError::new(at, format!("unknown string mode {m}"))),
    }
}

#[cfg(test)]
// Tests may panic: a panic is how a test fails.
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;

    fn rt(vals: &[&str]) -> usize {
        let mut buf = Vec::new();
        encode(vals, &mut buf, true);
        let mut r = Reader::new(&buf, 0);
        let got = decode(&mut r, vals.len()).unwrap_or_default();
        assert!(r.finish().is_ok());
        assert_eq!(got, vals);
        buf.len()
    }

    #[test]
    fn repeated_strings_use_the_dictionary() {
        let vals: Vec<&str> = (0..360)
            .map(|i| ["us-east-1", "eu-west-1"][i / 100 % 2])
            .collect();
        assert!(rt(&vals) < 40);
    }

    #[test]
    fn unique_and_unicode_strings_round_trip() {
        rt(&["", "é", "日本語", "\u{0}", "a"]);
        rt(&["x"]);
    }
}
