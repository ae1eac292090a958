//! How deep a caller's document nests, found without recursion.
//!
//! Every walk of a document that recurses (encoding, comparing, normalising, parsing operators)
//! takes a stack frame per level, and a caller can nest a document as deep as its bytes allow.
//! Documents are refused at the door once they nest deeper than MongoDB allows, by walks that
//! do not recurse (or stop at the limit), so that every later walk stays within bounds.

use crate::error::{Error, Result};
use bson::{Bson, Document};

/// Deepest level an element may sit at, a document's own fields being at level 1 (an empty
/// document or array holds nothing deeper): MongoDB's limit for stored documents
/// (`maxBSONDepth`, 200, less the 20 levels it keeps for itself).
pub const MAX_NESTING: usize = 180;
/// The same for what a caller asks with (filters, pipeline stages, updates, projections):
/// MongoDB's `maxBSONDepth`, which bounds the commands that carry them.
pub const MAX_REQUEST_NESTING: usize = 200;

/// The message for a document nested deeper than [`MAX_NESTING`].
pub fn too_deep() -> String {
    too_deep_for(MAX_NESTING)
}

fn too_deep_for(limit: usize) -> String {
    format!("it is nested more than {limit} levels deep")
}

/// True when no element of `doc` sits deeper than `limit` levels.
pub fn within(doc: &Document, limit: usize) -> bool {
    fits(doc, 1, limit)
}

/// True when no element of `doc`, whose own elements sit `level` levels deep, sits deeper than
/// `limit` levels.
pub fn fits(doc: &Document, level: usize, limit: usize) -> bool {
    if level > limit && !doc.is_empty() {
        return false;
    }
    let mut pending: Vec<(&Bson, usize)> = doc.values().map(|v| (v, level)).collect();
    while let Some((v, level)) = pending.pop() {
        if push_inside(&mut pending, v, level + 1) > 0 && level >= limit {
            return false;
        }
    }
    true
}

/// Pushes the values inside `v` (a document, an array or a scope) at `level`; returns how many.
fn push_inside<'a>(pending: &mut Vec<(&'a Bson, usize)>, v: &'a Bson, level: usize) -> usize {
    let before = pending.len();
    match v {
        Bson::Document(d) => pending.extend(d.values().map(|x| (x, level))),
        Bson::Array(a) => pending.extend(a.iter().map(|x| (x, level))),
        Bson::JavaScriptCodeWithScope(c) => pending.extend(c.scope.values().map(|x| (x, level))),
        _ => {}
    }
    pending.len() - before
}

/// `Error::BadValue` naming `what` (a filter, a pipeline stage, ...) when `doc` nests deeper
/// than [`MAX_REQUEST_NESTING`].
pub fn check(doc: &Document, what: &str) -> Result<()> {
    check_at(doc, what, MAX_REQUEST_NESTING)
}

/// [`check`] for a document about to be stored, against [`MAX_NESTING`].
pub fn check_stored(doc: &Document, what: &str) -> Result<()> {
    check_at(doc, what, MAX_NESTING)
}

fn check_at(doc: &Document, what: &str, limit: usize) -> Result<()> {
    match within(doc, limit) {
        true => Ok(()),
        false => Err(Error::BadValue(format!(
            "the {what} cannot be used: {}",
            too_deep_for(limit)
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    fn nested(levels: usize, leaf: Bson) -> Document {
        let mut v = leaf;
        for _ in 1..levels {
            v = Bson::Document(doc! {"a": v});
        }
        doc! {"x": v}
    }

    #[test]
    fn elements_count_their_level_and_empty_values_add_none() {
        let within = |d: &Document| within(d, MAX_NESTING);
        assert!(within(&nested(180, Bson::Int32(1))));
        assert!(!within(&nested(181, Bson::Int32(1))));
        assert!(within(&nested(180, Bson::Document(doc! {}))));
        assert!(within(&nested(180, Bson::Array(vec![]))));
        assert!(!within(&nested(180, Bson::Array(vec![Bson::Null]))));
        let scope = bson::JavaScriptCodeWithScope {
            code: "f()".into(),
            scope: doc! {"s": 1},
        };
        assert!(!within(&nested(180, Bson::JavaScriptCodeWithScope(scope))));
        assert!(within(&doc! {}));
        assert!(check(&nested(200, Bson::Null), "filter").is_ok());
        assert_eq!(
            check(&nested(201, Bson::Null), "filter")
                .unwrap_err()
                .code(),
            Some(2)
        );
        assert!(check_stored(&nested(181, Bson::Null), "meta").is_err());
    }
}
