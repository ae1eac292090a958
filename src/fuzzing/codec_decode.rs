//! `codec_decode`: arbitrary bytes given to every column decoder must yield `Ok` or `Err`,
//! never a panic, a hang or an allocation the row count does not justify.

use super::Input;
use crate::codec::{
    decode_column, decode_f64, decode_f64_dense, decode_i64, decode_i64_dense, encode_column,
};
use crate::query::columns::Col;

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
