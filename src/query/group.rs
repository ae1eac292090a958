//! Hash aggregation for `$group`: group key -> accumulator states.
//!
//! Keys are compared as MongoDB compares values (numbers by value, so `1`, `1.0` and
//! `NumberLong(1)` are one group; documents field by field in order), which a canonical byte
//! encoding of the key gives: the map hashes those bytes, and the group keeps the `_id` value
//! first seen. Groups come out in order of first appearance.

use super::accum::{Acc, AccSpec};
use super::expr::Expr;
use crate::error::Result;
use crate::order::{as_f64, type_rank};
use bson::{Bson, Document};

/// A `$group` stage.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupSpec {
    /// The `_id` expression.
    pub id: Expr,
    /// The output fields.
    pub accs: Vec<AccSpec>,
}

/// One group.
#[derive(Debug, Clone)]
pub struct Group {
    /// The `_id` value first seen.
    pub id: Bson,
    /// One state per output field.
    pub accs: Vec<Acc>,
}

/// Groups by canonical key.
pub struct GroupTable {
    map: foldhash::HashMap<Box<[u8]>, u32>,
    groups: Vec<Group>,
    buf: Vec<u8>,
    fresh: Vec<Acc>,
    names: Vec<String>,
}

impl GroupTable {
    /// An empty table whose groups start with `fresh` states for the output fields `names`.
    pub fn new(names: Vec<String>, fresh: Vec<Acc>) -> GroupTable {
        GroupTable {
            map: foldhash::HashMap::default(),
            groups: Vec::new(),
            buf: Vec::new(),
            fresh,
            names,
        }
    }

    /// A table for `spec` with ordinary (arrival-order) accumulators.
    pub fn for_spec(spec: &GroupSpec) -> GroupTable {
        GroupTable::new(
            spec.accs.iter().map(|a| a.name.clone()).collect(),
            spec.accs.iter().map(|a| Acc::new(a.op)).collect(),
        )
    }

    /// The index of the group of `id`, created if new.
    pub fn slot(&mut self, id: &Bson) -> u32 {
        self.buf.clear();
        encode_key(id, &mut self.buf);
        if let Some(&g) = self.map.get(self.buf.as_slice()) {
            return g;
        }
        let g = self.groups.len() as u32;
        self.map.insert(self.buf.as_slice().into(), g);
        self.groups.push(Group {
            id: id.clone(),
            accs: self.fresh.clone(),
        });
        g
    }

    /// The index of the group of `id` if it exists.
    pub fn find(&mut self, id: &Bson) -> Option<u32> {
        self.buf.clear();
        encode_key(id, &mut self.buf);
        self.map.get(self.buf.as_slice()).copied()
    }

    /// The states of group `g`.
    pub fn accs(&mut self, g: u32) -> &mut [Acc] {
        match self.groups.get_mut(g as usize) {
            Some(gr) => &mut gr.accs,
            None => &mut [],
        }
    }

    /// Feeds one document: evaluates the key and every accumulator's argument on it.
    pub fn feed_doc(&mut self, spec: &GroupSpec, d: &Document) -> Result<()> {
        let id = spec.id.eval(d)?.unwrap_or(Bson::Null);
        let g = self.slot(&id);
        for (i, a) in spec.accs.iter().enumerate() {
            let v = a.arg.eval(d)?;
            if let Some(acc) = self.accs(g).get_mut(i) {
                acc.feed(v.as_ref());
            }
        }
        Ok(())
    }

    /// The output documents `{_id, field: value, ...}`, in order of first appearance.
    pub fn into_docs(self) -> Result<Vec<Document>> {
        let mut out = Vec::with_capacity(self.groups.len());
        for g in self.groups {
            let mut d = Document::new();
            d.insert("_id", g.id);
            for (name, a) in self.names.iter().zip(&g.accs) {
                d.insert(name.clone(), a.value()?);
            }
            out.push(d);
        }
        Ok(out)
    }
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u32).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// Appends the canonical encoding of `v`: equal under MongoDB's comparison <=> equal bytes
/// (numbers integral and in range encode as i64, others as f64 bits, NaN as one value).
pub fn encode_key(v: &Bson, out: &mut Vec<u8>) {
    out.push(type_rank(v));
    match v {
        Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_) => {
            let exact = match v {
                Bson::Int32(i) => Some(i64::from(*i)),
                Bson::Int64(i) => Some(*i),
                _ => None,
            };
            let f = as_f64(v).unwrap_or(f64::NAN);
            // 2^63 as f64: integral doubles below it (and at or above -2^63) fit an i64.
            let limit = 9_223_372_036_854_775_808.0;
            match exact {
                Some(i) => {
                    out.push(b'i');
                    out.extend_from_slice(&i.to_le_bytes());
                }
                None if f.fract() == 0.0 && f >= -limit && f < limit => {
                    out.push(b'i');
                    out.extend_from_slice(&(f as i64).to_le_bytes());
                }
                None if f.is_nan() => out.push(b'n'),
                None => {
                    out.push(b'f');
                    out.extend_from_slice(&f.to_bits().to_le_bytes());
                }
            }
        }
        Bson::String(s) | Bson::Symbol(s) | Bson::JavaScriptCode(s) => put_str(out, s),
        Bson::Document(d) => {
            for (k, x) in d {
                out.push(1);
                put_str(out, k);
                encode_key(x, out);
            }
            out.push(0);
        }
        Bson::Array(a) => {
            for x in a {
                out.push(1);
                encode_key(x, out);
            }
            out.push(0);
        }
        Bson::DateTime(t) => out.extend_from_slice(&t.timestamp_millis().to_le_bytes()),
        Bson::ObjectId(o) => out.extend_from_slice(&o.bytes()),
        Bson::Boolean(b) => out.push(u8::from(*b)),
        Bson::Timestamp(t) => {
            out.extend_from_slice(&t.time.to_le_bytes());
            out.extend_from_slice(&t.increment.to_le_bytes());
        }
        Bson::Binary(b) => {
            out.push(u8::from(b.subtype));
            out.extend_from_slice(&(b.bytes.len() as u32).to_le_bytes());
            out.extend_from_slice(&b.bytes);
        }
        Bson::RegularExpression(r) => {
            put_str(out, r.pattern.as_str());
            put_str(out, r.options.as_str());
        }
        Bson::JavaScriptCodeWithScope(c) => {
            put_str(out, &c.code);
            encode_key(&Bson::Document(c.scope.clone()), out);
        }
        Bson::DbPointer(p) => put_str(out, &format!("{p:?}")),
        Bson::Null | Bson::Undefined | Bson::MinKey | Bson::MaxKey => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::query::accum::AccOp;
    use bson::doc;

    fn key(v: Bson) -> Vec<u8> {
        let mut out = Vec::new();
        encode_key(&v, &mut out);
        out
    }

    #[test]
    fn equal_values_share_a_key() {
        assert_eq!(key(Bson::Int32(1)), key(Bson::Double(1.0)));
        assert_eq!(key(Bson::Int64(1)), key(Bson::Int32(1)));
        assert_eq!(key(Bson::Double(-0.0)), key(Bson::Int32(0)));
        assert_eq!(key(Bson::Double(f64::NAN)), key(Bson::Double(-f64::NAN)));
        assert_eq!(key(Bson::Symbol("a".into())), key(Bson::String("a".into())));
        assert_eq!(
            key(Bson::Document(doc! {"a": 1, "b": [2.0]})),
            key(Bson::Document(doc! {"a": 1.0, "b": [2_i64]}))
        );
    }

    #[test]
    fn different_values_do_not() {
        assert_ne!(key(Bson::Double(1.5)), key(Bson::Int32(1)));
        assert_ne!(key(Bson::Null), key(Bson::Undefined));
        assert_ne!(key(Bson::String("1".into())), key(Bson::Int32(1)));
        assert_ne!(
            key(Bson::Document(doc! {"a": 1, "b": 2})),
            key(Bson::Document(doc! {"b": 2, "a": 1}))
        );
        assert_ne!(
            key(Bson::Document(doc! {"a": null})),
            key(Bson::Document(doc! {}))
        );
        assert_ne!(
            key(Bson::Array(vec!["ab".into()])),
            key(Bson::Array(vec!["a".into(), "b".into()]))
        );
    }

    #[test]
    fn groups_keep_the_first_id_and_order() {
        let spec = GroupSpec {
            id: Expr::Path("k".into()),
            accs: vec![AccSpec {
                name: "n".into(),
                op: AccOp::Sum,
                arg: Expr::Const(Bson::Int32(1)),
            }],
        };
        let mut t = GroupTable::for_spec(&spec);
        for d in [
            doc! {"k": 2},
            doc! {"k": 1.0},
            doc! {"k": 2.0},
            doc! {},
            doc! {"k": 1},
        ] {
            t.feed_doc(&spec, &d).unwrap();
        }
        assert_eq!(
            t.into_docs().unwrap(),
            vec![
                doc! {"_id": 2, "n": 2},
                doc! {"_id": 1.0, "n": 2},
                doc! {"_id": null, "n": 1},
            ]
        );
    }
}
