//! A brute-force MongoDB filter evaluator for the grammar the model generates, interpreting the
//! filter document directly.
//!
//! The rules, from the server's match expressions: a path yields the values it reaches
//! (descending through embedded documents, and through arrays into their document elements);
//! a predicate holds when it holds for one of those values or, for an array value, for the
//! array or one of its elements. Comparisons only see values in the operand's canonical type
//! bracket. `{x: null}` (and `$gte`/`$lte` null, and null inside `$in`) also matches a path
//! that reaches nothing; `$ne`, `$nin` and `$not` are plain negations.

use super::order::{canonical_type, cmp, equal};
use std::cmp::Ordering;
use tsbucket::bson::{Bson, Document};

/// The values `path` reaches in `doc`.
pub fn lookup<'a>(doc: &'a Document, path: &str) -> Vec<&'a Bson> {
    let parts: Vec<&str> = path.split('.').collect();
    let mut out = Vec::new();
    if let Some(v) = doc.get(parts[0]) {
        descend(v, &parts[1..], &mut out);
    }
    out
}

fn descend<'a>(v: &'a Bson, rest: &[&str], out: &mut Vec<&'a Bson>) {
    let Some((head, tail)) = rest.split_first() else {
        out.push(v);
        return;
    };
    match v {
        Bson::Document(d) => {
            if let Some(x) = d.get(*head) {
                descend(x, tail, out);
            }
        }
        Bson::Array(a) => {
            if let Some(x) = head.parse::<usize>().ok().and_then(|i| a.get(i)) {
                descend(x, tail, out);
            }
            for e in a {
                if matches!(e, Bson::Document(_)) {
                    descend(e, rest, out);
                }
            }
        }
        _ => {}
    }
}

/// True when `f` holds for a reached value or for an element of a reached array.
fn any_leaf(vals: &[&Bson], f: &dyn Fn(&Bson) -> bool) -> bool {
    vals.iter().any(|v| {
        f(v) || match v {
            Bson::Array(a) => a.iter().any(f),
            _ => false,
        }
    })
}

fn eq(vals: &[&Bson], operand: &Bson) -> bool {
    if matches!(operand, Bson::Null) && vals.is_empty() {
        return true;
    }
    any_leaf(vals, &|v| {
        canonical_type(v) == canonical_type(operand) && equal(v, operand)
    })
}

fn compare(vals: &[&Bson], operand: &Bson, ok: fn(Ordering) -> bool) -> bool {
    // `$gte: null` and `$lte: null` are `$eq: null`; `$gt`/`$lt` null reach nothing.
    if matches!(operand, Bson::Null) {
        return ok(Ordering::Equal) && eq(vals, operand);
    }
    any_leaf(vals, &|v| {
        canonical_type(v) == canonical_type(operand) && ok(cmp(v, operand))
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

/// The operator document `ops` on the values `vals`.
fn operators(ops: &Document, vals: &[&Bson]) -> bool {
    ops.iter().all(|(op, arg)| match op.as_str() {
        "$eq" => eq(vals, arg),
        "$ne" => !eq(vals, arg),
        "$gt" => compare(vals, arg, |o| o == Ordering::Greater),
        "$gte" => compare(vals, arg, |o| o != Ordering::Less),
        "$lt" => compare(vals, arg, |o| o == Ordering::Less),
        "$lte" => compare(vals, arg, |o| o != Ordering::Greater),
        "$in" => list(arg).iter().any(|x| eq(vals, x)),
        "$nin" => !list(arg).iter().any(|x| eq(vals, x)),
        "$exists" => vals.is_empty() != truthy(arg),
        "$not" => match arg {
            Bson::Document(inner) => !operators(inner, vals),
            other => panic!("the model generates $not with an operator document, not {other}"),
        },
        other => panic!("operator {other} is outside the model's grammar"),
    })
}

fn list(v: &Bson) -> &[Bson] {
    match v {
        Bson::Array(a) => a,
        other => panic!("$in/$nin take an array, not {other}"),
    }
}

fn is_operator_doc(v: &Bson) -> Option<&Document> {
    match v {
        Bson::Document(d) if d.keys().next().is_some_and(|k| k.starts_with('$')) => Some(d),
        _ => None,
    }
}

/// True when `doc` matches the filter document `filter`.
pub fn matches(filter: &Document, doc: &Document) -> bool {
    filter.iter().all(|(k, v)| match k.as_str() {
        "$and" => sub_filters(v).iter().all(|f| matches(f, doc)),
        "$or" => sub_filters(v).iter().any(|f| matches(f, doc)),
        "$nor" => !sub_filters(v).iter().any(|f| matches(f, doc)),
        path => {
            let vals = lookup(doc, path);
            match is_operator_doc(v) {
                Some(ops) => operators(ops, &vals),
                None => eq(&vals, v),
            }
        }
    })
}

fn sub_filters(v: &Bson) -> Vec<&Document> {
    list(v)
        .iter()
        .map(|e| match e {
            Bson::Document(d) => d,
            other => panic!("logical operators take documents, not {other}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tsbucket::bson::doc;

    /// Answers of MongoDB's own documentation and jstests, to keep the oracle honest.
    #[test]
    fn oracle_agrees_with_documented_mongodb_answers() {
        let d = doc! {"a": 1, "arr": [1, "x", null], "m": {"h": "a", "r": 2}, "n": null};
        let yes = [
            doc! {"a": 1.0},
            doc! {"a": {"$gte": Bson::Int64(1)}},
            doc! {"missing": null},
            doc! {"n": null},
            doc! {"n": {"$gte": null}},
            doc! {"arr": null},
            doc! {"arr": "x"},
            doc! {"arr": [1, "x", null]},
            doc! {"arr": {"$gt": 0, "$lt": 2}},
            doc! {"m.r": {"$in": [5, 2.0]}},
            doc! {"m": {"h": "a", "r": 2}},
            doc! {"m.q": {"$exists": false}},
            doc! {"a": {"$not": {"$gt": 1}}},
            doc! {"s": {"$not": {"$gt": 1}}},
            doc! {"a": {"$nin": ["1"]}},
            doc! {"$nor": [{"a": 2}, {"m.h": "b"}]},
        ];
        let no = [
            doc! {"a": null},
            doc! {"a": "1"},
            doc! {"a": {"$gt": "0"}},
            doc! {"n": {"$gt": null}},
            doc! {"missing": {"$lt": null}},
            doc! {"m": {"r": 2, "h": "a"}},
            doc! {"m.h": {"$exists": false}},
            doc! {"arr": {"$ne": null}},
            doc! {"missing": {"$nin": [null]}},
            doc! {"$or": [{"a": 2}, {"m.h": "b"}]},
        ];
        for f in yes {
            assert!(matches(&f, &d), "{f} should match {d}");
        }
        for f in no {
            assert!(!matches(&f, &d), "{f} should not match {d}");
        }
    }
}
