//! MongoDB query filters: parsed into a typed tree once, then matched against documents.
//!
//! Matching follows MongoDB: dotted paths descend into embedded documents and through arrays;
//! a predicate on an array field matches when the array itself or any element matches;
//! comparisons only match values of the same canonical type (`{x: {$gt: 5}}` never matches a
//! string); `{x: null}` matches documents where `x` is missing.

use crate::error::{Error, Result};
use crate::order::{cmp_bson, type_rank};
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

fn bad(msg: impl Into<String>) -> Error {
    Error::BadValue(msg.into())
}

impl Filter {
    /// Parses a MongoDB filter document.
    pub fn parse(d: &Document) -> Result<Filter> {
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
        match self {
            Filter::True => true,
            Filter::And(v) => v.iter().all(|f| f.matches(doc)),
            Filter::Or(v) => v.iter().any(|f| f.matches(doc)),
            Filter::Nor(v) => !v.iter().any(|f| f.matches(doc)),
            Filter::Field { path, pred } => {
                let mut vals = Vec::new();
                collect_doc(doc, path, &mut vals);
                pred.matches(&vals)
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
            Bson::Document(d) => Filter::parse(d),
            _ => Err(bad(format!("{op} argument's entries must be objects"))),
        })
        .collect()
}

fn parse_entry(k: &str, v: &Bson) -> Result<Filter> {
    match k {
        "$and" => Ok(Filter::And(parse_list(k, v)?)),
        "$or" => Ok(Filter::Or(parse_list(k, v)?)),
        "$nor" => Ok(Filter::Nor(parse_list(k, v)?)),
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
        other => Ok(Pred::Eq(other.clone())),
    }
}

fn parse_operators(d: &Document) -> Result<Pred> {
    let mut preds = Vec::new();
    for (op, arg) in d {
        let p = match op.as_str() {
            "$eq" => Pred::Eq(arg.clone()),
            "$ne" => Pred::Ne(arg.clone()),
            "$gt" => Pred::Gt(arg.clone()),
            "$gte" => Pred::Gte(arg.clone()),
            "$lt" => Pred::Lt(arg.clone()),
            "$lte" => Pred::Lte(arg.clone()),
            "$in" | "$nin" => {
                let Bson::Array(a) = arg else {
                    return Err(bad(format!("{op} needs an array")));
                };
                if a.iter().any(|x| matches!(x, Bson::RegularExpression(_))) {
                    return Err(bad(format!(
                        "regular expressions in {op} are not supported"
                    )));
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
    let (head, rest) = match path.split_once('.') {
        Some((h, r)) => (h, Some(r)),
        None => (path, None),
    };
    if let Some(v) = doc.get(head) {
        match rest {
            None => out.push(v),
            Some(r) => collect_value(v, r, out),
        }
    }
}

fn collect_value<'a>(v: &'a Bson, path: &str, out: &mut Vec<&'a Bson>) {
    match v {
        Bson::Document(d) => collect_doc(d, path, out),
        Bson::Array(a) => {
            let (head, rest) = match path.split_once('.') {
                Some((h, r)) => (h, Some(r)),
                None => (path, None),
            };
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

impl Pred {
    /// True when the values found at the path satisfy the predicate.
    pub fn matches(&self, vals: &[&Bson]) -> bool {
        match self {
            Pred::Eq(x) => eq_matches(vals, x),
            Pred::Ne(x) => !eq_matches(vals, x),
            Pred::Gt(x) => range(vals, x, |o| o == Ordering::Greater),
            Pred::Gte(x) => range(vals, x, |o| o != Ordering::Less),
            Pred::Lt(x) => range(vals, x, |o| o == Ordering::Less),
            Pred::Lte(x) => range(vals, x, |o| o != Ordering::Greater),
            Pred::In(xs) => xs.iter().any(|x| eq_matches(vals, x)),
            Pred::Nin(xs) => !xs.iter().any(|x| eq_matches(vals, x)),
            Pred::Exists(e) => vals.is_empty() != *e,
            Pred::Not(p) => !p.matches(vals),
            Pred::All(ps) => ps.iter().all(|p| p.matches(vals)),
        }
    }
}

fn range(vals: &[&Bson], x: &Bson, ok: fn(Ordering) -> bool) -> bool {
    // `{$gte: null}` / `{$lte: null}` match missing fields like `{$eq: null}`.
    if matches!(x, Bson::Null) && ok(Ordering::Equal) && eq_matches(vals, x) {
        return true;
    }
    any_value(vals, &|v| cmp_same_type(v, x).is_some_and(ok))
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
}
