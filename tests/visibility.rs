//! An insert returns once its batch is durable, and the log's applier puts it in the bucket
//! catalog afterwards: every read that starts after an insert returned must still see it, in
//! the inserting thread and in any thread that learned of the insert.

use std::sync::mpsc;
use tsbucket::bson::{doc, DateTime, Document};
use tsbucket::{Database, Error, TimeseriesOptions};

/// A batch of `n` measurements over 50 series, starting at row `from`.
fn batch(from: usize, n: usize) -> Vec<Document> {
    (from..from + n)
        .map(|i| {
            doc! {
                "t": DateTime::from_millis(1_700_000_000_000 + i as i64 * 10),
                "m": { "host": format!("h{}", i % 50), "rack": (i % 7) as i32 },
                "v": i as i64,
            }
        })
        .collect()
}

fn options() -> TimeseriesOptions {
    TimeseriesOptions::new("t").meta_field("m")
}

#[test]
fn an_insert_is_visible_to_the_next_read_in_its_thread() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let c = db.create_collection("c", options()).unwrap();
    let mut total = 0;
    for round in 0..40 {
        let docs = batch(total, 500);
        let r = c.insert_many(&docs).unwrap();
        total += docs.len();
        assert_eq!(
            c.count_documents(doc! {}).unwrap(),
            total as u64,
            "round {round}"
        );
        let last = r.inserted_ids.last().unwrap().clone();
        let found: Vec<_> = c.find(doc! { "_id": last }).unwrap().collect();
        assert_eq!(found.len(), 1, "round {round}");
        assert_eq!(c.stats().unwrap().measurements, total as u64);
    }
    // Flushing reads the catalog too: nothing acknowledged is left out of the segments.
    c.insert_many(&batch(total, 500)).unwrap();
    db.flush().unwrap();
    assert_eq!(c.stats().unwrap().open_buckets, 0);
    assert_eq!(c.count_documents(doc! {}).unwrap(), total as u64 + 500);
}

#[test]
fn an_insert_is_visible_to_a_thread_that_learned_of_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let c = db.create_collection("c", options()).unwrap();
    let (tx, rx) = mpsc::channel::<u64>();
    std::thread::scope(|s| {
        let writer = c.clone();
        s.spawn(move || {
            let mut total = 0;
            for _ in 0..40 {
                let docs = batch(total, 500);
                writer.insert_many(&docs).unwrap();
                total += docs.len();
                tx.send(total as u64).unwrap();
            }
        });
        for known in rx {
            // The writer may be further along by now, never behind what it told us.
            let seen = c.count_documents(doc! {}).unwrap();
            assert!(seen >= known, "read {seen} after learning of {known}");
        }
    });
    assert_eq!(c.count_documents(doc! {}).unwrap(), 20_000);
}

/// Reads beside a writer see whole batches, and the statistics a read keeps for the rows of an
/// open bucket (split once, brought up to date as rows arrive) agree with those rows: the
/// count, the sum and the maximum of `v` (row `i` holds `i`) are those of a prefix of batches.
#[test]
fn reads_beside_a_writer_see_whole_batches_with_matching_statistics() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let c = db.create_collection("c", options()).unwrap();
    let done = std::sync::atomic::AtomicBool::new(false);
    let group = vec![doc! {"$group": {
        "_id": null, "n": {"$count": {}}, "s": {"$sum": "$v"}, "mx": {"$max": "$v"}
    }}];
    std::thread::scope(|s| {
        let writer = c.clone();
        let done = &done;
        s.spawn(move || {
            for k in 0..40 {
                writer.insert_many(&batch(k * 500, 500)).unwrap();
            }
            done.store(true, std::sync::atomic::Ordering::SeqCst);
        });
        for _ in 0..2 {
            let (c, group) = (c.clone(), group.clone());
            s.spawn(move || {
                let mut reads = 0;
                while !done.load(std::sync::atomic::Ordering::SeqCst) || reads < 5 {
                    reads += 1;
                    let n = c.count_documents(doc! {}).unwrap() as i64;
                    assert_eq!(n % 500, 0, "a read saw part of a batch: {n}");
                    let got: Vec<Document> = c
                        .aggregate(group.clone())
                        .unwrap()
                        .map(Result::unwrap)
                        .collect();
                    let Some(g) = got.first() else { continue };
                    let n = i64::from(g.get_i32("n").unwrap());
                    assert_eq!(n % 500, 0, "a group saw part of a batch: {g:?}");
                    assert_eq!(g.get_i64("s").unwrap(), n * (n - 1) / 2, "{g:?}");
                    assert_eq!(g.get_i64("mx").unwrap(), n - 1, "{g:?}");
                    let high = c.count_documents(doc! {"v": {"$gte": n / 2}}).unwrap() as i64;
                    assert!(high >= n - n / 2, "{high} of {n} rows with v >= {}", n / 2);
                }
            });
        }
    });
    assert_eq!(c.stats().unwrap().measurements, 20_000);
    assert_eq!(c.count_documents(doc! {}).unwrap(), 20_000);
}

#[test]
fn an_insert_through_a_handle_of_a_dropped_collection_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let old = db.create_collection("c", options()).unwrap();
    old.insert_many(&batch(0, 10)).unwrap();
    assert!(db.drop_collection("c").unwrap());
    let e = old.insert_many(&batch(10, 10)).unwrap_err();
    assert!(matches!(e, Error::NamespaceNotFound(_)), "{e}");
    // A new collection of that name, with other fields, is not reached through the old handle.
    let new = db
        .create_collection("c", TimeseriesOptions::new("when"))
        .unwrap();
    let e = old.insert_many(&batch(20, 10)).unwrap_err();
    assert!(matches!(e, Error::NamespaceNotFound(_)), "{e}");
    let e = new.insert_many(&batch(30, 10)).unwrap_err();
    assert!(matches!(e, Error::InvalidDocument { index: 0, .. }), "{e}");
    new.insert_one(&doc! { "when": DateTime::from_millis(5), "v": 1 })
        .unwrap();
    assert_eq!(new.count_documents(doc! {}).unwrap(), 1);
    drop((db, old, new));
    let db = Database::open(dir.path()).unwrap();
    let new = db.collection("c").unwrap();
    new.insert_one(&doc! { "when": DateTime::from_millis(6), "v": 2 })
        .unwrap();
    assert_eq!(new.count_documents(doc! {}).unwrap(), 2);
}
