//! `codec_roundtrip`: a column built from the input (one value type, or mixed types, with
//! gaps) must decode to exactly what was encoded, bit for bit, through every decoder.

use super::values::{self, same};
use super::Input;
use tsbucket::bson::oid::ObjectId;
use tsbucket::bson::{Bson, DateTime};
use tsbucket::codec::{
    decode_column, decode_f64, decode_f64_dense, decode_i64, decode_i64_dense, encode_column,
};
use tsbucket::query::columns::Col;

/// Largest column the harness builds (buckets hold at most 1000 rows by default).
const MAX_ROWS: usize = 1200;

/// Builds a column from `data`, encodes it, and checks every decoder against it.
pub fn run(data: &[u8]) {
    let values = column(&mut Input::new(data));
    check(&values);
}

/// The column described by the input.
fn column(inp: &mut Input<'_>) -> Vec<Option<Bson>> {
    let kind = inp.u8() % 10;
    let gaps = inp.u8() % 4;
    let rows = 1 + inp.below(MAX_ROWS);
    let mut out = Vec::with_capacity(rows);
    let mut i = 0i64;
    let mut f = 0.0f64;
    let mut oid = ObjectId::from_bytes([0x65, 0, 0, 0, 1, 2, 3, 4, 5, 0, 0, 0]);
    let mut present = true;
    for _ in 0..rows {
        if inp.is_empty() {
            break;
        }
        present = match gaps {
            0 => true,
            1 => !inp.one_in(4),
            2 => present != inp.one_in(8),
            _ => inp.one_in(2),
        };
        let v = match kind {
            0 => {
                i = values::int64(inp, i);
                Bson::Int64(i)
            }
            1 => {
                i = values::int64(inp, i);
                Bson::Int32(i as i32)
            }
            2 => {
                i = values::int64(inp, i);
                Bson::DateTime(DateTime::from_millis(i))
            }
            3 => {
                f = values::double(inp, f);
                Bson::Double(f)
            }
            4 => Bson::String(values::string(inp)),
            5 => {
                oid = values::object_id(inp, oid);
                Bson::ObjectId(oid)
            }
            6 => Bson::Timestamp(values::timestamp(inp)),
            7 => Bson::Boolean(inp.one_in(2)),
            8 => {
                // Numbers of several types: what MIXED and the numeric decoders combine.
                i = values::int64(inp, i);
                match inp.u8() % 4 {
                    0 => Bson::Int32(i as i32),
                    1 => Bson::Int64(i),
                    2 => Bson::Double(values::double(inp, i as f64)),
                    _ => Bson::DateTime(DateTime::from_millis(i)),
                }
            }
            _ => values::any(inp, 2),
        };
        out.push(present.then_some(v));
    }
    if out.is_empty() {
        out.push(None);
    }
    out
}

/// Encodes `values` and checks that each decoder gives them back.
pub fn check(values: &[Option<Bson>]) {
    let rows = values.len();
    let mut enc = Vec::new();
    encode_column(values, &mut enc);
    let back = match decode_column(&enc, rows) {
        Ok(b) => b,
        Err(e) => panic!("decode_column failed on its own encoding: {e}; input {values:?}"),
    };
    assert_eq!(back.len(), rows, "row count");
    for (row, (a, b)) in values.iter().zip(&back).enumerate() {
        assert!(same(a, b), "row {row}: encoded {a:?}, decoded {b:?}");
    }

    let want_i64: Option<Vec<Option<i64>>> = values
        .iter()
        .map(|v| match v {
            None => Some(None),
            Some(Bson::Int32(x)) => Some(Some(i64::from(*x))),
            Some(Bson::Int64(x)) => Some(Some(*x)),
            Some(Bson::DateTime(d)) => Some(Some(d.timestamp_millis())),
            Some(_) => None,
        })
        .collect();
    let got_i64 = decode_i64(&enc, rows).unwrap_or_else(|e| panic!("decode_i64: {e}"));
    assert_eq!(got_i64, want_i64, "decode_i64");
    let dense = decode_i64_dense(&enc, rows).unwrap_or_else(|e| panic!("decode_i64_dense: {e}"));
    assert_eq!(dense.map(|d| d.into_rows()), want_i64, "decode_i64_dense");

    let want_f64: Option<Vec<Option<u64>>> = values
        .iter()
        .map(|v| match v {
            None => Some(None),
            Some(Bson::Int32(x)) => Some(Some(f64::from(*x).to_bits())),
            Some(Bson::Int64(x)) => Some(Some((*x as f64).to_bits())),
            Some(Bson::Double(x)) => Some(Some(x.to_bits())),
            Some(_) => None,
        })
        .collect();
    let bits = |v: Option<Vec<Option<f64>>>| -> Option<Vec<Option<u64>>> {
        v.map(|v| v.into_iter().map(|x| x.map(f64::to_bits)).collect())
    };
    let got_f64 = decode_f64(&enc, rows).unwrap_or_else(|e| panic!("decode_f64: {e}"));
    assert_eq!(bits(got_f64), want_f64, "decode_f64");
    let dense = decode_f64_dense(&enc, rows).unwrap_or_else(|e| panic!("decode_f64_dense: {e}"));
    assert_eq!(
        bits(dense.map(|d| d.into_rows())),
        want_f64,
        "decode_f64_dense"
    );

    let col = Col::decode(&enc, rows).unwrap_or_else(|e| panic!("Col::decode: {e}"));
    let vals = col.values();
    for (row, v) in values.iter().enumerate() {
        assert!(same(v, &vals.get(row)), "Col::decode row {row}");
    }
}
