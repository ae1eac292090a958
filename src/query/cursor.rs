//! The cursor `find` returns: it reads one bucket at a time, decoding only the columns the
//! filter, projection and sort need, and stops as soon as skip and limit are satisfied. A sort
//! on the time field alone streams in time order across buckets. A sort with a limit led by a
//! measurement field reads the buckets best first by their bounds of it and stops when no
//! bucket left can hold a row among the first `skip + limit`; other sorts read every match
//! (keeping only the first `skip + limit` when there is a limit).

use crate::query::aggregate::table::GroupDocs;
use super::merge::{MergeSpec, TimeMerge};
use super::options::{Fate, Projection};
use super::columns::Col;
use super::sort::{
    put_key, put_place, put_typed, put_value, sort_raw_within, sort_value, SortMemory, SortedDocs,
    SortedRaw, TopKeys,
};
use super::source::{self, Source};
use crate::order::cmp_bson;
use crate::segment::BoundRef;
use bson::Bson;
use std::cmp::Ordering;
use crate::query::plan::SegmentBounds;
use crate::query::select::{count_of, BucketStats, Plan, Scans, Verdict};
use crate::query::source::Scan;
use super::materialise::{RowOutput, Selected};
use crate::doc::encode::write_document;
use crate::error::{Error, Result};
use bson::raw::RawDocumentBuf;
use bson::Document;
use super::parallel::{self, InOrder};
use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};
use std::sync::Mutex;
use std::collections::VecDeque;
use std::sync::Arc;

/// What a pipeline gives.
pub(crate) enum Output {
    /// Documents, all built.
    Docs(Vec<Document>),
    /// Documents built as they are read: the output of a sort too large for memory, merged
    /// from its runs on disk.
    Stream(SortedDocs),
    /// The output of a final `$group`, built as it is read.
    Groups(Box<GroupDocs>),
    /// Measurements as a find returns them: a pipeline of `$match`, `$sort`, `$skip`,
    /// `$limit` and keep-only `$project` stages that a find does whole.
    Cursor(Box<Cursor>),
}

/// Parsed find options.
#[derive(Debug, Clone, Default)]
pub(crate) struct FindSpec {
    pub projection: Option<Projection>,
    /// Sort keys with ascending flags; empty for no sort.
    pub sort: Vec<(String, bool)>,
    pub skip: u64,
    /// `None` for no limit.
    pub limit: Option<u64>,
    /// What a sort without a limit may hold in memory.
    pub memory: SortMemory,
    /// Threads the read may use (0 or 1: this one alone).
    pub threads: usize,
}

/// Streams matching measurements.
pub struct Cursor {
    mode: Mode,
    projection: Option<Projection>,
    skip: u64,
    left: u64,
    failed: bool,
}

impl std::fmt::Debug for Cursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mode = match self.mode {
            Mode::Scan(_) => "scan",
            Mode::Merge(_) => "time merge",
            Mode::Docs(_) => "sorted",
            Mode::Groups(_) => "groups",
            Mode::Stream(_) => "sorted runs",
            Mode::Raw(_) => "sorted bytes",
        };
        f.debug_struct("Cursor")
            .field("mode", &mode)
            .field("buckets_read", &self.buckets_read())
            .finish()
    }
}

enum Mode {
    Scan(Box<ScanState>),
    Merge(Box<TimeMerge>),
    Docs(VecDeque<Document>),
    Groups(Box<GroupDocs>),
    Stream(SortedDocs),
    /// Measurements sorted as BSON bytes.
    Raw(Box<SortedRaw>),
}

/// Buckets read in the order `select` returned them.
struct ScanState {
    sources: Scans,
    /// The next of `sources` to read.
    next: usize,
    output: Arc<RowOutput>,
    /// The bucket being returned, and the position in its selected rows of the next row.
    current: Option<(Selected, usize)>,
    buckets_read: u64,
    /// Threads that may write rows ahead (see [`ScanState::start_writers`]); 0 once decided.
    threads: usize,
    /// Stretches of buckets whose rows worker threads write (or build), in scan order.
    written: Option<InOrder<Result<Written>>>,
    /// The workers build `Document`s rather than write bytes.
    built: bool,
    /// The stretch being returned, and the next of its written documents.
    chunk: Option<(Written, usize)>,
}

/// A stretch of buckets' selected rows, written as BSON documents one after another, or built.
#[derive(Default)]
struct Written {
    /// Buckets read.
    buckets: u64,
    bytes: Vec<u8>,
    /// Where each document ends.
    ends: Vec<usize>,
    /// The documents built instead, for a reader that takes `Document`s.
    docs: VecDeque<Document>,
}

/// A scan with fewer buckets left than this writes them on the reader's thread: threads
/// would cost more than they save.
const WRITE_AHEAD_MIN_BUCKETS: usize = 16;

/// Stretches of buckets written ahead of the reader at most: enough to keep the workers busy
/// through stretches of different costs, few enough that a reader that stops early (a limit)
/// wasted little. With [`WRITE_AHEAD_ROWS`], this bounds the memory written rows hold: about
/// 50,000 rows, 25 MB of whole devops measurements as BSON; a quarter of the rows as
/// `Document`s, 30-40 MB.
const WRITE_AHEAD_BUCKETS: usize = 6;

/// Most buckets written in one piece of work.
const WRITE_AHEAD_STRETCH: usize = 32;

/// Most stored rows in one piece of work, past its first bucket.
const WRITE_AHEAD_ROWS: u64 = 8192;

impl ScanState {
    fn new(
        sources: Scans,
        plan: Plan,
        projection: Option<Projection>,
        threads: usize,
    ) -> ScanState {
        ScanState {
            sources,
            next: 0,
            output: Arc::new(RowOutput::new(
                plan.filter,
                projection,
                &plan.time_field,
                plan.meta_field.as_deref(),
            )),
            current: None,
            buckets_read: 0,
            threads,
            written: None,
            built: false,
            chunk: None,
        }
    }

    /// Hands the buckets not read yet to worker threads that select their rows and write them
    /// as BSON (or build them as `Document`s, when `built`), each stretch of buckets on one
    /// thread from decoding to output, so that the reader only takes finished documents. Only
    /// once nothing is left to skip whole and no bucket is half read here, and for a scan long
    /// enough to pay for the threads.
    fn start_writers(&mut self, skip: u64, built: bool) {
        let half_read = self
            .current
            .as_ref()
            .is_some_and(|(sel, pos)| *pos < sel.rows().len());
        if self.threads < 2 || skip > 0 || half_read {
            return;
        }
        let threads = std::mem::take(&mut self.threads);
        let from = self.next;
        let n = self.sources.len().saturating_sub(from);
        if n < WRITE_AHEAD_MIN_BUCKETS {
            return;
        }
        // Stretches of buckets, growing to WRITE_AHEAD_STRETCH: a handover between threads
        // costs a wake-up, tens of microseconds on a busy machine, too much per bucket of a
        // few dozen rows; short first stretches give a reader that stops early its rows soon.
        // Built documents take several times the memory of their bytes.
        let cap = if built { WRITE_AHEAD_ROWS / 4 } else { WRITE_AHEAD_ROWS };
        let mut stretches = Vec::new();
        let mut at = from;
        while at < self.sources.len() {
            let most = (1usize << (stretches.len() / threads).min(16)).min(WRITE_AHEAD_STRETCH);
            let (mut end, mut rows) = (at, 0);
            while end < self.sources.len() && end - at < most && rows < cap {
                rows += self.sources.get(end).map_or(0, |s| count_of(&s.src));
                end += 1;
            }
            stretches.push(at..end);
            at = end;
        }
        let sources = self.sources.clone();
        let output = Arc::clone(&self.output);
        self.written = InOrder::start(stretches.len(), threads, WRITE_AHEAD_BUCKETS, move |i| {
            let mut w = Written::default();
            for k in stretches.get(i).cloned().unwrap_or_default() {
                write_bucket(&sources, &output, k, &mut w, built)?;
            }
            Ok(w)
        });
        if self.written.is_some() {
            self.next = self.sources.len();
            self.current = None;
            self.built = built;
        }
    }

    /// Takes the next stretch from the workers; false when none is left.
    fn next_chunk(&mut self) -> Result<bool> {
        self.chunk = None;
        match self.written.as_mut().and_then(InOrder::next) {
            None => Ok(false),
            Some(w) => {
                let w = w??;
                self.buckets_read += w.buckets;
                self.chunk = Some((w, 0));
                Ok(true)
            }
        }
    }

    /// The next built document, after skipping `skip`; `None` when none is left.
    fn next_built(&mut self, skip: &mut u64) -> Option<Result<Document>> {
        loop {
            if let Some(d) = self.chunk.as_mut().and_then(|(w, _)| w.docs.pop_front()) {
                if *skip > 0 {
                    *skip -= 1;
                    continue;
                }
                return Some(Ok(d));
            }
            match self.next_chunk() {
                Ok(true) => {}
                Ok(false) => return None,
                Err(e) => return Some(Err(e)),
            }
        }
    }

    /// The next written document, after skipping `skip`; `None` when none is left.
    fn next_written(&mut self, skip: &mut u64) -> Result<Option<&[u8]>> {
        loop {
            if let Some((w, pos)) = &mut self.chunk {
                if let Some(&end) = w.ends.get(*pos) {
                    // A document starts where the one before it ends.
                    let start = pos.checked_sub(1).and_then(|p| w.ends.get(p)).copied();
                    *pos += 1;
                    if *skip > 0 {
                        *skip -= 1;
                        continue;
                    }
                    let start = start.unwrap_or(0);
                    return Ok(self.chunk.as_ref().and_then(|(w, _)| w.bytes.get(start..end)));
                }
            }
            if !self.next_chunk()? {
                return Ok(None);
            }
        }
    }

    /// The bucket and row to return next, skipping `skip` matches first (whole buckets
    /// without reading them when their statistics prove every row matches); `None` when no
    /// row is left.
    fn next_row(&mut self, skip: &mut u64) -> Result<Option<u32>> {
        loop {
            if let Some((sel, pos)) = &mut self.current {
                if let Some(&r) = sel.rows().get(*pos) {
                    *pos += 1;
                    if *skip > 0 {
                        *skip -= 1;
                        continue;
                    }
                    return Ok(Some(r));
                }
            }
            self.current = None;
            let Some(scan) = self.sources.get(self.next) else {
                return Ok(None);
            };
            self.next += 1;
            let whole = scan.verdict == Verdict::All;
            if whole && *skip >= count_of(&scan.src) {
                *skip -= count_of(&scan.src);
                continue;
            }
            self.buckets_read += 1;
            self.current = Some((self.output.select(&scan.src, whole)?, 0));
        }
    }

    /// The next row as a document.
    fn document(&mut self, skip: &mut u64) -> Option<Result<Document>> {
        if self.threads > 1 {
            self.start_writers(*skip, true);
        }
        if self.built {
            return self.next_built(skip);
        }
        if self.written.is_some() {
            return match self.next_written(skip) {
                Ok(bytes) => Some(Document::from_reader(bytes?).map_err(|e| {
                    Error::Internal(format!("a written document is not BSON: {e}"))
                })),
                Err(e) => Some(Err(e)),
            };
        }
        let r = match self.next_row(skip) {
            Ok(r) => r?,
            Err(e) => return Some(Err(e)),
        };
        let (sel, _) = self.current.as_ref()?;
        Some(sel.document(&self.output, r))
    }

    /// Appends the next row to `buf` as BSON; false when no row is left.
    fn write(&mut self, skip: &mut u64, buf: &mut Vec<u8>) -> Result<bool> {
        if self.threads > 1 {
            self.start_writers(*skip, false);
        }
        if self.built {
            return match self.next_built(skip) {
                None => Ok(false),
                Some(d) => write_document(&d?, buf, 1)
                    .map(|()| true)
                    .map_err(Error::Internal),
            };
        }
        if self.written.is_some() {
            return Ok(match self.next_written(skip)? {
                Some(doc) => {
                    buf.extend_from_slice(doc);
                    true
                }
                None => false,
            });
        }
        let Some(r) = self.next_row(skip)? else {
            return Ok(false);
        };
        match self.current.as_ref() {
            Some((sel, _)) => sel.write(&self.output, r, buf).map(|()| true),
            None => Ok(false),
        }
    }
}

/// Appends the selected rows of chosen bucket `k` to `w` as BSON documents.
fn write_bucket(
    sources: &Scans,
    output: &RowOutput,
    k: usize,
    w: &mut Written,
    built: bool,
) -> Result<()> {
    let Some(scan) = sources.get(k) else {
        return Ok(());
    };
    let sel = output.select(&scan.src, scan.verdict == Verdict::All)?;
    w.buckets += 1;
    if built {
        w.docs.reserve(sel.rows().len());
        for &r in sel.rows() {
            w.docs.push_back(sel.document(output, r)?);
        }
        return Ok(());
    }
    let rows = sel.rows().len();
    w.ends.reserve(rows);
    let from = w.bytes.len();
    for (i, &r) in sel.rows().iter().enumerate() {
        sel.write(output, r, &mut w.bytes)?;
        w.ends.push(w.bytes.len());
        if i == 0 {
            // Room for the rest at the first one's size: growing by doubling copied them.
            w.bytes.reserve((w.bytes.len() - from) * (rows - 1));
        }
    }
    Ok(())
}

impl Cursor {
    /// Every measurement `plan` selects, read with up to `threads` threads.
    pub(crate) fn new(sources: Scans, plan: Plan, threads: usize) -> Cursor {
        Cursor::scan(sources, plan, None, 0, u64::MAX, threads)
    }

    /// A scan in the order of `sources`; the projection is applied as documents are built.
    fn scan(
        sources: Scans,
        plan: Plan,
        projection: Option<Projection>,
        skip: u64,
        left: u64,
        threads: usize,
    ) -> Cursor {
        Cursor {
            mode: Mode::Scan(Box::new(ScanState::new(sources, plan, projection, threads))),
            projection: None,
            skip,
            left,
            failed: false,
        }
    }

    /// A cursor over a pipeline's output.
    pub(crate) fn from_output(out: Output) -> Cursor {
        match out {
            Output::Docs(docs) => Cursor::from_docs(docs),
            Output::Groups(groups) => Cursor::all_of(Mode::Groups(groups)),
            Output::Stream(docs) => Cursor::all_of(Mode::Stream(docs)),
            Output::Cursor(c) => *c,
        }
    }

    pub(crate) fn from_docs(docs: Vec<Document>) -> Cursor {
        Cursor::all_of(Mode::Docs(docs.into()))
    }

    /// Every document `mode` gives, as it gives them.
    fn all_of(mode: Mode) -> Cursor {
        Cursor {
            mode,
            projection: None,
            skip: 0,
            left: u64::MAX,
            failed: false,
        }
    }

    /// A cursor over `sources` with projection, sort, skip and limit.
    pub(crate) fn find(sources: Scans, plan: Plan, spec: FindSpec) -> Result<Cursor> {
        let left = spec.limit.unwrap_or(u64::MAX);
        let time_sort = match spec.sort.as_slice() {
            [(k, asc)] if *k == plan.time_field => Some(*asc),
            _ => None,
        };
        if let Some(asc) = time_sort {
            let merge = TimeMerge::new(
                sources,
                MergeSpec {
                    output: RowOutput::new(
                        plan.filter,
                        spec.projection,
                        &plan.time_field,
                        plan.meta_field.as_deref(),
                    )
                    .with_times(),
                    time_field: plan.time_field,
                    asc,
                },
            );
            return Ok(Cursor {
                mode: Mode::Merge(Box::new(merge)),
                projection: None,
                skip: spec.skip,
                left,
                failed: false,
            });
        }
        if spec.sort.is_empty() {
            return Ok(Cursor::scan(
                sources,
                plan,
                spec.projection,
                spec.skip,
                left,
                spec.threads,
            ));
        }
        // A sort with a limit keeps the first `skip + limit` rows' keys and builds the rows
        // past the skip; one without, or one whose keys would not fit in memory or do not
        // encode exactly, sorts the rows within it.
        if let Some(n) = spec.limit.and_then(|l| usize::try_from(spec.skip.saturating_add(l)).ok()) {
            let from = usize::try_from(spec.skip).unwrap_or(usize::MAX);
            let top = top_rows(&sources, &plan, &spec.sort, (from, n), &spec.memory, spec.threads)?;
            if let Some(window) = top {
                let docs = build_rows(&sources, &plan, spec.projection, &window, spec.threads)?;
                return Ok(Cursor::from_docs(docs));
            }
        }
        // The rows are written and sorted as BSON bytes. A projection that keeps each key's
        // field whole is applied as they are written; any other, as they come out.
        let keeps_keys = spec.projection.as_ref().is_none_or(|p| {
            spec.sort
                .iter()
                .all(|(k, _)| p.fate(k.split('.').next().unwrap_or(k)) == Fate::Keep)
        });
        let (written, out) = match keeps_keys {
            true => (spec.projection, None),
            false => (None, spec.projection),
        };
        let mut all = Cursor::scan(sources, plan, written, 0, u64::MAX, spec.threads);
        let (sorted, _) = sort_raw_within(|buf| all.next_into(buf), &spec.sort, &spec.memory)?;
        let mut c = Cursor::all_of(Mode::Raw(Box::new(sorted)));
        c.projection = out;
        c.skip = spec.skip;
        c.left = left;
        Ok(c)
    }

    /// Buckets this cursor has read so far (decoded or copied from memory); buckets skipped
    /// whole by their statistics are not counted.
    pub fn buckets_read(&self) -> u64 {
        match &self.mode {
            Mode::Scan(s) => s.buckets_read,
            Mode::Merge(m) => m.buckets_read,
            Mode::Docs(_) | Mode::Groups(_) | Mode::Stream(_) | Mode::Raw(_) => 0,
        }
    }

    fn next_doc(&mut self) -> Option<Result<Document>> {
        match &mut self.mode {
            Mode::Docs(d) => loop {
                let doc = d.pop_front()?;
                if self.skip > 0 {
                    self.skip -= 1;
                    continue;
                }
                return Some(Ok(doc));
            },
            Mode::Stream(d) => loop {
                let doc = d.next()?;
                if self.skip > 0 && doc.is_ok() {
                    self.skip -= 1;
                    continue;
                }
                return Some(doc);
            },
            Mode::Groups(g) => loop {
                let doc = g.next()?;
                if self.skip > 0 && doc.is_ok() {
                    self.skip -= 1;
                    continue;
                }
                return Some(doc);
            },
            Mode::Raw(r) => {
                let mut buf = Vec::new();
                loop {
                    buf.clear();
                    match r.next_into(&mut buf) {
                        Ok(false) => return None,
                        Err(e) => return Some(Err(e)),
                        Ok(true) if self.skip > 0 => self.skip -= 1,
                        Ok(true) => break,
                    }
                }
                Some(Document::from_reader(buf.as_slice()).map_err(|e| {
                    Error::Internal(format!("a sorted document is not BSON: {e}"))
                }))
            }
            Mode::Scan(s) => s.document(&mut self.skip),
            Mode::Merge(m) => match next_merged(m, &mut self.skip)? {
                Ok((rows, r)) => Some(rows.document(m.output(), r)),
                Err(e) => Some(Err(e)),
            },
        }
    }
}

/// The merge's next row after skipping `skip` rows.
fn next_merged(m: &mut TimeMerge, skip: &mut u64) -> Option<Result<(Arc<Selected>, u32)>> {
    loop {
        let row = m.next_row()?;
        if *skip > 0 && row.is_ok() {
            *skip -= 1;
            continue;
        }
        return Some(row);
    }
}

impl Cursor {
    /// Appends the next document to `buf` as BSON bytes; false when none is left. A find
    /// without a sort or sorted on the time field alone, or a pipeline of `$match`, keep-only
    /// `$project` and such a `$sort` that a find does whole, writes the bytes straight from
    /// the bucket's columns without building a `Document`: the fastest way to take
    /// measurements out. The others encode the documents they build.
    pub fn next_into(&mut self, buf: &mut Vec<u8>) -> Result<bool> {
        if self.failed || self.left == 0 {
            return Ok(false);
        }
        let got = match &mut self.mode {
            Mode::Scan(s) => s.write(&mut self.skip, buf),
            Mode::Raw(r) if self.projection.is_none() => loop {
                let at = buf.len();
                match r.next_into(buf) {
                    Ok(true) if self.skip > 0 => {
                        self.skip -= 1;
                        buf.truncate(at);
                    }
                    got => break got,
                }
            },
            Mode::Merge(m) => match next_merged(m, &mut self.skip) {
                None => Ok(false),
                Some(Err(e)) => Err(e),
                Some(Ok((rows, r))) => rows.write(m.output(), r, buf).map(|()| true),
            },
            _ => match self.next() {
                None => return Ok(false),
                Some(Err(e)) => return Err(e),
                Some(Ok(d)) => {
                    return write_document(&d, buf, 1)
                        .map(|()| true)
                        .map_err(Error::Internal)
                }
            },
        };
        match got {
            Ok(true) => self.left -= 1,
            Ok(false) => {}
            Err(_) => self.failed = true,
        }
        got
    }

    /// The next document as BSON bytes (see [`Cursor::next_into`]).
    pub fn next_raw(&mut self) -> Option<Result<RawDocumentBuf>> {
        let mut buf = Vec::new();
        match self.next_into(&mut buf) {
            Ok(true) => Some(RawDocumentBuf::from_bytes(buf).map_err(|e| {
                Error::Internal(format!("a returned document is not BSON: {e}"))
            })),
            Ok(false) => None,
            Err(e) => Some(Err(e)),
        }
    }
}

impl Iterator for Cursor {
    type Item = Result<Document>;

    fn next(&mut self) -> Option<Result<Document>> {
        if self.failed || self.left == 0 {
            return None;
        }
        match self.next_doc()? {
            Ok(d) => {
                self.left -= 1;
                Some(Ok(match &self.projection {
                    Some(p) => p.apply(d),
                    None => d,
                }))
            }
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}

/// Where the matches of `sources` from the `from`th to before the `n`th in the order of
/// `keys` are, as (bucket in scan order, row), first to last, ties in scan order: what
/// sorting every match, skipping `from` and keeping up to the `n`th gives. Rows compete by
/// their keys alone, written as normalised bytes straight from the bucket's columns and meta
/// value, and a row that sorts after the `n`th kept is turned away at once: tens of
/// nanoseconds a row. The rows returned are built afterwards, only those past the skip. When the leading keys are ones a bucket's statistics bound
/// ([`bounded_keys`]), buckets are read best first by those bounds, and reading stops once no
/// bucket left can hold a row that sorts before the `n`th kept: a top 10 by a field, or the
/// latest rows by time then a field, read a few buckets, not all of them.
///
/// Up to `threads` threads read stretches of that order, each keeping its own first `n`; the
/// smallest `n`th any of them has kept bars rows on all of them (no row after it can be among
/// the first `n` of all), and their keepers are merged at the end. `None` when a key does not
/// encode exactly (decimals, integers past 2^53, code) or the kept keys would pass `memory`;
/// the caller sorts the rows within it instead.
fn top_rows(
    sources: &Scans,
    plan: &Plan,
    keys: &[(String, bool)],
    (from, n): (usize, usize),
    memory: &SortMemory,
    threads: usize,
) -> Result<Option<Vec<(usize, u32)>>> {
    if n == 0 {
        return Ok(Some(Vec::new()));
    }
    let bounded = bounded_keys(plan, keys);
    let order = best_first(sources, plan, &bounded)?;
    // Each bucket's best key as bytes (no row of it sorts before them), where the bounds give
    // one exactly. With every key bounded, a row that ties with the `n`th on all of them loses
    // to it when found later in scan order, and the buckets of equal bounds come in scan
    // order: the bucket's place closes its best.
    let all_bounded = bounded.len() == keys.len();
    let best_at = |at: usize, best: &mut Vec<u8>| {
        let Some((k, Some(bytes))) = order.get(at) else {
            return false;
        };
        best.clear();
        best.extend_from_slice(bytes);
        if all_bounded {
            put_place((*k, 0), best);
        }
        true
    };
    let out = RowOutput::new(
        plan.filter.clone(),
        Some(key_projection(keys)?),
        &plan.time_field,
        plan.meta_field.as_deref(),
    );
    let mut threads = parallel::workers(order.len(), TOP_BUCKETS_PER_THREAD, threads);
    // Each thread keeps up to `n` rows of its own: many rows are kept on this one alone.
    while threads > 1 && TopKeys::estimate(n, keys.len(), threads) > memory.limit {
        threads -= 1;
    }
    // Stretches short enough that reading stops soon after the threads' `n`th passes the
    // buckets' bests, when the order is best first; in scan order, cut where pages change.
    let positions: Vec<usize> = (0..order.len()).collect();
    let parts: Vec<&[usize]> = match bounded.is_empty() {
        true => parallel::split_by_page(sources, &positions, parallel::parts_for(threads)),
        false => positions.chunks(TOP_STRETCH).collect(),
    };
    // The first position no thread need read, and the smallest `n`th kept by any thread.
    let stop = AtomicUsize::new(order.len());
    let bar: Mutex<Option<Vec<u8>>> = Mutex::new(None);
    let limit = memory.limit / threads.max(1);
    let meta = plan.meta_field.as_deref();
    let read = |(top, best): &mut (TopKeys, Vec<u8>), _, part: &[usize]| {
        for &at in part {
            if at >= stop.load(AtomicOrdering::Relaxed) {
                break;
            }
            let Some((k, _)) = order.get(at) else { continue };
            let Some(scan) = sources.get(*k) else { continue };
            offer_bucket(top, &out, scan, *k, keys, meta)?;
            if top.bytes() > limit {
                return Err(TopStop::Inexact);
            }
            // A fresh `n`th after a bucket that gave rows, so that reading stops as soon as
            // it can; cuts of many more rows wait for the keeper's own.
            if !bounded.is_empty() && top.len() >= n && (!top.has_nth() || top.len() - n >= n / 4 + 16) {
                top.cut();
            }
            if threads > 1 {
                let mut shared = bar.lock().map_err(|_| TopStop::Failed(poisoned()))?;
                match shared.as_deref() {
                    Some(theirs) if !top.nth_before(theirs) => top.bar(theirs),
                    _ => *shared = top.nth(),
                }
            }
            // No bucket from the next on holds a row before the `n`th.
            if top.has_nth() && best_at(at + 1, best) && top.nth_before(best) {
                stop.fetch_min(at + 1, AtomicOrdering::Relaxed);
                break;
            }
        }
        Ok(())
    };
    // The first stretch on this thread alone: a top that ends within it (a top 10 by a
    // bounded key reads a bucket or two) starts no thread.
    let mut first = (TopKeys::new(n), Vec::new());
    let head = parts.first().map_or(&[][..], |p| *p);
    let rest = parts.get(1..).unwrap_or_default();
    let tops = read(&mut first, 0, head).and_then(|()| {
        let ended = stop.load(AtomicOrdering::Relaxed) < order.len();
        if ended || rest.is_empty() {
            return Ok(Vec::new());
        }
        parallel::run_claimed(rest, threads, || (TopKeys::new(n), Vec::new()), read)
    });
    let tops = match tops {
        Ok(tops) => tops.into_iter().map(|(top, _)| top),
        Err(TopStop::Inexact) => return Ok(None),
        Err(TopStop::Failed(e)) => return Err(e),
    };
    let mut top = first.0;
    for other in tops {
        if !top.absorb(&other) || top.bytes() > memory.limit {
            return Ok(None);
        }
    }
    Ok(Some(top.finish_from(from)))
}

/// Buckets a thread of a top should have at least.
const TOP_BUCKETS_PER_THREAD: usize = 64;

/// Buckets in one stretch of a top that reads best first.
const TOP_STRETCH: usize = 16;

/// Why a thread of a top stopped before its stretches were read.
enum TopStop {
    /// A key did not encode exactly, or the kept keys passed the memory: the rows are sorted
    /// instead.
    Inexact,
    Failed(Error),
}

impl From<Error> for TopStop {
    fn from(e: Error) -> TopStop {
        TopStop::Failed(e)
    }
}

fn poisoned() -> Error {
    Error::Internal("a thread of a top failed while it held the shared bar".into())
}

/// Offers every row `out` selects of the bucket `scan` (bucket `k` in scan order) to `top`.
fn offer_bucket(
    top: &mut TopKeys,
    out: &RowOutput,
    scan: Scan<'_>,
    k: usize,
    keys: &[(String, bool)],
    meta: Option<&str>,
) -> std::result::Result<(), TopStop> {
    let sel = out.select(&scan.src, scan.verdict == Verdict::All)?;
    let from: Vec<KeyFrom<'_>> = keys
        .iter()
        .map(|(path, asc)| key_from(&sel, path, *asc, meta))
        .collect();
    for &r in sel.rows() {
        // The row's key fields as a document, built only for a key the columns do not give as
        // a plain value.
        let mut doc: Option<Document> = None;
        let mut failed = None;
        let exact = top.offer(keys, (k, r), |i, buf| {
            let (Some(from), Some((path, asc))) = (from.get(i), keys.get(i)) else {
                return false;
            };
            match from {
                KeyFrom::Const(b) => {
                    buf.extend_from_slice(b);
                    return true;
                }
                // Numbers and dates where they lie, anything else as a value.
                KeyFrom::Col(c) => match c.typed_bits(r as usize) {
                    Some(typed) => return put_typed(typed, buf),
                    None => match c.value(r as usize) {
                        None => return put_value(&Bson::Null, buf),
                        Some(v) if !matches!(v.as_ref(), Bson::Array(_) | Bson::Document(_)) => {
                            return put_value(&v, buf)
                        }
                        Some(_) => {}
                    },
                },
                KeyFrom::Doc => {}
            }
            if doc.is_none() {
                match sel.document(out, r) {
                    Ok(d) => doc = Some(d),
                    Err(e) => {
                        failed = Some(e);
                        return false;
                    }
                }
            }
            doc.as_ref()
                .is_some_and(|d| put_value(&sort_value(d, path, *asc), buf))
        });
        if let Some(e) = failed {
            return Err(TopStop::Failed(e));
        }
        if !exact {
            return Err(TopStop::Inexact);
        }
    }
    Ok(())
}

/// Where a sort key's values are in one bucket.
enum KeyFrom<'a> {
    /// A decoded column of a top-level field.
    Col(&'a Col),
    /// The same normalised bytes in every row (ascending): the bucket's meta value, or a
    /// field the bucket does not have.
    Const(Vec<u8>),
    /// Only a document of the row's key fields tells.
    Doc,
}

/// Where the values of sort key `path` are in the bucket `sel` selected.
fn key_from<'a>(sel: &'a Selected, path: &str, asc: bool, meta: Option<&str>) -> KeyFrom<'a> {
    let head = path.split('.').next().unwrap_or(path);
    if Some(head) == meta {
        let Some(m) = sel.shared_meta() else {
            return KeyFrom::Doc;
        };
        let mut d = Document::new();
        if let Some(v) = m {
            d.insert(head, v.clone());
        }
        let mut b = Vec::new();
        return match put_value(&sort_value(&d, path, asc), &mut b) {
            true => KeyFrom::Const(b),
            false => KeyFrom::Doc,
        };
    }
    if head == "_id" || head.len() != path.len() || crate::catalog::is_hidden(head) {
        return KeyFrom::Doc;
    }
    match sel.column(head) {
        Some(c) => KeyFrom::Col(c),
        None if !sel.has_column(head) => {
            let mut b = Vec::new();
            put_value(&Bson::Null, &mut b);
            KeyFrom::Const(b)
        }
        None => KeyFrom::Doc,
    }
}

/// The buckets of `sources` in the order a top reads them, each with the key bytes of its best
/// values of the `bounded` keys (no row of it sorts before them): best first, those whose
/// bounds tell nothing exactly before all others, ties in scan order. Scan order when no key
/// is bounded.
fn best_first(
    sources: &Scans,
    plan: &Plan,
    bounded: &[(&str, Bounded, bool)],
) -> Result<Vec<(usize, Option<Vec<u8>>)>> {
    if bounded.is_empty() || sources.len() < 2 {
        return Ok((0..sources.len()).map(|k| (k, None)).collect());
    }
    // The bounds of the fields among the keys, gathered once per segment: looking them up in
    // each bucket's `control` documents was most of a top's time.
    let mut gathered = SegmentBounds::new(
        bounded
            .iter()
            .filter(|(_, kind, _)| *kind == Bounded::Field)
            .map(|(k, _, _)| k.to_string())
            .collect(),
    );
    let mut order: Vec<(usize, Option<Vec<u8>>)> = Vec::with_capacity(sources.len());
    for (k, s) in sources.iter().enumerate() {
        let best = best_of(&s.src, bounded, &plan.time_field, &mut gathered).and_then(|values| {
            let mut bytes = Vec::new();
            let exact = values
                .iter()
                .zip(bounded)
                .all(|(v, (_, _, asc))| put_key(v, *asc, &mut bytes));
            exact.then_some(bytes)
        });
        order.push((k, best));
    }
    // Ties end on the scan position: unstable sorting gives the one order.
    order.sort_unstable_by(|(i, a), (j, b)| a.cmp(b).then(i.cmp(j)));
    Ok(order)
}

/// The projection that keeps what `keys` read and nothing else (not `_id`, unless a key): a
/// path below another key's path is kept by that one.
fn key_projection(keys: &[(String, bool)]) -> Result<Projection> {
    let mut paths: Vec<&str> = keys.iter().map(|(k, _)| k.as_str()).collect();
    paths.sort_unstable();
    let mut spec = Document::new();
    let mut last: Option<&str> = None;
    for p in paths {
        let under = last.is_some_and(|l| p == l || p.strip_prefix(l).is_some_and(|r| r.starts_with('.')));
        if !under {
            spec.insert(p, 1);
            last = Some(p);
        }
    }
    if !spec.contains_key("_id") {
        spec.insert("_id", 0);
    }
    Projection::parse(&spec)
}

/// Builds the rows at `places` (bucket in scan order, row), in that order, with `projection`
/// applied, on up to `threads` threads: each bucket is read once, however its rows are spread.
fn build_rows(
    sources: &Scans,
    plan: &Plan,
    projection: Option<Projection>,
    places: &[(usize, u32)],
    threads: usize,
) -> Result<Vec<Document>> {
    // A projection that keeps nothing (what a `$count` after the top reads) makes empty
    // documents: no bucket need be read again.
    if projection.as_ref().and_then(Projection::kept).is_some_and(|k| k.is_empty()) {
        return Ok(places.iter().map(|_| Document::new()).collect());
    }
    let out = RowOutput::new(
        plan.filter.clone(),
        projection,
        &plan.time_field,
        plan.meta_field.as_deref(),
    );
    let mut by_bucket: Vec<(usize, u32, usize)> = places
        .iter()
        .enumerate()
        .map(|(i, &(k, r))| (k, r, i))
        .collect();
    by_bucket.sort_unstable();
    // (bucket, row, place in the output), the rows of one bucket together.
    type Rows<'a> = &'a [(usize, u32, usize)];
    let buckets: Vec<Rows<'_>> = by_bucket.chunk_by(|a, b| a.0 == b.0).collect();
    let threads = parallel::workers(buckets.len(), BUILD_BUCKETS_PER_THREAD, threads);
    let per_part = buckets.len().div_ceil(parallel::parts_for(threads)).max(1);
    let parts: Vec<&[Rows<'_>]> = buckets.chunks(per_part).collect();
    let built = parallel::run_claimed(&parts, threads, Vec::new, |done, _, part| {
        for rows in part {
            let Some(&(k, _, _)) = rows.first() else { continue };
            let scan = sources
                .get(k)
                .ok_or_else(|| Error::Internal(format!("a top kept a row of bucket {k}, past the scan")))?;
            // The rows were chosen: the bucket's filter need not run again.
            let sel = out.select(&scan.src, true)?;
            for &(_, r, i) in rows.iter() {
                done.push((i, sel.document(&out, r)?));
            }
        }
        Ok::<(), Error>(())
    })?;
    let mut docs: Vec<(usize, Document)> = built.into_iter().flatten().collect();
    docs.sort_unstable_by_key(|(i, _)| *i);
    Ok(docs.into_iter().map(|(_, d)| d).collect())
}

/// Buckets a thread that builds a top's rows should have at least.
const BUILD_BUCKETS_PER_THREAD: usize = 32;

/// What a sort key reads that a bucket's statistics bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Bounded {
    /// A top-level measurement field: `control.min/max`.
    Field,
    /// The time field: the bucket's time range (`control.min` of it is the rounded start, no
    /// later than any row's time).
    Time,
    /// The meta field or a path below it: the bucket's meta value, the same in every row.
    Meta,
}

/// The leading sort keys whose values a bucket's statistics bound, with what bounds them and
/// their direction: top-level measurement fields, the time field, the meta field and paths
/// below it. Stops at the first other key.
pub(crate) fn bounded_keys<'k>(
    plan: &Plan,
    keys: &'k [(String, bool)],
) -> Vec<(&'k str, Bounded, bool)> {
    let meta = plan.meta_field.as_deref();
    keys.iter()
        .map_while(|(k, asc)| {
            let head = k.split('.').next().unwrap_or(k);
            let kind = if *k == plan.time_field {
                Bounded::Time
            } else if Some(head) == meta {
                Bounded::Meta
            } else if !k.contains('.') && !crate::catalog::is_hidden(k) {
                Bounded::Field
            } else {
                return None;
            };
            Some((k.as_str(), kind, *asc))
        })
        .collect()
}

/// The values of the bounded keys that sort first among the bucket's rows, from its
/// statistics: each key's best alone, which as a tuple sorts no later than any row's. `None`
/// when they cannot tell for some key (arrays or documents in a field, bounds missing, rows
/// with their own meta values).
fn best_of(
    src: &Source<'_>,
    keys: &[(&str, Bounded, bool)],
    time_field: &str,
    gathered: &mut SegmentBounds,
) -> Option<Vec<Bson>> {
    let mut st = source::stats(src).ok()?;
    if let Source::Seg(seg, i) = src {
        if let Some(g) = gathered.of(seg, *i as usize) {
            st = st.with_bounds(g);
        }
    }
    keys.iter()
        .map(|(path, kind, asc)| match kind {
            Bounded::Time => {
                let (lo, hi) = st.time_range(time_field);
                let t = if *asc { lo? } else { hi? };
                Some(Bson::DateTime(bson::DateTime::from_millis(t)))
            }
            Bounded::Meta => {
                if st.meta_varies() {
                    return None;
                }
                let mut v = st.meta;
                for part in path.split('.').skip(1) {
                    v = match v {
                        Some(Bson::Document(d)) => d.get(part),
                        Some(Bson::Array(_)) => return None,
                        _ => None,
                    };
                }
                match v {
                    Some(Bson::Array(_)) => None,
                    Some(v) => Some(v.clone()),
                    None => Some(Bson::Null),
                }
            }
            Bounded::Field => field_best(src, &st, path, *asc),
        })
        .collect()
}

/// The value of top-level `field` that sorts first among the bucket's rows (a row without the
/// field sorts as null); `None` for arrays or documents in the field, or missing bounds.
fn field_best(src: &Source<'_>, st: &BucketStats<'_>, field: &str, asc: bool) -> Option<Bson> {
    let (lo, hi) = match st.bound(field) {
        BoundRef::Absent => return Some(Bson::Null),
        BoundRef::Range(lo, hi) => (lo, hi),
        BoundRef::Partial => return None,
    };
    let scalar = |v: &Bson| !matches!(v, Bson::Array(_) | Bson::Document(_));
    if !scalar(lo) || !scalar(hi) {
        return None;
    }
    let best = if asc { lo } else { hi };
    if source::in_every_row(src, field) {
        return Some(best.clone());
    }
    // Rows without the field sort as null, which may come first.
    let null = Bson::Null;
    let first = match (asc, cmp_bson(&null, best)) {
        (true, Ordering::Less) | (false, Ordering::Greater) => &null,
        _ => best,
    };
    Some(first.clone())
}
