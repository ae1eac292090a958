//! Reads segment files through a memory map.
//!
//! Trust is earned in order: footer (magic, version, crc), header (magic, version, crc,
//! agreement with the footer), directory (bounds, crc, bounded decompression, structure, exact
//! tiling of the pages by the buckets). Only then are the bucket summaries handed out. Bucket
//! data is trusted only after its page's crc matched, on every read. Every error is a
//! `Corruption` naming the file and the absolute offset of the unit that failed.
#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

use super::bounds::FieldBounds;
use super::control::{find, Control, ControlEntries, Keep, OidRefs};
use super::format::{self as f, Cursor, Footer, ValueRefs, BOOKKEEPING_PREFIX};
use super::meta_proj::{MetaFields, MetaProjection};
use super::order::{compare_bson, is_composite};
use super::pagecache::{segment_number, PageCache};
use super::writer::id_base_millis;
use super::SegmentHeaderInfo;
use crate::bucket::{BucketData, Column, META_SLOT};
use crate::codec::{decode_column, CodecError};
use crate::error::{Error, Result};
use crate::sums::{check_sums, SUM_KEY};
use crate::vfs::{FileBytes, Vfs};
use bson::oid::ObjectId;
use bson::{Bson, Document};
use parking_lot::Mutex;
use std::cmp::Ordering;
use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering as AtomicOrdering};
use std::sync::{Arc, OnceLock};

mod layout;
pub use layout::BucketLayout;

/// What the directory says about one bucket: the facts every read needs, decoded at open.
///
/// Its meta value stays in the segment's table of meta values ([`Segment::meta`]) and its
/// `control.min/max` stay encoded in the directory until asked for ([`Segment::control`]):
/// decoded into documents for every bucket at open, they were most of the time to open a
/// database of many small buckets and most of its memory.
#[derive(Debug)]
pub struct BucketSummary {
    /// Bucket `_id` (its 4-byte time prefix is the bucket start).
    pub id: ObjectId,
    /// Number of measurements.
    pub count: u32,
    /// BSON size in bytes of the bucket's measurements as inserted (see
    /// [`BucketData::bson_bytes`]); `None` in files written before directory version 3.
    pub bson_bytes: Option<u64>,
    loc: BucketLoc,
    /// `control.min` and `control.max` of the time field in milliseconds, read once at open.
    time_range: (i64, i64),
    /// The directory's reference to the meta value (0: none, `k`: the `k`-th value).
    meta_ref: u32,
    /// Some rows carry their own meta value (`control.max` lists the meta column).
    meta_varies: bool,
    /// `control.max` of the hidden log sequence column (0 when absent).
    max_seq: u64,
    /// Where `control.min/max` are encoded: `start..end` of the directory and the ObjectId
    /// references they are decoded against (`start..end` of the segment's reference table).
    control_at: (u32, u32),
    oid_refs: (u32, u32),
    /// `control.min/max`, once decoded for a statistics read ([`Segment::control`]).
    control: OnceLock<Box<Control>>,
}

impl BucketSummary {
    /// The bucket's start (`control.min` of the time field, the rounded start) and latest time,
    /// milliseconds.
    pub fn time_range(&self) -> (i64, i64) {
        self.time_range
    }

    /// The meta value's position in the segment's table of meta values (0 when the bucket has
    /// none). Buckets of one segment with the same reference have the same meta value, so a
    /// reader can decide something about a meta value once per reference.
    pub fn meta_ref(&self) -> u32 {
        self.meta_ref
    }

    /// True when some rows carry their own meta value (differing from [`Segment::meta`]
    /// in the order of embedded fields), read once at open.
    pub fn meta_varies(&self) -> bool {
        self.meta_varies
    }

    /// The largest log sequence among its rows (`control.max` of the hidden sequence
    /// column), 0 when it has none.
    pub fn max_seq(&self) -> u64 {
        self.max_seq
    }
}

/// Where a bucket's data lives and how it is cut into columns.
#[derive(Debug, Clone, Copy, PartialEq)]
struct BucketLoc {
    page: u32,
    /// Offset of the bucket's first column within the decompressed page.
    offset: u32,
    /// Total length of its columns.
    len: u32,
    /// Its columns: `start..end` of the segment's column table.
    columns: (u32, u32),
    /// Its shapes: `start..end` of the segment's table of bucket shapes, whose entries index
    /// the shape table.
    shapes: (u32, u32),
    /// Its row shapes: `start..end` of the segment's row shape table.
    row_shapes: (u32, u32),
    /// Bit `c` set when column `c` (below 64) has a value in every row: every shape lists it.
    dense: u64,
}

/// Byte accounting of a segment file; the `*_bytes*` fields of a file add up to its length
/// (`header_bytes + page_bytes_stored + directory_bytes_stored + footer_bytes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentStats {
    /// Header length.
    pub header_bytes: u64,
    /// Number of pages.
    pub page_count: u64,
    /// Pages stored zstd-compressed.
    pub zstd_page_count: u64,
    /// Bytes of all pages as stored.
    pub page_bytes_stored: u64,
    /// Bytes of all pages after decompression: the encoded columns.
    pub page_bytes_raw: u64,
    /// Bytes of the directory as stored (compressed).
    pub directory_bytes_stored: u64,
    /// Bytes of the directory after decompression.
    pub directory_bytes_raw: u64,
    /// Footer length.
    pub footer_bytes: u64,
}

/// One page as described by the directory.
#[derive(Debug, Clone)]
struct PageInfo {
    /// Absolute offset of the stored bytes.
    offset: u64,
    stored_len: u32,
    raw_len: u32,
    compression: u8,
    crc: u32,
    /// Buckets `first_bucket..end_bucket` live in this page.
    first_bucket: u32,
    end_bucket: u32,
}

/// A page whose crc has been checked: either the mapped bytes themselves (raw pages) or the
/// decompressed copy.
#[derive(Clone)]
enum PageData {
    Mapped,
    Owned(Arc<Vec<u8>>),
}

/// An open, validated segment file.
pub struct Segment {
    path: PathBuf,
    bytes: FileBytes,
    info: SegmentHeaderInfo,
    dir_offset: u64,
    dir_raw_len: u64,
    dir_version: u8,
    names: Vec<String>,
    pages: Vec<PageInfo>,
    shapes: Vec<Vec<u32>>,
    buckets: Vec<BucketSummary>,
    /// The directory's table of meta values; a bucket's `meta_ref` `k > 0` is entry `k - 1`.
    metas: Vec<Bson>,
    /// Tables the buckets' summaries point into, bucket after bucket: one array each, where
    /// a vector per bucket cost an allocation at open and a cache miss per read.
    tables: Tables,
    /// The decompressed directory, where `control.min/max` are decoded from on demand.
    dir: Vec<u8>,
    /// The pages read last, latest first: a scan that reads buckets in order decompresses
    /// each page once, and so do a few threads scanning different stretches of the file.
    recent_pages: Mutex<VecDeque<(u32, PageData)>>,
    /// This segment's number in the shared page cache, and the cache (see [`PageCache`]).
    number: u64,
    shared_pages: Option<Arc<PageCache>>,
    /// Per page: its crc has matched since the file was opened. The file is immutable, so a
    /// read checks each page once rather than on every visit ([`Segment::verify`] checks
    /// every page again regardless).
    checked: Vec<AtomicBool>,
    /// Meta projections built so far, latest last (see [`Segment::meta_projection`]).
    projections: Mutex<Vec<(MetaFields, Arc<MetaProjection>)>>,
    /// Field bounds gathered so far, latest last (see [`Segment::field_bounds`]).
    bounds: Mutex<Vec<(String, Arc<FieldBounds>)>>,
}

/// Decompressed pages a segment keeps (see [`Segment::cached_page`]).
const CACHED_PAGES: usize = 4;

/// Meta projections a segment keeps; the oldest is dropped beyond this.
const KEPT_PROJECTIONS: usize = 8;

/// Fields whose bounds a segment keeps; beyond this the oldest a read does not use is
/// dropped (a read of more fields keeps them all).
const KEPT_BOUNDS: usize = 8;

impl Drop for Segment {
    fn drop(&mut self) {
        if let Some(c) = &self.shared_pages {
            c.forget(self.number);
        }
    }
}

impl std::fmt::Debug for Segment {
    fn fmt(&self, fm: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        fm.debug_struct("Segment")
            .field("path", &self.path)
            .field("bytes", &self.bytes.len())
            .field("buckets", &self.buckets.len())
            .field("pages", &self.pages.len())
            .finish()
    }
}

impl Segment {
    /// Opens `path` and validates its footer, header and directory (checksums, versions,
    /// bounds and structure). Bucket data is checked later, page by page, when read.
    pub fn open(vfs: &dyn Vfs, path: &Path) -> Result<Segment> {
        let bytes = vfs.map(path)?;
        let path = path.to_path_buf();
        let bad = |off: u64, d: String| Error::corruption(&path, off, d);
        let len = bytes.len();
        if len < f::MIN_FILE_LEN {
            return Err(bad(
                0,
                format!(
                    "file is {len} bytes, shorter than the smallest segment ({} bytes); \
                     it was truncated or is not a segment",
                    f::MIN_FILE_LEN
                ),
            ));
        }
        let footer_off = len - f::FOOTER_LEN;
        let footer = Footer::decode(bytes.get(footer_off..).unwrap_or_default())
            .map_err(|d| bad(footer_off as u64, d))?;
        let before_footer = bytes.get(..footer_off).unwrap_or_default();
        let (info, header_len) = parse_header(before_footer).map_err(|d| bad(0, d))?;
        if footer.header_len as usize != header_len {
            return Err(bad(
                footer_off as u64,
                format!(
                    "footer says the header is {} bytes but it is {header_len}",
                    footer.header_len
                ),
            ));
        }

        // The directory sits between the last page and the footer.
        let dir_end = footer
            .dir_offset
            .checked_add(u64::from(footer.dir_stored_len));
        if footer.dir_offset < header_len as u64 || dir_end != Some(footer_off as u64) {
            return Err(bad(
                footer_off as u64,
                format!(
                    "directory range {}+{} does not end at the footer ({footer_off})",
                    footer.dir_offset, footer.dir_stored_len
                ),
            ));
        }
        let dir_off = footer.dir_offset;
        let bad_dir = |d: String| Error::corruption(&path, dir_off, format!("directory: {d}"));
        let stored = bytes
            .get(dir_off as usize..footer_off)
            .ok_or_else(|| bad_dir("out of bounds".into()))?;
        if crc32fast::hash(stored) != footer.dir_crc {
            return Err(bad_dir("checksum mismatch".into()));
        }
        if footer.dir_raw_len > f::MAX_DIRECTORY_RAW_LEN {
            return Err(bad_dir(format!(
                "decompressed length {} exceeds the limit {}",
                footer.dir_raw_len,
                f::MAX_DIRECTORY_RAW_LEN
            )));
        }
        let raw = zstd::bulk::decompress(stored, footer.dir_raw_len as usize)
            .map_err(|e| bad_dir(format!("zstd: {e}")))?;
        if raw.len() != footer.dir_raw_len as usize {
            return Err(bad_dir(format!(
                "decompressed to {} bytes, footer says {}",
                raw.len(),
                footer.dir_raw_len
            )));
        }
        let dir = parse_directory(&raw, &footer, header_len as u64, &info).map_err(bad_dir)?;
        let mut raw = raw;
        // What stays of it is read only to decode buckets' control.min/max.
        raw.shrink_to_fit();
        let checked = dir.pages.iter().map(|_| AtomicBool::new(false)).collect();
        Ok(Segment {
            path,
            bytes,
            info,
            dir_offset: dir_off,
            dir_raw_len: u64::from(footer.dir_raw_len),
            dir_version: dir.version,
            names: dir.names,
            pages: dir.pages,
            shapes: dir.shapes,
            buckets: dir.buckets,
            metas: dir.metas,
            tables: dir.tables,
            dir: raw,
            recent_pages: Mutex::new(VecDeque::with_capacity(CACHED_PAGES)),
            number: segment_number(),
            shared_pages: None,
            checked,
            projections: Mutex::new(Vec::new()),
            bounds: Mutex::new(Vec::new()),
        })
    }

    /// Collection id and time field stored in the header.
    pub fn info(&self) -> &SegmentHeaderInfo {
        &self.info
    }

    /// The file this segment was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Size of the file in bytes.
    pub fn len_bytes(&self) -> u64 {
        self.bytes.len() as u64
    }

    /// Where the file's bytes go (for size reports and the inspection tool).
    pub fn stats(&self) -> SegmentStats {
        let header_bytes = self.pages.first().map_or(self.dir_offset, |p| p.offset);
        SegmentStats {
            header_bytes,
            page_count: self.pages.len() as u64,
            zstd_page_count: self
                .pages
                .iter()
                .filter(|p| p.compression == f::PAGE_ZSTD)
                .count() as u64,
            page_bytes_stored: self.dir_offset - header_bytes,
            page_bytes_raw: self.pages.iter().map(|p| u64::from(p.raw_len)).sum(),
            directory_bytes_stored: self.len_bytes() - self.dir_offset - f::FOOTER_LEN as u64,
            directory_bytes_raw: self.dir_raw_len,
            footer_bytes: f::FOOTER_LEN as u64,
        }
    }

    /// Total BSON size of the file's buckets as inserted (expired ones included: a segment
    /// read on its own does not know about the manifest); `None` when some bucket's size is
    /// unknown (files written before directory version 3).
    pub fn bson_bytes(&self) -> Option<u64> {
        self.buckets.iter().map(|b| b.bson_bytes).sum()
    }

    /// One summary per bucket, in file order.
    pub fn buckets(&self) -> &[BucketSummary] {
        &self.buckets
    }

    /// The meta value of bucket `i`; `None` when its measurements had no meta field (or past
    /// the last bucket).
    pub fn meta(&self, i: usize) -> Option<&Bson> {
        self.meta_of(self.buckets.get(i)?)
    }

    /// The meta value of a bucket of this segment.
    pub fn meta_of(&self, s: &BucketSummary) -> Option<&Bson> {
        match s.meta_ref {
            0 => None,
            k => self.metas.get(k as usize - 1),
        }
    }

    /// The index of field `name` in the segment's table of names, if any bucket has it.
    pub(crate) fn name_index(&self, name: &str) -> Option<u32> {
        self.names.iter().position(|n| n == name).map(|i| i as u32)
    }

    /// The segment's distinct meta values; a bucket's [`BucketSummary::meta_ref`] `k > 0`
    /// names entry `k - 1`.
    pub fn metas(&self) -> &[Bson] {
        &self.metas
    }

    /// Bucket `i`'s `control.min/max`, decoded on first use and kept while the segment is
    /// open: for reads that take buckets whole from their statistics. A read that needs them
    /// once should use [`Segment::decode_control`], which keeps nothing.
    pub fn control(&self, i: usize) -> Result<&Control> {
        let s = self.summary(i)?;
        if let Some(c) = s.control.get() {
            return Ok(c);
        }
        let c = Box::new(self.decode_control(i, s)?);
        Ok(s.control.get_or_init(|| c))
    }

    /// Decodes the `control.min/max` of bucket `i` (summary `s`) from the directory.
    pub fn decode_control(&self, i: usize, s: &BucketSummary) -> Result<Control> {
        let mut e = ControlEntries::default();
        self.read_control_entries(s, &mut e, Keep::All)
            .map(|()| e.to_control(&self.names))
            .map_err(|d| {
                Error::corruption(
                    &self.path,
                    self.dir_offset,
                    format!("directory: bucket {i}: {d}"),
                )
            })
    }

    /// Decodes the `control.min/max` of the bucket of summary `s` into `e`, building the
    /// values `keep` asks for.
    pub(crate) fn read_control_entries(
        &self,
        s: &BucketSummary,
        e: &mut ControlEntries,
        keep: Keep<'_>,
    ) -> std::result::Result<(), String> {
        let (start, end) = s.control_at;
        let mut c = Cursor::at(&self.dir, start as usize);
        let base = id_base_millis(&s.id.bytes());
        let oids = slice_of(&self.tables.oid_refs, s.oid_refs);
        e.read(
            &mut c,
            &self.names,
            s.count,
            &self.info.time_field,
            base,
            &mut OidRefs::Kept(oids),
            keep,
        )?;
        match c.pos() == end as usize {
            true => Ok(()),
            false => Err(c.err("control.min/max end elsewhere than at open")),
        }
    }

    /// The numbering of this segment's meta references by their values in `fields`, built
    /// on first use and kept.
    pub fn meta_projection(&self, fields: &MetaFields) -> Arc<MetaProjection> {
        let mut kept = self.projections.lock();
        if let Some((_, p)) = kept.iter().find(|(f, _)| f == fields) {
            return p.clone();
        }
        let p = Arc::new(MetaProjection::build(&self.buckets, &self.metas, fields));
        if kept.len() >= KEPT_PROJECTIONS {
            kept.remove(0);
        }
        kept.push((fields.clone(), p.clone()));
        p
    }

    /// The bounds and sums of top-level field `field` in every bucket, gathered on first use
    /// and kept.
    pub fn field_bounds(&self, field: &str) -> Arc<FieldBounds> {
        self.fields_bounds(&[field]).pop().unwrap_or_default()
    }

    /// [`Segment::field_bounds`] of each of `fields`, in order; those not kept yet are gathered
    /// together, in one pass over the buckets.
    pub fn fields_bounds(&self, fields: &[&str]) -> Vec<Arc<FieldBounds>> {
        let mut kept = self.bounds.lock();
        let mut out: Vec<Option<Arc<FieldBounds>>> = fields
            .iter()
            .map(|f| kept.iter().find(|(k, _)| k == f).map(|(_, b)| b.clone()))
            .collect();
        let mut missing: Vec<&str> = fields
            .iter()
            .zip(&out)
            .filter(|(_, b)| b.is_none())
            .map(|(f, _)| *f)
            .collect();
        missing.sort_unstable();
        missing.dedup();
        for (f, b) in missing.iter().zip(FieldBounds::build(self, &missing)) {
            let b = Arc::new(b);
            for (slot, _) in out.iter_mut().zip(fields).filter(|(_, g)| *g == f) {
                *slot = Some(b.clone());
            }
            // Evict the oldest field this call did not ask for: evicting one it asked for
            // would make a read of more than KEPT_BOUNDS fields gather again every time.
            if kept.len() >= KEPT_BOUNDS {
                if let Some(old) = kept.iter().position(|(k, _)| !fields.contains(&k.as_str())) {
                    kept.remove(old);
                }
            }
            kept.push((f.to_string(), b));
        }
        out.into_iter().map(Option::unwrap_or_default).collect()
    }

    /// Decodes bucket `i` fully, after checking its page's checksum.
    pub fn read_bucket(&self, i: usize) -> Result<BucketData> {
        self.read(i, None)
    }

    /// Decodes only the named columns of bucket `i` (others are left out of `columns`; names
    /// that the bucket lacks are ignored). Shapes and row shapes are always returned; their
    /// column indexes refer to the bucket's full column list, not to the returned subset.
    /// `min` and `max` are left empty: they are statistics, not data, and decoding them for
    /// every bucket a query reads cost more than some reads; [`Segment::control`] has them.
    pub fn read_bucket_columns(&self, i: usize, names: &[&str]) -> Result<BucketData> {
        self.read(i, Some(names))
    }

    /// Decodes the named columns of bucket `i` with `decode` (given a column's encoded bytes and
    /// the bucket's row count), without building the rest of the bucket: typed readers use it to
    /// skip `Bson` values. One entry per name, `None` where the bucket has no such column.
    pub fn read_columns_with<T>(
        &self,
        i: usize,
        names: &[&str],
        decode: impl Fn(&[u8], usize) -> std::result::Result<T, CodecError>,
    ) -> Result<Vec<Option<T>>> {
        let mut out = Vec::new();
        self.read_columns_into(i, names, &mut out, decode)?;
        Ok(out)
    }

    /// [`Segment::read_columns_with`] into `out` (cleared first), so that a caller reading
    /// bucket after bucket reuses one vector.
    pub fn read_columns_into<T>(
        &self,
        i: usize,
        names: &[&str],
        out: &mut Vec<Option<T>>,
        decode: impl Fn(&[u8], usize) -> std::result::Result<T, CodecError>,
    ) -> Result<()> {
        self.read_ids_into(i, &self.name_ids(names), out, decode)
    }

    /// Where each of `names` stands in this segment's table of column names (`None` for a
    /// name no bucket of it has): what [`Segment::read_ids_into`] takes, so that a reader of
    /// many buckets matches names once per segment instead of once per bucket and column.
    pub fn name_ids(&self, names: &[&str]) -> Vec<Option<u32>> {
        names
            .iter()
            .map(|n| {
                self.names
                    .iter()
                    .position(|x| x == n)
                    .and_then(|k| u32::try_from(k).ok())
            })
            .collect()
    }

    /// [`Segment::read_columns_into`] with the names as [`Segment::name_ids`] gave them: one
    /// entry of `out` per id, `None` where the bucket has no such column.
    pub fn read_ids_into<T>(
        &self,
        i: usize,
        ids: &[Option<u32>],
        out: &mut Vec<Option<T>>,
        decode: impl Fn(&[u8], usize) -> std::result::Result<T, CodecError>,
    ) -> Result<()> {
        let s = self.summary(i)?;
        let p = s.loc.page as usize;
        let pg = self.page_info(p)?;
        let data = self.cached_page(p)?;
        let page = self.page_slice(p, &data)?;
        // Scans read a page's buckets in file order: the next bucket's bytes are asked for
        // now, so that they arrive while this one decodes.
        if let Some(next) = self.buckets.get(i + 1).filter(|n| n.loc.page == s.loc.page) {
            let start = next.loc.offset as usize;
            let end = (start + next.loc.len as usize)
                .min(page.len())
                .min(start + 64 * 32);
            let mut at = start;
            while at < end {
                crate::prefetch::line(page.as_ptr().wrapping_add(at));
                at += 64;
            }
        }
        out.clear();
        out.extend(ids.iter().map(|_| None));
        let slot = |name_idx: u32| ids.iter().position(|&x| x == Some(name_idx));
        self.decode_columns(
            i,
            s,
            pg,
            page,
            |name_idx, _| slot(name_idx).is_some(),
            decode,
            |name_idx, _, v| {
                if let Some(o) = slot(name_idx).and_then(|k| out.get_mut(k)) {
                    *o = Some(v);
                }
                Ok(())
            },
        )
    }

    /// The (name index, encoded length) of each of a bucket's columns, in stored order.
    fn columns_of(&self, s: &BucketSummary) -> &[(u32, u32)] {
        slice_of(&self.tables.columns, s.loc.columns)
    }

    /// True when every row of bucket `i` has field `name` (every field order the bucket uses
    /// lists it), read from the directory without decoding data.
    pub fn column_in_every_row(&self, i: usize, name: &str) -> bool {
        let Some(s) = self.buckets.get(i) else {
            return false;
        };
        let Some(col) = self
            .columns_of(s)
            .iter()
            .position(|&(n, _)| self.names.get(n as usize).is_some_and(|x| x == name))
        else {
            return false;
        };
        if col < 64 {
            return s.loc.dense & (1 << col) != 0;
        }
        let shapes = slice_of(&self.tables.shapes, s.loc.shapes);
        !shapes.is_empty()
            && shapes.iter().all(|&sh| {
                self.shapes
                    .get(sh as usize)
                    .is_some_and(|shape| shape.contains(&(col as u32)))
            })
    }

    /// The names of bucket `i`'s columns in stored order (the positions shapes refer to).
    pub fn column_names(&self, i: usize) -> Result<Vec<&str>> {
        let s = self.summary(i)?;
        self.columns_of(s)
            .iter()
            .map(|&(n, _)| {
                self.names
                    .get(n as usize)
                    .map(String::as_str)
                    .ok_or_else(|| {
                        Error::corruption(
                            &self.path,
                            self.dir_offset,
                            format!("bucket {i}: column name index {n} out of range"),
                        )
                    })
            })
            .collect()
    }

    /// Bucket `i`'s field orders, from the directory without reading its page: every shape
    /// (positions in [`Segment::column_names`]'s order, [`crate::bucket::META_SLOT`] for the
    /// meta field) and the shape of each row (empty when every row has shape 0).
    pub fn shapes_of(&self, i: usize) -> Result<(Vec<&[u32]>, &[u32])> {
        let s = self.summary(i)?;
        let shapes = slice_of(&self.tables.shapes, s.loc.shapes)
            .iter()
            .map(|&sh| {
                self.shapes.get(sh as usize).map(Vec::as_slice).ok_or_else(|| {
                    Error::corruption(
                        &self.path,
                        self.dir_offset,
                        format!("bucket {i}: shape index {sh} out of range"),
                    )
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok((shapes, slice_of(&self.tables.row_shapes, s.loc.row_shapes)))
    }

    /// Checks everything: every page checksum, every column decodes to `count` rows, shapes
    /// and row shapes are consistent with which columns have values at each row, and
    /// `control.min/max` agree with the data (see `format-spec/segment.md`, "verify").
    pub fn verify(&self) -> Result<()> {
        for (p, pg) in self.pages.iter().enumerate() {
            let data = self.load_page(p, true)?;
            let page = self.page_slice(p, &data)?;
            for i in pg.first_bucket..pg.end_bucket {
                let i = i as usize;
                let s = self.summary(i)?;
                let b = self.decode(i, s, pg, page, None)?;
                self.check_bucket(i, &b)?;
            }
        }
        Ok(())
    }

    fn summary(&self, i: usize) -> Result<&BucketSummary> {
        self.buckets.get(i).ok_or_else(|| {
            Error::BadValue(format!(
                "bucket index {i} out of range: {} has {} buckets",
                self.path.display(),
                self.buckets.len()
            ))
        })
    }

    fn page_info(&self, p: usize) -> Result<&PageInfo> {
        // Bucket locations were checked against the page table at open.
        self.pages
            .get(p)
            .ok_or_else(|| Error::corruption(&self.path, self.dir_offset, format!("no page {p}")))
    }

    fn read(&self, i: usize, filter: Option<&[&str]>) -> Result<BucketData> {
        let s = self.summary(i)?;
        let p = s.loc.page as usize;
        let data = self.cached_page(p)?;
        let page = self.page_slice(p, &data)?;
        self.decode(i, s, self.page_info(p)?, page, filter)
    }

    /// Keeps the pages it decompresses in `cache` too, shared with the database's other
    /// segments, so that they outlive a query.
    pub fn with_page_cache(mut self, cache: Arc<PageCache>) -> Segment {
        self.shared_pages = Some(cache);
        self
    }

    /// Page `p` from the cache of recent pages, else the shared cache, or loaded (and
    /// checked) and put in both.
    fn cached_page(&self, p: usize) -> Result<PageData> {
        if let Some((_, data)) = self
            .recent_pages
            .lock()
            .iter()
            .find(|(cp, _)| *cp as usize == p)
        {
            return Ok(data.clone());
        }
        let shared = self.shared_pages.as_ref();
        let kept = shared.and_then(|c| c.get(self.number, p as u32));
        let data = match kept {
            Some(d) => PageData::Owned(d),
            None => {
                let data = self.load_page(p, false)?;
                if let (Some(c), PageData::Owned(d)) = (shared, &data) {
                    c.put(self.number, p as u32, d.clone());
                }
                data
            }
        };
        let mut recent = self.recent_pages.lock();
        recent.truncate(CACHED_PAGES - 1);
        recent.push_front((p as u32, data.clone()));
        Ok(data)
    }

    /// The page holding bucket `i`'s data.
    pub fn page_of(&self, i: usize) -> Option<u32> {
        self.buckets.get(i).map(|b| b.loc.page)
    }

    /// Checks page `p`'s crc (unless it matched before and `recheck` is false) and
    /// decompresses it if needed.
    fn load_page(&self, p: usize, recheck: bool) -> Result<PageData> {
        let pg = self.page_info(p)?;
        let bad = |d: String| Error::corruption(&self.path, pg.offset, format!("page {p}: {d}"));
        let stored = self.stored(pg).ok_or_else(|| bad("out of bounds".into()))?;
        let checked = self.checked.get(p);
        if recheck || !checked.is_some_and(|c| c.load(AtomicOrdering::Acquire)) {
            if crc32fast::hash(stored) != pg.crc {
                return Err(bad("checksum mismatch".into()));
            }
            if let Some(c) = checked {
                c.store(true, AtomicOrdering::Release);
            }
        }
        match pg.compression {
            f::PAGE_RAW => Ok(PageData::Mapped),
            _ => {
                // raw_len was bounded by MAX_PAGE_RAW_LEN at open.
                let raw = crate::codec::decompress_frame(stored, pg.raw_len as usize)
                    .ok_or_else(|| bad("corrupt zstd frame".into()))?;
                if raw.len() != pg.raw_len as usize {
                    return Err(bad(format!(
                        "decompressed to {} bytes, directory says {}",
                        raw.len(),
                        pg.raw_len
                    )));
                }
                Ok(PageData::Owned(Arc::new(raw)))
            }
        }
    }

    fn stored(&self, pg: &PageInfo) -> Option<&[u8]> {
        let start = usize::try_from(pg.offset).ok()?;
        self.bytes
            .get(start..start.checked_add(pg.stored_len as usize)?)
    }

    fn page_slice<'a>(&'a self, p: usize, data: &'a PageData) -> Result<&'a [u8]> {
        match data {
            PageData::Owned(v) => Ok(v.as_slice()),
            PageData::Mapped => {
                let pg = self.page_info(p)?;
                self.stored(pg).ok_or_else(|| {
                    Error::corruption(&self.path, pg.offset, format!("page {p}: out of bounds"))
                })
            }
        }
    }

    /// Walks bucket `i`'s stored columns in order, decodes with `decode` those `want` selects
    /// and hands each to `take`; errors name the column and its byte within the page.
    #[allow(clippy::too_many_arguments)]
    fn decode_columns<T>(
        &self,
        i: usize,
        s: &BucketSummary,
        pg: &PageInfo,
        page: &[u8],
        want: impl Fn(u32, &str) -> bool,
        decode: impl Fn(&[u8], usize) -> std::result::Result<T, CodecError>,
        mut take: impl FnMut(u32, &String, T) -> Result<()>,
    ) -> Result<()> {
        let bad = |d: String| Error::corruption(&self.path, pg.offset, format!("bucket {i}: {d}"));
        let start = s.loc.offset as usize;
        let bucket = page
            .get(start..start + s.loc.len as usize)
            .ok_or_else(|| bad("data range outside its page".into()))?;
        let mut off = 0usize;
        for &(name_idx, len) in self.columns_of(s) {
            let end = off + len as usize;
            let name = self
                .names
                .get(name_idx as usize)
                .ok_or_else(|| bad(format!("column name index {name_idx} out of range")))?;
            if want(name_idx, name) {
                let bytes = bucket
                    .get(off..end)
                    .ok_or_else(|| bad(format!("column {name:?} outside the bucket")))?;
                let v = decode(bytes, s.count as usize).map_err(|e| {
                    bad(format!(
                        "column {name:?}: {} at byte {} of the column (page byte {})",
                        e.detail,
                        e.offset,
                        start + off + e.offset
                    ))
                })?;
                take(name_idx, name, v)?;
            }
            off = end;
        }
        Ok(())
    }

    /// Decodes bucket `i` from its (checked) page bytes.
    fn decode(
        &self,
        i: usize,
        s: &BucketSummary,
        pg: &PageInfo,
        page: &[u8],
        filter: Option<&[&str]>,
    ) -> Result<BucketData> {
        let bad = |d: String| Error::corruption(&self.path, pg.offset, format!("bucket {i}: {d}"));
        let mut columns = Vec::with_capacity(filter.map_or(self.columns_of(s).len(), <[_]>::len));
        // A set for a long list of names, where a search of the list per column would be
        // quadratic.
        let set: Option<foldhash::HashSet<&str>> = filter
            .filter(|names| names.len() > 32)
            .map(|names| names.iter().copied().collect());
        self.decode_columns(
            i,
            s,
            pg,
            page,
            |_, name| match (&set, filter) {
                (Some(set), _) => set.contains(name),
                (None, names) => names.is_none_or(|names| names.contains(&name)),
            },
            decode_column,
            |_, name, values| {
                if values.len() != s.count as usize {
                    return Err(bad(format!(
                        "column {name:?} decoded to {} rows, expected {}",
                        values.len(),
                        s.count
                    )));
                }
                columns.push(Column {
                    name: name.clone(),
                    values,
                });
                Ok(())
            },
        )?;
        let bucket_shapes = slice_of(&self.tables.shapes, s.loc.shapes);
        let mut shapes = Vec::with_capacity(bucket_shapes.len());
        for &sh in bucket_shapes {
            let shape = self
                .shapes
                .get(sh as usize)
                .ok_or_else(|| bad(format!("shape index {sh} out of range")))?;
            shapes.push(shape.clone());
        }
        let Control { min, max } = match filter {
            None => self.decode_control(i, s)?,
            Some(_) => Control {
                min: Document::new(),
                max: Document::new(),
            },
        };
        Ok(BucketData {
            id: s.id,
            meta: self.meta_of(s).cloned(),
            count: s.count,
            min,
            max,
            columns,
            shapes,
            row_shapes: slice_of(&self.tables.row_shapes, s.loc.row_shapes).to_vec(),
            bson_bytes: s.bson_bytes,
        })
    }

    /// The semantic checks of `verify` for one fully decoded bucket.
    fn check_bucket(&self, i: usize, b: &BucketData) -> Result<()> {
        let bad = |d: String| {
            Error::corruption(
                &self.path,
                self.dir_offset,
                format!("bucket {i} ({}): {d}", b.id),
            )
        };
        let rows = b.count as usize;
        // Shapes: column indexes in range (or the meta slot, only if there is a meta value),
        // each at most once.
        for (si, shape) in b.shapes.iter().enumerate() {
            let mut seen = vec![false; b.columns.len()];
            let mut meta_seen = false;
            for &slot in shape {
                if slot == META_SLOT {
                    if b.meta.is_none() || meta_seen {
                        return Err(bad(format!("shape {si} has a misplaced meta slot")));
                    }
                    meta_seen = true;
                    continue;
                }
                match seen.get_mut(slot as usize) {
                    Some(s) if !*s => *s = true,
                    _ => return Err(bad(format!("shape {si} has a bad column index {slot}"))),
                }
            }
        }
        // Row shapes: empty (all rows shape 0) or one valid shape index per row, and the
        // row's shape lists exactly the columns that have a value at that row.
        if !b.row_shapes.is_empty() && b.row_shapes.len() != rows {
            return Err(bad(format!(
                "{} row shapes for {rows} rows",
                b.row_shapes.len()
            )));
        }
        if !b.shapes.is_empty() {
            for r in 0..rows {
                let si = b.row_shapes.get(r).copied().unwrap_or(0);
                let shape = b
                    .shapes
                    .get(si as usize)
                    .ok_or_else(|| bad(format!("row {r} has shape {si}, out of range")))?;
                let in_shape = shape.iter().filter(|&&c| c != META_SLOT).count();
                // Bookkeeping columns (names starting with U+0001) are outside shapes.
                let present = b
                    .columns
                    .iter()
                    .filter(|c| !c.name.starts_with(BOOKKEEPING_PREFIX))
                    .filter(|c| matches!(c.values.get(r), Some(Some(_))))
                    .count();
                let all_present = shape.iter().filter(|&&c| c != META_SLOT).all(|&c| {
                    b.columns
                        .get(c as usize)
                        .is_some_and(|col| matches!(col.values.get(r), Some(Some(_))))
                });
                if in_shape != present || !all_present {
                    return Err(bad(format!(
                        "row {r}: shape {si} does not match the columns present"
                    )));
                }
            }
        } else if !b.row_shapes.is_empty() {
            return Err(bad("row shapes without shapes".into()));
        }
        // Columns: names unique.
        let mut names = HashMap::with_capacity(b.columns.len());
        for c in &b.columns {
            if names.insert(c.name.as_str(), c).is_some() {
                return Err(bad(format!("column {:?} appears twice", c.name)));
            }
        }
        // control.min/max: every key is a column with values; every column with values is in both.
        for (which, control) in [("min", &b.min), ("max", &b.max)] {
            for k in control.keys().filter(|k| k.as_str() != SUM_KEY) {
                let has_values = names
                    .get(k.as_str())
                    .is_some_and(|c| c.values.iter().any(Option::is_some));
                if !has_values {
                    return Err(bad(format!("control.{which}.{k} has no column values")));
                }
            }
        }
        for c in &b.columns {
            let mut vals = c.values.iter().flatten();
            let Some(first) = vals.next() else { continue };
            let (mut lo, mut hi) = (first, first);
            let mut composite = is_composite(first);
            for v in vals {
                composite |= is_composite(v);
                if compare_bson(v, lo) == Ordering::Less {
                    lo = v;
                }
                if compare_bson(v, hi) == Ordering::Greater {
                    hi = v;
                }
            }
            let (Some(cmin), Some(cmax)) = (b.min.get(&c.name), b.max.get(&c.name)) else {
                // Bookkeeping columns need no control entries (but must match when present).
                if c.name.starts_with(BOOKKEEPING_PREFIX) {
                    continue;
                }
                return Err(bad(format!(
                    "column {:?} has values but no control.min/max",
                    c.name
                )));
            };
            if c.name == self.info.time_field {
                if c.values
                    .iter()
                    .any(|v| !matches!(v, Some(Bson::DateTime(_))))
                {
                    return Err(bad("time column has a missing or non-date value".into()));
                }
                if compare_bson(cmin, lo) == Ordering::Greater
                    || compare_bson(cmax, hi) != Ordering::Equal
                    || !matches!(cmin, Bson::DateTime(_))
                {
                    return Err(bad(format!(
                        "time control min/max {cmin}/{cmax} disagree with data {lo}..{hi}"
                    )));
                }
            } else if !composite
                && (compare_bson(cmin, lo) != Ordering::Equal
                    || compare_bson(cmax, hi) != Ordering::Equal)
            {
                return Err(bad(format!(
                    "control.min/max of {:?} are {cmin}/{cmax} but the data spans {lo}..{hi}",
                    c.name
                )));
            }
        }
        if b.columns.iter().all(|c| c.name != self.info.time_field) {
            return Err(bad(format!("no time column {:?}", self.info.time_field)));
        }
        check_sums(b, &self.info.time_field).map_err(bad)?;
        Ok(())
    }
}

/// Parses and checks the header; returns it and its length. Errors are relative to offset 0.
fn parse_header(b: &[u8]) -> std::result::Result<(SegmentHeaderInfo, usize), String> {
    if b.get(f::HDR_MAGIC..f::HDR_MAGIC + f::HEADER_MAGIC.len()) != Some(&f::HEADER_MAGIC[..]) {
        return Err("bad header magic: not a tsbucket segment".into());
    }
    let version = f::le_u16(b, f::HDR_VERSION)?;
    if version != f::FORMAT_VERSION {
        return Err(format!(
            "unsupported segment format version {version} in header (this build reads {}); \
             the file is newer than this build or damaged",
            f::FORMAT_VERSION
        ));
    }
    let name_len = usize::from(f::le_u16(b, f::HDR_TIME_FIELD_LEN)?);
    let len = f::header_len(name_len);
    let crc_off = len - f::HDR_CRC_LEN;
    let body = b
        .get(..crc_off)
        .ok_or_else(|| format!("header of {len} bytes runs past the footer"))?;
    if crc32fast::hash(body) != f::le_u32(b, crc_off)? {
        return Err("header checksum mismatch".into());
    }
    let flags = f::le_u16(b, f::HDR_FLAGS)?;
    if flags != 0 {
        return Err(format!("unknown header flags {flags:#06x}"));
    }
    if f::le_u16(b, f::HDR_RESERVED)? != 0 {
        return Err("reserved header bytes are not zero".into());
    }
    let name = body.get(f::HDR_TIME_FIELD..).unwrap_or_default();
    let time_field =
        String::from_utf8(name.to_vec()).map_err(|_| "time field name is not UTF-8")?;
    let collection_id = f::le_u32(b, f::HDR_COLLECTION_ID)?;
    Ok((
        SegmentHeaderInfo {
            collection_id,
            time_field,
        },
        len,
    ))
}

/// The decoded directory.
struct Directory {
    version: u8,
    names: Vec<String>,
    pages: Vec<PageInfo>,
    shapes: Vec<Vec<u32>>,
    metas: Vec<Bson>,
    buckets: Vec<BucketSummary>,
    tables: Tables,
}

/// Per-bucket lists of a segment, each bucket's a `start..end` range.
#[derive(Debug, Default)]
struct Tables {
    /// (name index, encoded length) of every bucket's columns.
    columns: Vec<(u32, u32)>,
    /// Every bucket's shapes (indexes into the shape table).
    shapes: Vec<u32>,
    /// Every bucket's row shapes.
    row_shapes: Vec<u32>,
    /// (name index, reference) of the ObjectIds in every bucket's `control.min`: each is
    /// stored as a delta against the last one of its field in an earlier bucket.
    oid_refs: Vec<(u32, [u8; 12])>,
}

/// The range `start..end` of a table that grew from `start` to `end` entries.
fn span(start: usize, end: usize) -> std::result::Result<(u32, u32), String> {
    match (u32::try_from(start), u32::try_from(end)) {
        (Ok(a), Ok(b)) => Ok((a, b)),
        _ => Err("more than 2^32 table entries in one segment".into()),
    }
}

fn slice_of<T>(table: &[T], (a, b): (u32, u32)) -> &[T] {
    table.get(a as usize..b as usize).unwrap_or_default()
}

/// Parses the decompressed directory and checks it against the footer and the file layout.
fn parse_directory(
    raw: &[u8],
    footer: &Footer,
    header_len: u64,
    info: &SegmentHeaderInfo,
) -> std::result::Result<Directory, String> {
    let mut c = Cursor::new(raw);
    let v = c.u8()?;
    if !(f::MIN_DIRECTORY_VERSION..=f::DIRECTORY_VERSION).contains(&v) {
        return Err(format!(
            "unsupported directory version {v} (this build reads {} to {})",
            f::MIN_DIRECTORY_VERSION,
            f::DIRECTORY_VERSION
        ));
    }
    let n = c.count()?;
    let mut names = Vec::with_capacity(n);
    for _ in 0..n {
        names.push(c.string()?);
    }
    // Entries refer to fields by index: one name under two indexes would let a bucket list a
    // field twice unnoticed.
    let mut seen = std::collections::HashSet::with_capacity(n);
    if let Some(twice) = names.iter().find(|name| !seen.insert(name.as_str())) {
        return Err(c.err(format!("name {twice:?} is listed twice")));
    }

    // Pages are stored back to back from the end of the header to the directory.
    let n = c.count()?;
    if n != footer.page_count as usize {
        return Err(c.err(format!(
            "{n} pages listed, footer says {}",
            footer.page_count
        )));
    }
    let mut pages = Vec::with_capacity(n);
    let mut offset = header_len;
    for p in 0..n {
        let compression = c.u8()?;
        let stored_len = c.varint_u32()?;
        let raw_len = c.varint_u32()?;
        let crc = c.u32_le()?;
        let ok = match compression {
            f::PAGE_RAW => stored_len == raw_len,
            f::PAGE_ZSTD => true,
            _ => false,
        };
        if !ok || raw_len == 0 || raw_len > f::MAX_PAGE_RAW_LEN {
            return Err(c.err(format!(
                "page {p}: bad entry (compression {compression}, stored {stored_len}, raw {raw_len})"
            )));
        }
        pages.push(PageInfo {
            offset,
            stored_len,
            raw_len,
            compression,
            crc,
            first_bucket: 0,
            end_bucket: 0,
        });
        offset += u64::from(stored_len);
    }
    if offset != footer.dir_offset {
        return Err(c.err(format!(
            "pages end at {offset} but the directory starts at {}",
            footer.dir_offset
        )));
    }

    let n = c.count()?;
    let mut metas = Vec::with_capacity(n);
    for _ in 0..n {
        metas.push(f::get_value(&mut c, &ValueRefs::default())?);
    }

    let n = c.count()?;
    let mut shapes = Vec::with_capacity(n);
    for _ in 0..n {
        let len = c.count()?;
        let mut s = Vec::with_capacity(len);
        for _ in 0..len {
            s.push(match c.varint_u32()? {
                0 => META_SLOT,
                k => k - 1,
            });
        }
        shapes.push(s);
    }

    let n = c.count()?;
    if n != footer.bucket_count as usize {
        return Err(c.err(format!(
            "{n} buckets listed, footer says {}",
            footer.bucket_count
        )));
    }
    let mut buckets = Vec::with_capacity(n);
    let mut tables = Tables::default();
    let mut prev_id = [0u8; 12];
    let mut walk = ControlWalk {
        last_oids: HashMap::new(),
        entries: ControlEntries::default(),
        known: KnownNames::of(&names, &info.time_field),
    };
    // Placement cursor: buckets fill pages in order, each page exactly.
    let (mut page, mut page_off) = (0usize, 0u64);
    for i in 0..n {
        let (mut s, delta) = parse_entry(
            &mut c,
            &mut tables,
            &names,
            metas.len(),
            shapes.len(),
            &prev_id,
            &mut walk,
            &info.time_field,
            v,
        )
        .map_err(|e| format!("bucket {i}: {e}"))?;
        s.loc.dense = dense_mask(slice_of(&tables.shapes, s.loc.shapes), &shapes);
        match delta {
            0 => {}
            1 => {
                let full = pages
                    .get(page)
                    .is_some_and(|p| u64::from(p.raw_len) == page_off);
                if !full {
                    return Err(c.err(format!(
                        "bucket {i} starts a new page before page {page} is full"
                    )));
                }
                page += 1;
                page_off = 0;
            }
            d => return Err(c.err(format!("bucket {i} skips {d} pages"))),
        }
        let pg = pages
            .get_mut(page)
            .ok_or_else(|| format!("bucket {i} is in page {page}, which does not exist"))?;
        if page_off + u64::from(s.loc.len) > u64::from(pg.raw_len) {
            return Err(format!("bucket {i} overruns page {page}"));
        }
        if pg.end_bucket == 0 {
            pg.first_bucket = i as u32;
        }
        pg.end_bucket = i as u32 + 1;
        s.loc.page = page as u32;
        s.loc.offset = page_off as u32;
        page_off += u64::from(s.loc.len);
        prev_id = s.id.bytes();
        buckets.push(s);
    }
    if !c.at_end() {
        return Err(c.err(format!("{} trailing bytes", c.remaining())));
    }
    let tiled = match pages.last() {
        None => true,
        Some(last) => page + 1 == pages.len() && u64::from(last.raw_len) == page_off,
    };
    if !tiled {
        return Err(format!(
            "buckets end at page {page} byte {page_off}, not at the end of the last page"
        ));
    }
    Ok(Directory {
        version: v,
        names,
        pages,
        shapes,
        metas,
        buckets,
        tables,
    })
}

/// The columns (below 64) that every one of a bucket's shapes lists.
fn dense_mask(bucket_shapes: &[u32], shapes: &[Vec<u32>]) -> u64 {
    let mut mask = if bucket_shapes.is_empty() { 0 } else { !0 };
    for &sh in bucket_shapes {
        let mut m = 0u64;
        for &c in shapes.get(sh as usize).map_or(&[][..], Vec::as_slice) {
            if c < 64 {
                m |= 1 << c;
            }
        }
        mask &= m;
    }
    mask
}

/// A bucket summary (its `loc.page` and `loc.offset` not yet placed) and its page delta.
type Entry = (BucketSummary, u64);

/// Name indexes of the fields open reads from `control.min/max`.
struct KnownNames {
    time: Option<u32>,
    seq: Option<u32>,
    meta: Option<u32>,
    /// The ones whose values open builds: time and log sequence.
    built: Vec<u32>,
}

impl KnownNames {
    fn of(names: &[String], time_field: &str) -> KnownNames {
        let idx = |f: &str| names.iter().position(|n| n == f).map(|i| i as u32);
        let (time, seq) = (idx(time_field), idx(crate::bucket::SEQ_COLUMN));
        KnownNames {
            time,
            seq,
            meta: idx(crate::bucket::META_COLUMN),
            built: [time, seq].into_iter().flatten().collect(),
        }
    }
}

/// State of the walk over a directory's entries at open.
struct ControlWalk {
    /// The last ObjectId of each field so far (see [`OidRefs`]).
    last_oids: HashMap<u32, [u8; 12]>,
    entries: ControlEntries,
    known: KnownNames,
}

/// Parses one bucket entry (see the writer's `encode_entry`) of a directory of `version`.
/// Its `control.min/max` are checked in full, and what the summary keeps of them is read.
#[allow(clippy::too_many_arguments)]
fn parse_entry(
    c: &mut Cursor<'_>,
    tables: &mut Tables,
    names: &[String],
    meta_count: usize,
    shape_count: usize,
    prev_id: &[u8; 12],
    walk: &mut ControlWalk,
    time_field: &str,
    version: u8,
) -> std::result::Result<Entry, String> {
    let id = f::get_oid_delta(c, prev_id)?;
    let meta_ref = c.varint()?;
    if meta_ref > meta_count as u64 {
        return Err(c.err(format!("meta reference {meta_ref} out of range")));
    }
    let count = c.varint_u32()?;
    if count == 0 || count > f::MAX_BUCKET_ROWS {
        return Err(c.err(format!("bad row count {count}")));
    }
    let page_delta = c.varint()?;
    let base = id_base_millis(&id);
    let name = |c: &mut Cursor<'_>| -> std::result::Result<u32, String> {
        let n = c.varint_u32()?;
        match names.get(n as usize) {
            Some(_) => Ok(n),
            None => Err(c.err(format!("name index {n} out of range"))),
        }
    };

    let control_start = c.pos();
    let oid_start = tables.oid_refs.len();
    let k = &walk.known;
    let e = &mut walk.entries;
    e.read(
        c,
        names,
        count,
        time_field,
        base,
        &mut OidRefs::Walk {
            last: &mut walk.last_oids,
            kept: &mut tables.oid_refs,
        },
        Keep::Only(&k.built),
    )?;
    let control_at = span(control_start, c.pos())?;
    let oid_refs = span(oid_start, tables.oid_refs.len())?;
    let value = |entries, name: Option<u32>| name.and_then(|n| find(entries, n)).flatten();
    let ms = |v: Option<&Bson>| match v {
        Some(Bson::DateTime(t)) => Some(t.timestamp_millis()),
        _ => None,
    };
    let time_range = (
        ms(value(&e.min, k.time))
            .unwrap_or_else(|| ObjectId::from_bytes(id).timestamp().timestamp_millis()),
        ms(value(&e.max, k.time)).unwrap_or(i64::MAX),
    );
    let meta_varies = k.meta.is_some_and(|m| find(&e.max, m).is_some());
    let max_seq = match value(&e.max, k.seq) {
        Some(Bson::Int64(s)) => *s as u64,
        _ => 0,
    };

    let n = c.count()?;
    let start = tables.columns.len();
    let mut len: u64 = 0;
    for _ in 0..n {
        let idx = name(c)?;
        let l = c.varint_u32()?;
        len += u64::from(l);
        tables.columns.push((idx, l));
    }
    let columns = span(start, tables.columns.len()).map_err(|e| c.err(e))?;
    let len = u32::try_from(len)
        .ok()
        .filter(|&l| l > 0 && l <= f::MAX_PAGE_RAW_LEN)
        .ok_or_else(|| c.err(format!("bad bucket data length {len}")))?;
    let n = c.count()?;
    let start = tables.shapes.len();
    for _ in 0..n {
        let s = c.varint_u32()?;
        if s as usize >= shape_count {
            return Err(c.err(format!("shape index {s} out of range")));
        }
        tables.shapes.push(s);
    }
    let shapes = span(start, tables.shapes.len()).map_err(|e| c.err(e))?;
    let n = c.count()?;
    if n != 0 && n != count as usize {
        return Err(c.err(format!("{n} row shapes for {count} rows")));
    }
    let start = tables.row_shapes.len();
    for _ in 0..n {
        tables.row_shapes.push(c.varint_u32()?);
    }
    let row_shapes = span(start, tables.row_shapes.len()).map_err(|e| c.err(e))?;
    // 0: unknown (a bucket rewritten from an older file); anything else must be possible.
    let bson_bytes = match version {
        ..=2 => None,
        _ => match c.varint()? {
            0 => None,
            b if b < f::MIN_BSON_BYTES * u64::from(count) => {
                return Err(c.err(format!(
                    "BSON size {b} is less than {} bytes per measurement",
                    f::MIN_BSON_BYTES
                )))
            }
            b => Some(b),
        },
    };
    let loc = BucketLoc {
        page: 0,
        offset: 0,
        len,
        columns,
        shapes,
        row_shapes,
        dense: 0,
    };
    Ok((
        BucketSummary {
            id: ObjectId::from_bytes(id),
            count,
            bson_bytes,
            loc,
            time_range,
            meta_ref: u32::try_from(meta_ref).unwrap_or(u32::MAX),
            meta_varies,
            max_seq,
            control_at,
            oid_refs,
            control: OnceLock::new(),
        },
        page_delta,
    ))
}
