//! Readers beside a writer: `Database::open_read_only` sees a consistent snapshot of what was
//! acknowledged while another handle or process holds the database for writing, writes
//! nothing (not even a lock file), refuses writes, and moves forward on `refresh`. The CLI's
//! side of it is tested with the CLI (`cli/tests/read_only.rs`).

mod common;

use common::*;
use std::sync::Arc;
use tsbucket::bson::doc;
use tsbucket::vfs::{FaultFs, MemFs, OpKind};
use tsbucket::{Database, DbOptions, Error};

fn options() -> DbOptions {
    options_without_sweeper()
}

fn count(db: &Database, coll: &str) -> u64 {
    count_in(db, coll)
}

#[test]
fn a_reader_sees_what_was_acknowledged_and_moves_on_with_refresh() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let w = Database::open_with(dir, options()).unwrap();
    let c = w.create_collection("a", ts_options()).unwrap();
    c.insert_many(&batch_docs(1, 1, 100, 3)).unwrap();
    w.flush().unwrap();
    c.insert_many(&batch_docs(1, 2, 50, 3)).unwrap();

    // The writer holds the lock: a second writer is refused, a reader is not.
    assert!(matches!(
        Database::open_with(dir, options()),
        Err(Error::Locked(_))
    ));
    let r = Database::open_read_only(dir).unwrap();
    assert!(r.is_read_only());
    assert_eq!(count(&r, "a"), 150, "segments and the log's open buckets");
    let docs = read_all(&r.collection("a").unwrap()).unwrap();
    assert_eq!(docs.len(), 150);

    // Later writes are not seen until a refresh, then all are.
    c.insert_many(&batch_docs(1, 3, 25, 3)).unwrap();
    let b = w.create_collection("b", ts_options()).unwrap();
    b.insert_many(&batch_docs(2, 1, 10, 1)).unwrap();
    assert_eq!(count(&r, "a"), 150);
    assert!(matches!(
        r.collection("b"),
        Err(Error::NamespaceNotFound(_))
    ));
    r.refresh().unwrap();
    assert_eq!(count(&r, "a"), 175);
    assert_eq!(count(&r, "b"), 10);

    // A flush rewrites the log into segments and reclaims the log; a drop deletes files the
    // reader's snapshot still reads.
    let cursor = r.collection("b").unwrap().find(doc! {}).unwrap();
    w.flush().unwrap();
    assert!(w.drop_collection("b").unwrap());
    c.insert_many(&batch_docs(1, 4, 5, 3)).unwrap();
    assert_eq!(cursor.count(), 10, "a cursor reads what it was opened on");
    assert_eq!(
        count(&r, "b"),
        10,
        "the snapshot still holds the dropped collection"
    );
    r.refresh().unwrap();
    assert_eq!(count(&r, "a"), 180);
    assert!(matches!(
        r.collection("b"),
        Err(Error::NamespaceNotFound(_))
    ));
    r.verify().unwrap();

    // Writes are refused with a clear error.
    let ra = r.collection("a").unwrap();
    assert!(matches!(
        ra.insert_many(&batch_docs(1, 9, 1, 1)),
        Err(Error::ReadOnly(_))
    ));
    assert!(matches!(
        r.create_collection("c", ts_options()),
        Err(Error::ReadOnly(_))
    ));
    assert!(matches!(r.flush(), Err(Error::ReadOnly(_))));
    assert!(matches!(r.drop_collection("a"), Err(Error::ReadOnly(_))));
    assert!(matches!(
        ra.delete_many(doc! {META: 1}),
        Err(Error::ReadOnly(_))
    ));
    r.close().unwrap();
    w.close().unwrap();
    let w = Database::open_with(dir, options()).unwrap();
    assert_eq!(count(&w, "a"), 180);
    w.close().unwrap();
}

#[test]
fn a_read_only_open_writes_nothing() {
    let mem = MemFs::new();
    let db = Database::open_with("/db", mem_options(&mem)).unwrap();
    let c = db.create_collection("a", ts_options()).unwrap();
    c.insert_many(&batch_docs(1, 1, 100, 3)).unwrap();
    db.flush().unwrap();
    c.insert_many(&batch_docs(1, 2, 40, 3)).unwrap();
    // Still open for writing, with a log tail to cut and zeros ahead.
    let fault = FaultFs::new(Arc::new(mem.clone()));
    let opts = DbOptions {
        vfs: Arc::new(fault.clone()),
        ..mem_options(&mem)
    };
    let r = Database::open_read_only_with("/db", opts).unwrap();
    assert_eq!(count(&r, "a"), 140);
    r.refresh().unwrap();
    r.verify().unwrap();
    r.close().unwrap();
    for kind in [
        OpKind::CreateDirAll,
        OpKind::OpenAppend,
        OpKind::Rename,
        OpKind::RemoveFile,
        OpKind::SyncDir,
        OpKind::TryLock,
    ] {
        assert_eq!(fault.op_count_of(kind), 0, "{kind:?}");
    }
    db.close().unwrap();
}

/// git keeps no empty directory, so a database that never flushed has no `seg/` once
/// committed (as `tests/golden/` does) and checked out.
#[test]
fn a_reader_verifies_a_database_whose_empty_seg_directory_was_not_copied() {
    let d = tempfile::tempdir().unwrap();
    let db = Database::open_with(d.path(), options()).unwrap();
    let c = db.create_collection("a", ts_options()).unwrap();
    c.insert_many(&batch_docs(1, 1, 10, 3)).unwrap();
    db.close().unwrap();
    std::fs::remove_dir(d.path().join("seg")).unwrap();
    let r = Database::open_read_only(d.path()).unwrap();
    assert_eq!(count(&r, "a"), 10);
    assert_eq!(r.verify().unwrap().segments, 0);
    r.close().unwrap();
    assert!(!d.path().join("seg").exists());
}

#[test]
fn a_read_only_open_of_a_missing_database_creates_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("nothing");
    match Database::open_read_only(&dir) {
        Err(Error::Io(e)) => assert_eq!(e.kind(), std::io::ErrorKind::NotFound),
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("opened a database that does not exist"),
    }
    assert!(!dir.exists());
}

#[test]
fn a_damaged_database_is_refused_read_only_too() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let db = Database::open_with(dir, options()).unwrap();
    db.create_collection("a", ts_options())
        .unwrap()
        .insert_many(&batch_docs(1, 1, 10, 1))
        .unwrap();
    db.close().unwrap();
    std::fs::remove_dir_all(dir.join("wal")).unwrap();
    assert!(matches!(
        Database::open_read_only(dir),
        Err(Error::Corruption { .. })
    ));
}
