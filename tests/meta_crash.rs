//! Crash safety of meta-only `update_many` and `delete_many`: a power cut at every
//! file-system operation of the operation (FaultFs failing everything from operation k on),
//! then every kind of crash image of what was left. Each image opens, passes `verify`, and
//! holds the collection either exactly as before the operation or exactly as after it (after
//! it whenever the operation was acknowledged), and takes new writes.

mod common;

use common::{all_by_id, mem_options, CRASH_MODES};
use std::sync::Arc;
use tsbucket::bson::{doc, DateTime, Document};
use tsbucket::vfs::{FaultFs, Injected, MemFs};
use tsbucket::{Collection, Database, DbOptions, TimeseriesOptions};

const T0: i64 = 1_700_000_000_000;

fn mem_opts(fs: &MemFs) -> DbOptions {
    mem_options(fs)
}

fn all(c: &Collection) -> Vec<Document> {
    all_by_id(c)
}

/// Three series over three segments (each holding all of them) plus rows still in open
/// buckets, and a second collection the operation must leave alone.
fn setup(db: &Database) -> Vec<Document> {
    let c = db
        .create_collection("c", TimeseriesOptions::new("time").meta_field("tag"))
        .unwrap();
    let other = db
        .create_collection("o", TimeseriesOptions::new("time").meta_field("tag"))
        .unwrap();
    let mut docs = Vec::new();
    for round in 0..4i64 {
        let batch: Vec<Document> = (0..30)
            .map(|i| {
                let n = (round * 30 + i) as i32;
                doc! {"_id": n, "time": DateTime::from_millis(T0 + i64::from(n) * 60_000),
                "tag": {"s": n % 3}, "v": n}
            })
            .collect();
        c.insert_many(&batch).unwrap();
        other.insert_many(&batch[..5]).unwrap();
        docs.extend(batch);
        if round < 3 {
            db.flush().unwrap();
        }
    }
    docs
}

fn series(d: &Document) -> i32 {
    d.get_document("tag").unwrap().get_i32("s").unwrap()
}

type Op = fn(&Collection) -> tsbucket::Result<u64>;

fn run_power_cuts(op: Op, after: fn(Vec<Document>) -> Vec<Document>, expect_count: u64) {
    let mut k = 1u64;
    let mut images = 0;
    loop {
        let mem = MemFs::new();
        let fault = FaultFs::new(Arc::new(mem.clone()));
        let opts = DbOptions {
            vfs: Arc::new(fault.clone()),
            ..mem_opts(&mem)
        };
        let db = Database::open_with("/db", opts).unwrap();
        let before = setup(&db);
        let want_after = after(before.clone());
        let c = db.collection("c").unwrap();
        fault.fail_nth(k, true, Injected::Eio);
        let r = op(&c);
        let injected = fault.injected_count();
        if let Ok(n) = &r {
            assert_eq!(*n, expect_count, "cut at {k}");
        } else {
            // The failure poisons the database: nothing more reaches the disk.
            assert!(c.insert_one(&doc! {"time": DateTime::now()}).is_err());
        }
        let mut cuts = vec![mem.crash()];
        for (i, m) in CRASH_MODES.iter().enumerate() {
            cuts.push(mem.crash_with(*m, k * 7 + i as u64));
            cuts.push(mem.crash_with_dir_entries(*m, k * 11 + i as u64));
        }
        drop(c);
        drop(db);
        for (i, img) in cuts.iter().enumerate() {
            let ctx = format!("cut at operation {k}, image {i}, op result {r:?}");
            let db = Database::open_with("/db", mem_opts(img))
                .unwrap_or_else(|e| panic!("{ctx}: does not open: {e}"));
            db.verify().unwrap_or_else(|e| panic!("{ctx}: verify: {e}"));
            let c = db.collection("c").unwrap();
            let got = all(&c);
            if r.is_ok() {
                assert!(got == want_after, "{ctx}: acknowledged but not done");
            } else {
                assert!(
                    got == before || got == want_after,
                    "{ctx}: half done: {} rows",
                    got.len()
                );
            }
            assert_eq!(
                db.collection("o")
                    .unwrap()
                    .count_documents(doc! {})
                    .unwrap(),
                20,
                "{ctx}: other collection"
            );
            // Takes new writes, which survive a reopen.
            let n = got.len() as u64;
            c.insert_one(&doc! {"_id": 1000, "time": DateTime::from_millis(T0), "tag": {"s": 9}})
                .unwrap();
            db.close().unwrap();
            let db = Database::open_with("/db", mem_opts(img)).unwrap();
            assert_eq!(
                db.collection("c")
                    .unwrap()
                    .count_documents(doc! {})
                    .unwrap(),
                n + 1,
                "{ctx}"
            );
            db.close().unwrap();
            images += 1;
        }
        if r.is_ok() && injected == 0 {
            break;
        }
        k += 1;
    }
    eprintln!("{k} cut points, {images} crash images verified");
    assert!(k > 5, "the operation did too little I/O to be tested: {k}");
}

#[test]
fn power_cut_during_meta_delete_leaves_it_done_or_not_done() {
    run_power_cuts(
        |c| Ok(c.delete_many(doc! {"tag.s": 1})?.deleted_count),
        |docs| docs.into_iter().filter(|d| series(d) != 1).collect(),
        40,
    );
}

#[test]
fn power_cut_during_delete_of_everything_leaves_it_done_or_not_done() {
    run_power_cuts(
        |c| Ok(c.delete_many(doc! {})?.deleted_count),
        |_| Vec::new(),
        120,
    );
}

#[test]
fn power_cut_during_meta_update_leaves_it_done_or_not_done() {
    run_power_cuts(
        |c| {
            let r = c.update_many(doc! {"tag.s": 2}, doc! {"$set": {"tag.s": 0, "tag.x": "m"}})?;
            assert_eq!(r.matched_count, r.modified_count);
            Ok(r.modified_count)
        },
        |docs| {
            docs.into_iter()
                .map(|mut d| {
                    if series(&d) == 2 {
                        d.insert("tag", doc! {"s": 0, "x": "m"});
                    }
                    d
                })
                .collect()
        },
        40,
    );
}
