//! Update operator documents restricted to the meta field: parsed once, then applied to each
//! bucket's meta value.

use super::rules::{is_meta_path, not_meta_update, require_meta};
use crate::doc::meta::normalize;
use crate::error::{Error, Result};
use crate::order::cmp_bson;
use bson::{Bson, Document};
use std::cmp::Ordering;

/// One operator applied to one path.
#[derive(Debug, Clone, PartialEq)]
enum Op {
    Set(Bson),
    Unset,
    Inc(Bson),
    Mul(Bson),
    Min(Bson),
    Max(Bson),
    /// Moves the value to this path.
    Rename(String),
}

/// A parsed meta-only update.
#[derive(Debug, Clone)]
pub struct MetaUpdate {
    meta_field: String,
    ops: Vec<(String, Op)>,
}

impl MetaUpdate {
    /// Parses `update`, refusing what MongoDB's legacy rules refuse: replacement documents and
    /// operators on other fields are `InvalidOptions` (72); unknown or unsupported operators
    /// and conflicting paths are `BadValue`.
    pub fn parse(update: &Document, meta_field: Option<&str>) -> Result<MetaUpdate> {
        crate::depth::check(update, "update")?;
        let meta = require_meta(meta_field)?;
        if update.is_empty() || update.keys().all(|k| !k.starts_with('$')) {
            return Err(not_meta_update(meta));
        }
        let mut ops = Vec::new();
        for (name, arg) in update {
            let Bson::Document(fields) = arg else {
                return Err(Error::BadValue(format!(
                    "Modifiers operate on fields but we found type {:?} instead for {name}",
                    arg.element_type()
                )));
            };
            for (path, v) in fields {
                let op = match name.as_str() {
                    "$set" => Op::Set(v.clone()),
                    "$unset" => Op::Unset,
                    "$inc" | "$mul" => {
                        if !matches!(v, Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_)) {
                            return Err(Error::BadValue(format!(
                                "Cannot {} with non-numeric argument: {{{path}: {v}}}",
                                if name == "$inc" {
                                    "increment"
                                } else {
                                    "multiply"
                                }
                            )));
                        }
                        if name == "$inc" {
                            Op::Inc(v.clone())
                        } else {
                            Op::Mul(v.clone())
                        }
                    }
                    "$min" => Op::Min(v.clone()),
                    "$max" => Op::Max(v.clone()),
                    "$rename" => match v {
                        Bson::String(to) => {
                            if !is_meta_path(to, meta) {
                                return Err(not_meta_update(meta));
                            }
                            Op::Rename(to.clone())
                        }
                        _ => {
                            return Err(Error::BadValue(format!(
                                "The 'to' field for $rename must be a string: {path}: {v}"
                            )))
                        }
                    },
                    s if s.starts_with('$') => {
                        return Err(Error::BadValue(format!(
                            "update operator {s} is not supported on a time-series collection; \
                             use $set, $unset, $rename, $inc, $mul, $min or $max"
                        )))
                    }
                    s => {
                        return Err(Error::BadValue(format!(
                            "the update document mixes operators with the plain field '{s}'"
                        )))
                    }
                };
                if !is_meta_path(path, meta) {
                    return Err(not_meta_update(meta));
                }
                if path.split('.').any(|p| p.is_empty() || p.starts_with('$')) {
                    return Err(Error::BadValue(format!(
                        "update path '{path}' is empty in part or positional, which time-series \
                         meta updates do not support"
                    )));
                }
                ops.push((path.clone(), op));
            }
        }
        let mut touched: Vec<&str> = Vec::new();
        for (p, op) in &ops {
            touched.push(p);
            if let Op::Rename(to) = op {
                touched.push(to);
            }
        }
        for (i, a) in touched.iter().enumerate() {
            for b in touched.iter().skip(i + 1) {
                if a == b || is_meta_path(a, b) || is_meta_path(b, a) {
                    return Err(Error::BadValue(format!(
                        "Updating the path '{a}' would create a conflict at '{b}'"
                    )));
                }
            }
        }
        Ok(MetaUpdate {
            meta_field: meta.to_string(),
            ops,
        })
    }

    /// The normalised meta value after the update, or an error (nothing is written then).
    pub fn apply(&self, meta: Option<&Bson>) -> Result<Option<Bson>> {
        let mut d = Document::new();
        if let Some(m) = meta {
            d.insert(self.meta_field.clone(), m.clone());
        }
        for (path, op) in &self.ops {
            match op {
                Op::Set(v) => set_path(&mut d, path, v.clone())?,
                Op::Unset => {
                    remove_path(&mut d, path);
                }
                Op::Inc(x) => {
                    let new = match get_path(&d, path) {
                        None => x.clone(),
                        Some(old) => arith(old, x, path, "$inc", i64::checked_add, |a, b| a + b)?,
                    };
                    set_path(&mut d, path, new)?
                }
                Op::Mul(x) => {
                    let new = match get_path(&d, path) {
                        None => zero_like(x),
                        Some(old) => arith(old, x, path, "$mul", i64::checked_mul, |a, b| a * b)?,
                    };
                    set_path(&mut d, path, new)?
                }
                Op::Min(x) | Op::Max(x) => {
                    let want = if matches!(op, Op::Min(_)) {
                        Ordering::Less
                    } else {
                        Ordering::Greater
                    };
                    let replace = get_path(&d, path).is_none_or(|old| cmp_bson(x, old) == want);
                    if replace {
                        set_path(&mut d, path, x.clone())?
                    }
                }
                Op::Rename(to) => {
                    if let Some(v) = remove_path(&mut d, path) {
                        set_path(&mut d, to, v)?
                    }
                }
            }
        }
        // A dotted path can put a value that was shallow enough deeper than it was.
        crate::depth::check_stored(&d, "updated meta value")?;
        Ok(d.get(&self.meta_field).map(normalize))
    }
}

fn zero_like(x: &Bson) -> Bson {
    match x {
        Bson::Int32(_) => Bson::Int32(0),
        Bson::Int64(_) => Bson::Int64(0),
        _ => Bson::Double(0.0),
    }
}

/// Integer arithmetic widens Int32 to Int64 on overflow, as MongoDB does; Int64 overflow is
/// refused; any double makes the result a double.
fn arith(
    old: &Bson,
    x: &Bson,
    path: &str,
    name: &str,
    int: fn(i64, i64) -> Option<i64>,
    float: fn(f64, f64) -> f64,
) -> Result<Bson> {
    let as_int = |v: &Bson| match v {
        Bson::Int32(i) => Some(i64::from(*i)),
        Bson::Int64(i) => Some(*i),
        _ => None,
    };
    let as_float = |v: &Bson| match v {
        Bson::Double(f) => Some(*f),
        _ => as_int(v).map(|i| i as f64),
    };
    if let (Some(a), Some(b)) = (as_int(old), as_int(x)) {
        let r = int(a, b).ok_or_else(|| {
            Error::BadValue(format!("{name} on '{path}' overflows a 64-bit integer"))
        })?;
        let both32 = matches!((old, x), (Bson::Int32(_), Bson::Int32(_)));
        return Ok(match i32::try_from(r) {
            Ok(small) if both32 => Bson::Int32(small),
            _ => Bson::Int64(r),
        });
    }
    match (as_float(old), as_float(x)) {
        (Some(a), Some(b)) => Ok(Bson::Double(float(a, b))),
        _ => Err(Error::BadValue(format!(
            "Cannot apply {name} to a value of non-numeric type at '{path}'"
        ))),
    }
}

fn get_path<'a>(d: &'a Document, path: &str) -> Option<&'a Bson> {
    let (head, rest) = match path.split_once('.') {
        Some((h, r)) => (h, Some(r)),
        None => (path, None),
    };
    let v = d.get(head)?;
    match (rest, v) {
        (None, v) => Some(v),
        (Some(r), Bson::Document(sub)) => get_path(sub, r),
        _ => None,
    }
}

fn set_path(d: &mut Document, path: &str, value: Bson) -> Result<()> {
    match path.split_once('.') {
        None => {
            d.insert(path, value);
            Ok(())
        }
        Some((head, rest)) => {
            let entry = d
                .entry(head.to_string())
                .or_insert_with(|| Bson::Document(Document::new()));
            match entry {
                Bson::Document(sub) => set_path(sub, rest, value),
                other => Err(Error::BadValue(format!(
                    "Cannot create field '{rest}' in element {{{head}: {other}}}"
                ))),
            }
        }
    }
}

fn remove_path(d: &mut Document, path: &str) -> Option<Bson> {
    match path.split_once('.') {
        None => d.remove(path),
        Some((head, rest)) => match d.get_mut(head) {
            Some(Bson::Document(sub)) => remove_path(sub, rest),
            _ => None,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    fn meta(d: Document) -> Option<Bson> {
        Some(Bson::Document(d))
    }

    #[test]
    fn operators_apply_to_the_meta_value() {
        let u = MetaUpdate::parse(
            &doc! {"$set": {"tag.z": "Z"}, "$inc": {"tag.n": 2}, "$unset": {"tag.gone": ""},
            "$rename": {"tag.old": "tag.new"}, "$min": {"tag.lo": 3}, "$max": {"tag.hi": 3},
            "$mul": {"tag.m": 2.5}},
            Some("tag"),
        )
        .unwrap();
        let got = u
            .apply(meta(doc! {"n": 1, "gone": 1, "old": "o", "lo": 5, "hi": 5, "m": 2}).as_ref())
            .unwrap();
        assert_eq!(
            got,
            meta(doc! {"hi": 5, "lo": 3, "m": 5.0, "n": 3, "new": "o", "z": "Z"})
        );
    }

    #[test]
    fn whole_meta_can_be_set_or_removed() {
        let u = MetaUpdate::parse(&doc! {"$set": {"tag": {"b": 1, "a": 2}}}, Some("tag")).unwrap();
        assert_eq!(u.apply(None).unwrap(), meta(doc! {"a": 2, "b": 1}));
        let u = MetaUpdate::parse(&doc! {"$unset": {"tag": 1}}, Some("tag")).unwrap();
        assert_eq!(u.apply(meta(doc! {"a": 1}).as_ref()).unwrap(), None);
    }

    #[test]
    fn refusals() {
        let code = |u: Document| MetaUpdate::parse(&u, Some("tag")).unwrap_err().code();
        assert_eq!(code(doc! {"$set": {"x": 1}}), Some(72));
        assert_eq!(code(doc! {"tag": 1}), Some(72));
        assert_eq!(code(doc! {}), Some(72));
        assert_eq!(code(doc! {"$rename": {"tag.a": "x"}}), Some(72));
        assert_eq!(code(doc! {"$set": {"tag.a": 1, "tag": 2}}), Some(2));
        assert_eq!(code(doc! {"$push": {"tag.a": 1}}), Some(2));
        assert_eq!(code(doc! {"$inc": {"tag.a": "s"}}), Some(2));
        let u = MetaUpdate::parse(&doc! {"$inc": {"tag.a": 1}}, Some("tag")).unwrap();
        assert_eq!(
            u.apply(meta(doc! {"a": "s"}).as_ref()).unwrap_err().code(),
            Some(2)
        );
    }

    #[test]
    fn int32_overflow_widens() {
        let u = MetaUpdate::parse(&doc! {"$inc": {"tag": 1}}, Some("tag")).unwrap();
        assert_eq!(
            u.apply(Some(&Bson::Int32(i32::MAX))).unwrap(),
            Some(Bson::Int64(i64::from(i32::MAX) + 1))
        );
    }
}
