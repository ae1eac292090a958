//! Rows an open bucket keeps as BSON documents until they are split into columns: documents
//! back to back, in chunks that are never copied as the bucket grows.
//!
//! A bucket's rows arrive one per batch, a thousand buckets apart. Kept in one `Vec` that
//! doubles, the bytes of a bucket of 360 rows (an hour at 10 s) were copied about twice over
//! and new memory touched for every doubling: with a thousand series starting buckets together,
//! that was about 40% of the catalog's time. Here only the first chunk grows by doubling, up to
//! [`FIRST_CHUNK`] bytes (or the capacity reserved for it, from what the series needed before);
//! after that each new chunk takes twice the last one's capacity, up to [`CHUNK`], and no row
//! is copied again. A document never straddles two chunks.

/// The first chunk grows like a `Vec` up to this many bytes; copying that little is cheap, and
/// a bucket of a few small rows keeps no more than it needs.
pub const FIRST_CHUNK: usize = 16 << 10;
/// Largest capacity of a later chunk (a larger document gets a chunk of its own size).
pub const CHUNK: usize = 64 << 10;

/// Documents back to back in chunks.
#[derive(Debug, Default, Clone)]
pub struct RowRun {
    chunks: Vec<Vec<u8>>,
    len: usize,
}

impl RowRun {
    /// Bytes of all documents.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when no document was added.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Makes room for `bytes` more without a new chunk.
    pub fn reserve(&mut self, bytes: usize) {
        match self.chunks.last_mut() {
            Some(c) => c.reserve(bytes),
            None => self.chunks.push(Vec::with_capacity(bytes)),
        }
    }

    /// Appends one document, written as the concatenation of `parts`.
    pub fn push(&mut self, parts: &[&[u8]]) {
        let total: usize = parts.iter().map(|p| p.len()).sum();
        if let Some(c) = self.room_for(total) {
            for p in parts {
                c.extend_from_slice(p);
            }
        }
        self.len += total;
    }

    /// Appends one row made of the bytes of `doc` at each of `ranges` (start, length), which
    /// add up to `total` bytes.
    pub fn push_ranges(&mut self, doc: &[u8], ranges: &[(usize, usize)], total: usize) {
        if let Some(c) = self.room_for(total) {
            for &(at, len) in ranges {
                c.extend_from_slice(doc.get(at..at + len).unwrap_or_default());
            }
        }
        self.len += total;
    }

    /// The chunk the next `total` bytes go to: the last one if it has room (or is the first
    /// and may still grow), else a new one (so there always is one).
    fn room_for(&mut self, total: usize) -> Option<&mut Vec<u8>> {
        let grow_in_place = match self.chunks.last() {
            None => false,
            Some(c) => {
                c.capacity() - c.len() >= total
                    || (self.chunks.len() == 1 && c.len() + total <= FIRST_CHUNK)
            }
        };
        if !grow_in_place {
            let cap = match self.chunks.last() {
                // The first chunk starts like a Vec and grows by doubling.
                None => 0,
                Some(c) => c
                    .capacity()
                    .saturating_mul(2)
                    .clamp(FIRST_CHUNK, CHUNK)
                    .max(total),
            };
            self.chunks.push(Vec::with_capacity(cap));
        }
        self.chunks.last_mut()
    }

    /// The rows, when every one is `width` bytes (rows of [`RowRun::push_ranges`] with one
    /// layout).
    pub fn fixed_rows(&self, width: usize) -> impl Iterator<Item = &[u8]> + '_ {
        self.chunks
            .iter()
            .flat_map(move |c| c.chunks_exact(width.max(1)))
    }

    /// The documents in the order they were added. Each is found from its own length prefix,
    /// which [`RowRun::push`]'s callers wrote.
    pub fn docs(&self) -> impl Iterator<Item = &[u8]> + '_ {
        self.chunks.iter().flat_map(|c| {
            let mut at = 0;
            std::iter::from_fn(move || {
                let doc = next_document(c, at)?;
                at += doc.len();
                Some(doc)
            })
        })
    }
}

/// The bytes of the document starting at `at` in a run of documents, if one does.
fn next_document(run: &[u8], at: usize) -> Option<&[u8]> {
    let len = i32::from_le_bytes(run.get(at..at + 4)?.try_into().ok()?);
    run.get(at..at.checked_add(usize::try_from(len).ok().filter(|&n| n >= 5)?)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A document of `n` bytes (length prefix, filler, terminator).
    fn doc(n: usize, fill: u8) -> Vec<u8> {
        let mut d = (n as i32).to_le_bytes().to_vec();
        d.resize(n - 1, fill);
        d.push(0);
        d
    }

    #[test]
    fn documents_come_back_in_order_across_chunks_and_are_never_moved() {
        let mut r = RowRun::default();
        let docs: Vec<Vec<u8>> = (0..3000).map(|i| doc(5 + i % 300, i as u8)).collect();
        let mut firsts = Vec::new();
        for d in &docs {
            r.push(&[&d[..4], &d[4..]]);
            firsts.push(r.chunks.last().unwrap().as_ptr());
        }
        assert_eq!(r.len(), docs.iter().map(Vec::len).sum::<usize>());
        let back: Vec<&[u8]> = r.docs().collect();
        assert_eq!(back, docs.iter().map(Vec::as_slice).collect::<Vec<_>>());
        // Past the first chunk no chunk was reallocated: each still starts where it began.
        assert!(r.chunks.len() > 2);
        for c in &r.chunks[1..] {
            assert!(c.capacity() <= CHUNK);
            assert!(firsts.contains(&c.as_ptr()));
        }
        assert!(r.chunks[0].capacity() <= 2 * FIRST_CHUNK);
    }

    #[test]
    fn a_reserved_first_chunk_takes_the_rows_it_was_reserved_for() {
        let mut r = RowRun::default();
        r.reserve(100_000);
        for i in 0..300 {
            r.push(&[&doc(300, i as u8)]);
        }
        assert_eq!(r.chunks.len(), 1);
        r.push(&[&doc(200_000, 1)]);
        assert_eq!(r.chunks.len(), 2);
        assert_eq!(r.docs().count(), 301);
    }

    #[test]
    fn empty_and_small_runs() {
        let mut r = RowRun::default();
        assert!(r.is_empty());
        assert_eq!(r.docs().count(), 0);
        r.push(&[&doc(5, 0)]);
        assert_eq!(r.docs().collect::<Vec<_>>(), vec![&doc(5, 0)[..]]);
        // A few small rows keep a chunk no larger than a Vec would.
        assert!(r.chunks[0].capacity() < 64);
    }
}
