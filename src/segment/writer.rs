//! Writes a segment file: header, pages of bucket column data, compressed directory, footer.
//!
//! The file is built in a temporary file beside the target (`<path>.tmp`), synced, renamed into
//! place and the directory synced, so that a crash leaves either no segment or a complete one.

use super::format::{self as f, Footer, ValueRefs};
use super::sum_entry::{put_sums, SUM_KEY};
use super::SegmentHeaderInfo;
use crate::bucket::{BucketData, EncodedBucket, META_SLOT};
use crate::error::{Error, Result};
use crate::vfs::{Vfs, WritableFile};
use bson::Bson;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Page-packing knobs and the directory version. Only tests change them (to get many pages
/// out of a few buckets, or files as older releases wrote them).
#[derive(Debug, Clone, Copy)]
pub(crate) struct WriteOptions {
    /// Flush a page of small buckets once adding a bucket would take it past this many bytes.
    pub page_target: usize,
    /// Buckets at least this long get a page of their own.
    pub large_bucket: usize,
    /// Directory version to write, `MIN_DIRECTORY_VERSION..=DIRECTORY_VERSION`: version 1
    /// leaves out sums, versions 1 and 2 the BSON sizes.
    pub directory_version: u8,
}

impl Default for WriteOptions {
    fn default() -> Self {
        WriteOptions {
            page_target: f::PAGE_TARGET,
            large_bucket: f::LARGE_BUCKET,
            directory_version: f::DIRECTORY_VERSION,
        }
    }
}

/// Writes `buckets` to `path` durably: write `<path>.tmp`, sync it, rename it over `path`, sync
/// the directory. Returns the number of bytes of the file.
///
/// Buckets must be well formed: `count` in `1..=MAX_BUCKET_ROWS`, at least one column, every
/// column with exactly `count` values, `row_shapes` empty or `count` long, `bson_bytes` (when
/// known) at least 5 bytes per measurement. Anything else is refused with [`Error::BadValue`]
/// before a byte is written.
pub fn write_segment(
    vfs: &dyn Vfs,
    path: &Path,
    info: &SegmentHeaderInfo,
    buckets: &[&BucketData],
) -> Result<u64> {
    write_segment_with(vfs, path, info, buckets, WriteOptions::default())
}

/// [`write_segment`] for buckets whose columns are already encoded (the flusher's, which come
/// straight from the catalog's typed vectors). Besides [`write_segment`]'s checks, each
/// bucket's column lengths must add up to its body.
pub fn write_encoded_segment(
    vfs: &dyn Vfs,
    path: &Path,
    info: &SegmentHeaderInfo,
    buckets: &[&EncodedBucket],
) -> Result<u64> {
    write_segment_with(vfs, path, info, buckets, WriteOptions::default())
}

/// A bucket the writer can place: its directory fields and its encoded columns.
pub(crate) trait SegmentBucket {
    /// Everything but the column values.
    fn head(&self) -> &BucketData;
    /// Number of columns.
    fn column_count(&self) -> usize;
    /// Name of column `i`.
    fn column_name(&self, i: usize) -> &str;
    /// The encoded columns back to back, and their lengths: borrowed when already encoded,
    /// else encoded into `scratch` and `lens` (both cleared first).
    fn columns<'a>(
        &'a self,
        scratch: &'a mut Vec<u8>,
        lens: &'a mut Vec<usize>,
    ) -> (&'a [u8], &'a [usize]);
    /// Why the columns do not fit the bucket's row count, if they do not.
    fn column_mismatch(&self) -> Option<String>;
}

impl SegmentBucket for BucketData {
    fn head(&self) -> &BucketData {
        self
    }

    fn column_count(&self) -> usize {
        self.columns.len()
    }

    fn column_name(&self, i: usize) -> &str {
        self.columns.get(i).map_or("", |c| c.name.as_str())
    }

    fn columns<'a>(
        &'a self,
        scratch: &'a mut Vec<u8>,
        lens: &'a mut Vec<usize>,
    ) -> (&'a [u8], &'a [usize]) {
        scratch.clear();
        lens.clear();
        self.encode_columns(scratch, lens);
        (scratch, lens)
    }

    fn column_mismatch(&self) -> Option<String> {
        let c = self
            .columns
            .iter()
            .find(|c| c.values.len() != self.count as usize)?;
        Some(format!(
            "column {:?} has {} values for {} rows",
            c.name,
            c.values.len(),
            self.count
        ))
    }
}

impl SegmentBucket for EncodedBucket {
    fn head(&self) -> &BucketData {
        &self.head
    }

    fn column_count(&self) -> usize {
        self.names.len()
    }

    fn column_name(&self, i: usize) -> &str {
        self.names.get(i).map_or("", String::as_str)
    }

    fn columns<'a>(&'a self, _: &'a mut Vec<u8>, _: &'a mut Vec<usize>) -> (&'a [u8], &'a [usize]) {
        (&self.body, &self.lens)
    }

    fn column_mismatch(&self) -> Option<String> {
        if !self.head.columns.is_empty() {
            return Some("an encoded bucket's head holds columns".into());
        }
        if self.lens.len() != self.names.len() {
            return Some(format!(
                "{} column lengths for {} names",
                self.lens.len(),
                self.names.len()
            ));
        }
        let total: usize = self.lens.iter().sum();
        (total != self.body.len()).then(|| {
            format!(
                "column lengths add up to {total} bytes, the body has {}",
                self.body.len()
            )
        })
    }
}

/// [`write_segment`] with explicit packing options.
pub(crate) fn write_segment_with<B: SegmentBucket>(
    vfs: &dyn Vfs,
    path: &Path,
    info: &SegmentHeaderInfo,
    buckets: &[&B],
    opts: WriteOptions,
) -> Result<u64> {
    check_input(info, buckets)?;
    let tmp = tmp_path(path);
    let result = write_file(vfs, &tmp, info, buckets, opts).and_then(|len| {
        vfs.rename(&tmp, path)?;
        vfs.sync_dir(path.parent().unwrap_or_else(|| Path::new(".")))?;
        Ok(len)
    });
    if result.is_err() {
        // Best effort: a leftover tmp file is harmless (never referenced) but wastes space.
        let _ = vfs.remove_file(&tmp);
    }
    result
}

/// `<path>.tmp`.
fn tmp_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".tmp");
    path.with_file_name(name)
}

/// Rejects input the format cannot represent or the reader would refuse.
fn check_input<B: SegmentBucket>(info: &SegmentHeaderInfo, buckets: &[&B]) -> Result<()> {
    if info.time_field.len() > usize::from(u16::MAX) {
        return Err(Error::BadValue(
            "time field name longer than 65535 bytes".into(),
        ));
    }
    if buckets.len() > u32::MAX as usize {
        return Err(Error::BadValue("too many buckets for one segment".into()));
    }
    for (i, whole) in buckets.iter().enumerate() {
        let b = whole.head();
        let bad = |m: String| Err(Error::BadValue(format!("bucket {i} ({}): {m}", b.id)));
        if b.count == 0 || b.count > f::MAX_BUCKET_ROWS {
            return bad(format!(
                "count {} outside 1..={}",
                b.count,
                f::MAX_BUCKET_ROWS
            ));
        }
        if whole.column_count() == 0 {
            return bad("no columns".into());
        }
        if let Some(m) = whole.column_mismatch() {
            return bad(m);
        }
        match b.max.get(SUM_KEY) {
            None => {}
            Some(Bson::Document(d)) => {
                // Encoding is cheap next to the columns; doing it here keeps the file untouched.
                put_sums(
                    &mut Vec::new(),
                    d,
                    &b.min,
                    &b.max,
                    b.count,
                    &info.time_field,
                )
                .or_else(bad)?;
            }
            Some(v) => return bad(format!("control.max.{SUM_KEY:?} is not a document: {v}")),
        }
        if !b.row_shapes.is_empty() && b.row_shapes.len() != b.count as usize {
            return bad(format!(
                "{} row shapes for {} rows",
                b.row_shapes.len(),
                b.count
            ));
        }
        // The smallest BSON document takes 5 bytes; 0 is how the directory says "unknown".
        if let Some(n) = b
            .bson_bytes
            .filter(|&n| n < f::MIN_BSON_BYTES * u64::from(b.count))
        {
            return bad(format!(
                "bson_bytes {n} is less than {} bytes per measurement",
                f::MIN_BSON_BYTES
            ));
        }
    }
    Ok(())
}

/// Interns strings, meta values and shapes into the directory's tables, and tracks the
/// per-name ObjectId references of `control.min` values.
#[derive(Default)]
struct Tables {
    names: Vec<String>,
    name_ids: HashMap<String, u32>,
    /// Encoded meta values (tag + payload), deduplicated by their bytes.
    metas: Vec<u8>,
    meta_count: u32,
    meta_ids: HashMap<Vec<u8>, u32>,
    shapes: Vec<Vec<u32>>,
    shape_ids: HashMap<Vec<u32>, u32>,
    /// Per name, the previous bucket's `control.min` ObjectId: the reference for the next.
    min_oids: OidContext,
}

impl Tables {
    fn name(&mut self, n: &str) -> u32 {
        if let Some(&i) = self.name_ids.get(n) {
            return i;
        }
        let i = self.names.len() as u32;
        self.names.push(n.to_owned());
        self.name_ids.insert(n.to_owned(), i);
        i
    }

    /// Meta reference: 0 = absent, k = entry k-1 of the meta table.
    fn meta(&mut self, m: Option<&Bson>) -> Result<u32> {
        let Some(m) = m else { return Ok(0) };
        let mut enc = Vec::new();
        f::put_value(&mut enc, m, &ValueRefs::default()).map_err(Error::BadValue)?;
        if let Some(&i) = self.meta_ids.get(&enc) {
            return Ok(i + 1);
        }
        let i = self.meta_count;
        self.meta_count += 1;
        self.metas.extend_from_slice(&enc);
        self.meta_ids.insert(enc, i);
        Ok(i + 1)
    }

    fn shape(&mut self, s: &[u32]) -> u32 {
        if let Some(&i) = self.shape_ids.get(s) {
            return i;
        }
        let i = self.shapes.len() as u32;
        self.shapes.push(s.to_vec());
        self.shape_ids.insert(s.to_vec(), i);
        i
    }
}

/// One page as listed in the directory.
struct PageEntry {
    compression: u8,
    stored_len: u32,
    raw_len: u32,
    crc: u32,
}

/// Streams pages to the file and records their directory entries.
struct PageSink<'a> {
    file: &'a mut dyn WritableFile,
    pages: Vec<PageEntry>,
    written: u64,
}

impl PageSink<'_> {
    /// Writes `raw` as the next page, compressed if that saves enough.
    fn flush(&mut self, raw: &[u8]) -> Result<()> {
        let raw_len = u32::try_from(raw.len())
            .ok()
            .filter(|&l| l <= f::MAX_PAGE_RAW_LEN)
            .ok_or_else(|| Error::BadValue(format!("bucket data of {} bytes", raw.len())))?;
        let z = zstd::bulk::compress(raw, f::ZSTD_LEVEL)?;
        let (compression, stored): (u8, &[u8]) =
            if z.len() + raw.len() / f::ZSTD_MIN_SAVING_DIVISOR <= raw.len() {
                (f::PAGE_ZSTD, &z)
            } else {
                (f::PAGE_RAW, raw)
            };
        self.file.append(stored)?;
        self.written += stored.len() as u64;
        self.pages.push(PageEntry {
            compression,
            stored_len: stored.len() as u32,
            raw_len,
            crc: crc32fast::hash(stored),
        });
        Ok(())
    }
}

/// Per-name "previous `control.min` ObjectId", the reference for the next bucket's delta.
type OidContext = HashMap<u32, [u8; 12]>;

fn write_file<B: SegmentBucket>(
    vfs: &dyn Vfs,
    tmp: &Path,
    info: &SegmentHeaderInfo,
    buckets: &[&B],
    opts: WriteOptions,
) -> Result<u64> {
    let mut file = vfs.open_append(tmp, true)?;
    let header = encode_header(info);
    file.append(&header)?;

    let mut tables = Tables::default();
    let mut entries = Vec::new(); // the directory's bucket section
    let mut sink = PageSink {
        file: &mut *file,
        pages: Vec::new(),
        written: header.len() as u64,
    };
    let mut page = Vec::with_capacity(opts.page_target);
    let mut scratch = Vec::new();
    let mut scratch_lens = Vec::new();
    let mut prev_page = 0usize;
    let mut prev_id = [0u8; 12];

    for b in buckets {
        let (bucket_buf, col_lens) = b.columns(&mut scratch, &mut scratch_lens);
        // Place the bucket: small ones share the open page, large ones get their own.
        let page_index;
        if bucket_buf.len() >= opts.large_bucket {
            if !page.is_empty() {
                sink.flush(&page)?;
                page.clear();
            }
            page_index = sink.pages.len();
            sink.flush(bucket_buf)?;
        } else {
            if !page.is_empty() && page.len() + bucket_buf.len() > opts.page_target {
                sink.flush(&page)?;
                page.clear();
            }
            page_index = sink.pages.len();
            page.extend_from_slice(bucket_buf);
        }
        encode_entry(
            &mut entries,
            &mut tables,
            *b,
            (page_index - prev_page) as u64,
            &prev_id,
            col_lens,
            &info.time_field,
            opts.directory_version,
        )?;
        prev_page = page_index;
        prev_id = b.head().id.bytes();
    }
    if !page.is_empty() {
        sink.flush(&page)?;
    }

    let dir_raw = encode_directory(
        &tables,
        &sink.pages,
        buckets.len(),
        &entries,
        opts.directory_version,
    );
    let dir = zstd::bulk::compress(&dir_raw, f::ZSTD_LEVEL)?;
    let too_big = |what: &str| Error::BadValue(format!("segment {what} too large"));
    let footer = Footer {
        dir_offset: sink.written,
        dir_stored_len: u32::try_from(dir.len()).map_err(|_| too_big("directory"))?,
        dir_raw_len: u32::try_from(dir_raw.len())
            .ok()
            .filter(|&l| l <= f::MAX_DIRECTORY_RAW_LEN)
            .ok_or_else(|| too_big("directory"))?,
        dir_crc: crc32fast::hash(&dir),
        bucket_count: buckets.len() as u32,
        page_count: u32::try_from(sink.pages.len()).map_err(|_| too_big("page count"))?,
        header_len: header.len() as u32,
    };
    let total = sink.written + dir.len() as u64 + f::FOOTER_LEN as u64;
    file.append(&dir)?;
    file.append(&footer.encode())?;
    file.sync_data()?;
    Ok(total)
}

/// `magic | version | flags | collection_id | time_field_len | reserved | time_field | crc`.
fn encode_header(info: &SegmentHeaderInfo) -> Vec<u8> {
    let name = info.time_field.as_bytes();
    let mut h = Vec::with_capacity(f::header_len(name.len()));
    h.extend_from_slice(&f::HEADER_MAGIC);
    h.extend_from_slice(&f::FORMAT_VERSION.to_le_bytes());
    h.extend_from_slice(&0u16.to_le_bytes());
    h.extend_from_slice(&info.collection_id.to_le_bytes());
    // check_input bounded the length to u16.
    h.extend_from_slice(&(name.len() as u16).to_le_bytes());
    h.extend_from_slice(&0u16.to_le_bytes());
    h.extend_from_slice(name);
    let crc = crc32fast::hash(&h);
    h.extend_from_slice(&crc.to_le_bytes());
    h
}

/// `version | names | pages | metas | shapes | bucket_count | entries`.
fn encode_directory(
    t: &Tables,
    pages: &[PageEntry],
    bucket_count: usize,
    entries: &[u8],
    version: u8,
) -> Vec<u8> {
    let mut d = Vec::with_capacity(entries.len() + t.metas.len() + 64);
    d.push(version);
    f::put_varint(&mut d, t.names.len() as u64);
    for n in &t.names {
        f::put_varint(&mut d, n.len() as u64);
        d.extend_from_slice(n.as_bytes());
    }
    f::put_varint(&mut d, pages.len() as u64);
    for p in pages {
        d.push(p.compression);
        f::put_varint(&mut d, u64::from(p.stored_len));
        f::put_varint(&mut d, u64::from(p.raw_len));
        d.extend_from_slice(&p.crc.to_le_bytes());
    }
    f::put_varint(&mut d, u64::from(t.meta_count));
    d.extend_from_slice(&t.metas);
    f::put_varint(&mut d, t.shapes.len() as u64);
    for s in &t.shapes {
        f::put_varint(&mut d, s.len() as u64);
        for &slot in s {
            // 0 = meta slot, k + 1 = column k.
            f::put_varint(
                &mut d,
                if slot == META_SLOT {
                    0
                } else {
                    u64::from(slot) + 1
                },
            );
        }
    }
    f::put_varint(&mut d, bucket_count as u64);
    d.extend_from_slice(entries);
    d
}

/// The bucket's `_id` time as milliseconds: the reference for its DateTime values.
pub(crate) fn id_base_millis(id: &[u8; 12]) -> i64 {
    let t = u32::from_be_bytes([id[0], id[1], id[2], id[3]]);
    i64::from(t) * 1000
}

/// One bucket's directory entry:
/// `id | meta_ref | count | page_delta | min | max | columns | shapes | row_shapes | bson`
/// (`bson` from directory version 3 on).
#[allow(clippy::too_many_arguments)]
fn encode_entry(
    out: &mut Vec<u8>,
    t: &mut Tables,
    whole: &impl SegmentBucket,
    page_delta: u64,
    prev_id: &[u8; 12],
    col_lens: &[usize],
    time_field: &str,
    version: u8,
) -> Result<()> {
    let b = whole.head();
    let id = b.id.bytes();
    f::put_oid_delta(out, prev_id, &id);
    let meta_ref = t.meta(b.meta.as_ref())?;
    f::put_varint(out, u64::from(meta_ref));
    f::put_varint(out, u64::from(b.count));
    f::put_varint(out, page_delta);
    let base = id_base_millis(&id);

    f::put_varint(out, b.min.len() as u64);
    for (k, v) in &b.min {
        let n = t.name(k);
        f::put_varint(out, u64::from(n));
        let refs = ValueRefs {
            oid: t.min_oids.get(&n).copied().unwrap_or_default(),
            millis: base,
        };
        f::put_value(out, v, &refs).map_err(Error::BadValue)?;
        if let Bson::ObjectId(o) = v {
            t.min_oids.insert(n, o.bytes());
        }
    }
    // The sums entry goes last in its compact form (`sum_entry`), which needs the entries
    // before it; one-row buckets store none (readers derive them from control.max).
    let sums = match b.max.get(SUM_KEY) {
        Some(Bson::Document(d)) if b.count > 1 && !d.is_empty() && version >= 2 => Some(d),
        _ => None,
    };
    let plain = b.max.len() - usize::from(b.max.contains_key(SUM_KEY));
    f::put_varint(out, (plain + usize::from(sums.is_some())) as u64);
    for (k, v) in &b.max {
        if k == SUM_KEY {
            continue;
        }
        let n = t.name(k);
        f::put_varint(out, u64::from(n));
        let min_v = b.min.get(k);
        if min_v.is_some_and(|m| identical(m, v)) {
            out.push(f::TAG_SAME_AS_MIN);
        } else {
            f::put_value(out, v, &max_refs(min_v, base)).map_err(Error::BadValue)?;
        }
    }
    if let Some(sums) = sums {
        f::put_varint(out, u64::from(t.name(SUM_KEY)));
        put_sums(out, sums, &b.min, &b.max, b.count, time_field)
            .map_err(|e| Error::BadValue(format!("bucket {}: {e}", b.id)))?;
    }

    f::put_varint(out, whole.column_count() as u64);
    for (i, &len) in col_lens.iter().enumerate() {
        f::put_varint(out, u64::from(t.name(whole.column_name(i))));
        f::put_varint(out, len as u64);
    }
    f::put_varint(out, b.shapes.len() as u64);
    for s in &b.shapes {
        f::put_varint(out, u64::from(t.shape(s)));
    }
    f::put_varint(out, b.row_shapes.len() as u64);
    for &r in &b.row_shapes {
        f::put_varint(out, u64::from(r));
    }
    if version >= 3 {
        f::put_varint(out, b.bson_bytes.unwrap_or(0));
    }
    Ok(())
}

/// References for a `control.max` value: the same field's `control.min` value when it has the
/// delta-encoded type, else zero / the bucket start.
pub(crate) fn max_refs(min_v: Option<&Bson>, base: i64) -> ValueRefs {
    ValueRefs {
        oid: match min_v {
            Some(Bson::ObjectId(o)) => o.bytes(),
            _ => [0; 12],
        },
        millis: match min_v {
            Some(Bson::DateTime(d)) => d.timestamp_millis(),
            _ => base,
        },
    }
}

/// True when `a` and `b` encode to the same bytes. `Bson`'s `==` is not enough: it calls
/// `0.0 == -0.0` equal, and writing "same as min" for those would change a bit on read.
fn identical(a: &Bson, b: &Bson) -> bool {
    if a != b {
        return false;
    }
    let (mut x, mut y) = (Vec::new(), Vec::new());
    let refs = ValueRefs::default();
    f::put_value(&mut x, a, &refs).is_ok() && f::put_value(&mut y, b, &refs).is_ok() && x == y
}
