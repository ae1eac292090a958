//! `kill -9` in the middle of TTL sweeps: a child process (this test binary, re-executed)
//! inserts expired and fresh series, flushes and sweeps in a loop on the real file system,
//! reporting each step only after it returned `Ok`. The parent kills it with SIGKILL at a
//! seeded random moment, reopens and checks: every acknowledged fresh series is whole, every
//! expired series is whole or gone (never partial), every series a reported sweep covered is
//! gone, and the database verifies. `TSBUCKET_KILL_CYCLES=N` runs more cycles.

mod common;

use common::{count_from_env, reported, run_child_until_killed, seed_from_env, Rng};
use std::collections::BTreeMap;
use std::time::Duration;
use tsbucket::bson::{doc, DateTime};
use tsbucket::{Database, DbOptions, TimeseriesOptions};

const CHILD_TEST: &str = "child_sweeps_until_killed";
const DIR_VAR: &str = "TSBUCKET_TTL_CHILD_DIR";
const NOW: i64 = 1_704_069_000_000;

fn options() -> DbOptions {
    DbOptions {
        flush_threshold_bytes: 8 << 10,
        ttl_interval: None,
        ..DbOptions::default()
    }
}

/// The child's body; without the directory variable (a normal run) it returns at once.
#[test]
fn child_sweeps_until_killed() {
    let Ok(dir) = std::env::var(DIR_VAR) else {
        return;
    };
    let db = Database::open_with(&dir, options()).unwrap();
    let c = db
        .create_collection(
            "c",
            TimeseriesOptions::new("t")
                .meta_field("m")
                .expire_after_seconds(60),
        )
        .unwrap();
    for i in 0i64.. {
        let old = DateTime::from_millis(NOW - 3_600_000);
        let young = DateTime::from_millis(NOW + i);
        c.insert_many(&[
            doc! {"t": old, "m": format!("o{i}"), "i": i},
            doc! {"t": old, "m": format!("o{i}"), "i": i},
            doc! {"t": young, "m": format!("y{i}"), "i": i},
            doc! {"t": young, "m": format!("y{i}"), "i": i},
        ])
        .unwrap();
        println!("ACK {i}");
        if i % 3 == 0 {
            db.flush().unwrap();
        }
        db.sweep_expired(DateTime::from_millis(NOW)).unwrap();
        println!("SWEPT {i}");
    }
}

#[test]
fn kill9_during_sweeps_leaves_each_bucket_whole_or_gone() {
    if std::env::var(DIR_VAR).is_ok() {
        return;
    }
    let cycles = count_from_env("TSBUCKET_KILL_CYCLES", 6);
    let mut rng = Rng::new(seed_from_env(0x7474_6c39));
    for cycle in 0..cycles {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("db");
        let delay = Duration::from_millis(rng.range(30, 1500));
        let lines = run_child_until_killed(CHILD_TEST, DIR_VAR, &dir, delay);
        let last = |tag: &str| reported(&lines, tag).into_iter().max();
        let (acked, swept) = (last("ACK "), last("SWEPT "));
        let ctx = format!("cycle {cycle}, delay {delay:?}, acked {acked:?}, swept {swept:?}");
        eprintln!("kill9_ttl: {ctx}");
        let db = Database::open_with(&dir, options()).unwrap();
        db.verify().unwrap_or_else(|e| panic!("{ctx}: {e}"));
        let Ok(c) = db.collection("c") else {
            assert_eq!(acked, None, "{ctx}");
            continue;
        };
        let mut per: BTreeMap<String, u32> = BTreeMap::new();
        for d in c.find(doc! {}).unwrap() {
            *per.entry(d.unwrap().get_str("m").unwrap().to_string())
                .or_default() += 1;
        }
        for (series, n) in &per {
            assert_eq!(*n, 2, "{ctx}: series {series} is partial");
        }
        for i in 0..=acked.unwrap_or(-1) {
            assert!(per.contains_key(&format!("y{i}")), "{ctx}: y{i} lost");
        }
        for i in 0..=swept.unwrap_or(-1) {
            assert!(!per.contains_key(&format!("o{i}")), "{ctx}: o{i} came back");
        }
        // Finishing the job on the recovered database.
        db.sweep_expired(DateTime::from_millis(NOW)).unwrap();
        assert_eq!(
            c.count_documents(doc! {"t": {"$lt": DateTime::from_millis(NOW)}})
                .unwrap(),
            0,
            "{ctx}"
        );
        db.verify().unwrap();
    }
}
