//! Server-side cursors: what `find`, `aggregate` and the listing commands have not yet
//! returned, kept between `getMore`s until they are drained, killed or left idle too long.
//!
//! Batches are written straight into the reply as BSON bytes: a document goes from the
//! engine's cursor into the reply buffer without being parsed or copied again.

use crate::error::{CmdResult, CommandError, CURSOR_NOT_FOUND, OPERATION_FAILED, UNAUTHORIZED};
use crate::reply::RawDoc;
use bson::RawDocumentBuf;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// The most document bytes a batch carries, so that a reply stays within the 16 MiB that
/// drivers accept for a document (MongoDB's limit too). A single larger document still goes
/// alone.
const BATCH_BYTES: usize = 16 * 1024 * 1024 - 64 * 1024;
/// Documents in a first batch when the client names no `batchSize` (MongoDB's default).
pub const DEFAULT_FIRST_BATCH: usize = 101;

/// Where a cursor's documents come from.
pub enum Docs {
    /// A query on the engine.
    Engine(tsbucket::Cursor),
    /// A list computed up front (listings, raw buckets, command results).
    List(std::vec::IntoIter<RawDocumentBuf>),
}

impl Docs {
    /// Appends the next document's bytes to `buf`; false at the end.
    fn next_into(&mut self, buf: &mut Vec<u8>) -> CmdResult<bool> {
        match self {
            Docs::Engine(c) => Ok(c.next_into(buf)?),
            Docs::List(it) => Ok(match it.next() {
                Some(d) => {
                    buf.extend_from_slice(d.as_bytes());
                    true
                }
                None => false,
            }),
        }
    }
}

/// An open cursor.
pub struct Open {
    docs: Docs,
    /// A document read for an earlier batch that did not fit in it.
    pending: Option<Vec<u8>>,
    /// Documents still allowed by a `limit` (`u64::MAX` for none).
    left: u64,
    ns: String,
    last_used: Instant,
    /// Bytes of the last batch, reserved for the next one.
    last_batch: usize,
}

impl Open {
    /// A cursor over `docs` for the namespace `ns` (`<db>.<collection>`), returning at most
    /// `limit` documents in all.
    pub fn new(docs: Docs, ns: String, limit: Option<u64>) -> Open {
        Open {
            docs,
            pending: None,
            left: limit.unwrap_or(u64::MAX),
            ns,
            last_used: Instant::now(),
            last_batch: 0,
        }
    }

    /// The namespace the cursor reads.
    pub fn ns(&self) -> &str {
        &self.ns
    }

    /// Writes up to `max_docs` documents into `array` (an open BSON array); returns whether
    /// the cursor is exhausted.
    pub fn fill(&mut self, array: &mut RawDoc, max_docs: usize) -> CmdResult<bool> {
        let start = array.len();
        array.reserve(self.last_batch);
        let done = self.fill_batch(array, max_docs);
        self.last_batch = array.len() - start;
        done
    }

    fn fill_batch(&mut self, array: &mut RawDoc, max_docs: usize) -> CmdResult<bool> {
        let mut n = 0;
        while n < max_docs && self.left > 0 {
            let mark = array.len();
            if let Some(doc) = self.pending.take() {
                if n > 0 && array.len() + doc.len() > BATCH_BYTES {
                    self.pending = Some(doc);
                    return Ok(false);
                }
                array.push_indexed_document(n, &doc);
            } else {
                array.begin_indexed_document(n);
                let got = self.docs.next_into(array.buf_mut())?;
                if !got {
                    array.truncate(mark);
                    return Ok(true);
                }
                if n > 0 && array.len() > BATCH_BYTES {
                    // Over the batch's size: keep the document for the next batch.
                    let doc = array.split_off_value(mark);
                    self.pending = Some(doc);
                    return Ok(false);
                }
            }
            n += 1;
            self.left -= 1;
        }
        if self.left == 0 {
            return Ok(true);
        }
        // The batch is full: the cursor is exhausted only if nothing follows.
        if self.pending.is_none() {
            let mut next = Vec::new();
            if !self.docs.next_into(&mut next)? {
                return Ok(true);
            }
            self.pending = Some(next);
        }
        Ok(false)
    }
}

/// The registry of open cursors, shared by every connection.
pub struct Cursors {
    open: Mutex<HashMap<i64, Open>>,
    next_id: Mutex<i64>,
    timeout: Duration,
    limit: usize,
}

impl Cursors {
    /// Cursors idle longer than `timeout` are closed; at most `limit` are open at once.
    pub fn new(timeout: Duration, limit: usize) -> Cursors {
        // Ids start from the clock so that a restarted server does not reuse its
        // predecessor's ids, which clients may still hold.
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as i64)
            .unwrap_or(1);
        Cursors {
            open: Mutex::new(HashMap::new()),
            next_id: Mutex::new((seed & 0x3fff_ffff_ffff_ffff).max(1)),
            timeout,
            limit,
        }
    }

    /// Keeps `cursor` open; returns its id.
    pub fn register(&self, cursor: Open) -> CmdResult<i64> {
        let mut open = self.open.lock();
        self.reap(&mut open);
        if open.len() >= self.limit {
            return Err(CommandError::new(
                OPERATION_FAILED,
                format!(
                    "too many open cursors ({}); close or drain some first",
                    self.limit
                ),
            ));
        }
        let mut next = self.next_id.lock();
        *next = next.wrapping_add(1).max(1);
        let id = *next;
        open.insert(id, cursor);
        Ok(id)
    }

    /// Takes cursor `id` out to serve a `getMore` on `ns`; put it back with [`Cursors::put`].
    pub fn take(&self, id: i64, ns: &str) -> CmdResult<Open> {
        let mut open = self.open.lock();
        self.reap(&mut open);
        match open.remove(&id) {
            Some(c) if c.ns == ns => Ok(c),
            Some(c) => {
                let msg = format!(
                    "Requested getMore on namespace '{ns}', but cursor {id} belongs to a different namespace {}",
                    c.ns
                );
                open.insert(id, c);
                Err(CommandError::new(UNAUTHORIZED, msg))
            }
            None => Err(CommandError::new(
                CURSOR_NOT_FOUND,
                format!("cursor id {id} not found"),
            )),
        }
    }

    /// Returns a cursor taken with [`Cursors::take`].
    pub fn put(&self, id: i64, mut cursor: Open) {
        cursor.last_used = Instant::now();
        self.open.lock().insert(id, cursor);
    }

    /// Closes cursor `id`; false when it was not open.
    pub fn kill(&self, id: i64) -> bool {
        self.open.lock().remove(&id).is_some()
    }

    /// Whether no cursor is open.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many cursors are open.
    pub fn len(&self) -> usize {
        let mut open = self.open.lock();
        self.reap(&mut open);
        open.len()
    }

    fn reap(&self, open: &mut HashMap<i64, Open>) {
        let timeout = self.timeout;
        open.retain(|_, c| c.last_used.elapsed() < timeout);
    }
}
