//! The rows of one bucket read straight from its columns, for filters that typed columns
//! cannot decide (`$or`, dotted paths below measurement fields, meta values that differ by
//! row): only the columns the filter reads are decoded, and rows are tested without building
//! documents. Also which top-level fields a read needs ([`Need`]).

use super::filter::{split_path, Fields, Filter, Pred};
use super::scans::Source;
use crate::bucket::BucketData;
use crate::catalog::{is_hidden, META_COLUMN};
use crate::error::Result;
use bson::Bson;
use std::sync::Arc;

/// Which top-level fields of a measurement a read needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Need {
    /// Every field.
    All,
    /// Every field except these.
    AllBut(Vec<String>),
    /// Only these.
    Only(Vec<String>),
}

impl Need {
    /// True when field `name` is needed.
    pub fn wants(&self, name: &str) -> bool {
        match self {
            Need::All => true,
            Need::AllBut(v) => !v.iter().any(|x| x == name),
            Need::Only(v) => v.iter().any(|x| x == name),
        }
    }

    /// This need plus the given fields.
    pub fn with(&self, fields: &[String]) -> Need {
        match self {
            Need::All => Need::All,
            Need::AllBut(v) => {
                Need::AllBut(v.iter().filter(|x| !fields.contains(x)).cloned().collect())
            }
            Need::Only(v) => {
                let mut v = v.clone();
                for f in fields {
                    if !v.contains(f) {
                        v.push(f.clone());
                    }
                }
                Need::Only(v)
            }
        }
    }
}

/// The distinct first components of `paths`.
pub fn heads(paths: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for p in paths {
        let h = p.split('.').next().unwrap_or(p);
        if !out.iter().any(|x| x == h) {
            out.push(h.to_string());
        }
    }
    out
}

/// A bucket's decoded columns (all or some), for testing rows against a filter that typed
/// columns cannot decide ([`super::materialise`] builds the documents returned).
pub struct Rows {
    data: Arc<BucketData>,
    /// Where the per-row meta values are, if the bucket has them and they are loaded.
    meta_col: Option<usize>,
    meta_field: Option<String>,
}

impl Rows {
    /// Loads the bucket at `src`, decoding only the columns `need` names (and the per-row meta
    /// values when the meta field is needed).
    pub fn load(src: &Source, need: &Need, meta_field: Option<&str>) -> Result<Rows> {
        let want_meta = meta_field.is_some_and(|m| need.wants(m));
        let wanted = |name: &str| {
            if is_hidden(name) {
                name == META_COLUMN && want_meta
            } else {
                need.wants(name)
            }
        };
        let data = match src {
            Source::Mem(b) => Arc::clone(b),
            Source::Seg(seg, i) => {
                let i = *i as usize;
                let all = seg.column_names(i)?;
                let pick: Vec<&str> = all.iter().copied().filter(|n| wanted(n)).collect();
                Arc::new(seg.read_bucket_columns(i, &pick)?)
            }
        };
        let meta_col = if want_meta {
            data.columns.iter().position(|c| c.name == META_COLUMN)
        } else {
            None
        };
        Ok(Rows {
            meta_col,
            meta_field: meta_field.map(str::to_string),
            data,
        })
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        self.data.count as usize
    }

    /// True for a bucket without rows.
    pub fn is_empty(&self) -> bool {
        self.data.count == 0
    }

    /// Row `row` for matching.
    pub fn row(&self, row: usize) -> Row<'_> {
        Row { rows: self, row }
    }

    fn meta_at(&self, row: usize) -> Option<&Bson> {
        let own = self.meta_col.and_then(|c| self.value_at(c, row));
        own.or(self.data.meta.as_ref())
    }

    /// The value of loaded column `col` in row `row`, when it has one.
    fn value_at(&self, col: usize, row: usize) -> Option<&Bson> {
        self.data.columns.get(col)?.values.get(row)?.as_ref()
    }

}

/// Where a filter leaf finds its first path component in a bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum At {
    /// In this column of the loaded data.
    Column(usize),
    /// In the meta value.
    Meta,
    /// Nowhere: no row has it.
    Missing,
}

/// A filter with its fields resolved to a bucket's columns once, so testing a row is a
/// column index per leaf instead of a name lookup.
pub enum Bound<'f> {
    /// Matches everything.
    True,
    /// All must match.
    And(Vec<Bound<'f>>),
    /// At least one must match.
    Or(Vec<Bound<'f>>),
    /// None may match.
    Nor(Vec<Bound<'f>>),
    /// A predicate on the values below a field.
    Leaf(At, Option<&'f str>, &'f Pred),
}

impl Rows {
    /// Resolves `filter`'s fields against this bucket's columns.
    pub fn bind<'f>(&self, filter: &'f Filter) -> Bound<'f> {
        let list = |v: &'f [Filter]| v.iter().map(|f| self.bind(f)).collect();
        match filter {
            Filter::True => Bound::True,
            Filter::And(v) => Bound::And(list(v)),
            Filter::Or(v) => Bound::Or(list(v)),
            Filter::Nor(v) => Bound::Nor(list(v)),
            Filter::Field { path, pred } => {
                let (head, rest) = split_path(path);
                let at = if self.meta_field.as_deref() == Some(head) {
                    At::Meta
                } else if is_hidden(head) {
                    At::Missing
                } else {
                    match self.data.columns.iter().position(|c| c.name == head) {
                        Some(i) => At::Column(i),
                        None => At::Missing,
                    }
                };
                Bound::Leaf(at, rest, pred)
            }
        }
    }
}

impl Bound<'_> {
    /// True when row `row` of `rows` (the bucket this was bound to) matches.
    pub fn matches(&self, rows: &Rows, row: usize) -> bool {
        match self {
            Bound::True => true,
            Bound::And(v) => v.iter().all(|b| b.matches(rows, row)),
            Bound::Or(v) => v.iter().any(|b| b.matches(rows, row)),
            Bound::Nor(v) => !v.iter().any(|b| b.matches(rows, row)),
            Bound::Leaf(at, rest, pred) => {
                let v = match *at {
                    At::Column(c) => rows.value_at(c, row),
                    At::Meta => rows.meta_at(row),
                    At::Missing => None,
                };
                pred.matches_at(v, *rest)
            }
        }
    }
}

/// One row of a [`Rows`], matched without building a document.
pub struct Row<'a> {
    rows: &'a Rows,
    row: usize,
}

impl Fields for Row<'_> {
    fn field(&self, name: &str) -> Option<&Bson> {
        if self.rows.meta_field.as_deref() == Some(name) {
            return self.rows.meta_at(self.row);
        }
        if is_hidden(name) {
            return None;
        }
        self.rows
            .data
            .columns
            .iter()
            .find(|c| c.name == name)?
            .values
            .get(self.row)?
            .as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn needs_combine_with_filter_fields() {
        let only = Need::Only(vec!["a".into()]);
        assert_eq!(
            only.with(&["b".into(), "a".into()]),
            Need::Only(vec!["a".into(), "b".into()])
        );
        let but = Need::AllBut(vec!["a".into(), "b".into()]);
        assert_eq!(but.with(&["a".into()]), Need::AllBut(vec!["b".into()]));
        assert!(!but.wants("a") && but.wants("c"));
        assert_eq!(
            heads(&["m.h".into(), "m.r".into(), "x".into()]),
            vec!["m".to_string(), "x".to_string()]
        );
    }
}
