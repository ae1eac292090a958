//! `codec_decode`: arbitrary bytes given to every column decoder must yield `Ok` or `Err`,
//! never a panic, a hang or an allocation the row count does not justify; the readers that
//! skip work must agree with the full decoders.

use super::Input;
use tsbucket::codec::{
    decode_column, decode_date_progression, decode_date_runs, decode_f64, decode_f64_dense,
    decode_i64, decode_i64_dense, encode_column, int_magnitude_bound,
};
use tsbucket::query::columns::Col;

/// Rows a decoder is asked for: up to a little over the largest bucket the engine writes
/// (segment readers refuse more than `MAX_BUCKET_ROWS`).
const MAX_ROWS: usize = 4096;

/// Decodes `data` (after a two-byte row count) with each decoder.
pub fn run(data: &[u8]) {
    let mut inp = Input::new(data);
    let rows = inp.below(MAX_ROWS + 1);
    let col = inp.rest();
    let full = decode_column(col, rows);
    let _ = decode_i64(col, rows);
    let _ = decode_f64(col, rows);
    let _ = decode_i64_dense(col, rows);
    let _ = decode_f64_dense(col, rows);
    let _ = Col::decode(col, rows);
    // The readers of time columns that skip values must agree with the one that reads them.
    let values = || decode_i64(col, rows).ok().flatten();
    if let Ok(Some(runs)) = decode_date_runs(col, rows) {
        let expanded: Vec<Option<i64>> = runs
            .iter()
            .flat_map(|&(v, n)| std::iter::repeat_n(Some(v), n as usize))
            .collect();
        assert_eq!(Some(expanded), values(), "runs disagree with values");
    }
    if let Ok(Some((first, step))) = decode_date_progression(col, rows) {
        let expanded: Vec<Option<i64>> = (0..rows as i64)
            .map(|i| Some(first.wrapping_add(step.wrapping_mul(i))))
            .collect();
        assert_eq!(
            Some(expanded),
            values(),
            "progression disagrees with values"
        );
    }
    // A bound read from the header holds for whatever the column decodes to: sums trust it.
    if let (Some(b), Ok(Some(d))) = (int_magnitude_bound(col, rows), decode_i64_dense(col, rows)) {
        let top = d.values.iter().map(|v| v.unsigned_abs()).max();
        assert!(
            top.is_none_or(|t| t <= b),
            "value {top:?} over the bound {b}"
        );
    }
    // Whatever decodes is a valid column: it must survive a round trip of its own.
    if let Ok(values) = full {
        assert_eq!(
            values.len(),
            rows,
            "decode_column returned the wrong row count"
        );
        let mut enc = Vec::new();
        encode_column(&values, &mut enc);
        match decode_column(&enc, rows) {
            Ok(back) => {
                for (a, b) in values.iter().zip(&back) {
                    assert!(super::values::same(a, b), "re-encoded {a:?}, got {b:?}");
                }
            }
            Err(e) => panic!("re-encoding a decoded column gave undecodable bytes: {e}"),
        }
    }
}
