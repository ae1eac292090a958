//! I/O errors: a scripted workload (open, creates, inserts, flushes, close) runs on a
//! FaultFs that fails its k-th file-system operation, for every k, once or persistently, with
//! EIO or ENOSPC. No call may panic; the failing call returns `Err`; the database then refuses
//! writes (`Poisoned`) without touching the disk, since after a failed write or fsync the state
//! on disk is unknown and a retry could falsely succeed; once the fault is cleared, a reopen
//! holds every acknowledged batch exactly once and takes new writes.

mod common;

use common::*;
use std::sync::Arc;
use tsbucket::vfs::{FaultFs, Injected, MemFs, OpKind};
use tsbucket::{Database, DbOptions, Error};

fn fault_options(mem: &MemFs, fault: &FaultFs) -> DbOptions {
    DbOptions {
        vfs: Arc::new(fault.clone()),
        ..mem_options(mem)
    }
}

fn is_no_space(e: &Error) -> bool {
    match e {
        Error::Io(io) => io.raw_os_error() == Some(28),
        _ => e.to_string().contains("No space left") || e.to_string().contains("os error 28"),
    }
}

/// True for the refusal that follows a failure of the zeros the log writer adds ahead of its
/// records between inserts: a fault armed right after an insert may hit those first.
fn failed_writing_ahead(e: &Error) -> bool {
    matches!(e, Error::Poisoned(why) if why.contains("WAL write ahead failed"))
}

/// After the first failure the handle refuses writes, with no I/O, even once the fault is gone.
fn assert_poisoned(db: &Database, out: &Outcome, fault: &FaultFs, ctx: &str) {
    let before = fault.op_count();
    if let Some(name) = out.created.keys().next() {
        let c = db.collection(name).unwrap();
        let e = c.insert_many(&batch_docs(7, 1, 1, 1)).unwrap_err();
        assert!(
            matches!(e, Error::Poisoned(_)),
            "{ctx}: insert after failure: {e}"
        );
    }
    let e = db.flush().unwrap_err();
    assert!(
        matches!(e, Error::Poisoned(_)),
        "{ctx}: flush after failure: {e}"
    );
    let e = db.create_collection("z", ts_options()).unwrap_err();
    assert!(
        matches!(e, Error::Poisoned(_)),
        "{ctx}: create after failure: {e}"
    );
    assert_eq!(fault.op_count(), before, "{ctx}: a refused write did I/O");
}

fn countdown(err: Injected, persistent: bool) -> u64 {
    let steps = standard_steps();
    let mut k = 1u64;
    loop {
        let mem = MemFs::new();
        let fault = FaultFs::new(Arc::new(mem.clone()));
        let opts = fault_options(&mem, &fault);
        fault.fail_nth(k, persistent, err);
        let mut out = run_steps(|| Database::open_with("/db", opts.clone()), &steps);
        let ctx = format!(
            "{err:?} at operation {k} (persistent: {persistent}), failing step {:?}",
            out.failure.as_ref().map(|f| &f.1)
        );
        let Some((_, _, e)) = &out.failure else {
            assert_eq!(
                fault.injected_count(),
                0,
                "{ctx}: an injected error was swallowed"
            );
            return k - 1;
        };
        if err == Injected::NoSpace && !matches!(e, Error::Poisoned(_)) {
            assert!(is_no_space(e), "{ctx}: ENOSPC reported as {e}");
        }
        fault.disarm();
        if let Some(db) = &out.db {
            assert_poisoned(db, &out, &fault, &ctx);
        }
        // Closing a poisoned database reports the poison but must not fail to release it.
        if let Some(db) = out.db.take() {
            let _ = db.close();
        }
        let db = Database::open_with("/db", mem_options(&mem))
            .unwrap_or_else(|e| panic!("{ctx}: reopen after the fault cleared: {e}"));
        check_outcome(&db, &out, &ctx);
        db.close().unwrap();
        check_liveness(&mem, "/db", mem_options);
        k += 1;
    }
}

#[test]
fn eio_once_at_every_operation_is_reported_and_recovered() {
    let n = countdown(Injected::Eio, false);
    eprintln!("io_errors: EIO once at each of {n} operations");
    assert!(n > 50);
}

#[test]
fn eio_persistent_from_every_operation_is_reported_and_recovered() {
    let n = countdown(Injected::Eio, true);
    eprintln!("io_errors: persistent EIO from each of {n} operations");
    assert!(n > 50);
}

#[test]
fn enospc_once_at_every_operation_is_reported_and_recovered() {
    let n = countdown(Injected::NoSpace, false);
    eprintln!("io_errors: ENOSPC once at each of {n} operations");
    assert!(n > 50);
}

#[test]
fn enospc_persistent_from_every_operation_is_reported_and_recovered() {
    let n = countdown(Injected::NoSpace, true);
    eprintln!("io_errors: persistent ENOSPC from each of {n} operations");
    assert!(n > 50);
}

/// Opens a database on `fault` holding one collection with two acknowledged batches.
fn healthy(mem: &MemFs, fault: &FaultFs) -> (Database, Outcome) {
    let out = run_steps(
        || Database::open_with("/db", fault_options(mem, fault)),
        &[
            Step::Create("a", 1),
            Step::Insert("a", 10),
            Step::Insert("a", 20),
        ],
    );
    assert!(out.failure.is_none());
    let db = out.db.clone().unwrap();
    (db, out)
}

#[test]
fn failed_wal_fsync_fails_the_batch_poisons_and_is_never_retried() {
    let mem = MemFs::new();
    let fault = FaultFs::new(Arc::new(mem.clone()));
    let (db, mut out) = healthy(&mem, &fault);
    let c = db.collection("a").unwrap();
    fault.fail_kind(OpKind::SyncData, Injected::Eio);
    let syncs = fault.op_count_of(OpKind::SyncData);
    let e = c.insert_many(&batch_docs(1, 3, 5, 3)).unwrap_err();
    assert!(matches!(e, Error::Io(_)) || failed_writing_ahead(&e), "{e}");
    assert_eq!(
        fault.op_count_of(OpKind::SyncData),
        syncs + 1,
        "one sync, no retry"
    );
    out.failure = Some((4, Step::Insert("a", 5), e));
    // No retry-then-success: with the device healthy again the handle still refuses.
    fault.disarm();
    assert_poisoned(&db, &out, &fault, "after the failed WAL fsync");
    assert_eq!(fault.op_count_of(OpKind::SyncData), syncs + 1);
    out.db = None;
    let e = db.close().unwrap_err();
    assert!(
        matches!(e, Error::Poisoned(_)),
        "close reports the poison: {e}"
    );
    // The process lives on: the failed batch may be in the page cache (unknown outcome), the
    // acknowledged ones must be there; after a power cut as well.
    for (what, image) in [("live", mem.clone()), ("power cut", mem.crash())] {
        let db = Database::open_with("/db", mem_options(&image)).unwrap();
        check_outcome(&db, &out, what);
        db.close().unwrap();
        check_liveness(&image, "/db", mem_options);
    }
}

#[test]
fn failed_segment_or_directory_fsync_during_flush_poisons_and_keeps_the_log() {
    for kind in [OpKind::SyncData, OpKind::SyncDir, OpKind::Rename] {
        let mem = MemFs::new();
        let fault = FaultFs::new(Arc::new(mem.clone()));
        let (db, mut out) = healthy(&mem, &fault);
        fault.fail_kind(kind, Injected::Eio);
        let e = db.flush().unwrap_err();
        let ctx = format!("{kind:?} failing in flush");
        assert!(
            matches!(e, Error::Io(_)) || failed_writing_ahead(&e),
            "{ctx}: {e}"
        );
        out.failure = Some((4, Step::Flush, e));
        fault.disarm();
        assert_poisoned(&db, &out, &fault, &ctx);
        out.db = None;
        let _ = db.close();
        for (what, image) in [("live", mem.clone()), ("power cut", mem.crash())] {
            let db = Database::open_with("/db", mem_options(&image))
                .unwrap_or_else(|e| panic!("{ctx}, {what}: {e}"));
            check_outcome(&db, &out, &format!("{ctx}, {what}"));
            db.close().unwrap();
        }
    }
}

#[test]
fn enospc_during_flush_leaves_no_partial_segment_and_resumes_once_space_is_freed() {
    let mem = MemFs::new();
    let fault = FaultFs::new(Arc::new(mem.clone()));
    let (db, mut out) = healthy(&mem, &fault);
    // A short write, as a full device gives, then ENOSPC.
    fault.set_partial_appends(true);
    fault.fail_kind(OpKind::Append, Injected::NoSpace);
    let e = db.flush().unwrap_err();
    assert!(is_no_space(&e), "{e}");
    out.failure = Some((4, Step::Flush, e));
    fault.disarm();
    let seg = file_sizes(&mem, "/db/seg");
    assert!(
        seg.is_empty(),
        "the failed segment left files behind: {seg:?}"
    );
    assert_poisoned(&db, &out, &fault, "ENOSPC in flush");
    out.db = None;
    let _ = db.close();
    // Space is back: reopen, everything acknowledged is there, and flushing now works.
    let db = Database::open_with("/db", mem_options(&mem)).unwrap();
    check_outcome(&db, &out, "after ENOSPC");
    db.flush().unwrap();
    check_outcome(&db, &out, "after ENOSPC and a flush");
    assert_eq!(file_sizes(&mem, "/db/seg").len(), 1);
    db.close().unwrap();
    check_liveness(&mem, "/db", mem_options);
}

/// On the real file system, an operating-system error names what was being done to which
/// path, and keeps its kind.
#[test]
fn os_errors_name_the_path() {
    let tmp = tempfile::tempdir().unwrap();
    // A regular file where the database's parent directory should be.
    let plain = tmp.path().join("plain");
    std::fs::write(&plain, b"").unwrap();
    let e = Database::open(plain.join("db")).err().unwrap();
    let msg = e.to_string();
    assert!(matches!(&e, Error::Io(_)), "{msg}");
    assert!(msg.contains("creating directory"), "{msg}");
    assert!(
        msg.contains(&plain.join("db").display().to_string()),
        "{msg}"
    );

    // A segment that cannot be mapped: a directory stands in its place.
    let dir = tmp.path().join("db");
    let db = Database::open(&dir).unwrap();
    let c = db.create_collection("c", ts_options()).unwrap();
    c.insert_many(&batch_docs(1, 1, 10, 2)).unwrap();
    db.flush().unwrap();
    db.close().unwrap();
    let seg = std::fs::read_dir(dir.join("seg"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .next()
        .unwrap();
    std::fs::remove_file(&seg).unwrap();
    std::fs::create_dir(&seg).unwrap();
    let e = Database::open(&dir).err().unwrap();
    let msg = e.to_string();
    assert!(msg.contains(&seg.display().to_string()), "{msg}");
}
