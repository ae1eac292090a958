//! The ordering `verify` checks `control.min/max` with: the engine's own (`crate::order`), so
//! the check and the catalog that computed the values can never disagree.

use bson::Bson;

pub(crate) use crate::order::cmp_bson as compare_bson;

/// True for values whose `control.min/max` MongoDB computes field by field (not checked
/// exactly by `verify`).
pub(crate) fn is_composite(v: &Bson) -> bool {
    matches!(v, Bson::Document(_) | Bson::Array(_))
}
