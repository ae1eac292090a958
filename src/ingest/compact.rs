//! The compact form of an insert record in the log (format-spec/wal.md, "Compacted insert
//! records").
//!
//! A measurement of ten string tags and ten int64 fields is about 470 bytes of BSON, of which
//! some 100 are values: the rest are element names, which every row of a series repeats, and
//! the meta value, which every row of the series repeats too. Every byte of a record is written
//! and `fdatasync`ed before the insert returns (and, in a new log, a zero was written and
//! synced ahead of it), so what the log stores per row is most of an insert's time on the disk.
//! Here a row is stored as its values alone: its element headers are a *layout* written once
//! per log file, and its meta value is an entry of a per-file dictionary written the first time
//! the file needs it.
//!
//! The inserting thread has already named each row's element headers (its [`ShapeId`]) and its
//! meta value (its [`MetaId`]), so the compactor finds a row's layout and meta entry with two
//! integer lookups, and only walks the row's elements to copy their values.

use super::Batch;
use super::{Prepared, ShapeId, INSERT_HEADER, RECORD_INSERT};
use crate::doc::elements::{value_len, Elements};
use crate::wal::codec::{Compact, Expand};
use foldhash::HashMap;

/// Flag of a compacted record: the file's layouts and meta values are forgotten before it.
const RESET: u8 = 1;

/// Row tag of a document stored as it is.
const VERBATIM: u8 = 0;
/// Row tag bits 0-1: the layout is referred to by its index.
const LAYOUT_REF: u8 = 1;
/// Row tag bits 0-1: the layout is defined here, and gets the next index.
const LAYOUT_NEW: u8 = 2;
/// Row tag bits 2-3: the layout has no meta element.
const META_NONE: u8 = 0;
/// Row tag bits 2-3: the meta value is a dictionary entry, referred to by its index.
const META_REF: u8 = 1 << 2;
/// Row tag bits 2-3: the meta value follows and becomes the next dictionary entry.
const META_NEW: u8 = 2 << 2;
/// Row tag bits 2-3: the meta value follows and is not kept.
const META_ONCE: u8 = 3 << 2;

/// Layouts a file may define; rows of other shapes are stored as they are.
pub const MAX_LAYOUTS: usize = 4096;
/// Meta values a file's dictionary may hold, and their bytes: beyond them a row carries its
/// meta value itself. Bounds the memory of the compactor's map and of the expander.
pub const MAX_METAS: usize = 1 << 20;
/// See [`MAX_METAS`].
pub const MAX_META_BYTES: usize = 64 << 20;

/// Appends `v` as LEB128.
fn put_varint(out: &mut Vec<u8>, mut v: u32) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Reads a LEB128 u32 at `*at`.
fn get_varint(b: &[u8], at: &mut usize) -> Option<u32> {
    let mut v: u32 = 0;
    for shift in (0..35).step_by(7) {
        let byte = *b.get(*at)?;
        *at += 1;
        let bits = u32::from(byte & 0x7F);
        if shift == 28 && bits > 0x0F {
            return None;
        }
        v |= bits << shift;
        if byte & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

/// What the compactor knows of a layout: each element's type and header length, and which
/// element is the meta field.
struct Plan {
    elems: Vec<(u8, usize)>,
    meta: Option<usize>,
    /// Set when every value outside the meta field has one width (int64 fields only, say): each
    /// value then lies at a fixed offset from the start of the document or from the end of its
    /// meta element, which the insert path located, so a row needs no walk.
    fixed: Option<Fixed>,
}

/// Where the values of a row of a [`Plan::fixed`] layout lie.
struct Fixed {
    /// (offset, width) from the document's start of each value before the meta element.
    before: Vec<(usize, usize)>,
    /// Where the meta element starts, and its header's length (when the layout has one).
    meta: Option<(usize, usize)>,
    /// (offset, width) from the meta element's end (or 0) of each value after it.
    after: Vec<(usize, usize)>,
    /// Bytes from the meta element's end (or from the start) to the document's end.
    tail: usize,
}

/// The width of every value of BSON type `kind`, if it has one.
fn fixed_width(kind: u8) -> Option<usize> {
    match kind {
        0x01 | 0x09 | 0x11 | 0x12 => Some(8),
        0x07 => Some(12),
        0x08 => Some(1),
        0x10 => Some(4),
        0x13 => Some(16),
        0x06 | 0x0A | 0x7F | 0xFF => Some(0),
        _ => None,
    }
}

impl Fixed {
    fn of(elems: &[(u8, usize)], meta: Option<usize>) -> Option<Fixed> {
        let mut f = Fixed {
            before: Vec::new(),
            meta: None,
            after: Vec::new(),
            tail: 0,
        };
        let mut p = 4;
        for (i, &(kind, header)) in elems.iter().enumerate() {
            if meta == Some(i) {
                f.meta = Some((p, header));
                p = 0;
                continue;
            }
            let width = fixed_width(kind)?;
            let at = p + header;
            match f.meta {
                None => f.before.push((at, width)),
                Some(_) => f.after.push((at, width)),
            }
            p = at + width;
        }
        f.tail = p + 1;
        Some(f)
    }

    /// Appends the values of `doc`, whose meta element lies at `meta_at`; returns the meta
    /// value's range, or `None` when the document is not laid out so.
    fn copy(
        &self,
        doc: &[u8],
        meta_at: Option<(usize, usize)>,
        out: &mut Vec<u8>,
    ) -> Option<Option<(usize, usize)>> {
        let (base, meta) = match (self.meta, meta_at) {
            (Some((start, header)), Some((s, e))) if s == start && e >= s + header => {
                (e, Some((s + header, e)))
            }
            (None, _) => (0, None),
            _ => return None,
        };
        // The shape fixed the headers, so the length alone tells the layout holds (the
        // last byte is not read: touching the row's end first would defeat the prefetcher).
        if doc.len() != base + self.tail {
            return None;
        }
        for &(at, width) in &self.before {
            push_value(out, doc, at, width)?;
        }
        for &(at, width) in &self.after {
            push_value(out, doc, base + at, width)?;
        }
        Some(meta)
    }
}

/// Appends `doc[at..at + width]`; the common widths copy as fixed-size moves.
#[inline]
fn push_value(out: &mut Vec<u8>, doc: &[u8], at: usize, width: usize) -> Option<()> {
    fn fixed<const N: usize>(out: &mut Vec<u8>, doc: &[u8], at: usize) -> Option<()> {
        let v: &[u8; N] = doc.get(at..at + N)?.try_into().ok()?;
        out.extend_from_slice(v);
        Some(())
    }
    match width {
        8 => fixed::<8>(out, doc, at),
        12 => fixed::<12>(out, doc, at),
        4 => fixed::<4>(out, doc, at),
        _ => {
            out.extend_from_slice(doc.get(at..at + width)?);
            Some(())
        }
    }
}

/// The writer's side: builds compacted records, remembering the layouts and meta values
/// the current file already holds.
pub struct InsertCompactor {
    /// The next record must tell the reader to forget the file's layouts and metas (true
    /// until the first record is stored, and after every reset).
    stale: bool,
    layouts: HashMap<(u32, ShapeId), u32>,
    plans: Vec<Plan>,
    metas: HashMap<u64, u32>,
    meta_bytes: usize,
    /// What the record being built added, to take back if it is not stored compacted.
    added_layouts: Vec<(u32, ShapeId)>,
    added_metas: Vec<u64>,
    added_meta_bytes: usize,
    /// The layout the last row had, the next row's usually.
    last_layout: Option<((u32, ShapeId), u32)>,
    /// The meta id and dictionary index of each of the first [`BY_ROW`] rows, as the last
    /// records had them (see [`InsertCompactor::meta_entry`]); (0, 0) for none.
    by_row: Vec<(u64, u32)>,
}

/// Rows whose meta entry is remembered by their place in the record.
const BY_ROW: usize = 4096;

impl InsertCompactor {
    /// A compactor with nothing remembered.
    pub fn new() -> InsertCompactor {
        InsertCompactor {
            stale: true,
            layouts: HashMap::default(),
            plans: Vec::new(),
            metas: HashMap::default(),
            meta_bytes: 0,
            added_layouts: Vec::new(),
            added_metas: Vec::new(),
            added_meta_bytes: 0,
            last_layout: None,
            by_row: Vec::new(),
        }
    }

    /// Appends the compact form of an insert payload to `out`, or returns false with `out`
    /// and the compactor as they were. `docs` describe the payload's documents.
    pub fn compact_payload(
        &mut self,
        payload: &[u8],
        collection_id: u32,
        docs: &[Prepared],
        out: &mut Vec<u8>,
    ) -> bool {
        let start = out.len();
        self.added_layouts.clear();
        self.added_metas.clear();
        self.added_meta_bytes = 0;
        let fresh = self.stale;
        if fresh {
            self.forget();
        }
        // The compact form is never longer than the payload: one reservation for all rows.
        out.reserve(payload.len());
        let done = self.rows(payload, collection_id, docs, fresh, out);
        if done && out.len() - start <= payload.len() {
            self.stale = false;
            return true;
        }
        out.truncate(start);
        self.take_back();
        false
    }

    /// The dictionary index of meta value `id` (nonzero), if the file has it. Rows tend to
    /// bring the same series in the same order batch after batch, so the row's place in the
    /// last record is asked first: that spares hashing the id.
    fn meta_entry(&mut self, r: usize, id: u64) -> Option<u32> {
        if id == 0 {
            return None;
        }
        if let Some(&(seen, i)) = self.by_row.get(r) {
            if seen == id {
                return Some(i);
            }
        }
        let i = *self.metas.get(&id)?;
        if r < BY_ROW {
            if self.by_row.len() <= r {
                self.by_row.resize(r + 1, (0, 0));
            }
            if let Some(slot) = self.by_row.get_mut(r) {
                *slot = (id, i);
            }
        }
        Some(i)
    }

    fn forget(&mut self) {
        self.by_row.clear();
        self.last_layout = None;
        self.layouts.clear();
        self.plans.clear();
        self.metas.clear();
        self.meta_bytes = 0;
    }

    /// Undoes what the record being built added.
    fn take_back(&mut self) {
        // It may name entries taken back now.
        self.by_row.clear();
        self.last_layout = None;
        for k in self.added_layouts.drain(..) {
            self.layouts.remove(&k);
        }
        self.plans.truncate(self.layouts.len());
        for k in self.added_metas.drain(..) {
            self.metas.remove(&k);
        }
        self.meta_bytes -= self.added_meta_bytes;
    }

    fn rows(
        &mut self,
        payload: &[u8],
        collection_id: u32,
        docs: &[Prepared],
        fresh: bool,
        out: &mut Vec<u8>,
    ) -> bool {
        // Only a payload the documents tile exactly, as the insert path writes it.
        let Some(header) = payload.get(..INSERT_HEADER) else {
            return false;
        };
        let count = header.get(5..9).and_then(|b| b.try_into().ok());
        if header.first() != Some(&RECORD_INSERT)
            || count.map(u32::from_le_bytes) != u32::try_from(docs.len()).ok()
        {
            return false;
        }
        out.push(if fresh { RESET } else { 0 });
        out.extend_from_slice(header);
        let mut at = INSERT_HEADER;
        for (r, m) in docs.iter().enumerate() {
            if m.start != at {
                return false;
            }
            let Some(doc) = payload.get(m.start..m.start + m.len) else {
                return false;
            };
            at += m.len;
            if !self.row(collection_id, r, m, doc, out) {
                out.push(VERBATIM);
                out.extend_from_slice(doc);
            }
        }
        at == payload.len()
    }

    /// Appends one row by layout, or returns false with `out` as it was (the row is then
    /// stored as it is).
    fn row(
        &mut self,
        collection_id: u32,
        r: usize,
        m: &Prepared,
        doc: &[u8],
        out: &mut Vec<u8>,
    ) -> bool {
        if m.shape == 0 {
            return false;
        }
        let row_start = out.len();
        out.push(0);
        let key = (collection_id, m.shape);
        let known = match self.last_layout {
            Some((k, i)) if k == key => Some(i),
            _ => self.layouts.get(&key).copied(),
        };
        let (layout, new_layout) = match known {
            Some(i) => (i, false),
            None => {
                if self.plans.len() >= MAX_LAYOUTS {
                    out.truncate(row_start);
                    return false;
                }
                let Some(plan) = define_layout(doc, m.meta_at, out) else {
                    out.truncate(row_start);
                    return false;
                };
                let i = self.plans.len() as u32;
                self.plans.push(plan);
                self.layouts.insert(key, i);
                self.added_layouts.push(key);
                (i, true)
            }
        };
        self.last_layout = Some((key, layout));
        let mut tag = if new_layout {
            LAYOUT_NEW
        } else {
            put_varint(out, layout);
            LAYOUT_REF
        };
        let Some(plan) = self.plans.get(layout as usize) else {
            out.truncate(row_start);
            return false;
        };
        let copied = match &plan.fixed {
            Some(f) => f.copy(doc, m.meta_at, out),
            None => copy_values(doc, plan, out),
        };
        let Some(meta) = copied else {
            out.truncate(row_start);
            if new_layout {
                self.layouts.remove(&key);
                self.added_layouts.pop();
                self.plans.pop();
                self.last_layout = None;
            }
            return false;
        };
        if let Some(meta) = meta {
            let value = doc.get(meta.0..meta.1).unwrap_or_default();
            match self.meta_entry(r, m.meta_id) {
                Some(i) => {
                    tag |= META_REF;
                    put_varint(out, i);
                }
                _ if m.meta_id != 0
                    && self.metas.len() < MAX_METAS
                    && self.meta_bytes + value.len() <= MAX_META_BYTES =>
                {
                    tag |= META_NEW;
                    let i = self.metas.len() as u32;
                    self.metas.insert(m.meta_id, i);
                    if let Some(slot) = self.by_row.get_mut(r) {
                        *slot = (m.meta_id, i);
                    }
                    self.added_metas.push(m.meta_id);
                    self.meta_bytes += value.len();
                    self.added_meta_bytes += value.len();
                    out.extend_from_slice(value);
                }
                _ => {
                    tag |= META_ONCE;
                    out.extend_from_slice(value);
                }
            }
        } else {
            tag |= META_NONE;
        }
        if let Some(t) = out.get_mut(row_start) {
            *t = tag;
        }
        true
    }
}

/// Writes the layout of `doc` (`varint n | varint meta position + 1, or 0 | n headers`) and
/// returns its plan; `None` when the document's elements cannot be walked or the meta element
/// is not where `meta_at` says.
fn define_layout(doc: &[u8], meta_at: Option<(usize, usize)>, out: &mut Vec<u8>) -> Option<Plan> {
    let mut elems = Vec::new();
    let mut meta = None;
    let mut headers = Vec::new();
    let mut it = Elements::new(doc);
    for e in it.by_ref() {
        if meta_at.is_some_and(|(s, _)| s == e.start) {
            meta = Some(elems.len());
        }
        elems.push((e.kind, e.name.len() + 2));
        headers.push(e.kind);
        headers.extend_from_slice(e.name);
        headers.push(0);
    }
    if !it.finished() || (meta_at.is_some() && meta.is_none()) {
        return None;
    }
    put_varint(out, u32::try_from(elems.len()).ok()?);
    put_varint(out, meta.map_or(0, |i| i as u32 + 1));
    out.extend_from_slice(&headers);
    let fixed = Fixed::of(&elems, meta);
    Some(Plan { elems, meta, fixed })
}

/// Appends the values of `doc`'s elements outside the meta field, walking them by `plan`;
/// returns the meta value's range (`Some(None)` when the plan has no meta element), or `None`
/// when the document does not follow the plan.
fn copy_values(doc: &[u8], plan: &Plan, out: &mut Vec<u8>) -> Option<Option<(usize, usize)>> {
    let mut p = 4;
    let mut meta = None;
    for (i, &(kind, header)) in plan.elems.iter().enumerate() {
        if *doc.get(p)? != kind {
            return None;
        }
        p += header;
        let n = value_len(kind, doc.get(p..)?)?;
        if plan.meta == Some(i) {
            meta = Some((p, p + n));
        } else {
            out.extend_from_slice(doc.get(p..p + n)?);
        }
        p += n;
    }
    (p + 1 == doc.len() && doc.get(p) == Some(&0)).then_some(meta)
}

impl Compact<Batch> for InsertCompactor {
    fn reset(&mut self) {
        self.stale = true;
    }

    fn compact(&mut self, payload: &[u8], batch: &Batch, out: &mut Vec<u8>) -> bool {
        self.compact_payload(payload, batch.collection_id, &batch.docs, out)
    }
}

/// A layout as the expander keeps it.
struct Layout {
    /// Each element's type and header (`{ type | name | 0 }`) range in `headers`.
    elems: Vec<(u8, usize, usize)>,
    headers: Vec<u8>,
    meta: Option<usize>,
}

impl Default for InsertCompactor {
    fn default() -> Self {
        InsertCompactor::new()
    }
}

/// Recovery's side: turns compacted records back into insert payloads.
#[derive(Default)]
pub struct InsertExpander {
    layouts: Vec<Layout>,
    /// Meta values back to back, and where each lies.
    meta_bytes: Vec<u8>,
    metas: Vec<(usize, usize)>,
    /// Each value's range in the record, for the row being expanded.
    values: Vec<(usize, usize)>,
}

impl InsertExpander {
    /// An expander with nothing remembered.
    pub fn new() -> InsertExpander {
        InsertExpander::default()
    }

    fn row(
        &mut self,
        b: &[u8],
        at: &mut usize,
        max: usize,
        out: &mut Vec<u8>,
    ) -> Result<(), String> {
        let tag = *b.get(*at).ok_or("row truncated")?;
        *at += 1;
        if tag == VERBATIM {
            let len = b
                .get(*at..*at + 4)
                .and_then(|l| l.try_into().ok())
                .map(i32::from_le_bytes)
                .and_then(|l| usize::try_from(l).ok())
                .filter(|&l| l >= 5)
                .ok_or("bad document length")?;
            let doc = b.get(*at..*at + len).ok_or("document truncated")?;
            *at += len;
            return push_limited(out, doc, max);
        }
        if tag & 0xF0 != 0 {
            return Err(format!("unknown row tag {tag:#x}"));
        }
        let layout = match tag & 3 {
            LAYOUT_REF => {
                let i = get_varint(b, at).ok_or("layout index truncated")? as usize;
                if i >= self.layouts.len() {
                    return Err(format!("layout {i} is not defined"));
                }
                i
            }
            LAYOUT_NEW => {
                if self.layouts.len() >= MAX_LAYOUTS {
                    return Err("too many layouts".into());
                }
                let l = read_layout(b, at)?;
                self.layouts.push(l);
                self.layouts.len() - 1
            }
            _ => return Err(format!("unknown row tag {tag:#x}")),
        };
        let Some(l) = self.layouts.get(layout) else {
            return Err("layout lost".into());
        };
        self.values.clear();
        for (i, &(kind, _, _)) in l.elems.iter().enumerate() {
            if l.meta == Some(i) {
                continue;
            }
            let n = value_len(kind, b.get(*at..).unwrap_or_default()).ok_or("value truncated")?;
            self.values.push((*at, n));
            *at += n;
        }
        let meta_kind = l.meta.and_then(|i| l.elems.get(i)).map(|e| e.0);
        let meta: Option<&[u8]> = match (tag & 0x0C, meta_kind) {
            (META_NONE, None) => None,
            (META_REF, Some(_)) => {
                let i = get_varint(b, at).ok_or("meta index truncated")? as usize;
                let &(s, n) = self
                    .metas
                    .get(i)
                    .ok_or(format!("meta value {i} is not defined"))?;
                Some(self.meta_bytes.get(s..s + n).ok_or("meta value lost")?)
            }
            (META_NEW | META_ONCE, Some(kind)) => {
                let n = value_len(kind, b.get(*at..).unwrap_or_default())
                    .ok_or("meta value truncated")?;
                let v = b.get(*at..*at + n).ok_or("meta value truncated")?;
                *at += n;
                if tag & 0x0C == META_NEW {
                    if self.metas.len() >= MAX_METAS || self.meta_bytes.len() + n > MAX_META_BYTES {
                        return Err("too many meta values".into());
                    }
                    self.metas.push((self.meta_bytes.len(), n));
                    self.meta_bytes.extend_from_slice(v);
                    let s = self.meta_bytes.len() - n;
                    self.meta_bytes.get(s..)
                } else {
                    Some(v)
                }
            }
            _ => return Err(format!("row tag {tag:#x} does not fit its layout")),
        };
        let meta_len = meta.map_or(0, <[u8]>::len);
        let total =
            4 + l.headers.len() + self.values.iter().map(|v| v.1).sum::<usize>() + meta_len + 1;
        if out.len() + total > max {
            return Err(format!("expands past the record limit of {max} bytes"));
        }
        let len = i32::try_from(total).map_err(|_| "document too long")?;
        out.extend_from_slice(&len.to_le_bytes());
        let mut values = self.values.iter();
        for (i, &(_, hs, hn)) in l.elems.iter().enumerate() {
            out.extend_from_slice(l.headers.get(hs..hs + hn).unwrap_or_default());
            if l.meta == Some(i) {
                out.extend_from_slice(meta.unwrap_or_default());
            } else if let Some(&(s, n)) = values.next() {
                out.extend_from_slice(b.get(s..s + n).unwrap_or_default());
            }
        }
        out.push(0);
        Ok(())
    }
}

/// Reads a layout definition.
fn read_layout(b: &[u8], at: &mut usize) -> Result<Layout, String> {
    let n = get_varint(b, at).ok_or("layout truncated")? as usize;
    let meta = match get_varint(b, at).ok_or("layout truncated")? {
        0 => None,
        m => Some(m as usize - 1),
    };
    if meta.is_some_and(|m| m >= n) {
        return Err("layout's meta element is past its elements".into());
    }
    let mut elems = Vec::with_capacity(n.min(b.len() / 2));
    let start = *at;
    for _ in 0..n {
        let kind = *b.get(*at).ok_or("layout truncated")?;
        if !matches!(kind, 0x01..=0x13 | 0x7F | 0xFF) {
            return Err(format!("layout has unknown element type {kind:#x}"));
        }
        let name = b
            .get(*at + 1..)
            .and_then(|r| r.iter().position(|&c| c == 0))
            .ok_or("layout truncated")?;
        elems.push((kind, *at - start, name + 2));
        *at += name + 2;
    }
    let headers = b.get(start..*at).ok_or("layout truncated")?.to_vec();
    Ok(Layout {
        elems,
        headers,
        meta,
    })
}

fn push_limited(out: &mut Vec<u8>, bytes: &[u8], max: usize) -> Result<(), String> {
    if out.len() + bytes.len() > max {
        return Err(format!("expands past the record limit of {max} bytes"));
    }
    out.extend_from_slice(bytes);
    Ok(())
}

impl Expand for InsertExpander {
    fn reset(&mut self) {
        self.layouts.clear();
        self.meta_bytes.clear();
        self.metas.clear();
    }

    fn expand(&mut self, b: &[u8], max: usize, out: &mut Vec<u8>) -> Result<(), String> {
        let flags = *b.first().ok_or("empty record")?;
        if flags & !RESET != 0 {
            return Err(format!("unknown flags {flags:#x}"));
        }
        if flags & RESET != 0 {
            Expand::reset(self);
        }
        let header = b.get(1..1 + INSERT_HEADER).ok_or("header truncated")?;
        if header.first() != Some(&RECORD_INSERT) {
            return Err("not an insert record".into());
        }
        let count = header
            .get(5..9)
            .and_then(|c| c.try_into().ok())
            .map(u32::from_le_bytes)
            .ok_or("header truncated")?;
        push_limited(out, header, max)?;
        let mut at = 1 + INSERT_HEADER;
        for i in 0..count {
            self.row(b, &mut at, max, out)
                .map_err(|e| format!("row {i}: {e}"))?;
        }
        if at != b.len() {
            return Err(format!("{} bytes after the last row", b.len() - at));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ingest::{prepare_batch, prepare_raw_batch};
    use crate::schema::Schema;
    use tsbucket_workload::Devops;
    use bson::{doc, DateTime, RawDocumentBuf};
    use proptest::prelude::*;

    fn fields() -> Schema {
        Schema::new("time", Some("tags"), 3600, 60)
    }

    fn expand(x: &mut InsertExpander, stored: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        x.expand(stored, usize::MAX, &mut out).unwrap();
        out
    }

    #[test]
    fn devops_rows_are_stored_as_their_values() {
        let docs: Vec<RawDocumentBuf> = Devops {
            hosts: 100,
            hours: 0.1,
            ..Devops::default()
        }
        .generate()
        .map(|d| RawDocumentBuf::try_from(&d).unwrap())
        .collect();
        let (mut c, mut x) = (InsertCompactor::new(), InsertExpander::new());
        let mut sizes = Vec::new();
        for batch in docs.chunks(100) {
            let (prepared, payload, _) = prepare_raw_batch(7, batch, &fields()).unwrap();
            let mut stored = Vec::new();
            assert!(c.compact_payload(&payload, 7, &prepared, &mut stored));
            assert_eq!(expand(&mut x, &stored), payload);
            sizes.push((payload.len(), stored.len()));
        }
        // The first batch defines the layout and every host's tags; later ones only refer to
        // them: time, _id and ten int64s, 100 bytes, plus a tag byte and two index bytes.
        let (payload, stored) = sizes[1];
        assert!(stored < payload / 4, "{stored} of {payload} bytes");
        assert!(stored <= 9 + 1 + 100 * 104, "{stored} bytes for 100 rows");
        assert!(sizes[0].1 > 2 * stored, "the first batch defines the tags");
    }

    #[test]
    fn a_reset_record_is_readable_without_the_records_before_it() {
        let docs: Vec<_> = (0..4)
            .map(|i| doc! {"time": DateTime::from_millis(i), "tags": {"h": i % 2}, "v": i})
            .collect();
        let (p, payload, _) = prepare_batch(1, &docs, &fields()).unwrap();
        let mut c = InsertCompactor::new();
        let mut first = Vec::new();
        assert!(c.compact_payload(&payload, 1, &p, &mut first));
        let mut second = Vec::new();
        assert!(c.compact_payload(&payload, 1, &p, &mut second));
        assert!(second.len() < first.len(), "refers back to the first");
        Compact::reset(&mut c);
        let mut third = Vec::new();
        assert!(c.compact_payload(&payload, 1, &p, &mut third));
        assert_eq!(third, first, "starts over as the first record did");
        // An expander that saw the first two records starts over at the third.
        let mut x = InsertExpander::new();
        for r in [&first, &second, &third] {
            assert_eq!(expand(&mut x, r), payload);
        }
        // The second record alone refers to what it does not have.
        let mut fresh = InsertExpander::new();
        let err = fresh.expand(&second, usize::MAX, &mut Vec::new());
        assert!(err.unwrap_err().contains("not defined"));
    }

    #[test]
    fn rows_without_a_shape_are_stored_as_they_are() {
        // An array outside the meta field gives the first row no shape; the others, which
        // have one, save more than its tag byte costs.
        let mut docs = vec![doc! {"time": DateTime::from_millis(1), "tags": 1, "a": [1, 2]}];
        docs.extend((0..3).map(|i| doc! {"time": DateTime::from_millis(i), "tags": 1, "a": 2}));
        let (p, payload, _) = prepare_batch(1, &docs, &fields()).unwrap();
        assert_eq!(p[0].shape, 0);
        let mut stored = Vec::new();
        assert!(InsertCompactor::new().compact_payload(&payload, 1, &p, &mut stored));
        assert_eq!(stored.get(1 + INSERT_HEADER), Some(&VERBATIM));
        assert!(stored.len() < payload.len());
        assert_eq!(expand(&mut InsertExpander::new(), &stored), payload);
    }

    #[test]
    fn a_record_that_would_grow_is_refused_and_forgotten() {
        // A verbatim row costs a tag byte more than it saves.
        let docs = [doc! {"time": DateTime::from_millis(1), "a": [1]}];
        let (p, payload, _) = prepare_batch(1, &docs, &fields()).unwrap();
        let mut c = InsertCompactor::new();
        let mut out = vec![0xAA];
        assert!(!c.compact_payload(&payload, 1, &p, &mut out));
        assert_eq!(out, [0xAA], "nothing left behind");
        // Still the first record the reader will see: it must carry the reset flag.
        let shaped = [doc! {"time": DateTime::from_millis(1), "tags": "x", "v": 1.5}];
        let (p, payload, _) = prepare_batch(1, &shaped, &fields()).unwrap();
        let mut stored = Vec::new();
        assert!(c.compact_payload(&payload, 1, &p, &mut stored));
        assert_eq!(stored[0], RESET);
    }

    #[test]
    fn damaged_records_are_errors_not_panics() {
        let docs: Vec<_> = (0..3)
            .map(|i| doc! {"time": DateTime::from_millis(i), "tags": {"h": "a"}, "s": "x"})
            .collect();
        let (p, payload, _) = prepare_batch(1, &docs, &fields()).unwrap();
        let mut stored = Vec::new();
        assert!(InsertCompactor::new().compact_payload(&payload, 1, &p, &mut stored));
        for cut in 0..stored.len() {
            let r = InsertExpander::new().expand(&stored[..cut], usize::MAX, &mut Vec::new());
            assert!(r.is_err(), "cut at {cut} expands");
        }
        let r = InsertExpander::new().expand(&stored, payload.len() - 1, &mut Vec::new());
        assert!(r.unwrap_err().contains("record limit"));
    }

    proptest! {
        #[test]
        fn compacted_records_expand_to_their_payloads(
            data in proptest::collection::vec(any::<u8>(), 0..2048)
        ) {
            tsbucket_testkit::wal_codec::run(&data);
        }
    }
}
