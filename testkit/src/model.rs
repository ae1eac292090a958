//! `model`: random operations on a database on `MemFs` against a plain list of the
//! acknowledged measurements. Operations: insert a batch (a few series, times in and out of
//! order), flush, query a time range (optionally one series) with `find` and
//! `count_documents`, meta-only `delete_many` and `update_many` of one series, power loss (a
//! crash image of every kind `MemFs` makes, then reopen), and a clean close and reopen. Every
//! acknowledged measurement, update and delete must survive every crash, and every answer must
//! equal the model's.

use super::Input;
use std::sync::Arc;
use tsbucket::bson::{doc, Bson, DateTime, Document};
use tsbucket::vfs::{CrashMode, MemFs};
use tsbucket::{BucketLimits, Collection, Database, DbOptions, TimeseriesOptions};

const T0: i64 = 1_700_000_000_000;
const MAX_OPS: usize = 48;
const MODES: [CrashMode; 5] = [
    CrashMode::DropUnsynced,
    CrashMode::KeepPrefix,
    CrashMode::TornSector,
    CrashMode::ZeroExtension,
    CrashMode::Random,
];

fn options(fs: &MemFs) -> DbOptions {
    let mut o = DbOptions::default().vfs(Arc::new(fs.clone()));
    o.ttl_interval = None;
    // Small buckets so a few dozen measurements span several buckets and segments.
    o.limits = BucketLimits {
        max_count: 8,
        ..BucketLimits::default()
    };
    o
}

fn open(fs: &MemFs, create: bool) -> (Database, Collection) {
    let db = match Database::open_with("/db", options(fs)) {
        Ok(db) => db,
        Err(e) => panic!("the database does not open: {e}"),
    };
    let c = if create {
        db.create_collection("c", TimeseriesOptions::new("t").meta_field("m"))
    } else {
        db.collection("c")
    };
    match c {
        Ok(c) => (db, c),
        Err(e) => panic!("the collection is missing: {e}"),
    }
}

/// Model documents in `[lo, hi)` of series `series` (any series when `None`), as sorted bytes.
fn answer(model: &[(i64, i32, Vec<u8>)], lo: i64, hi: i64, series: Option<i32>) -> Vec<Vec<u8>> {
    let mut v: Vec<Vec<u8>> = model
        .iter()
        .filter(|(t, s, _)| *t >= lo && *t < hi && series.is_none_or(|x| x == *s))
        .map(|(_, _, b)| b.clone())
        .collect();
    v.sort();
    v
}

fn query(c: &Collection, filter: Document, ctx: &str) -> Vec<Vec<u8>> {
    let docs = match c
        .find(filter)
        .and_then(|cur| cur.collect::<tsbucket::Result<Vec<_>>>())
    {
        Ok(d) => d,
        Err(e) => panic!("{ctx}: find failed: {e}"),
    };
    let mut v: Vec<Vec<u8>> = docs
        .iter()
        .map(|d| d.to_vec().unwrap_or_default())
        .collect();
    v.sort();
    v
}

/// Runs one input.
pub fn run(data: &[u8]) {
    let mut inp = Input::new(data);
    let mut fs = MemFs::new();
    let (mut db, mut c) = open(&fs, true);
    // (time, series, document bytes) of every acknowledged measurement.
    let mut model: Vec<(i64, i32, Vec<u8>)> = Vec::new();
    let mut next_id = 0i64;
    for step in 0..MAX_OPS {
        if inp.is_empty() {
            break;
        }
        match inp.u8() % 10 {
            0..=2 => {
                let n = 1 + inp.below(12);
                let docs: Vec<(i64, i32, Document)> = (0..n)
                    .map(|_| {
                        next_id += 1;
                        let t = T0 + inp.below(400) as i64 * 15_000;
                        let s = i32::from(inp.u8() % 3);
                        let mut d = doc! {"_id": next_id, "t": DateTime::from_millis(t), "m": s};
                        match inp.u8() % 4 {
                            0 => {}
                            1 => {
                                d.insert("v", f64::from(inp.u16()) / 8.0);
                            }
                            2 => {
                                d.insert("v", i32::from(inp.u8()));
                            }
                            _ => {
                                d.insert("w", Bson::String("x".repeat(inp.below(40))));
                            }
                        }
                        (t, s, d)
                    })
                    .collect();
                let batch: Vec<Document> = docs.iter().map(|d| d.2.clone()).collect();
                if c.insert_many(&batch).is_ok() {
                    for (t, s, d) in docs {
                        model.push((t, s, d.to_vec().unwrap_or_default()));
                    }
                }
            }
            3 => {
                if let Err(e) = db.flush() {
                    panic!("step {step}: flush failed: {e}");
                }
            }
            4 | 5 => {
                let lo = T0 + inp.below(420) as i64 * 15_000 - 30_000;
                let hi = lo + inp.below(420) as i64 * 15_000;
                let series = (!inp.one_in(2)).then(|| i32::from(inp.u8() % 4));
                let mut f = doc! {"t": {"$gte": DateTime::from_millis(lo), "$lt": DateTime::from_millis(hi)}};
                if let Some(s) = series {
                    f.insert("m", s);
                }
                let want = answer(&model, lo, hi, series);
                let ctx = format!("step {step}: query {f}");
                assert_eq!(query(&c, f.clone(), &ctx), want, "{ctx}");
                match c.count_documents(f) {
                    Ok(n) => assert_eq!(n, want.len() as u64, "{ctx}: count"),
                    Err(e) => panic!("{ctx}: count failed: {e}"),
                }
            }
            6 => {
                let mode = MODES[inp.below(MODES.len())];
                let image = if inp.one_in(2) {
                    fs.crash_with(mode, u64::from(inp.u8()))
                } else {
                    fs.crash_with_dir_entries(mode, u64::from(inp.u8()))
                };
                drop(c);
                drop(db);
                fs = image;
                (db, c) = open(&fs, false);
                let ctx = format!("step {step}: after a crash ({mode:?})");
                assert_eq!(
                    query(&c, doc! {}, &ctx),
                    answer(&model, i64::MIN, i64::MAX, None),
                    "{ctx}"
                );
            }
            7 => {
                let s = i32::from(inp.u8() % 4);
                let n = model.iter().filter(|m| m.1 == s).count() as u64;
                match c.delete_many(doc! {"m": s}) {
                    Ok(r) => assert_eq!(r.deleted_count, n, "step {step}: delete of series {s}"),
                    Err(e) => panic!("step {step}: delete failed: {e}"),
                }
                model.retain(|m| m.1 != s);
            }
            8 => {
                let (from, to) = (i32::from(inp.u8() % 4), i32::from(inp.u8() % 4));
                let n = model.iter().filter(|m| m.1 == from).count() as u64;
                match c.update_many(doc! {"m": from}, doc! {"$set": {"m": to}}) {
                    Ok(r) => {
                        let changed = if from == to { 0 } else { n };
                        assert_eq!(
                            (r.matched_count, r.modified_count),
                            (n, changed),
                            "step {step}: update of series {from} to {to}"
                        );
                    }
                    Err(e) => panic!("step {step}: update failed: {e}"),
                }
                for m in model.iter_mut().filter(|m| m.1 == from) {
                    m.1 = to;
                    // The meta field keeps its place in the document.
                    if let Ok(mut d) = Document::from_reader(m.2.as_slice()) {
                        d.insert("m", to);
                        m.2 = d.to_vec().unwrap_or_default();
                    }
                }
            }
            _ => {
                drop(c);
                if let Err(e) = db.close() {
                    panic!("step {step}: close failed: {e}");
                }
                (db, c) = open(&fs, false);
            }
        }
    }
    let all = query(&c, doc! {}, "at the end");
    assert_eq!(all, answer(&model, i64::MIN, i64::MAX, None), "at the end");
    let _ = db.close();
}
