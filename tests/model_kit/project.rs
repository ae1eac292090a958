//! Brute-force projection and sort, as MongoDB's find (and `$project` / `$sort`) define them.

use super::matcher::lookup;
use super::order::{canonical_type, cmp};
use std::cmp::Ordering;
use tsbucket::bson::{Bson, Document};

/// A projection document in the model's grammar: every value 0/1 (or a bool).
pub fn project(spec: &Document, doc: &Document) -> Document {
    let on = |v: &Bson| match v {
        Bson::Int32(i) => *i != 0,
        Bson::Int64(i) => *i != 0,
        Bson::Double(d) => *d != 0.0,
        Bson::Boolean(b) => *b,
        other => panic!("projection values are 0/1 in the model, not {other}"),
    };
    let keep_id = spec.get("_id").is_none_or(on);
    let paths: Vec<(&str, bool)> = spec
        .iter()
        .filter(|(k, _)| k.as_str() != "_id")
        .map(|(k, v)| (k.as_str(), on(v)))
        .collect();
    // `{_id: 1}` alone includes; `{_id: 0}` alone excludes.
    let inclusion = match paths.first() {
        Some((_, incl)) => *incl,
        None => keep_id && !spec.is_empty(),
    };
    if inclusion {
        let wanted: Vec<Vec<&str>> = paths.iter().map(|(p, _)| p.split('.').collect()).collect();
        let mut out = Document::new();
        for (k, v) in doc {
            if k == "_id" {
                if keep_id {
                    out.insert(k.clone(), v.clone());
                }
                continue;
            }
            let below: Vec<&[&str]> = wanted
                .iter()
                .filter(|p| p[0] == k)
                .map(|p| &p[1..])
                .collect();
            if let Some(x) = include(v, &below) {
                out.insert(k.clone(), x);
            }
        }
        out
    } else {
        let mut out = doc.clone();
        if !keep_id {
            out.remove("_id");
        }
        for (p, _) in &paths {
            let parts: Vec<&str> = p.split('.').collect();
            exclude(&mut out, &parts);
        }
        out
    }
}

/// What an inclusion of the sub-paths `below` keeps of `v` (`[]` in `below` means all of it).
fn include(v: &Bson, below: &[&[&str]]) -> Option<Bson> {
    if below.is_empty() {
        return None;
    }
    if below.iter().any(|p| p.is_empty()) {
        return Some(v.clone());
    }
    match v {
        // A document keeps only the included fields, possibly none.
        Bson::Document(d) => {
            let mut out = Document::new();
            for (k, x) in d {
                let sub: Vec<&[&str]> = below
                    .iter()
                    .filter(|p| p[0] == k)
                    .map(|p| &p[1..])
                    .collect();
                if let Some(y) = include(x, &sub) {
                    out.insert(k.clone(), y);
                }
            }
            Some(Bson::Document(out))
        }
        // Arrays keep their documents' included fields and drop scalars.
        Bson::Array(a) => Some(Bson::Array(
            a.iter()
                .filter_map(|e| match e {
                    Bson::Document(_) | Bson::Array(_) => include(e, below),
                    _ => None,
                })
                .collect(),
        )),
        _ => None,
    }
}

fn exclude(d: &mut Document, parts: &[&str]) {
    if parts.len() == 1 {
        d.remove(parts[0]);
        return;
    }
    match d.get_mut(parts[0]) {
        Some(Bson::Document(sub)) => exclude(sub, &parts[1..]),
        Some(Bson::Array(a)) => {
            for e in a {
                if let Bson::Document(sub) = e {
                    exclude(sub, &parts[1..]);
                }
            }
        }
        _ => {}
    }
}

/// The value a document sorts by at `path`: missing is null; an array contributes its smallest
/// element ascending and its largest descending; an empty array sorts before null.
pub fn sort_key(doc: &Document, path: &str, ascending: bool) -> Bson {
    let mut candidates = Vec::new();
    for v in lookup(doc, path) {
        match v {
            Bson::Array(a) if a.is_empty() => candidates.push(Bson::Undefined),
            Bson::Array(a) => candidates.extend(a.iter().cloned()),
            other => candidates.push(other.clone()),
        }
    }
    let pick = if ascending {
        candidates.into_iter().min_by(cmp)
    } else {
        candidates.into_iter().max_by(cmp)
    };
    pick.unwrap_or(Bson::Null)
}

/// The sort keys of `doc` under `spec` (`{path: 1 | -1, ..}`).
pub fn sort_keys(spec: &[(String, bool)], doc: &Document) -> Vec<Bson> {
    spec.iter().map(|(p, asc)| sort_key(doc, p, *asc)).collect()
}

/// Compares two key vectors under `spec`.
pub fn cmp_keys(spec: &[(String, bool)], a: &[Bson], b: &[Bson]) -> Ordering {
    for ((_, asc), (x, y)) in spec.iter().zip(a.iter().zip(b)) {
        let o = cmp(x, y);
        let o = if *asc { o } else { o.reverse() };
        if o != Ordering::Equal {
            return o;
        }
    }
    Ordering::Equal
}

/// Parses a sort document of 1/-1 values.
pub fn parse_sort(spec: &Document) -> Vec<(String, bool)> {
    spec.iter()
        .map(|(k, v)| {
            let asc = match v {
                Bson::Int32(i) => *i > 0,
                Bson::Int64(i) => *i > 0,
                Bson::Double(d) => *d > 0.0,
                other => panic!("sort directions are 1/-1 in the model, not {other}"),
            };
            (k.clone(), asc)
        })
        .collect()
}

/// Stable sort of `docs` by `spec`.
pub fn sort(spec: &[(String, bool)], docs: &mut [Document]) {
    docs.sort_by_cached_key(|d| SortKey(spec.to_vec(), sort_keys(spec, d)));
}

#[derive(PartialEq)]
struct SortKey(Vec<(String, bool)>, Vec<Bson>);

impl Eq for SortKey {}

impl PartialOrd for SortKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for SortKey {
    fn cmp(&self, other: &Self) -> Ordering {
        cmp_keys(&self.0, &self.1, &other.1)
    }
}

/// True when two key vectors tie.
pub fn keys_tie(a: &[Bson], b: &[Bson]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| canonical_type(x) == canonical_type(y) && cmp(x, y) == Ordering::Equal)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tsbucket::bson::doc;

    #[test]
    fn projections_follow_mongodb() {
        let d = doc! {"_id": 1, "t": 2, "m": {"a": 1, "b": 2}, "s": 5, "e": [1, {"a": 3, "b": 4}]};
        assert_eq!(
            project(&doc! {"m.a": 1}, &d),
            doc! {"_id": 1, "m": {"a": 1}}
        );
        assert_eq!(project(&doc! {"s.a": 1, "_id": 0}, &d), doc! {});
        assert_eq!(project(&doc! {"m.c": 1}, &d), doc! {"_id": 1, "m": {}});
        assert_eq!(
            project(&doc! {"e.a": 1}, &d),
            doc! {"_id": 1, "e": [{"a": 3}]}
        );
        assert_eq!(
            project(&doc! {"m.a": 0, "t": 0}, &d),
            doc! {"_id": 1, "m": {"b": 2}, "s": 5, "e": [1, {"a": 3, "b": 4}]}
        );
        assert_eq!(project(&doc! {"_id": 1}, &d), doc! {"_id": 1});
        assert_eq!(project(&doc! {"_id": 0}, &d).len(), 4);
    }

    #[test]
    fn sort_keys_follow_mongodb() {
        let spec = parse_sort(&doc! {"a": 1});
        let mut v = vec![
            doc! {"_id": 0, "a": 2},
            doc! {"_id": 1},
            doc! {"_id": 2, "a": []},
            doc! {"_id": 3, "a": [5, 0]},
            doc! {"_id": 4, "a": "s"},
        ];
        sort(&spec, &mut v);
        let ids: Vec<i32> = v.iter().map(|d| d.get_i32("_id").unwrap()).collect();
        assert_eq!(ids, [2, 1, 3, 0, 4]);
        let spec = parse_sort(&doc! {"a": -1});
        sort(&spec, &mut v);
        let ids: Vec<i32> = v.iter().map(|d| d.get_i32("_id").unwrap()).collect();
        assert_eq!(ids, [4, 3, 0, 1, 2]);
    }
}
