//! `wal_codec`: the compact form of insert records in the log. Batches of generated
//! measurements, built from a few shapes and meta values so that layouts and meta entries are
//! referred back to, are compacted in order by one compactor (sometimes told to start over)
//! and expanded by one expander (sometimes at a new file): every payload must come back byte
//! for byte, and no compact form may be longer than its payload. Or the expander gets
//! arbitrary bytes: it must refuse them or give at most the bytes allowed, never panic.

use super::values;
use super::Input;
use tsbucket::bson::oid::ObjectId;
use tsbucket::bson::{Bson, DateTime, Document, RawDocumentBuf};
use tsbucket::ingest::compact::{InsertCompactor, InsertExpander};
use tsbucket::ingest::{prepare_batch, prepare_raw_batch};
use tsbucket::schema::Schema;
use tsbucket::wal::codec::{Compact, Expand};

fn fields() -> Schema {
    Schema::new("t", Some("m"), 3600, 60)
}

/// Runs one input.
pub fn run(data: &[u8]) {
    let mut inp = Input::new(data);
    if inp.one_in(4) {
        arbitrary(&mut inp);
    } else {
        round_trip(&mut inp);
    }
}

fn arbitrary(inp: &mut Input<'_>) {
    let mut x = InsertExpander::new();
    let max = 1 + inp.below(1 << 16);
    while !inp.is_empty() {
        if inp.one_in(8) {
            Expand::reset(&mut x);
        }
        let len = usize::from(inp.u16() % 4096);
        let stored = inp.bytes(len);
        let mut out = Vec::new();
        if x.expand(stored, max, &mut out).is_ok() {
            assert!(
                out.len() <= max,
                "expanded to {} bytes, over {max}",
                out.len()
            );
        }
    }
}

/// A field of a shape: its name and a type code for [`value_of`].
type Field = (String, u8);

/// A value of type `code`: the scalars a row may hold and still have a shape, or, for the
/// last code, anything.
fn value_of(inp: &mut Input<'_>, code: u8) -> Bson {
    match code % 9 {
        0 => Bson::Double(values::double(inp, 0.0)),
        1 => Bson::String(values::string(inp)),
        2 => Bson::Int32(inp.u32() as i32),
        3 => Bson::Int64(values::int64(inp, 0)),
        4 => Bson::Boolean(inp.one_in(2)),
        5 => Bson::DateTime(DateTime::from_millis(values::int64(inp, 0))),
        6 => Bson::ObjectId(values::object_id(inp, ObjectId::from_bytes([0; 12]))),
        7 => Bson::Null,
        _ => values::any(inp, 2),
    }
}

fn round_trip(inp: &mut Input<'_>) {
    // A few shapes (the time and meta fields somewhere among up to five others) and meta
    // values, shared by all batches.
    let shapes: Vec<Vec<Field>> = (0..1 + inp.below(3))
        .map(|_| {
            let mut s: Vec<Field> = (0..inp.below(6))
                .map(|_| {
                    (
                        ["a", "b", "_id", "usage", "x.y"][inp.below(5)].to_string(),
                        inp.u8(),
                    )
                })
                .collect();
            s.insert(inp.below(s.len() + 1), ("t".into(), 5));
            if !inp.one_in(4) {
                s.insert(inp.below(s.len() + 1), ("m".into(), 255));
            }
            s
        })
        .collect();
    let metas: Vec<Bson> = (0..1 + inp.below(4)).map(|_| values::any(inp, 2)).collect();
    let mut compactor = InsertCompactor::new();
    let mut expander = InsertExpander::new();
    for _ in 0..1 + inp.below(6) {
        if inp.one_in(6) {
            Compact::reset(&mut compactor);
        }
        if inp.one_in(8) {
            // A new file: both start over.
            Compact::reset(&mut compactor);
            Expand::reset(&mut expander);
        }
        let docs: Vec<Document> = (0..1 + inp.below(8))
            .map(|_| {
                if inp.one_in(8) {
                    let mut d = values::document(inp, 1);
                    d.insert("t", DateTime::from_millis(values::int64(inp, 0)));
                    return d;
                }
                let shape = &shapes[inp.below(shapes.len())];
                let mut d = Document::new();
                for (name, code) in shape {
                    let v = match (name.as_str(), code) {
                        ("m", _) => metas[inp.below(metas.len())].clone(),
                        ("t", _) => Bson::DateTime(DateTime::from_millis(values::int64(inp, 0))),
                        _ => value_of(inp, *code),
                    };
                    d.insert(name.clone(), v);
                }
                d
            })
            .collect();
        let coll = 1 + u32::from(inp.u8() % 2);
        let prepared = if inp.one_in(2) {
            prepare_batch(coll, &docs, &fields())
        } else {
            let raw: Vec<RawDocumentBuf> = docs
                .iter()
                .filter_map(|d| RawDocumentBuf::try_from(d).ok())
                .collect();
            prepare_raw_batch(coll, &raw, &fields())
        };
        let Ok((prepared, payload, _)) = prepared else {
            continue;
        };
        let mut stored = Vec::new();
        if !compactor.compact_payload(&payload, coll, &prepared, &mut stored) {
            assert!(stored.is_empty(), "a refused record left bytes behind");
            continue;
        }
        assert!(stored.len() <= payload.len(), "the compact form is longer");
        let mut back = Vec::new();
        let r = expander.expand(&stored, payload.len(), &mut back);
        assert_eq!(r, Ok(()), "a compacted record does not expand");
        assert!(back == payload, "a compacted record expands to other bytes");
    }
}
