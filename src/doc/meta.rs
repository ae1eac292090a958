//! Meta values: normalisation and the series key derived from it.
//!
//! Two meta values name the same series when they are equal after sorting the fields of every
//! embedded document by name (binary order). Array element order matters; documents inside
//! arrays are normalised too. `meta: null` and a missing meta are different series.

use bson::{Bson, Document};

/// Returns `v` with the fields of every embedded document sorted by name.
pub fn normalize(v: &Bson) -> Bson {
    match v {
        Bson::Document(d) => Bson::Document(normalize_doc(d)),
        Bson::Array(a) => Bson::Array(a.iter().map(normalize).collect()),
        other => other.clone(),
    }
}

fn normalize_doc(d: &Document) -> Document {
    let mut fields: Vec<(&String, &Bson)> = d.iter().collect();
    fields.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    fields
        .into_iter()
        .map(|(k, v)| (k.clone(), normalize(v)))
        .collect()
}

/// True when `v` is already in normal form (no allocation needed).
pub fn is_normalized(v: &Bson) -> bool {
    match v {
        Bson::Document(d) => {
            let mut prev: Option<&str> = None;
            for (k, v) in d {
                if let Some(p) = prev {
                    if p.as_bytes() >= k.as_bytes() {
                        return false;
                    }
                }
                if !is_normalized(v) {
                    return false;
                }
                prev = Some(k);
            }
            true
        }
        Bson::Array(a) => a.iter().all(is_normalized),
        _ => true,
    }
}

/// The series key: bytes that are equal exactly when two (normalised) meta values name the same
/// series. A missing meta is the empty key; a present one is its BSON encoding behind a marker.
pub fn series_key(normalized_meta: Option<&Bson>) -> Vec<u8> {
    match normalized_meta {
        None => Vec::new(),
        Some(v) => {
            let mut d = Document::new();
            d.insert("", v.clone());
            let mut out = vec![1u8];
            // Serialising an in-memory document into a Vec cannot fail for sane sizes; an
            // oversized meta was rejected at validation.
            let _ = d.to_writer(&mut out);
            out
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    #[test]
    fn nested_documents_are_sorted() {
        let m = Bson::Document(doc! {"m": {"c": 1, "b": {"f": true, "d": 0}}});
        let n = normalize(&m);
        assert_eq!(
            n,
            Bson::Document(doc! {"m": {"b": {"d": 0, "f": true}, "c": 1}})
        );
        assert!(is_normalized(&n));
        assert!(!is_normalized(&m));
    }

    #[test]
    fn array_order_is_kept_but_inner_documents_normalised() {
        let a = normalize(&Bson::Array(vec![Bson::Document(doc! {"c": 0, "b": 1})]));
        assert_eq!(a, Bson::Array(vec![Bson::Document(doc! {"b": 1, "c": 0})]));
        let x = series_key(Some(&normalize(&Bson::Array(vec![1.into(), 2.into()]))));
        let y = series_key(Some(&normalize(&Bson::Array(vec![2.into(), 1.into()]))));
        assert_ne!(x, y);
    }

    #[test]
    fn null_and_missing_meta_differ() {
        assert_ne!(series_key(None), series_key(Some(&Bson::Null)));
    }
}
