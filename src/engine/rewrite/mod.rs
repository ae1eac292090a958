//! Meta-only updates and deletes (`update_many`, `delete_many`): MongoDB's legacy rules (filter
//! and update on the meta field alone, see [`rules`]) applied to whole flushed buckets,
//! committed by one manifest swap.
//!
//! The operation first flushes every open bucket, so that all of the collection's data is in
//! segments and the log checkpoint covers every row of it; then it decides each bucket's fate
//! from its meta value alone, writes replacement segment files for the segments that change,
//! and commits by storing a manifest that lists the new files instead of the old ones. A crash
//! before that store leaves unreferenced new files (removed at open) and the old data; after
//! it, the old files are unreferenced and removed. See `format-spec/crash-model.md`.

pub mod rules;
pub mod segments;
pub mod statement;
pub mod update;

use crate::doc::meta::series_key;
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::manifest::segment_path;
use crate::manifest::SEG_DIR;
use crate::segment::Segment;
use bson::{Bson, Document};
use segments::{fate, rewrite_segment, BucketAction, SegmentFate};
use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;

/// Result of [`crate::Collection::update_many`]; counts are of measurements, as MongoDB's
/// `n` and `nModified` on a time-series collection.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UpdateResult {
    /// Measurements in buckets whose meta matched the filter.
    pub matched_count: u64,
    /// Measurements whose meta value the update changed.
    pub modified_count: u64,
}

/// Result of [`crate::Collection::delete_many`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeleteResult {
    /// Measurements deleted.
    pub deleted_count: u64,
}

/// Measurement counts of one pass over a collection's buckets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Counts {
    pub matched: u64,
    pub changed: u64,
}

/// Applies `decide` to every bucket of collection `coll_id` (`None`: not matched; `Some`:
/// matched, with what to do) and commits the outcome atomically. `decide` may fail; then
/// nothing is written.
pub(crate) fn apply_to_buckets(
    db: &Engine,
    coll_id: u32,
    name: &str,
    decide: impl Fn(Option<&Bson>) -> Result<Option<BucketAction>>,
) -> Result<Counts> {
    db.check_writable()?;
    let mut man = db.manifest.lock();
    // A dry run over every bucket's meta, in memory too, so an update that fails on some value
    // fails before anything, even the flush below, touches the disk.
    {
        let st = db.state.read();
        let c = st
            .colls
            .get(&coll_id)
            .ok_or_else(|| Error::NamespaceNotFound(name.to_string()))?;
        let mut seen: HashSet<Vec<u8>> = HashSet::new();
        let open = c.catalog.snapshot_open();
        let entry = &c.entry;
        let metas = c
            .segments
            .iter()
            .flat_map(|(&sid, s)| {
                s.buckets()
                    .iter()
                    .enumerate()
                    .filter(move |(i, _)| !entry.is_expired(sid, *i as u32))
                    .map(|(_, b)| s.meta_of(b))
            })
            .chain(c.flushing.iter().map(|b| b.data().meta.as_ref()))
            .chain(c.catalog.closed().iter().map(|b| b.data().meta.as_ref()))
            .chain(open.iter().map(|b| b.meta.as_ref()));
        for m in metas {
            if seen.insert(series_key(m)) {
                decide(m)?;
            }
        }
    }
    // Everything in segments, and every segment row at or below the log checkpoint, so the log
    // can never bring back a row this operation removes or changes.
    db.flush_locked(&mut man, true)?;
    // Each segment with the positions of its buckets the TTL sweeper already deleted: they
    // are neither matched nor counted, and a rewrite leaves them out.
    type Live = (u64, Arc<Segment>, BTreeSet<u32>);
    let segs: Vec<Live> = {
        let st = db.state.read();
        let c = st
            .colls
            .get(&coll_id)
            .ok_or_else(|| Error::NamespaceNotFound(name.to_string()))?;
        c.entry
            .segments
            .iter()
            .filter_map(|sid| {
                c.segments.get(sid).map(|s| {
                    let gone = c.entry.expired.get(sid).cloned().unwrap_or_default();
                    (*sid, s.clone(), gone)
                })
            })
            .collect()
    };
    let mut counts = Counts::default();
    let mut plans: Vec<(u64, Arc<Segment>, Vec<BucketAction>, SegmentFate)> = Vec::new();
    for (sid, seg, gone) in segs {
        let mut actions = Vec::with_capacity(seg.buckets().len());
        for (i, b) in seg.buckets().iter().enumerate() {
            if gone.contains(&(i as u32)) {
                actions.push(BucketAction::Drop);
                continue;
            }
            let action = match decide(seg.meta_of(b))? {
                None => BucketAction::Keep,
                Some(a) => {
                    counts.matched += u64::from(b.count);
                    if a != BucketAction::Keep {
                        counts.changed += u64::from(b.count);
                        let max_seq = b.max_seq();
                        if max_seq > man.wal_checkpoint {
                            // Cannot happen after the flush above; refusing keeps the log from
                            // resurrecting rows should it ever.
                            return Err(Error::BadValue(format!(
                                "bucket {} holds rows the log has not checkpointed; retry",
                                b.id
                            )));
                        }
                    }
                    a
                }
            };
            actions.push(action);
        }
        // Deleted buckets alone are no reason to rewrite: the sweeper removes the file once
        // all of its buckets have expired.
        let live_changes = actions
            .iter()
            .enumerate()
            .any(|(i, a)| *a != BucketAction::Keep && !gone.contains(&(i as u32)));
        let f = fate(&actions);
        if live_changes && f != SegmentFate::Untouched {
            plans.push((sid, seg, actions, f));
        }
    }
    if plans.is_empty() {
        return Ok(counts);
    }

    // The manifest commit is the commit point.
    let (replaced, segments, expired) = db.commit(&mut man, |next| {
        let mut replaced: Vec<Replacement> = Vec::new();
        for (sid, seg, actions, f) in &plans {
            if *f == SegmentFate::Removed {
                replaced.push((*sid, None));
                continue;
            }
            let new_id = next.next_segment_id;
            next.next_segment_id += 1;
            let path = segment_path(&db.path, new_id);
            let new_seg = rewrite_segment(db.vfs.as_ref(), seg, actions, &path)
                .and_then(|_| Segment::open(db.vfs.as_ref(), &path))
                .map(|s| s.with_page_cache(db.page_cache.clone()))
                .inspect_err(|e| db.poison(e))?;
            replaced.push((*sid, Some((new_id, Arc::new(new_seg)))));
        }
        let entry = next
            .collections
            .iter_mut()
            .find(|e| e.id == coll_id)
            .ok_or_else(|| Error::NamespaceNotFound(name.to_string()))?;
        entry.segments = replace_ids(&entry.segments, &replaced);
        for (o, _) in &replaced {
            entry.expired.remove(o);
        }
        let (segments, expired) = (entry.segments.clone(), entry.expired.clone());
        Ok((replaced, segments, expired))
    })?;

    let old: HashSet<u64> = replaced.iter().map(|(o, _)| *o).collect();
    {
        let mut st = db.state.write();
        if let Some(c) = st.colls.get_mut(&coll_id) {
            for o in &old {
                c.segments.remove(o);
            }
            c.index.retain(|_, loc| !old.contains(&loc.segment));
            for (_, new) in &replaced {
                if let Some((id, seg)) = new {
                    c.add_segment(*id, seg.clone());
                }
            }
            c.entry.segments = segments;
            c.entry.expired = expired;
        }
    }
    // No longer referenced: a crash before these removals leaves files that the next open
    // deletes.
    for o in &old {
        let _ = db.vfs.remove_file(&segment_path(&db.path, *o));
    }
    let _ = db.vfs.sync_dir(&db.path.join(SEG_DIR));
    Ok(counts)
}

impl Engine {
    /// See [`crate::Collection::update_many`].
    pub(crate) fn update_many(
        &self,
        id: u32,
        name: &str,
        filter: Document,
        update: Document,
    ) -> Result<UpdateResult> {
        self.check_writable()?;
        let schema = self.coll_schema(id, name)?;
        let meta = schema.meta();
        let f = crate::engine::rewrite::rules::update_filter(&filter, meta)?;
        let u = crate::engine::rewrite::update::MetaUpdate::parse(&update, meta)?;
        let counts = crate::engine::rewrite::apply_to_buckets(self, id, name, |meta| {
            if !f.matches(meta) {
                return Ok(None);
            }
            let new = u.apply(meta)?;
            Ok(Some(if new.as_ref() == meta {
                BucketAction::Keep
            } else {
                BucketAction::SetMeta(new)
            }))
        })?;
        Ok(UpdateResult {
            matched_count: counts.matched,
            modified_count: counts.changed,
        })
    }

    /// See [`crate::Collection::delete_many`].
    pub(crate) fn delete_many(
        &self,
        id: u32,
        name: &str,
        filter: Document,
    ) -> Result<DeleteResult> {
        self.check_writable()?;
        let schema = self.coll_schema(id, name)?;
        let f = crate::engine::rewrite::rules::delete_filter(&filter, schema.meta())?;
        let counts = crate::engine::rewrite::apply_to_buckets(self, id, name, |meta| {
            Ok(f.matches(meta).then_some(BucketAction::Drop))
        })?;
        Ok(DeleteResult {
            deleted_count: counts.changed,
        })
    }

    /// See [`crate::Collection::update`].
    pub(crate) fn update(&self, id: u32, name: &str, statement: Document) -> Result<UpdateResult> {
        self.check_writable()?;
        let schema = self.coll_schema(id, name)?;
        let s = crate::engine::rewrite::statement::parse_update(&statement, schema.meta())?;
        self.update_many(id, name, s.filter, s.update)
    }

    /// See [`crate::Collection::delete`].
    pub(crate) fn delete(&self, id: u32, name: &str, statement: Document) -> Result<DeleteResult> {
        let filter = crate::engine::rewrite::statement::parse_delete(&statement)?;
        self.delete_many(id, name, filter)
    }
}

/// An old segment id and what replaces it: a new segment, or nothing.
type Replacement = (u64, Option<(u64, Arc<Segment>)>);

/// `ids` with each replaced id swapped for its replacement in place, or removed.
fn replace_ids(ids: &[u64], replaced: &[Replacement]) -> Vec<u64> {
    ids.iter()
        .filter_map(|id| match replaced.iter().find(|(o, _)| o == id) {
            None => Some(*id),
            Some((_, new)) => new.as_ref().map(|(n, _)| *n),
        })
        .collect()
}
