//! One collection's state in memory: the catalog's open buckets, the closed buckets being
//! flushed, the flushed segments and the indexes over them. Reads see a collection through it;
//! the engine changes it under its state lock.

use crate::catalog::{ClosedBucket, CollCatalog, FitLimits};
use crate::index::id::{id_key, BucketLoc, IdKey};
use crate::index::meta::MetaCache;
use crate::manifest::CollectionEntry;
use crate::schema::Schema;
use crate::segment::Segment;
use std::collections::BTreeMap;
use std::sync::Arc;

/// One collection's live state.
pub(crate) struct CollState {
    pub entry: CollectionEntry,
    pub catalog: CollCatalog,
    pub segments: BTreeMap<u64, Arc<Segment>>,
    pub index: BTreeMap<IdKey, BucketLoc>,
    /// Closed buckets being written to a segment right now; readers still see them here.
    pub flushing: Vec<Arc<ClosedBucket>>,
    /// Maps of the meta indexes, derived from `segments` on demand.
    pub meta_cache: MetaCache,
}

impl CollState {
    pub(crate) fn new(entry: CollectionEntry, limits: FitLimits) -> CollState {
        let catalog = CollCatalog::new(Schema::of(&entry.options), limits);
        CollState {
            entry,
            catalog,
            segments: BTreeMap::new(),
            index: BTreeMap::new(),
            flushing: Vec::new(),
            meta_cache: Default::default(),
        }
    }

    /// The collection's fields and bucketing in force.
    pub(crate) fn schema(&self) -> &Schema {
        self.catalog.schema()
    }

    pub(crate) fn add_segment(&mut self, id: u64, seg: Arc<Segment>) {
        for (i, b) in seg.buckets().iter().enumerate() {
            // Buckets the TTL sweeper deleted stay in the file but not in the index.
            if self.entry.is_expired(id, i as u32) {
                continue;
            }
            self.index.insert(
                id_key(b),
                BucketLoc {
                    segment: id,
                    index: i as u32,
                },
            );
        }
        self.segments.insert(id, seg);
    }

    /// Summaries of the live buckets in segments (those the `_id` index lists).
    pub(crate) fn segment_buckets(
        &self,
    ) -> impl Iterator<Item = &crate::segment::BucketSummary> + '_ {
        self.index.values().filter_map(|loc| {
            self.segments
                .get(&loc.segment)
                .and_then(|s| s.buckets().get(loc.index as usize))
        })
    }
}
