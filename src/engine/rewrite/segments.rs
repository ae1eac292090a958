//! Rewriting one segment file keeping, dropping or transforming whole buckets: the primitive
//! behind meta-only updates and deletes, and anything else that must change flushed buckets.
//!
//! The new file is written under a fresh segment id with the usual durable protocol
//! (temporary file, sync, rename, directory sync); the caller makes it live by committing a
//! manifest that lists it instead of the old one, and deletes the old file afterwards.

use crate::bucket::{BucketData, Shape, META_SLOT};
use crate::catalog::META_COLUMN;
use crate::error::Result;
use crate::segment::{write_segment, Segment, SegmentHeaderInfo};
use crate::vfs::Vfs;
use bson::Bson;
use std::path::Path;

/// What to do with one bucket of a segment being rewritten.
#[derive(Debug, Clone, PartialEq)]
pub enum BucketAction {
    /// Copy it unchanged.
    Keep,
    /// Leave it out.
    Drop,
    /// Copy it with this (normalised) meta value.
    SetMeta(Option<Bson>),
}

/// What a planned rewrite of one segment comes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SegmentFate {
    /// No bucket changes: the file stays.
    Untouched,
    /// Every bucket is dropped: the file goes, nothing replaces it.
    Removed,
    /// Some buckets change: a new file replaces it.
    Rewritten,
}

/// Decides the fate of a segment from the actions of its buckets.
pub fn fate(actions: &[BucketAction]) -> SegmentFate {
    if actions.iter().all(|a| *a == BucketAction::Keep) {
        SegmentFate::Untouched
    } else if actions.iter().all(|a| *a == BucketAction::Drop) {
        SegmentFate::Removed
    } else {
        SegmentFate::Rewritten
    }
}

/// Writes to `dest` a copy of `seg` with `actions[i]` applied to bucket `i` (at least one bucket
/// must be kept). Every kept bucket is decoded in full, checksums checked, and re-encoded, so
/// internal columns (log positions) travel with it. Returns the new file's length.
pub fn rewrite_segment(
    vfs: &dyn Vfs,
    seg: &Segment,
    actions: &[BucketAction],
    dest: &Path,
) -> Result<u64> {
    let mut kept: Vec<BucketData> = Vec::new();
    for (i, action) in actions.iter().enumerate().take(seg.buckets().len()) {
        match action {
            BucketAction::Drop => {}
            BucketAction::Keep => kept.push(seg.read_bucket(i)?),
            BucketAction::SetMeta(m) => {
                let mut b = seg.read_bucket(i)?;
                set_meta(&mut b, m.clone());
                kept.push(b);
            }
        }
    }
    let info = SegmentHeaderInfo {
        collection_id: seg.info().collection_id,
        time_field: seg.info().time_field.clone(),
    };
    let refs: Vec<&BucketData> = kept.iter().collect();
    write_segment(vfs, dest, &info, &refs)
}

/// Gives every row of `b` the meta value `meta`: the bucket's meta changes, the per-row meta
/// column (rows whose meta differed from the bucket's in field order only) goes, and each
/// row's field order gains or loses the meta field (a meta added where a row had none comes
/// last).
pub fn set_meta(b: &mut BucketData, meta: Option<Bson>) {
    if let Some(k) = b.columns.iter().position(|c| c.name == META_COLUMN) {
        b.columns.remove(k);
        let k = k as u32;
        for shape in &mut b.shapes {
            for slot in shape.iter_mut() {
                if *slot != META_SLOT && *slot > k {
                    *slot -= 1;
                }
            }
        }
        b.min.remove(META_COLUMN);
        b.max.remove(META_COLUMN);
    }
    let present = meta.is_some();
    b.meta = meta;
    let mut shapes: Vec<Shape> = Vec::new();
    let mut remap = Vec::with_capacity(b.shapes.len());
    for shape in &b.shapes {
        let mut s: Shape = shape.iter().copied().filter(|&x| x != META_SLOT).collect();
        if present {
            match shape.iter().position(|&x| x == META_SLOT) {
                Some(p) => s.insert(p, META_SLOT),
                None => s.push(META_SLOT),
            }
        }
        let id = match shapes.iter().position(|x| *x == s) {
            Some(id) => id,
            None => {
                shapes.push(s);
                shapes.len() - 1
            }
        };
        remap.push(id as u32);
    }
    b.shapes = shapes;
    if b.shapes.len() == 1 {
        b.row_shapes.clear();
    } else {
        for r in &mut b.row_shapes {
            *r = remap.get(*r as usize).copied().unwrap_or(0);
        }
    }
}
