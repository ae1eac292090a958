//! Loading a random collection into a real database (batches, flushes, reopens) while keeping
//! the documents the engine must return, and comparing the engine's answers with the model's.

use super::data::{self, After};
use super::filters::{Clause, Find, Operands};
use super::matcher::matches;
use super::project::{keys_tie, parse_sort, project, sort, sort_keys};
use proptest::test_runner::TestCaseError;
use std::collections::HashMap;
use tsbucket::bson::{Bson, Document};
use tsbucket::{Collection, Database, DbOptions, SyncMode};

/// `cases` unless `PROPTEST_CASES` says otherwise.
pub fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

fn fail(msg: impl Into<String>) -> TestCaseError {
    TestCaseError::fail(msg.into())
}

fn ok<T>(r: tsbucket::Result<T>, what: &str) -> Result<T, TestCaseError> {
    r.map_err(|e| fail(format!("{what}: {e}")))
}

/// A loaded database and what it holds.
pub struct State<'a> {
    pub db: &'a Database,
    pub coll: &'a Collection,
    /// Every measurement inserted so far, exactly as the engine must return it.
    pub docs: &'a [Document],
    /// Which step of the load this is, for failure messages.
    pub step: &'a str,
}

fn open(dir: &std::path::Path, case: &data::Collection) -> Result<Database, TestCaseError> {
    let mut o = DbOptions::default().sync(SyncMode::Never);
    o.ttl_interval = None;
    if let Some(n) = case.max_count {
        o.limits.max_count = n;
    }
    ok(Database::open_with(dir, o), "open")
}

/// Loads `case` batch by batch and calls `check` at the batches marked for it and at the end.
pub fn run(
    case: &data::Collection,
    mut check: impl FnMut(&State<'_>) -> Result<(), TestCaseError>,
) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().map_err(|e| fail(e.to_string()))?;
    let mut db = open(dir.path(), case)?;
    let mut coll = ok(db.create_collection("c", case.options()), "create")?;
    let rows = case.insertion_order();
    let mut next = 0;
    let mut docs: Vec<Document> = Vec::new();
    for (i, b) in case.batches.iter().enumerate() {
        let n = if i + 1 == case.batches.len() {
            rows.len() - next
        } else {
            b.len.min(rows.len() - next)
        };
        let batch: Vec<Document> = rows[next..next + n]
            .iter()
            .map(|(k, r)| case.document(*k, r))
            .collect();
        next += n;
        if !batch.is_empty() {
            let res = ok(coll.insert_many(&batch), "insert_many")?;
            for (d, id) in batch.into_iter().zip(res.inserted_ids) {
                docs.push(as_returned(d, id));
            }
        }
        if matches!(b.after, After::Flush | After::FlushReopen) {
            ok(db.flush(), "flush")?;
        }
        if matches!(b.after, After::Reopen | After::FlushReopen) {
            ok(db.close(), "close")?;
            db = open(dir.path(), case)?;
            coll = ok(db.collection("c"), "collection after reopen")?;
        }
        if b.check && i + 1 < case.batches.len() {
            let step = format!("after batch {i} ({:?})", b.after);
            check(&State {
                db: &db,
                coll: &coll,
                docs: &docs,
                step: &step,
            })?;
        }
    }
    check(&State {
        db: &db,
        coll: &coll,
        docs: &docs,
        step: "at the end",
    })?;
    ok(db.close(), "close")
}

/// The measurement as reads return it: a generated `_id` comes first.
fn as_returned(d: Document, id: Bson) -> Document {
    if d.contains_key("_id") {
        return d;
    }
    let mut out = Document::new();
    out.insert("_id", id);
    out.extend(d);
    out
}

fn bytes(d: &Document) -> Vec<u8> {
    d.to_vec().expect("documents encode")
}

fn counts(docs: &[Document]) -> HashMap<Vec<u8>, usize> {
    let mut m = HashMap::new();
    for d in docs {
        *m.entry(bytes(d)).or_insert(0) += 1;
    }
    m
}

fn show(docs: &[Document]) -> String {
    docs.iter().map(|d| format!("\n    {d}")).collect()
}

/// `got` holds exactly the documents of `want`, byte for byte, in any order.
pub fn same_multiset(got: &[Document], want: &[Document], ctx: &str) -> Result<(), TestCaseError> {
    let (mut g, mut w) = (counts(got), counts(want));
    for (k, n) in g.iter_mut() {
        let m = w.get_mut(k).map(|m| {
            let common = (*m).min(*n);
            *m -= common;
            common
        });
        *n -= m.unwrap_or(0);
    }
    let extra: Vec<Document> = left_over(got, &mut g);
    let missing: Vec<Document> = left_over(want, &mut w);
    if extra.is_empty() && missing.is_empty() {
        return Ok(());
    }
    Err(fail(format!(
        "{ctx}: {} returned, {} expected\n  returned but not expected:{}\n  expected but not returned:{}",
        got.len(),
        want.len(),
        show(&extra),
        show(&missing)
    )))
}

fn left_over(docs: &[Document], counts: &mut HashMap<Vec<u8>, usize>) -> Vec<Document> {
    let mut out = Vec::new();
    for d in docs {
        if let Some(n) = counts.get_mut(&bytes(d)) {
            if *n > 0 {
                *n -= 1;
                out.push(d.clone());
            }
        }
    }
    out
}

/// `got` is a sub-multiset of `pool`.
fn within(got: &[Document], pool: &[Document]) -> bool {
    let mut c = counts(pool);
    got.iter().all(|d| match c.get_mut(&bytes(d)) {
        Some(n) if *n > 0 => {
            *n -= 1;
            true
        }
        _ => false,
    })
}

/// Checks `find`, `count_documents`, `explain` and `find_with` for one filter.
pub fn check_query(
    st: &State<'_>,
    ctx: &data::Ctx,
    clauses: &[Clause],
    find: &Find,
) -> Result<(), TestCaseError> {
    let filter = Operands { ctx, docs: st.docs }.filter(clauses);
    let what = format!("{} with filter {filter}", st.step);
    let want: Vec<Document> = st
        .docs
        .iter()
        .filter(|d| matches(&filter, d))
        .cloned()
        .collect();

    let got: Vec<Document> = ok(
        ok(st.coll.find(filter.clone()), &what)?.collect(),
        &format!("{what}: reading"),
    )?;
    same_multiset(&got, &want, &format!("find {what}"))?;

    let n = ok(st.coll.count_documents(filter.clone()), &what)?;
    if n != want.len() as u64 {
        return Err(fail(format!(
            "count_documents {what}: {n}, expected {}",
            want.len()
        )));
    }

    let ex = ok(st.coll.explain(filter.clone()), &what)?;
    let stats = ok(st.coll.stats(), "stats")?;
    let pruned = ex.buckets_pruned_by_index + ex.buckets_pruned_by_id + ex.buckets_pruned_by_stats;
    if ex.buckets_total != pruned + ex.buckets_examined
        || ex.buckets_examined != ex.buckets_taken_whole + ex.buckets_unpacked
        || ex.buckets_total != stats.buckets
        || (filter.is_empty() && pruned != 0)
        || (!want.is_empty() && ex.buckets_examined == 0)
    {
        return Err(fail(format!(
            "explain {what}: inconsistent {ex:?} ({} buckets in stats, {} matches)",
            stats.buckets,
            want.len()
        )));
    }
    if stats.measurements != st.docs.len() as u64 {
        return Err(fail(format!(
            "stats {}: {} measurements, {} inserted",
            st.step,
            stats.measurements,
            st.docs.len()
        )));
    }

    check_find_with(st, &filter, want, find, &what)
}

/// The documents `cursor` gives as BSON bytes are `docs`, in the same order: a scan writes
/// its bytes from the columns, apart from the code that builds `Document`s.
fn same_as_raw(
    docs: &[Document],
    cursor: tsbucket::Result<tsbucket::Cursor>,
    what: &str,
) -> Result<(), TestCaseError> {
    let mut cursor = ok(cursor, what)?;
    let mut raw = Vec::new();
    while let Some(r) = cursor.next_raw() {
        let r = ok(r, &format!("{what}: reading BSON"))?;
        raw.push(ok(
            Document::try_from(r.as_ref()).map_err(|e| tsbucket::Error::Internal(e.to_string())),
            what,
        )?);
    }
    if raw != docs {
        return Err(fail(format!(
            "{what}: as BSON bytes{}\n  as documents{}",
            show(&raw),
            show(docs)
        )));
    }
    Ok(())
}

fn check_find_with(
    st: &State<'_>,
    filter: &Document,
    mut want: Vec<Document>,
    find: &Find,
    what: &str,
) -> Result<(), TestCaseError> {
    let opts = find.options();
    let what = format!("find_with {what}, {opts:?}");
    let got: Vec<Document> = ok(
        ok(st.coll.find_with(filter.clone(), opts.clone()), &what)?.collect(),
        &what,
    )?;
    same_as_raw(&got, st.coll.find_with(filter.clone(), opts.clone()), &what)?;
    let skip = find.skip.unwrap_or(0) as usize;
    let limit = match find.limit {
        None | Some(0) => usize::MAX,
        Some(l) => l.unsigned_abs() as usize,
    };
    let window = want.len().saturating_sub(skip).min(limit);
    if got.len() != window {
        return Err(fail(format!(
            "{what}: {} documents, expected {window} of {} matches:{}",
            got.len(),
            want.len(),
            show(&got)
        )));
    }
    let proj = |d: &Document| match &opts.projection {
        Some(p) => project(p, d),
        None => d.clone(),
    };
    let Some(sort_doc) = &opts.sort else {
        // Unsorted: any `window` of the matches.
        let pool: Vec<Document> = want.iter().map(proj).collect();
        if !within(&got, &pool) {
            return Err(fail(format!(
                "{what}: returned documents that do not match:{}",
                show(&got)
            )));
        }
        return Ok(());
    };
    let spec = parse_sort(sort_doc);
    sort(&spec, &mut want);
    let keys: Vec<Vec<Bson>> = want.iter().map(|d| sort_keys(&spec, d)).collect();
    // Ties may come back in any order: each run of equal keys that meets the window must
    // supply exactly the returned documents at its positions.
    let mut a = 0;
    while a < want.len() {
        let mut b = a + 1;
        while b < want.len() && keys_tie(&keys[a], &keys[b]) {
            b += 1;
        }
        let (lo, hi) = (a.max(skip), b.min(skip.saturating_add(limit)));
        if lo < hi {
            let pool: Vec<Document> = want[a..b].iter().map(proj).collect();
            let part = &got[lo - skip..hi - skip];
            if !within(part, &pool) {
                let expected: Vec<Document> =
                    want.iter().skip(skip).take(limit).map(proj).collect();
                return Err(fail(format!(
                    "{what}: positions {lo}..{hi} should come from the documents sorting as {:?}\n  got:{}\n  expected (ties in any order):{}",
                    keys[a],
                    show(&got),
                    show(&expected)
                )));
            }
        }
        a = b;
    }
    Ok(())
}
