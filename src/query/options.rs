//! Find options: projection, sort, skip and limit, applied to unpacked measurements.

use crate::error::{Error, Result};
use bson::{Bson, Document};

/// Options of [`crate::Collection::find_with`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FindOptions {
    /// Inclusion (`{a: 1}`) or exclusion (`{a: 0}`) projection; `_id` is included unless
    /// excluded, as in MongoDB.
    pub projection: Option<Document>,
    /// Sort keys, `1` ascending and `-1` descending, applied in order.
    pub sort: Option<Document>,
    /// Matches to skip.
    pub skip: Option<u64>,
    /// Most matches to return (`0` means no limit, as in MongoDB).
    pub limit: Option<i64>,
}

/// A validated projection.
#[derive(Debug, Clone)]
pub struct Projection {
    include: bool,
    paths: Vec<String>,
    id: bool,
}

impl Projection {
    /// Parses a MongoDB projection document.
    pub fn parse(p: &Document) -> Result<Projection> {
        crate::depth::check(p, "projection")?;
        let mut include = None;
        let mut id = true;
        let mut paths = Vec::new();
        for (k, v) in p {
            let on = match v {
                Bson::Boolean(b) => *b,
                Bson::Int32(i) => *i != 0,
                Bson::Int64(i) => *i != 0,
                Bson::Double(d) => *d != 0.0,
                _ => {
                    return Err(Error::BadValue(format!(
                    "projection of '{k}' must be 0/1 or true/false; expressions are not supported"
                )))
                }
            };
            if k.starts_with('$') || k.is_empty() || k.split('.').any(str::is_empty) {
                return Err(Error::BadValue(format!("invalid projection path '{k}'")));
            }
            if k == "_id" {
                id = on;
                continue;
            }
            match include {
                None => include = Some(on),
                Some(i) if i != on => {
                    return Err(Error::BadValue(format!(
                        "cannot mix inclusion and exclusion in a projection (at '{k}')"
                    )))
                }
                _ => {}
            }
            if let Some(p) = paths.iter().find(|p: &&String| collides(p, k)) {
                return Err(Error::BadValue(format!(
                    "path collision in the projection: '{p}' and '{k}'"
                )));
            }
            paths.push(k.clone());
        }
        Ok(Projection {
            // `{_id: 0}` alone is an exclusion projection; `{_id: 1}` alone an inclusion one.
            include: include.unwrap_or(paths.is_empty() && id && !p.is_empty()),
            paths,
            id,
        })
    }

    /// The inclusion projection of `paths` and nothing else (an empty document when there are
    /// none): `_id` only when among them, a path below another kept one left to it.
    pub(crate) fn keeping(paths: &[String]) -> Projection {
        let mut kept: Vec<String> = Vec::new();
        let mut id = false;
        let mut sorted: Vec<&str> = paths.iter().map(String::as_str).collect();
        sorted.sort_unstable_by_key(|p| p.len());
        for p in sorted {
            if p == "_id" || p.starts_with("_id.") {
                id = true;
            } else if !kept.iter().any(|k| collides(k, p)) {
                kept.push(p.to_string());
            }
        }
        Projection {
            include: true,
            paths: kept,
            id,
        }
    }

    /// The paths an inclusion projection keeps (`_id` among them unless excluded); `None` for
    /// an exclusion projection.
    pub fn kept(&self) -> Option<Vec<&str>> {
        self.include.then(|| {
            let mut v: Vec<&str> = self.paths.iter().map(String::as_str).collect();
            if self.id {
                v.push("_id");
            }
            v
        })
    }

    /// The paths an exclusion projection leaves out (`_id` among them when excluded); `None`
    /// for an inclusion projection.
    pub fn dropped(&self) -> Option<Vec<&str>> {
        (!self.include).then(|| {
            let mut v: Vec<&str> = self.paths.iter().map(String::as_str).collect();
            if !self.id {
                v.push("_id");
            }
            v
        })
    }

    /// What the projection does to top-level field `name`, which it treats apart from every
    /// other field: a reader that builds documents from columns decides once per field.
    pub fn fate(&self, name: &str) -> Fate {
        if name == "_id" {
            // `_id` follows its own flag, then (for an exclusion) any path below it.
            if !self.id {
                return Fate::Drop;
            }
            if self.include {
                return Fate::Keep;
            }
        }
        let sub = sub_paths(self.paths.iter().map(String::as_str), name);
        match (self.include, sub.is_empty(), sub.contains(&"")) {
            (true, _, true) => Fate::Keep,
            (true, true, _) => Fate::Drop,
            (false, _, true) => Fate::Drop,
            (false, true, _) => Fate::Keep,
            _ => Fate::Reshape,
        }
    }

    /// The value field `name` has after the projection, given its value before (for a field
    /// whose [`Projection::fate`] is [`Fate::Reshape`]; the others need no call).
    pub fn apply_field(&self, name: &str, v: &Bson) -> Option<Bson> {
        let mut d = Document::new();
        d.insert(name, v.clone());
        self.apply(d).remove(name)
    }

    /// Applies the projection to one document.
    pub fn apply(&self, d: Document) -> Document {
        if self.include {
            let mut out = Document::new();
            for (k, v) in &d {
                let keep_id = k == "_id" && self.id;
                let sub = sub_paths(self.paths.iter().map(String::as_str), k);
                if keep_id || sub.contains(&"") {
                    out.insert(k.clone(), v.clone());
                } else if !sub.is_empty() {
                    if let Some(x) = include_sub(v, &sub) {
                        out.insert(k.clone(), x);
                    }
                }
            }
            out
        } else {
            let mut d = d;
            if !self.id {
                d.remove("_id");
            }
            for p in &self.paths {
                remove_path(&mut d, p);
            }
            d
        }
    }
}

/// What a projection does to one top-level field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// Kept as it is.
    Keep,
    /// Left out.
    Drop,
    /// Some paths below it are kept or left out: its value is rebuilt per document.
    Reshape,
}

/// True when one path is the other or lies inside it (`a` and `a.b`).
fn collides(a: &str, b: &str) -> bool {
    let under = |x: &str, y: &str| x.strip_prefix(y).is_some_and(|r| r.starts_with('.'));
    a == b || under(a, b) || under(b, a)
}

/// What remains of each projected path below field `k`: `""` for the field itself, `"b.c"` for
/// `"k.b.c"`; paths not under `k` are dropped.
fn sub_paths<'a>(paths: impl Iterator<Item = &'a str>, k: &str) -> Vec<&'a str> {
    paths
        .filter_map(|p| {
            if p == k {
                Some("")
            } else {
                p.strip_prefix(k).and_then(|r| r.strip_prefix('.'))
            }
        })
        .collect()
}

fn include_sub(v: &Bson, paths: &[&str]) -> Option<Bson> {
    match v {
        Bson::Document(d) => {
            let mut out = Document::new();
            for (k, x) in d {
                let sub = sub_paths(paths.iter().copied(), k);
                if sub.contains(&"") {
                    out.insert(k.clone(), x.clone());
                } else if !sub.is_empty() {
                    if let Some(y) = include_sub(x, &sub) {
                        out.insert(k.clone(), y);
                    }
                }
            }
            Some(Bson::Document(out))
        }
        Bson::Array(a) => Some(Bson::Array(
            a.iter().filter_map(|e| include_sub(e, paths)).collect(),
        )),
        _ => None,
    }
}

fn remove_path(d: &mut Document, path: &str) {
    match path.split_once('.') {
        None => {
            d.remove(path);
        }
        Some((h, rest)) => match d.get_mut(h) {
            Some(Bson::Document(sub)) => remove_path(sub, rest),
            Some(Bson::Array(a)) => {
                for e in a {
                    if let Bson::Document(sub) = e {
                        remove_path(sub, rest);
                    }
                }
            }
            _ => {}
        },
    }
}

/// Parses sort keys.
pub fn parse_sort(s: &Document) -> Result<Vec<(String, bool)>> {
    s.iter()
        .map(|(k, v)| {
            let dir = match v {
                Bson::Int32(1) | Bson::Int64(1) => true,
                Bson::Int32(-1) | Bson::Int64(-1) => false,
                Bson::Double(d) if *d == 1.0 => true,
                Bson::Double(d) if *d == -1.0 => false,
                _ => {
                    return Err(Error::BadValue(format!(
                        "sort direction of '{k}' must be 1 or -1"
                    )))
                }
            };
            Ok((k.clone(), dir))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    #[test]
    fn inclusion_keeps_id_and_paths() {
        let p = Projection::parse(&doc! {"a": 1, "m.x": 1}).unwrap();
        let d = doc! {"_id": 1, "a": 2, "b": 3, "m": {"x": 1, "y": 2}};
        assert_eq!(p.apply(d), doc! {"_id": 1, "a": 2, "m": {"x": 1}});
    }

    #[test]
    fn exclusion_removes_paths() {
        let p = Projection::parse(&doc! {"_id": 0, "m.y": 0}).unwrap();
        let d = doc! {"_id": 1, "a": 2, "m": {"x": 1, "y": 2}};
        assert_eq!(p.apply(d), doc! {"a": 2, "m": {"x": 1}});
    }

    #[test]
    fn mixed_projection_is_bad_value() {
        assert_eq!(
            Projection::parse(&doc! {"a": 1, "b": 0})
                .unwrap_err()
                .code(),
            Some(2)
        );
    }

    #[test]
    fn projection_path_collisions_are_bad_value() {
        for p in [doc! {"a": 1, "a.b": 1}, doc! {"a.b": 0, "a": 0}] {
            assert_eq!(Projection::parse(&p).unwrap_err().code(), Some(2), "{p}");
        }
        assert!(Projection::parse(&doc! {"a.b": 1, "a.c": 1, "ab": 1}).is_ok());
    }
}
