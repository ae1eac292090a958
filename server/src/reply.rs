//! A BSON writer for replies whose bulk is documents already in BSON (cursor batches), so
//! they are copied into the reply as bytes instead of being parsed and encoded again.

use crate::error::CmdResult;
use bson::{Document, RawDocumentBuf};

/// A BSON document (or array) being written. Nested documents are written in place and closed
/// with [`RawDoc::end`], which fills in their lengths.
pub struct RawDoc {
    buf: Vec<u8>,
    /// Start offsets of the documents still open, outermost first.
    open: Vec<usize>,
}

impl Default for RawDoc {
    fn default() -> Self {
        RawDoc::new()
    }
}

impl RawDoc {
    /// An empty document, open for fields.
    pub fn new() -> RawDoc {
        RawDoc {
            buf: vec![0, 0, 0, 0],
            open: vec![0],
        }
    }

    /// Bytes written so far.
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// Whether nothing but the length prefix is written.
    pub fn is_empty(&self) -> bool {
        self.buf.len() <= 4
    }

    /// The buffer, for a writer that appends a document's bytes itself.
    pub fn buf_mut(&mut self) -> &mut Vec<u8> {
        &mut self.buf
    }

    /// Cuts the buffer back to `len` bytes.
    pub fn truncate(&mut self, len: usize) {
        self.buf.truncate(len);
    }

    fn key(&mut self, t: u8, key: &str) {
        self.buf.push(t);
        self.buf.extend_from_slice(key.as_bytes());
        self.buf.push(0);
    }

    fn index_key(&mut self, t: u8, i: usize) {
        self.buf.push(t);
        // Array keys are the decimal indexes; written without allocating, as a batch has
        // tens of thousands of them.
        let mut digits = [0u8; 20];
        let mut at = digits.len();
        let mut v = i;
        loop {
            at -= 1;
            if let Some(d) = digits.get_mut(at) {
                *d = b'0' + (v % 10) as u8;
            }
            v /= 10;
            if v == 0 || at == 0 {
                break;
            }
        }
        self.buf
            .extend_from_slice(digits.get(at..).unwrap_or_default());
        self.buf.push(0);
    }

    /// Reserves room for `bytes` more, so that a large batch is not copied as it grows.
    pub fn reserve(&mut self, bytes: usize) {
        self.buf.reserve(bytes);
    }

    /// Opens a nested document under `key`.
    pub fn begin_document(&mut self, key: &str) {
        self.key(0x03, key);
        self.open.push(self.buf.len());
        self.buf.extend_from_slice(&[0, 0, 0, 0]);
    }

    /// Opens a nested array under `key`; its elements are added with the indexed methods.
    pub fn begin_array(&mut self, key: &str) {
        self.key(0x04, key);
        self.open.push(self.buf.len());
        self.buf.extend_from_slice(&[0, 0, 0, 0]);
    }

    /// Writes the key of array element `i`, whose document bytes the caller appends next.
    pub fn begin_indexed_document(&mut self, i: usize) {
        self.index_key(0x03, i);
    }

    /// Adds array element `i`: the document `doc` (BSON bytes).
    pub fn push_indexed_document(&mut self, i: usize, doc: &[u8]) {
        self.index_key(0x03, i);
        self.buf.extend_from_slice(doc);
    }

    /// Removes everything from `mark` (the start of an element) and returns the element's
    /// value bytes, that is the document after its type and key.
    pub fn split_off_value(&mut self, mark: usize) -> Vec<u8> {
        let tail = self.buf.split_off(mark);
        let key_end = tail
            .iter()
            .skip(1)
            .position(|&c| c == 0)
            .map(|p| p + 2)
            .unwrap_or(tail.len());
        tail.get(key_end..).unwrap_or_default().to_vec()
    }

    /// Closes the innermost open document or array.
    pub fn end(&mut self) {
        self.buf.push(0);
        if let Some(start) = self.open.pop() {
            let len = (self.buf.len() - start) as i32;
            if let Some(slot) = self.buf.get_mut(start..start + 4) {
                slot.copy_from_slice(&len.to_le_bytes());
            }
        }
    }

    /// Adds a 64-bit integer.
    pub fn i64(&mut self, key: &str, v: i64) {
        self.key(0x12, key);
        self.buf.extend_from_slice(&v.to_le_bytes());
    }

    /// Adds a double.
    pub fn f64(&mut self, key: &str, v: f64) {
        self.key(0x01, key);
        self.buf.extend_from_slice(&v.to_le_bytes());
    }

    /// Adds a string.
    pub fn str(&mut self, key: &str, v: &str) {
        self.key(0x02, key);
        self.buf
            .extend_from_slice(&((v.len() + 1) as i32).to_le_bytes());
        self.buf.extend_from_slice(v.as_bytes());
        self.buf.push(0);
    }

    /// Adds every field of `d`.
    pub fn fields_of(&mut self, d: &Document) {
        if let Ok(raw) = RawDocumentBuf::try_from(d) {
            let bytes = raw.as_bytes();
            // A document's fields are its bytes between the length and the final zero.
            if let Some(fields) = bytes.get(4..bytes.len().saturating_sub(1)) {
                self.buf.extend_from_slice(fields);
            }
        }
    }

    /// Closes every open document and returns the bytes.
    pub fn finish(mut self) -> Vec<u8> {
        while !self.open.is_empty() {
            self.end();
        }
        self.buf
    }
}

/// `{cursor: {<batch_key>: [...], id, ns}, ok: 1}` with the batch from `fill`.
pub fn cursor_reply(
    batch_key: &str,
    ns: &str,
    fill: impl FnOnce(&mut RawDoc) -> crate::error::CmdResult<i64>,
) -> crate::error::CmdResult<Vec<u8>> {
    let mut r = RawDoc::new();
    r.begin_document("cursor");
    r.begin_array(batch_key);
    let id = fill(&mut r)?;
    r.end();
    r.i64("id", id);
    r.str("ns", ns);
    r.end();
    r.f64("ok", 1.0);
    Ok(r.finish())
}

/// A reply document as bytes.
pub fn bson_bytes(d: &Document) -> Vec<u8> {
    let mut out = Vec::new();
    if d.to_writer(&mut out).is_err() {
        out.clear();
        let _ = bson::doc! {"ok": 0.0, "errmsg": "the reply could not be encoded", "code": 1, "codeName": "InternalError"}
            .to_writer(&mut out);
    }
    out
}

/// `d` with `ok: 1`, as bytes.
pub fn ok(mut d: Document) -> CmdResult<Vec<u8>> {
    d.insert("ok", 1.0);
    Ok(bson_bytes(&d))
}

/// A reply built with [`RawDoc`], closed with `ok: 1`.
pub fn raw_ok(mut r: RawDoc) -> CmdResult<Vec<u8>> {
    r.f64("ok", 1.0);
    Ok(r.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::{doc, rawdoc};

    #[test]
    fn a_cursor_reply_reads_back_as_bson() {
        let a = rawdoc! {"x": 1};
        let b = rawdoc! {"y": "two"};
        let bytes = cursor_reply("firstBatch", "db.c", |r| {
            r.push_indexed_document(0, a.as_bytes());
            r.begin_indexed_document(1);
            r.buf_mut().extend_from_slice(b.as_bytes());
            Ok(42)
        })
        .unwrap();
        let d = Document::from_reader(&bytes[..]).unwrap();
        assert_eq!(
            d,
            doc! {"cursor": {"firstBatch": [{"x": 1}, {"y": "two"}], "id": 42i64, "ns": "db.c"}, "ok": 1.0}
        );
    }

    #[test]
    fn split_off_value_returns_the_document_after_its_key() {
        let mut r = RawDoc::new();
        r.begin_array("a");
        let mark = r.len();
        let d = rawdoc! {"k": 10};
        r.push_indexed_document(12, d.as_bytes());
        assert_eq!(r.split_off_value(mark), d.as_bytes());
        r.push_indexed_document(0, d.as_bytes());
        r.push_indexed_document(1_234_567, d.as_bytes());
        assert_eq!(r.len(), mark + 2 * (d.as_bytes().len() + 2) + 1 + 7);
        r.truncate(mark);
        assert_eq!(r.len(), mark);
        r.end();
        r.fields_of(&doc! {"z": true});
        let out = r.finish();
        let back = Document::from_reader(&out[..]).unwrap();
        assert_eq!(back, doc! {"a": [], "z": true});
    }
}
