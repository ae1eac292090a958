//! `kill -9` in the middle of meta-only updates, meta-only deletes and collection drops: a
//! child process (this test binary, re-executed) runs them in a loop on the real file system,
//! reporting each step only after it returned `Ok`. The parent kills it with SIGKILL at a
//! seeded random moment, reopens and checks that every operation is done or not done: no
//! series is partial or half updated, every reported update and delete is there, every
//! reported drop stays dropped, every acknowledged insert not deleted since is present, and
//! the database verifies. `TSBUCKET_KILL_CYCLES=N` runs more cycles.

mod common;

use common::{
    collection_names, count_from_env, reported, run_child_until_killed, seed_from_env, Rng,
};
use std::collections::BTreeMap;
use std::time::Duration;
use tsbucket::bson::{doc, DateTime, Document};
use tsbucket::{Database, DbOptions, TimeseriesOptions};

const CHILD_TEST: &str = "child_modifies_until_killed";
const DIR_VAR: &str = "TSBUCKET_LIFECYCLE_CHILD_DIR";
const T0: i64 = 1_704_069_000_000;

fn options() -> DbOptions {
    DbOptions {
        flush_threshold_bytes: 8 << 10,
        ttl_interval: None,
        ..DbOptions::default()
    }
}

fn pair(i: i64) -> Vec<Document> {
    (0..2)
        .map(|k| {
            doc! {"t": DateTime::from_millis(T0 + i * 1000 + k), "m": {"s": i, "k": "a"}, "v": k}
        })
        .collect()
}

/// The child's body; without the directory variable (a normal run) it returns at once.
/// Iteration `i` inserts series `i` (two measurements) into `c`, then updates series `i` to
/// `k: "b"` when `i` is even and deletes it when `i` is odd; every fourth iteration it also
/// creates collection `x<i>` with two measurements and drops it.
#[test]
fn child_modifies_until_killed() {
    let Ok(dir) = std::env::var(DIR_VAR) else {
        return;
    };
    let db = Database::open_with(&dir, options()).unwrap();
    let opts = TimeseriesOptions::new("t").meta_field("m");
    let c = db.create_collection("c", opts.clone()).unwrap();
    for i in 0i64.. {
        c.insert_many(&pair(i)).unwrap();
        println!("ACK {i}");
        if i % 3 == 0 {
            db.flush().unwrap();
        }
        if i % 2 == 0 {
            let r = c
                .update_many(doc! {"m.s": i}, doc! {"$set": {"m.k": "b"}})
                .unwrap();
            assert_eq!(r.modified_count, 2);
            println!("UPD {i}");
        } else {
            assert_eq!(c.delete_many(doc! {"m.s": i}).unwrap().deleted_count, 2);
            println!("DEL {i}");
        }
        if i % 4 == 0 {
            let x = db
                .create_collection(&format!("x{i}"), opts.clone())
                .unwrap();
            x.insert_many(&pair(i)).unwrap();
            if i % 8 == 0 {
                db.flush().unwrap();
            }
            println!("CREATED {i}");
            assert!(db.drop_collection(&format!("x{i}")).unwrap());
            println!("DROPPED {i}");
        }
    }
}

#[test]
fn kill9_during_updates_deletes_and_drops_leaves_each_done_or_not() {
    if std::env::var(DIR_VAR).is_ok() {
        return;
    }
    let cycles = count_from_env("TSBUCKET_KILL_CYCLES", 6);
    let mut rng = Rng::new(seed_from_env(0x6d65_7461));
    for cycle in 0..cycles {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("db");
        let delay = Duration::from_millis(rng.range(30, 1500));
        let lines = run_child_until_killed(CHILD_TEST, DIR_VAR, &dir, delay);
        let acked = reported(&lines, "ACK ").into_iter().max();
        let (updated, deleted) = (reported(&lines, "UPD "), reported(&lines, "DEL "));
        let (created, dropped) = (reported(&lines, "CREATED "), reported(&lines, "DROPPED "));
        let ctx = format!(
            "cycle {cycle}, delay {delay:?}, acked {acked:?}, {} updates, {} deletes, {} drops",
            updated.len(),
            deleted.len(),
            dropped.len()
        );
        eprintln!("kill9_lifecycle: {ctx}");
        let db = Database::open_with(&dir, options()).unwrap();
        db.verify().unwrap_or_else(|e| panic!("{ctx}: {e}"));
        let Ok(c) = db.collection("c") else {
            assert_eq!(acked, None, "{ctx}");
            continue;
        };
        // Series -> the `k` of each of its measurements.
        let mut per: BTreeMap<i64, Vec<String>> = BTreeMap::new();
        for d in c.find(doc! {}).unwrap() {
            let d = d.unwrap();
            let m = d.get_document("m").unwrap();
            per.entry(m.get_i64("s").unwrap())
                .or_default()
                .push(m.get_str("k").unwrap().to_string());
        }
        for (s, ks) in &per {
            assert_eq!(ks.len(), 2, "{ctx}: series {s} is partial");
            assert_eq!(ks[0], ks[1], "{ctx}: series {s} is half updated");
        }
        for i in 0..=acked.unwrap_or(-1) {
            let got = per.get(&i);
            if i % 2 == 0 {
                let ks = got.unwrap_or_else(|| panic!("{ctx}: series {i} lost"));
                if updated.contains(&i) {
                    assert_eq!(ks[0], "b", "{ctx}: update of {i} undone");
                }
            } else if deleted.contains(&i) {
                assert!(got.is_none(), "{ctx}: deleted series {i} came back");
            } else if let Some(ks) = got {
                assert_eq!(ks[0], "a", "{ctx}: series {i}");
            }
        }
        let names = collection_names(&db);
        for i in &dropped {
            assert!(!names.contains(&format!("x{i}")), "{ctx}: x{i} came back");
        }
        for n in names.iter().filter(|n| n.starts_with('x')) {
            let i: i64 = n[1..].parse().unwrap();
            let x = db.collection(n).unwrap();
            let count = x.count_documents(doc! {}).unwrap();
            if created.contains(&i) {
                assert_eq!(count, 2, "{ctx}: {n} survived its drop but not whole");
            } else {
                assert!(count == 0 || count == 2, "{ctx}: {n} partial");
            }
        }
        // The recovered database takes the same operations.
        c.insert_many(&pair(1_000_000)).unwrap();
        let r = c
            .update_many(doc! {"m.s": 1_000_000i64}, doc! {"$set": {"m.k": "b"}})
            .unwrap();
        assert_eq!(r.modified_count, 2, "{ctx}");
        db.verify().unwrap();
    }
}
