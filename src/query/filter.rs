//! MongoDB query filters: parsed into a typed tree once, then matched against documents.
//!
//! Matching follows MongoDB: dotted paths descend into embedded documents and through arrays;
//! a predicate on an array field matches when the array itself or any element matches;
//! comparisons only match values of the same canonical type (`{x: {$gt: 5}}` never matches a
//! string); `{x: null}` matches documents where `x` is missing. As in MongoDB, a missing
//! field also satisfies `$lt`/`$lte: MaxKey` and `$gt`/`$gte: MinKey`, and NaN satisfies no
//! `$lt`/`$gt` and only the `$lte`/`$gte`/`$eq` of another NaN.

use crate::error::{Error, Result};
use crate::order::{as_f64, cmp_bson, type_rank};
use bson::{Bson, Document};
use std::cmp::Ordering;

/// A parsed filter.
#[derive(Debug, Clone, PartialEq)]
pub enum Filter {
    /// Matches everything (the empty filter).
    True,
    /// All must match.
    And(Vec<Filter>),
    /// At least one must match.
    Or(Vec<Filter>),
    /// None may match.
    Nor(Vec<Filter>),
    /// A predicate on the values at a dotted path.
    Field {
        /// Dotted path.
        path: String,
        /// What the values must satisfy.
        pred: Pred,
    },
}

/// A predicate on the values found at a path.
#[derive(Debug, Clone, PartialEq)]
pub enum Pred {
    /// `$eq`
    Eq(Bson),
    /// `$ne`
    Ne(Bson),
    /// `$gt`
    Gt(Bson),
    /// `$gte`
    Gte(Bson),
    /// `$lt`
    Lt(Bson),
    /// `$lte`
    Lte(Bson),
    /// `$in`
    In(Vec<Bson>),
    /// `$nin`
    Nin(Vec<Bson>),
    /// `$exists`
    Exists(bool),
    /// `$not`
    Not(Box<Pred>),
    /// Several operators on one path (`{x: {$gt: 1, $lt: 5}}`).
    All(Vec<Pred>),
}

/// Top-level field access for matching: documents, and rows read straight from columns.
pub trait Fields {
    /// The value of top-level field `name`, if the row has it.
    fn field(&self, name: &str) -> Option<&Bson>;
}

impl Fields for Document {
    fn field(&self, name: &str) -> Option<&Bson> {
        self.get(name)
    }
}

/// Splits a dotted path into its first component and the rest.
pub fn split_path(path: &str) -> (&str, Option<&str>) {
    // A byte search: paths are short, and `str::split_once` first sets up a `memchr`, which
    // was a sixth of judging meta values bucket by bucket.
    let cut = path
        .bytes()
        .position(|b| b == b'.')
        .and_then(|i| path.split_at_checked(i));
    match cut {
        Some((h, r)) => (h, r.get(1..)),
        None => (path, None),
    }
}

fn bad(msg: impl Into<String>) -> Error {
    Error::BadValue(msg.into())
}

impl Filter {
    /// Parses a MongoDB filter document; one nested deeper than MongoDB allows is
    /// `BadValue` (see [`crate::depth`]).
    pub fn parse(d: &Document) -> Result<Filter> {
        crate::depth::check(d, "filter")?;
        Filter::parse_checked(d)
    }

    /// [`Filter::parse`] for a document whose depth was checked already (a part of a filter,
    /// or a `$match` stage's, checked with its pipeline stage).
    pub(crate) fn parse_checked(d: &Document) -> Result<Filter> {
        let mut parts = Vec::new();
        for (k, v) in d {
            parts.push(parse_entry(k, v)?);
        }
        Ok(match parts.len() {
            0 => Filter::True,
            1 => parts.pop().unwrap_or(Filter::True),
            _ => Filter::And(parts),
        })
    }

    /// True when `doc` matches.
    pub fn matches(&self, doc: &Document) -> bool {
        self.matches_row(doc)
    }

    /// True when `row` matches; rows read straight from columns need no document.
    pub fn matches_row<R: Fields + ?Sized>(&self, row: &R) -> bool {
        match self {
            Filter::True => true,
            Filter::And(v) => v.iter().all(|f| f.matches_row(row)),
            Filter::Or(v) => v.iter().any(|f| f.matches_row(row)),
            Filter::Nor(v) => !v.iter().any(|f| f.matches_row(row)),
            Filter::Field { path, pred } => {
                let (head, rest) = split_path(path);
                pred.matches_at(row.field(head), rest)
            }
        }
    }

    /// The top-level conjuncts (a non-`And` filter is its own single conjunct).
    pub fn conjuncts(&self) -> Vec<&Filter> {
        match self {
            Filter::True => Vec::new(),
            Filter::And(v) => v.iter().flat_map(Filter::conjuncts).collect(),
            other => vec![other],
        }
    }

    /// The same filter reading each path `rename` gives for it.
    pub fn renamed(&self, rename: &dyn Fn(&str) -> String) -> Filter {
        match self {
            Filter::True => Filter::True,
            Filter::And(v) => Filter::And(v.iter().map(|f| f.renamed(rename)).collect()),
            Filter::Or(v) => Filter::Or(v.iter().map(|f| f.renamed(rename)).collect()),
            Filter::Nor(v) => Filter::Nor(v.iter().map(|f| f.renamed(rename)).collect()),
            Filter::Field { path, pred } => Filter::Field {
                path: rename(path),
                pred: pred.clone(),
            },
        }
    }

    /// Every path the filter reads.
    pub fn paths(&self, out: &mut Vec<String>) {
        match self {
            Filter::True => {}
            Filter::And(v) | Filter::Or(v) | Filter::Nor(v) => v.iter().for_each(|f| f.paths(out)),
            Filter::Field { path, .. } => out.push(path.clone()),
        }
    }
}

fn parse_list(op: &str, v: &Bson) -> Result<Vec<Filter>> {
    let arr = match v {
        Bson::Array(a) if !a.is_empty() => a,
        _ => return Err(bad(format!("{op} must be a nonempty array"))),
    };
    arr.iter()
        .map(|e| match e {
            Bson::Document(d) => Filter::parse_checked(d),
            _ => Err(bad(format!("{op} argument's entries must be objects"))),
        })
        .collect()
}

/// MongoDB's top-level query operators that filters do not take yet: refused as such, not
/// as unknown, so that a user can tell them from a typo.
const MONGODB_TOP_LEVEL: &[&str] = &["$expr", "$where", "$text", "$jsonSchema"];

/// MongoDB's field query operators that filters do not take yet (see [`MONGODB_TOP_LEVEL`]).
const MONGODB_FIELD_LEVEL: &[&str] = &[
    "$regex",
    "$options",
    "$type",
    "$mod",
    "$all",
    "$elemMatch",
    "$size",
    "$bitsAllSet",
    "$bitsAllClear",
    "$bitsAnySet",
    "$bitsAnyClear",
    "$geoWithin",
    "$geoIntersects",
    "$near",
    "$nearSphere",
];

fn parse_entry(k: &str, v: &Bson) -> Result<Filter> {
    match k {
        "$and" => Ok(Filter::And(parse_list(k, v)?)),
        "$or" => Ok(Filter::Or(parse_list(k, v)?)),
        "$nor" => Ok(Filter::Nor(parse_list(k, v)?)),
        // A note for the server's logs in MongoDB; it never affects matching.
        "$comment" => Ok(Filter::True),
        _ if MONGODB_TOP_LEVEL.contains(&k) => Err(bad(format!(
            "{k} is a MongoDB query operator that tsbucket does not support yet (supported at \
             the top level: $and $or $nor $comment)"
        ))),
        _ if k.starts_with('$') => Err(bad(format!("unknown top level operator: {k}"))),
        _ => {
            if k.is_empty() || k.split('.').any(str::is_empty) {
                return Err(bad(format!("invalid field path '{k}'")));
            }
            Ok(Filter::Field {
                path: k.to_string(),
                pred: parse_value(v)?,
            })
        }
    }
}

fn is_operator_doc(d: &Document) -> bool {
    d.keys().next().is_some_and(|k| k.starts_with('$'))
}

fn parse_value(v: &Bson) -> Result<Pred> {
    match v {
        Bson::Document(d) if is_operator_doc(d) => parse_operators(d),
        Bson::RegularExpression(_) => Err(bad("regular expressions are not supported in filters")),
        other => Ok(Pred::Eq(operand(other)?)),
    }
}

fn parse_operators(d: &Document) -> Result<Pred> {
    let mut preds = Vec::new();
    for (op, arg) in d {
        let p = match op.as_str() {
            "$eq" => Pred::Eq(operand(arg)?),
            "$ne" => Pred::Ne(operand(arg)?),
            "$gt" => Pred::Gt(operand(arg)?),
            "$gte" => Pred::Gte(operand(arg)?),
            "$lt" => Pred::Lt(operand(arg)?),
            "$lte" => Pred::Lte(operand(arg)?),
            "$in" | "$nin" => {
                let Bson::Array(a) = arg else {
                    return Err(bad(format!("{op} needs an array")));
                };
                if a.iter().any(|x| matches!(x, Bson::RegularExpression(_))) {
                    return Err(bad(format!(
                        "regular expressions in {op} are not supported"
                    )));
                }
                for x in a {
                    operand(x)?;
                }
                if op == "$in" {
                    Pred::In(a.clone())
                } else {
                    Pred::Nin(a.clone())
                }
            }
            "$exists" => Pred::Exists(truthy(arg)),
            "$not" => match arg {
                Bson::Document(inner) if is_operator_doc(inner) => {
                    Pred::Not(Box::new(parse_operators(inner)?))
                }
                _ => {
                    return Err(bad(
                        "$not needs an operator document, e.g. {$not: {$gt: 5}}",
                    ))
                }
            },
            other if MONGODB_FIELD_LEVEL.contains(&other) => {
                return Err(bad(format!(
                    "{other} is a MongoDB query operator that tsbucket does not support yet \
                     (supported: $eq $ne $gt $gte $lt $lte $in $nin $exists $not)"
                )))
            }
            other if other.starts_with('$') => {
                return Err(bad(format!("unknown operator: {other}")))
            }
            other => {
                return Err(bad(format!(
                    "cannot mix operators and field names in one condition (found '{other}')"
                )))
            }
        };
        preds.push(p);
    }
    Ok(match preds.len() {
        1 => preds.pop().unwrap_or(Pred::All(Vec::new())),
        _ => Pred::All(preds),
    })
}

/// A comparison operand; MongoDB refuses `undefined` ("cannot compare to undefined").
fn operand(v: &Bson) -> Result<Bson> {
    match v {
        Bson::Undefined => Err(bad("cannot compare to undefined")),
        other => Ok(other.clone()),
    }
}

fn truthy(v: &Bson) -> bool {
    match v {
        Bson::Boolean(b) => *b,
        Bson::Null | Bson::Undefined => false,
        Bson::Int32(i) => *i != 0,
        Bson::Int64(i) => *i != 0,
        Bson::Double(d) => *d != 0.0,
        _ => true,
    }
}

/// Collects the values at `path` in `doc`, descending through arrays as MongoDB does.
pub fn collect_doc<'a>(doc: &'a Document, path: &str, out: &mut Vec<&'a Bson>) {
    let (head, rest) = split_path(path);
    if let Some(v) = doc.get(head) {
        match rest {
            None => out.push(v),
            Some(r) => collect_value(v, r, out),
        }
    }
}

/// Collects the values at `path` below the value `v` (the path is relative to `v`).
pub fn collect_value<'a>(v: &'a Bson, path: &str, out: &mut Vec<&'a Bson>) {
    match v {
        Bson::Document(d) => collect_doc(d, path, out),
        Bson::Array(a) => {
            let (head, rest) = split_path(path);
            if let Some(e) = head.parse::<usize>().ok().and_then(|i| a.get(i)) {
                match rest {
                    None => out.push(e),
                    Some(r) => collect_value(e, r, out),
                }
            }
            for e in a {
                if let Bson::Document(d) = e {
                    collect_doc(d, path, out);
                }
            }
        }
        _ => {}
    }
}

fn cmp_same_type(v: &Bson, operand: &Bson) -> Option<Ordering> {
    let (rv, ro) = (type_rank(v), type_rank(operand));
    // MinKey and MaxKey compare with everything; other types only within their bracket.
    if rv == ro || matches!(operand, Bson::MinKey | Bson::MaxKey) {
        Some(cmp_bson(v, operand))
    } else {
        None
    }
}

/// Tests each value, and each element of array values, with `f`.
fn any_value(vals: &[&Bson], f: &dyn Fn(&Bson) -> bool) -> bool {
    vals.iter().any(|v| {
        f(v) || match v {
            Bson::Array(a) => a.iter().any(f),
            _ => false,
        }
    })
}

fn eq_matches(vals: &[&Bson], operand: &Bson) -> bool {
    if matches!(operand, Bson::Null)
        && (vals.is_empty() || any_value(vals, &|v| matches!(v, Bson::Null | Bson::Undefined)))
    {
        return true;
    }
    any_value(vals, &|v| {
        cmp_same_type(v, operand) == Some(Ordering::Equal)
    })
}

/// What lies at a path below a value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Reach<'a> {
    /// This one value, reached without crossing an array.
    Value(&'a Bson),
    /// Nothing, and no array was crossed.
    Missing,
    /// An array is in the way: every branch must be collected.
    ThroughArray,
}

/// Follows `path` below `v` through embedded documents only.
pub fn resolve_plain<'a>(mut v: &'a Bson, path: &str) -> Reach<'a> {
    let mut rest = Some(path);
    while let Some(p) = rest {
        let (part, next) = split_path(p);
        v = match v {
            Bson::Document(d) => match d.get(part) {
                Some(x) => x,
                None => return Reach::Missing,
            },
            Bson::Array(_) => return Reach::ThroughArray,
            _ => return Reach::Missing,
        };
        rest = next;
    }
    Reach::Value(v)
}

impl Pred {
    /// True when the values found at the path satisfy the predicate.
    pub fn matches(&self, vals: &[&Bson]) -> bool {
        match self {
            Pred::Eq(x) => eq_matches(vals, x),
            Pred::Ne(x) => !eq_matches(vals, x),
            Pred::Gt(x) => range(vals, x, Cmp::Gt),
            Pred::Gte(x) => range(vals, x, Cmp::Gte),
            Pred::Lt(x) => range(vals, x, Cmp::Lt),
            Pred::Lte(x) => range(vals, x, Cmp::Lte),
            Pred::In(xs) => xs.iter().any(|x| eq_matches(vals, x)),
            Pred::Nin(xs) => !xs.iter().any(|x| eq_matches(vals, x)),
            Pred::Exists(e) => vals.is_empty() != *e,
            Pred::Not(p) => !p.matches(vals),
            Pred::All(ps) => ps.iter().all(|p| p.matches(vals)),
        }
    }

    /// Matches the values at `rest` below `top` (the value of the path's first component, if
    /// any), without collecting them into a list unless the path crosses an array.
    pub fn matches_at(&self, top: Option<&Bson>, rest: Option<&str>) -> bool {
        let Some(v) = top else {
            return self.matches(&[]);
        };
        let Some(rest) = rest else {
            return self.matches(&[v]);
        };
        match resolve_plain(v, rest) {
            Reach::Value(x) => self.matches(&[x]),
            Reach::Missing => self.matches(&[]),
            Reach::ThroughArray => {
                let mut vals = Vec::new();
                collect_value(v, rest, &mut vals);
                self.matches(&vals)
            }
        }
    }
}

/// A range operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cmp {
    /// `$gt`
    Gt,
    /// `$gte`
    Gte,
    /// `$lt`
    Lt,
    /// `$lte`
    Lte,
}

impl Cmp {
    /// True when a value ordered `o` against the operand passes.
    pub(crate) fn accepts(self, o: Ordering) -> bool {
        match self {
            Cmp::Gt => o == Ordering::Greater,
            Cmp::Gte => o != Ordering::Less,
            Cmp::Lt => o == Ordering::Less,
            Cmp::Lte => o != Ordering::Greater,
        }
    }

    fn inclusive(self) -> bool {
        matches!(self, Cmp::Gte | Cmp::Lte)
    }
}

/// True for a double or decimal NaN.
pub fn is_nan(v: &Bson) -> bool {
    match v {
        Bson::Double(d) => d.is_nan(),
        Bson::Decimal128(_) => as_f64(v).is_some_and(f64::is_nan),
        _ => false,
    }
}

/// One value against a range operand, MongoDB's way: only within a type bracket (MinKey and
/// MaxKey compare with everything), and NaN is only ever equal to NaN.
pub fn cmp_matches(v: &Bson, x: &Bson, op: Cmp) -> bool {
    let Some(o) = cmp_same_type(v, x) else {
        return false;
    };
    // MinKey and MaxKey bound NaN like any other value; among numbers NaN is special.
    let (nv, nx) = (is_nan(v), is_nan(x));
    if (nv || nx) && type_rank(v) == type_rank(x) {
        return op.inclusive() && nv && nx;
    }
    op.accepts(o)
}

fn range(vals: &[&Bson], x: &Bson, op: Cmp) -> bool {
    if vals.is_empty() {
        // A missing field compares like MongoDB's EOO: equal to null, below MaxKey and above
        // MinKey.
        return match x {
            Bson::Null => op.inclusive(),
            Bson::MaxKey => matches!(op, Cmp::Lt | Cmp::Lte),
            Bson::MinKey => matches!(op, Cmp::Gt | Cmp::Gte),
            _ => false,
        };
    }
    // `{$gte: null}` / `{$lte: null}` match null and undefined values like `{$eq: null}`.
    if matches!(x, Bson::Null) && op.inclusive() && eq_matches(vals, x) {
        return true;
    }
    any_value(vals, &|v| cmp_matches(v, x, op))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    fn m(filter: Document, d: Document) -> bool {
        Filter::parse(&filter).unwrap().matches(&d)
    }

    #[test]
    fn implicit_equality_and_dotted_paths() {
        let d = doc! {"a": 1, "m": {"host": "h1", "rack": 5}};
        assert!(m(doc! {"a": 1}, d.clone()));
        assert!(m(doc! {"a": 1.0}, d.clone()));
        assert!(m(doc! {"m.host": "h1"}, d.clone()));
        assert!(!m(doc! {"m.host": "h2"}, d.clone()));
        assert!(m(doc! {"m.rack": {"$gte": 5, "$lt": 6}}, d.clone()));
        assert!(m(doc! {"missing": null}, d.clone()));
        assert!(!m(doc! {"a": null}, d));
    }

    #[test]
    fn comparisons_respect_type_brackets() {
        let d = doc! {"x": "abc"};
        assert!(!m(doc! {"x": {"$gt": 5}}, d.clone()));
        assert!(m(doc! {"x": {"$gt": "ab"}}, d.clone()));
        assert!(m(doc! {"x": {"$ne": 5}}, d));
    }

    #[test]
    fn arrays_match_by_element() {
        let d = doc! {"tags": [1, 5, 9], "pts": [{"v": 1}, {"v": 7}]};
        assert!(m(doc! {"tags": 5}, d.clone()));
        assert!(m(doc! {"tags": {"$gt": 8}}, d.clone()));
        assert!(m(doc! {"pts.v": 7}, d.clone()));
        assert!(m(doc! {"tags.1": 5}, d.clone()));
        assert!(m(doc! {"tags": [1, 5, 9]}, d));
    }

    #[test]
    fn logical_operators() {
        let d = doc! {"a": 1, "b": 2};
        assert!(m(doc! {"$or": [{"a": 2}, {"b": 2}]}, d.clone()));
        assert!(!m(doc! {"$nor": [{"a": 2}, {"b": 2}]}, d.clone()));
        assert!(m(
            doc! {"$and": [{"a": 1}, {"b": {"$in": [2, 3]}}]},
            d.clone()
        ));
        assert!(m(doc! {"a": {"$nin": [2, 3]}}, d.clone()));
        assert!(m(doc! {"a": {"$not": {"$gt": 1}}}, d.clone()));
        assert!(m(doc! {"c": {"$exists": false}}, d));
    }

    #[test]
    fn null_matches_missing_and_null_but_not_empty_arrays() {
        assert!(m(doc! {"a": {"$in": [null, 5]}}, doc! {}));
        assert!(m(doc! {"a": {"$in": [null]}}, doc! {"a": null}));
        assert!(!m(doc! {"a": {"$in": [null]}}, doc! {"a": []}));
        assert!(m(doc! {"a": {"$in": [null]}}, doc! {"a": [1, null]}));
        assert!(!m(doc! {"a": {"$nin": [null]}}, doc! {}));
        assert!(m(doc! {"a": {"$ne": null}}, doc! {"a": []}));
        assert!(m(doc! {"a": {"$gte": null}}, doc! {}));
        assert!(!m(doc! {"a": {"$gt": null}}, doc! {}));
        assert!(!m(doc! {"a": {"$gt": null}}, doc! {"a": 1}));
        assert!(m(doc! {"a.b": null}, doc! {"a": 5}));
    }

    #[test]
    fn ne_and_nin_on_arrays_exclude_any_element() {
        let d = doc! {"a": [1, 2, 3]};
        assert!(!m(doc! {"a": {"$ne": 2}}, d.clone()));
        assert!(m(doc! {"a": {"$ne": 4}}, d.clone()));
        assert!(!m(doc! {"a": {"$nin": [4, 3]}}, d.clone()));
        assert!(m(doc! {"a": {"$nin": [4, 5]}}, d.clone()));
        assert!(!m(doc! {"a": {"$ne": [1, 2, 3]}}, d));
    }

    #[test]
    fn exists_follows_dotted_paths_through_arrays() {
        let d = doc! {"a": [{"b": 1}, {"c": 2}, 7], "n": [[{"b": 1}]]};
        assert!(m(doc! {"a.b": {"$exists": true}}, d.clone()));
        assert!(m(doc! {"a.c": {"$exists": true}}, d.clone()));
        assert!(!m(doc! {"a.d": {"$exists": true}}, d.clone()));
        assert!(m(doc! {"a.2": {"$exists": true}}, d.clone()));
        assert!(!m(doc! {"a.3": {"$exists": true}}, d.clone()));
        assert!(m(doc! {"a.0.b": {"$exists": true}}, d.clone()));
        // Arrays directly inside arrays are not searched by field name.
        assert!(!m(doc! {"n.b": {"$exists": true}}, d.clone()));
        assert!(m(doc! {"n.b": {"$exists": false}}, d));
    }

    #[test]
    fn min_and_max_key_bound_every_value_and_missing_fields() {
        for d in [
            doc! {"a": 1},
            doc! {"a": "s"},
            doc! {"a": null},
            doc! {},
            doc! {"a": []},
        ] {
            assert!(m(doc! {"a": {"$lt": Bson::MaxKey}}, d.clone()), "{d}");
            assert!(m(doc! {"a": {"$lte": Bson::MaxKey}}, d.clone()), "{d}");
            assert!(m(doc! {"a": {"$gt": Bson::MinKey}}, d.clone()), "{d}");
            assert!(!m(doc! {"a": {"$gt": Bson::MaxKey}}, d.clone()), "{d}");
            assert!(!m(doc! {"a": {"$lt": Bson::MinKey}}, d.clone()), "{d}");
            assert!(!m(doc! {"a": Bson::MaxKey}, d.clone()), "{d}");
        }
        assert!(m(doc! {"a": Bson::MaxKey}, doc! {"a": Bson::MaxKey}));
        assert!(m(
            doc! {"a": {"$gte": Bson::MaxKey}},
            doc! {"a": Bson::MaxKey}
        ));
        assert!(!m(doc! {"a": {"$gt": 5}}, doc! {"a": Bson::MaxKey}));
    }

    #[test]
    fn nan_only_equals_nan() {
        let nan = doc! {"a": f64::NAN};
        for f in [
            doc! {"a": {"$lt": 0}},
            doc! {"a": {"$lte": 0}},
            doc! {"a": {"$gt": 0}},
            doc! {"a": {"$gte": f64::NEG_INFINITY}},
            doc! {"a": {"$lt": f64::NAN}},
            doc! {"a": 0},
        ] {
            assert!(!m(f.clone(), nan.clone()), "{f}");
        }
        for f in [
            doc! {"a": f64::NAN},
            doc! {"a": {"$gte": f64::NAN}},
            doc! {"a": {"$lte": f64::NAN}},
            doc! {"a": {"$gt": Bson::MinKey}},
        ] {
            assert!(m(f.clone(), nan.clone()), "{f}");
        }
        assert!(!m(doc! {"a": {"$gte": f64::NAN}}, doc! {"a": 1}));
        assert!(!m(doc! {"a": {"$lt": f64::NAN}}, doc! {"a": 1}));
    }

    #[test]
    fn numbers_compare_across_types_and_brackets_hold() {
        let d = doc! {"i": 5, "l": 5i64, "f": 5.0, "s": "5", "b": true};
        assert!(m(doc! {"i": 5.0, "l": 5, "f": 5i64}, d.clone()));
        assert!(m(doc! {"l": {"$gt": 4.5, "$lt": 5.5}}, d.clone()));
        assert!(!m(doc! {"s": {"$gt": 1}}, d.clone()));
        assert!(!m(doc! {"b": {"$gte": 0}}, d.clone()));
        assert!(m(doc! {"b": {"$gt": false}}, d));
    }

    #[test]
    fn comment_is_ignored_and_undefined_operands_refused() {
        assert!(m(doc! {"$comment": "why", "a": 1}, doc! {"a": 1}));
        for f in [
            doc! {"a": Bson::Undefined},
            doc! {"a": {"$gt": Bson::Undefined}},
            doc! {"a": {"$in": [1, Bson::Undefined]}},
        ] {
            assert_eq!(Filter::parse(&f).unwrap_err().code(), Some(2), "{f}");
        }
    }

    #[test]
    fn malformed_filters_are_bad_value() {
        for f in [
            doc! {"$foo": 1},
            doc! {"a": {"$bar": 1}},
            doc! {"a": {"$in": 1}},
            doc! {"$and": []},
            doc! {"$or": [1]},
            doc! {"a": {"$not": 1}},
            doc! {"a": {"$gt": 1, "b": 2}},
        ] {
            let e = Filter::parse(&f).unwrap_err();
            assert_eq!(e.code(), Some(2), "{f}");
        }
    }

    #[test]
    fn mongodb_operators_not_supported_yet_are_told_from_typos() {
        let said = |f: Document| Filter::parse(&f).unwrap_err().to_string();
        for f in [
            doc! {"a": {"$regex": "^x"}},
            doc! {"a": {"$type": "double"}},
            doc! {"$expr": {"$gt": ["$a", 1]}},
        ] {
            let e = said(f.clone());
            assert!(e.contains("does not support yet") && e.contains("supported"), "{e}");
        }
        assert!(said(doc! {"a": {"$gtt": 1}}).contains("unknown operator: $gtt"));
        assert!(said(doc! {"$exprr": 1}).contains("unknown top level operator"));
    }
}
