//! `control.min/max` and schema tracking of a bucket, field by field.
//!
//! Min and max of embedded documents and arrays are taken element-wise (MongoDB: `{x:1,y:2}` and
//! `{x:2,y:1}` give min `{x:1,y:1}`), which is sound because a bucket never mixes type classes in
//! one path: a measurement that would is refused by [`Schema::accepts`] and the bucket closes.

use crate::order::{cmp_bson, type_rank};
use bson::{Bson, Document};
use std::cmp::Ordering;

/// Folds `new` into the running minimum (`want = Less`) or maximum (`want = Greater`).
pub fn fold_extreme(cur: &mut Bson, new: &Bson, want: Ordering) {
    match (cur, new) {
        (Bson::Document(c), Bson::Document(n)) => {
            for (k, nv) in n {
                match c.get_mut(k) {
                    Some(cv) => fold_extreme(cv, nv, want),
                    None => {
                        c.insert(k.clone(), nv.clone());
                    }
                }
            }
        }
        (Bson::Array(c), Bson::Array(n)) => {
            for (i, nv) in n.iter().enumerate() {
                match c.get_mut(i) {
                    Some(cv) => fold_extreme(cv, nv, want),
                    None => c.push(nv.clone()),
                }
            }
        }
        (c, n) => {
            if cmp_bson(n, c) == want {
                *c = n.clone();
            }
        }
    }
}

/// Type class of a value for schema-change detection: all numbers are one class.
fn class(v: &Bson) -> u8 {
    type_rank(v)
}

/// The type structure a bucket has seen along every path.
#[derive(Debug, Clone, PartialEq)]
pub enum Schema {
    /// A scalar of this class.
    Scalar(u8),
    /// A document with these sub-fields.
    Object(Vec<(String, Schema)>),
    /// An array with these element positions.
    Array(Vec<Schema>),
}

impl Schema {
    /// The schema of a single value.
    pub fn of(v: &Bson) -> Schema {
        match v {
            Bson::Document(d) => {
                Schema::Object(d.iter().map(|(k, v)| (k.clone(), Schema::of(v))).collect())
            }
            Bson::Array(a) => Schema::Array(a.iter().map(Schema::of).collect()),
            other => Schema::Scalar(class(other)),
        }
    }

    /// True when `v` does not change the class of any path already seen.
    pub fn accepts(&self, v: &Bson) -> bool {
        match (self, v) {
            (Schema::Object(fields), Bson::Document(d)) => d.iter().all(|(k, v)| {
                fields
                    .iter()
                    .find(|(n, _)| n == k)
                    .is_none_or(|(_, s)| s.accepts(v))
            }),
            (Schema::Array(elems), Bson::Array(a)) => a
                .iter()
                .enumerate()
                .all(|(i, v)| elems.get(i).is_none_or(|s| s.accepts(v))),
            (Schema::Scalar(c), v) => {
                !matches!(v, Bson::Document(_) | Bson::Array(_)) && class(v) == *c
            }
            _ => false,
        }
    }

    /// Records the paths of `v` (which [`Schema::accepts`] approved).
    pub fn absorb(&mut self, v: &Bson) {
        match (self, v) {
            (Schema::Object(fields), Bson::Document(d)) => {
                for (k, v) in d {
                    match fields.iter_mut().find(|(n, _)| n == k) {
                        Some((_, s)) => s.absorb(v),
                        None => fields.push((k.clone(), Schema::of(v))),
                    }
                }
            }
            (Schema::Array(elems), Bson::Array(a)) => {
                for (i, v) in a.iter().enumerate() {
                    match elems.get_mut(i) {
                        Some(s) => s.absorb(v),
                        None => elems.push(Schema::of(v)),
                    }
                }
            }
            _ => {}
        }
    }

    /// Cheap check for scalar values: the common case, no recursion.
    pub fn is_scalar_class(&self, v: &Bson) -> Option<bool> {
        match self {
            Schema::Scalar(c) if !matches!(v, Bson::Document(_) | Bson::Array(_)) => {
                Some(class(v) == *c)
            }
            _ => None,
        }
    }
}

/// Inserts `v` as `min`/`max` of `field` in control documents.
pub fn fold_into(doc: &mut Document, field: &str, v: &Bson, want: Ordering) {
    match doc.get_mut(field) {
        Some(cur) => fold_extreme(cur, v, want),
        None => {
            doc.insert(field.to_string(), v.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::{doc, Decimal128};

    fn fold_all(vals: &[Bson], want: Ordering) -> Bson {
        let mut cur = vals[0].clone();
        for v in &vals[1..] {
            fold_extreme(&mut cur, v, want);
        }
        cur
    }

    #[test]
    fn documents_and_arrays_fold_element_wise() {
        let vals = [
            Bson::Document(doc! {"x": 1, "y": 2}),
            Bson::Document(doc! {"x": 2, "y": 1}),
        ];
        assert_eq!(
            fold_all(&vals, Ordering::Less),
            Bson::Document(doc! {"x": 1, "y": 1})
        );
        assert_eq!(
            fold_all(&vals, Ordering::Greater),
            Bson::Document(doc! {"x": 2, "y": 2})
        );
        let arrs = [
            Bson::Array(vec![1.into(), 2.into()]),
            Bson::Array(vec![2.into(), 1.into()]),
        ];
        assert_eq!(
            fold_all(&arrs, Ordering::Less),
            Bson::Array(vec![1.into(), 1.into()])
        );
    }

    #[test]
    fn numbers_keep_the_winning_type() {
        let d: Decimal128 = "2.5".parse().unwrap();
        let vals = [
            Bson::Double(1.5),
            Bson::Int64(2),
            Bson::Int32(1),
            Bson::Decimal128(d),
            Bson::Double(0.5),
        ];
        assert_eq!(fold_all(&vals, Ordering::Less), Bson::Double(0.5));
        assert_eq!(fold_all(&vals, Ordering::Greater), Bson::Decimal128(d));
    }

    #[test]
    fn schema_detects_class_changes() {
        let s = Schema::of(&Bson::Int32(1));
        assert!(s.accepts(&Bson::Double(2.0)));
        assert!(!s.accepts(&Bson::String("x".into())));
        assert!(!s.accepts(&Bson::Document(doc! {"b": 1})));
        let mut a = Schema::of(&Bson::Array(vec![]));
        assert!(a.accepts(&Bson::Array(vec![5.into()])));
        a.absorb(&Bson::Array(vec![5.into()]));
        assert!(!a.accepts(&Bson::Array(vec!["x".into()])));
        let o = Schema::of(&Bson::Document(doc! {"b": 1}));
        assert!(o.accepts(&Bson::Document(doc! {"c": "new field"})));
        assert!(!o.accepts(&Bson::Document(doc! {"b": "s"})));
        assert!(!o.accepts(&Bson::Array(vec![])));
    }
}
