//! Run-length or bitmap coding of a boolean per row: which rows have the field (presence) and
//! the values of Boolean columns.
#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

use super::bits::{put_varint, varint_len, Reader};
use super::CodecError;

/// Which of the two layouts a flag vector uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Layout {
    /// Alternating run lengths as varints, starting with a (possibly empty) run of `true`.
    Runs,
    /// One bit per row, LSB first, `1` = true.
    Bitmap,
}

fn runs(flags: &[bool]) -> Vec<u64> {
    let mut out = Vec::new();
    let mut cur = true;
    let mut len = 0u64;
    for &f in flags {
        if f == cur {
            len += 1;
        } else {
            out.push(len);
            cur = f;
            len = 1;
        }
    }
    out.push(len);
    out
}

/// Picks the smaller layout and appends it (without saying which; the caller records that).
pub(crate) fn encode(flags: &[bool], out: &mut Vec<u8>) -> Layout {
    let r = runs(flags);
    let runs_size: usize = r.iter().map(|&l| varint_len(l)).sum();
    let bitmap_size = flags.len().div_ceil(8);
    if runs_size <= bitmap_size {
        for l in r {
            put_varint(out, l);
        }
        Layout::Runs
    } else {
        for chunk in flags.chunks(8) {
            let mut b = 0u8;
            for (i, &f) in chunk.iter().enumerate() {
                b |= u8::from(f) << i;
            }
            out.push(b);
        }
        Layout::Bitmap
    }
}

/// Decodes `rows` flags.
pub(crate) fn decode(r: &mut Reader, layout: Layout, rows: usize) -> Result<Vec<bool>, CodecError> {
    let mut flags = Vec::with_capacity(rows);
    match layout {
        Layout::Bitmap => {
            let bytes = r.bytes(rows.div_ceil(8))?;
            for &b in bytes {
                for i in 0..8 {
                    if flags.len() < rows {
                        flags.push(b >> i & 1 != 0);
                    }
                }
            }
        }
        Layout::Runs => {
            let mut cur = true;
            let mut first = true;
            while flags.len() < rows || first {
                let at = r.offset();
                let len = r.len(rows - flags.len(), "run length")?;
                if len == 0 && !first {
                    return Err(CodecError::new(at, "empty run"));
                }
                flags.resize(flags.len() + len, cur);
                cur = !cur;
                first = false;
            }
        }
    }
    Ok(flags)
}

#[cfg(test)]
// Tests may panic: a panic is how a test fails.
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;

    fn rt(flags: &[bool]) -> usize {
        let mut buf = Vec::new();
        let layout = encode(flags, &mut buf);
        let mut r = Reader::new(&buf, 0);
        assert_eq!(
            decode(&mut r, layout, flags.len()).ok().as_deref(),
            Some(flags)
        );
        assert!(r.finish().is_ok());
        buf.len()
    }

    #[test]
    fn flags_round_trip_in_both_layouts() {
        assert_eq!(rt(&[true; 300]), 2);
        assert_eq!(rt(&[false; 3]), 1);
        rt(&[]);
        let alt: Vec<bool> = (0..77).map(|i| i % 3 == 0).collect();
        assert_eq!(rt(&alt), 10);
        let mut sparse = vec![true; 1000];
        sparse[500] = false;
        assert!(rt(&sparse) <= 5);
    }

    #[test]
    fn runs_overshooting_the_row_count_are_rejected() {
        let buf = [2u8, 5];
        let mut r = Reader::new(&buf, 0);
        assert!(decode(&mut r, Layout::Runs, 4).is_err());
    }
}
