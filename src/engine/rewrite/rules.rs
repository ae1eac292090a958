//! MongoDB's legacy "meta-only" rules for updates and deletes on a time-series collection (a
//! filter may read only the meta field, an update may change only the meta field): which
//! filters and update documents are accepted, and the exact codes and messages of the refusals.
//! Everything here runs before any data is touched.

use crate::error::{Error, Result};
use crate::query::Filter;
use bson::{Bson, Document};

/// A filter checked to read only the meta field, evaluated against a bucket's meta value.
#[derive(Debug, Clone)]
pub struct MetaFilter {
    filter: Filter,
    meta_field: Option<String>,
}

impl MetaFilter {
    /// True when a bucket with meta value `meta` matches: the filter is evaluated against the
    /// document `{<metaField>: meta}`, which is MongoDB's rewrite of `<metaField>.x` to
    /// `meta.x` on the bucket documents, read the other way round.
    pub fn matches(&self, meta: Option<&Bson>) -> bool {
        let mut d = Document::new();
        if let (Some(f), Some(m)) = (&self.meta_field, meta) {
            d.insert(f.clone(), m.clone());
        }
        self.filter.matches(&d)
    }
}

/// True when `path` is the meta field or one of its subfields.
pub fn is_meta_path(path: &str, meta: &str) -> bool {
    path == meta || path.strip_prefix(meta).is_some_and(|r| r.starts_with('.'))
}

/// Checks a delete filter: it may read only the meta field; without a meta field only `{}`.
pub fn delete_filter(filter: &Document, meta_field: Option<&str>) -> Result<MetaFilter> {
    let parsed = Filter::parse(filter)?;
    let Some(meta) = meta_field else {
        if parsed != Filter::True {
            return Err(Error::InvalidOptions(
                "Cannot perform a delete with a non-empty query on a time-series collection \
                 that does not have a metaField"
                    .into(),
            ));
        }
        return Ok(MetaFilter {
            filter: parsed,
            meta_field: None,
        });
    };
    check_paths(&parsed, meta)?;
    Ok(MetaFilter {
        filter: parsed,
        meta_field: Some(meta.to_string()),
    })
}

/// Checks an update filter: the collection needs a meta field and the filter may read only it.
pub fn update_filter(filter: &Document, meta_field: Option<&str>) -> Result<MetaFilter> {
    let meta = require_meta(meta_field)?;
    let parsed = Filter::parse(filter)?;
    check_paths(&parsed, meta)?;
    Ok(MetaFilter {
        filter: parsed,
        meta_field: Some(meta.to_string()),
    })
}

/// The meta field, or MongoDB's refusal of an update on a collection without one.
pub fn require_meta(meta_field: Option<&str>) -> Result<&str> {
    meta_field.ok_or_else(|| {
        Error::InvalidOptions(
            "Cannot perform an update on a time-series collection that does not have a metaField"
                .into(),
        )
    })
}

fn check_paths(f: &Filter, meta: &str) -> Result<()> {
    let mut paths = Vec::new();
    f.paths(&mut paths);
    if paths.iter().all(|p| is_meta_path(p, meta)) {
        return Ok(());
    }
    Err(Error::InvalidOptions(format!(
        "Cannot perform an update or delete on a time-series collection when querying on a \
         field that is not the metaField '{meta}'"
    )))
}

/// MongoDB's refusal of an update that touches anything but the meta field.
pub fn not_meta_update(meta: &str) -> Error {
    Error::InvalidOptions(format!(
        "Cannot perform an update on a time-series collection which updates a field that is \
         not the metaField '{meta}'"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    #[test]
    fn meta_paths() {
        assert!(is_meta_path("tag", "tag"));
        assert!(is_meta_path("tag.a.b", "tag"));
        assert!(!is_meta_path("tags", "tag"));
        assert!(!is_meta_path("t", "tag"));
    }

    #[test]
    fn filters_on_other_fields_are_invalid_options() {
        let e = delete_filter(&doc! {"tag": 1, "time": 5}, Some("tag")).unwrap_err();
        assert_eq!(e.code(), Some(72));
        assert!(e.to_string().contains("not the metaField 'tag'"));
        let e = update_filter(&doc! {"$or": [{"tag.a": 1}, {"x": 2}]}, Some("tag")).unwrap_err();
        assert_eq!(e.code(), Some(72));
        let e = delete_filter(&doc! {"x": 1}, None).unwrap_err();
        assert!(e.to_string().contains("does not have a metaField"));
        assert!(delete_filter(&doc! {}, None).is_ok());
        assert_eq!(update_filter(&doc! {}, None).unwrap_err().code(), Some(72));
    }

    #[test]
    fn subfield_filter_reads_the_bucket_meta() {
        let f = delete_filter(&doc! {"tag.a": 1}, Some("tag")).unwrap();
        assert!(f.matches(Some(&Bson::Document(doc! {"a": 1, "b": 2}))));
        assert!(!f.matches(Some(&Bson::Document(doc! {"a": 2}))));
        assert!(!f.matches(None));
        let f = delete_filter(&doc! {"tag": null}, Some("tag")).unwrap();
        assert!(f.matches(None));
    }
}
