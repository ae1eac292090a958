//! The rows of one bucket read straight from its columns: only the columns a read needs are
//! decoded, rows are tested against the filter without building documents, and a document is
//! built only for a row that is returned.

use super::filter::{split_path, Fields, Filter, Pred};
use super::scans::Source;
use crate::bucket::{BucketData, META_SLOT};
use crate::catalog::{is_hidden, META_COLUMN};
use crate::error::{Error, Result};
use bson::{Bson, Document};
use std::sync::{Arc, OnceLock};

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

/// A bucket's decoded columns (all or some), ready to be tested and turned into documents.
pub struct Rows {
    data: Arc<BucketData>,
    /// Per stored column position (what shapes refer to): where that column is in
    /// `data.columns`, if it is loaded and wanted in documents.
    slots: Vec<Option<usize>>,
    /// Where the per-row meta values are, if the bucket has them and they are loaded.
    meta_col: Option<usize>,
    time_col: Option<usize>,
    meta_field: Option<String>,
    /// Whether built documents include the meta field.
    want_meta: bool,
    /// The segment file and its bucket's number when the bucket was read from one (`None` for
    /// a bucket in memory), for the error a row that does not fit its columns gets.
    origin: Option<(Arc<crate::segment::Segment>, usize)>,
    /// Per row shape, built on first use: the document's field names in order (values
    /// unset) and where each value comes from. A row's document is a copy of its shape's
    /// with the values put in place: inserting field by field hashed every name and grew the
    /// map several times per row.
    templates: Vec<OnceLock<Option<Template>>>,
}

/// A row shape's document with its values unset, and their sources in field order.
struct Template {
    doc: Document,
    from: Vec<From>,
}

/// Where a document field's value comes from.
#[derive(Clone, Copy)]
enum From {
    Meta,
    Column(usize),
}

impl Rows {
    /// Loads the bucket at `src`, decoding only the columns `need` names (and the per-row meta
    /// values when the meta field is needed).
    pub fn load(
        src: &Source,
        need: &Need,
        time_field: &str,
        meta_field: Option<&str>,
    ) -> Result<Rows> {
        let want_meta = meta_field.is_some_and(|m| need.wants(m));
        let wanted = |name: &str| {
            if is_hidden(name) {
                name == META_COLUMN && want_meta
            } else {
                need.wants(name)
            }
        };
        let mut origin = None;
        let (data, names): (Arc<BucketData>, Vec<String>) = match src {
            Source::Mem(b) => {
                let names = b.columns.iter().map(|c| c.name.clone()).collect();
                (Arc::clone(b), names)
            }
            Source::Seg(seg, i) => {
                let i = *i as usize;
                let all = seg.column_names(i)?;
                let pick: Vec<&str> = all.iter().copied().filter(|n| wanted(n)).collect();
                let data = seg.read_bucket_columns(i, &pick)?;
                origin = Some((Arc::clone(seg), i));
                (Arc::new(data), all.iter().map(|n| n.to_string()).collect())
            }
        };
        let find = |name: &str| data.columns.iter().position(|c| c.name == name);
        // The columns come in the order of `names`, less those not wanted: the one after the
        // last found is looked at first, so that a wide bucket costs no search per field.
        let mut next = 0;
        let slots = names
            .iter()
            .map(|n| {
                if is_hidden(n) || !need.wants(n) {
                    return None;
                }
                let at = match data.columns.get(next) {
                    Some(c) if c.name == *n => Some(next),
                    _ => find(n),
                };
                next = at.map_or(next, |k| k + 1);
                at
            })
            .collect();
        let meta_col = if want_meta { find(META_COLUMN) } else { None };
        let time_col = find(time_field);
        Ok(Rows {
            slots,
            meta_col,
            time_col,
            meta_field: meta_field.map(str::to_string),
            want_meta,
            origin,
            templates: (0..data.shapes.len()).map(|_| OnceLock::new()).collect(),
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

    /// The time of row `row`, milliseconds (`i64::MIN` if the time column is not loaded).
    pub fn time_ms(&self, row: usize) -> i64 {
        match self
            .time_col
            .and_then(|c| self.data.columns.get(c))
            .and_then(|c| c.values.get(row))
        {
            Some(Some(Bson::DateTime(t))) => t.timestamp_millis(),
            _ => i64::MIN,
        }
    }

    fn meta_at(&self, row: usize) -> Option<&Bson> {
        let own = self.meta_col.and_then(|c| self.value_at(c, row));
        own.or(self.data.meta.as_ref())
    }

    /// The value of loaded column `col` in row `row`, when it has one.
    fn value_at(&self, col: usize, row: usize) -> Option<&Bson> {
        self.data.columns.get(col)?.values.get(row)?.as_ref()
    }

    /// The error for row `row` when it does not fit the bucket's columns: damage the checks
    /// did not catch in a bucket read from a segment, a bug in one built in memory.
    fn mismatch(&self, row: usize) -> Error {
        let what = format!(
            "bucket {} row {row} does not match its column layout",
            self.data.id
        );
        match &self.origin {
            Some((seg, i)) => Error::corruption(seg.path(), 0, format!("{what} (bucket {i})")),
            None => Error::Internal(format!("{what} (an open bucket)")),
        }
    }

    /// Rebuilds row `row` with the wanted fields, in the order they were inserted.
    pub fn document(&self, row: usize) -> Result<Document> {
        let bad = || self.mismatch(row);
        let shape_id = self.data.row_shapes.get(row).copied().unwrap_or(0) as usize;
        let template = self
            .templates
            .get(shape_id)
            .and_then(|t| t.get_or_init(|| self.template(shape_id)).as_ref());
        let Some(t) = template else {
            return self.document_field_by_field(row, shape_id);
        };
        let mut d = t.doc.clone();
        for ((_, v), from) in d.iter_mut().zip(&t.from) {
            let value = match *from {
                From::Meta => self.meta_at(row),
                From::Column(ci) => self.value_at(ci, row),
            };
            *v = value.ok_or_else(bad)?.clone();
        }
        Ok(d)
    }

    /// [`Rows::document`] for a shape without a template: names one by one.
    fn document_field_by_field(&self, row: usize, shape_id: usize) -> Result<Document> {
        let bad = || self.mismatch(row);
        let shape = self.data.shapes.get(shape_id).ok_or_else(bad)?;
        let mut d = Document::new();
        for &slot in shape {
            if slot == META_SLOT {
                if self.want_meta {
                    let name = self.meta_field.as_deref().ok_or_else(bad)?;
                    d.insert(name, self.meta_at(row).ok_or_else(bad)?.clone());
                }
                continue;
            }
            let Some(ci) = self.slots.get(slot as usize).ok_or_else(bad)? else {
                continue;
            };
            let c = self.data.columns.get(*ci).ok_or_else(bad)?;
            let v = c.values.get(row).and_then(Option::as_ref).ok_or_else(bad)?;
            d.insert(c.name.clone(), v.clone());
        }
        Ok(d)
    }

    /// The template of row shape `shape_id`; `None` when the shape does not match the
    /// bucket's columns or names a field twice (the field-by-field path then decides).
    fn template(&self, shape_id: usize) -> Option<Template> {
        let shape = self.data.shapes.get(shape_id)?;
        let mut doc = Document::new();
        let mut from = Vec::with_capacity(shape.len());
        for &slot in shape {
            if slot == META_SLOT {
                if self.want_meta {
                    doc.insert(self.meta_field.as_deref()?, Bson::Null);
                    from.push(From::Meta);
                }
                continue;
            }
            let Some(ci) = *self.slots.get(slot as usize)? else {
                continue;
            };
            let c = self.data.columns.get(ci)?;
            doc.insert(c.name.clone(), Bson::Null);
            from.push(From::Column(ci));
        }
        // A name twice would leave one entry for two sources.
        (doc.len() == from.len()).then_some(Template { doc, from })
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
