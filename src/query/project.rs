//! The `$project` stage: inclusion or exclusion of paths (as find projections do) plus
//! top-level fields computed from a field path or a constant (`{host: "$_id.h"}`).

use super::expr::Expr;
use super::options::Projection;
use crate::error::{Error, Result};
use bson::{Bson, Document};

/// A computed field: its name and expression.
pub type Computed = (String, Expr);

/// A parsed `$project`.
#[derive(Debug, Clone)]
pub struct Project {
    /// Inclusion or exclusion part; `None` when only computed fields are output.
    base: Option<Projection>,
    /// Computed fields, in the order given.
    computed: Vec<Computed>,
}

fn bad(msg: impl Into<String>) -> Error {
    Error::BadValue(msg.into())
}

fn flag(v: &Bson) -> Option<bool> {
    match v {
        Bson::Boolean(b) => Some(*b),
        Bson::Int32(i) => Some(*i != 0),
        Bson::Int64(i) => Some(*i != 0),
        Bson::Double(d) => Some(*d != 0.0),
        _ => None,
    }
}

impl Project {
    /// Parses a `$project` specification.
    pub fn parse(spec: &Document) -> Result<Project> {
        if spec.is_empty() {
            return Err(bad("$project specification must have at least one field"));
        }
        let mut flags = Document::new();
        let mut computed = Vec::new();
        let (mut includes, mut excludes) = (false, false);
        for (k, v) in spec {
            if k.is_empty() || k.starts_with('$') || k.split('.').any(str::is_empty) {
                return Err(bad(format!("$project: invalid field path '{k}'")));
            }
            if let Some(on) = flag(v) {
                if k != "_id" {
                    includes |= on;
                    excludes |= !on;
                }
                flags.insert(k.clone(), on);
                continue;
            }
            let e = match v {
                Bson::String(_) => Expr::parse(v)?,
                Bson::Document(x) if x.len() == 1 && x.contains_key("$literal") => Expr::parse(v)?,
                _ => {
                    return Err(bad(format!(
                        "$project: '{k}' must be 0/1, true/false, a field path, a string or \
                         $literal; other expressions are not supported"
                    )))
                }
            };
            if k.contains('.') {
                return Err(bad(format!(
                    "$project: computed field '{k}' must be a top-level name"
                )));
            }
            computed.push((k.clone(), e));
        }
        if excludes && (includes || !computed.is_empty()) {
            return Err(bad(
                "$project cannot mix exclusion with inclusion or computed fields \
                 (only _id may be excluded then)",
            ));
        }
        let base = if includes || computed.is_empty() {
            Some(Projection::parse(&flags)?)
        } else {
            // Only computed fields: `_id` comes along unless excluded or computed.
            let id = flags.get("_id").and_then(flag).unwrap_or(true);
            id.then(|| Projection::parse(&bson::doc! {"_id": 1}))
                .transpose()?
        };
        Ok(Project { base, computed })
    }

    /// The paths the stage keeps as they are, when it only keeps paths (no computed fields,
    /// no exclusions): a later stage that reads nothing else sees the same values without it.
    pub fn kept(&self) -> Option<Vec<&str>> {
        if !self.computed.is_empty() {
            return None;
        }
        self.base.as_ref()?.kept()
    }

    /// The paths the stage leaves out, when it only leaves paths out (an exclusion, no
    /// computed fields): every other path passes through unchanged.
    pub fn dropped(&self) -> Option<Vec<&str>> {
        if !self.computed.is_empty() {
            return None;
        }
        self.base.as_ref()?.dropped()
    }

    /// The paths the stage keeps as they are and its computed fields, unless it leaves paths
    /// out (an exclusion).
    pub fn kept_and_computed(&self) -> Option<(Vec<&str>, &[Computed])> {
        let kept = match &self.base {
            Some(b) => b.kept()?,
            None => Vec::new(),
        };
        Some((kept, &self.computed))
    }

    /// A stage that keeps `_id` and computes `fields` in order (what a rewrite appends).
    pub fn computed(fields: Vec<(String, Expr)>) -> Result<Project> {
        Ok(Project {
            base: Some(Projection::parse(&bson::doc! {"_id": 1})?),
            computed: fields,
        })
    }

    /// The stage as a find projection, when it only keeps or leaves out paths (no computed
    /// fields): the two then give the same documents.
    pub fn as_projection(&self) -> Option<&Projection> {
        if self.computed.is_empty() {
            self.base.as_ref()
        } else {
            None
        }
    }

    /// Applies the stage to one document.
    pub fn apply(&self, d: Document) -> Result<Document> {
        let mut out = if self.computed.is_empty() {
            return Ok(match &self.base {
                Some(p) => p.apply(d),
                None => d,
            });
        } else {
            match &self.base {
                Some(p) => p.apply(d.clone()),
                None => Document::new(),
            }
        };
        for (k, e) in &self.computed {
            if let Some(v) = e.eval(&d)? {
                out.insert(k.clone(), v);
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    fn p(spec: Document, d: Document) -> Document {
        Project::parse(&spec).unwrap().apply(d).unwrap()
    }

    #[test]
    fn inclusion_exclusion_and_renames() {
        let d = doc! {"_id": {"h": "a", "t": 5}, "max": 3, "min": 1};
        assert_eq!(
            p(doc! {"max": 1}, d.clone()),
            doc! {"_id": {"h": "a", "t": 5}, "max": 3}
        );
        assert_eq!(p(doc! {"_id": 0, "min": 0}, d.clone()), doc! {"max": 3});
        assert_eq!(
            p(doc! {"_id": 0, "host": "$_id.h", "max": 1}, d.clone()),
            doc! {"max": 3, "host": "a"}
        );
        assert_eq!(
            p(
                doc! {"host": "$_id.h", "k": "lit", "gone": "$nope"},
                d.clone()
            ),
            doc! {"_id": {"h": "a", "t": 5}, "host": "a", "k": "lit"}
        );
        assert_eq!(p(doc! {"_id": "$_id.t"}, d), doc! {"_id": 5});
    }

    #[test]
    fn unsupported_or_malformed_is_bad_value() {
        for spec in [
            doc! {},
            doc! {"a": 1, "b": 0},
            doc! {"a": "$x", "b": 0},
            doc! {"a": {"$add": [1, 2]}},
            doc! {"a": {"b": 1}},
            doc! {"a.b": "$x"},
            doc! {"$a": 1},
        ] {
            assert_eq!(Project::parse(&spec).unwrap_err().code(), Some(2), "{spec}");
        }
    }
}
