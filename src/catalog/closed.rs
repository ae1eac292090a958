//! A closed bucket waiting for the flusher.
//!
//! Closing a bucket happens on the thread that applies logged batches, which every insert
//! waits for. Finishing it (splitting the rows that still wait unsplit, building `control`,
//! sorting rows by time) is therefore left to whoever reads it first: normally the flusher,
//! sometimes a query. Either way it is done once.

use super::builder::BucketBuilder;
use crate::bucket::{BucketData, EncodedBucket};
use parking_lot::Mutex;
use std::sync::{Arc, OnceLock};

/// A bucket that takes no more measurements, finished on first use.
pub struct ClosedBucket {
    builder: Mutex<Option<BucketBuilder>>,
    data: OnceLock<Arc<BucketData>>,
    count: u32,
    min_seq: u64,
    bson_bytes: u64,
}

impl ClosedBucket {
    /// Closes `b`; it is finished when first read.
    pub fn new(b: BucketBuilder) -> ClosedBucket {
        ClosedBucket {
            count: b.count,
            min_seq: b.min_seq,
            bson_bytes: b.bson_bytes,
            builder: Mutex::new(Some(b)),
            data: OnceLock::new(),
        }
    }

    /// The bucket's contents, finished now if nothing read them before.
    pub fn data(&self) -> &Arc<BucketData> {
        self.data.get_or_init(|| {
            // OnceLock runs this once; the builder is always there for it.
            let b = self.builder.lock().take();
            Arc::new(b.map(BucketBuilder::finish).unwrap_or_else(empty))
        })
    }

    /// The bucket encoded for a segment: straight from the builder's typed column vectors
    /// when nothing has read the bucket yet and its rows are in time order, else from its
    /// finished contents. The bytes are the same either way.
    pub fn encoded(&self) -> EncodedBucket {
        if self.data.get().is_none() {
            let mut builder = self.builder.lock();
            if let Some(e) = builder.as_mut().and_then(BucketBuilder::encode) {
                return e;
            }
        }
        EncodedBucket::from_data(self.data())
    }

    /// Number of measurements.
    pub fn count(&self) -> u32 {
        self.count
    }

    /// Smallest log sequence number among its rows.
    pub fn min_seq(&self) -> u64 {
        self.min_seq
    }

    /// BSON size of its measurements as inserted.
    pub fn bson_bytes(&self) -> u64 {
        self.bson_bytes
    }
}

fn empty() -> BucketData {
    BucketData {
        id: bson::oid::ObjectId::from_bytes([0; 12]),
        meta: None,
        count: 0,
        min: bson::Document::new(),
        max: bson::Document::new(),
        columns: Vec::new(),
        shapes: Vec::new(),
        row_shapes: Vec::new(),
        bson_bytes: Some(0),
    }
}
