//! A flusher slower than the inserts (a slow disk, a busy machine) makes inserts wait rather
//! than let closed buckets pile up in memory: what waits for the flusher stays near half of
//! `DbOptions::catalog_memory_limit`, whatever the input's size.

use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tsbucket::bson::{doc, DateTime, Document};
use tsbucket::vfs::{FileBytes, LockGuard, RealFs, Vfs, WritableFile};
use tsbucket::{Database, DbOptions, SyncMode, TimeseriesOptions};

/// The real file system, with no segment put into place before `until` and each a little
/// late after it: a disk that stalls under the flusher alone (the log is not slowed).
#[derive(Debug)]
struct SlowSegments {
    inner: RealFs,
    until: Instant,
    renamed: AtomicU64,
}

impl Vfs for SlowSegments {
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        self.inner.create_dir_all(path)
    }
    fn list_dir(&self, path: &Path) -> io::Result<Vec<String>> {
        self.inner.list_dir(path)
    }
    fn exists(&self, path: &Path) -> bool {
        self.inner.exists(path)
    }
    fn open_append(&self, path: &Path, truncate: bool) -> io::Result<Box<dyn WritableFile>> {
        self.inner.open_append(path, truncate)
    }
    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        self.inner.read(path)
    }
    fn map(&self, path: &Path) -> io::Result<FileBytes> {
        self.inner.map(path)
    }
    fn file_len(&self, path: &Path) -> io::Result<u64> {
        self.inner.file_len(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        if to
            .parent()
            .and_then(Path::file_name)
            .is_some_and(|d| d == "seg")
        {
            let wait = self.until.saturating_duration_since(Instant::now());
            std::thread::sleep(wait.max(Duration::from_millis(20)));
            self.renamed.fetch_add(1, Ordering::Relaxed);
        }
        self.inner.rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.inner.remove_file(path)
    }
    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        self.inner.sync_dir(path)
    }
    fn try_lock(&self, dir: &Path, lock_file: &str) -> io::Result<Option<Box<dyn LockGuard>>> {
        self.inner.try_lock(dir, lock_file)
    }
}

/// One batch: `n` measurements of 4 series, a second apart in each, from measurement `from`.
fn batch(from: i64, n: i64) -> Vec<Document> {
    (from..from + n)
        .map(|i| {
            doc! {
                "t": DateTime::from_millis(1_700_000_000_000 + (i / 4) * 1000),
                "m": {"series": i % 4},
                "a": i as f64 * 0.5,
                "b": i,
                "c": format!("reading {i}"),
            }
        })
        .collect()
}

#[test]
fn inserts_wait_for_a_slow_flusher_instead_of_piling_up_closed_buckets() {
    let dir = tempfile::tempdir().unwrap();
    // The first segment waits three seconds: the inserts outrun the flusher meanwhile.
    let fs = Arc::new(SlowSegments {
        inner: RealFs,
        until: Instant::now() + Duration::from_secs(3),
        renamed: AtomicU64::new(0),
    });
    let limit = 4 << 20;
    let opts = DbOptions {
        vfs: fs.clone(),
        sync: SyncMode::Never,
        catalog_memory_limit: limit,
        flush_threshold_bytes: 256 << 10,
        ..DbOptions::default()
    };
    let db = Database::open_with(dir.path(), opts).unwrap();
    let c = db
        .create_collection("c", TimeseriesOptions::new("t").meta_field("m"))
        .unwrap();
    // About 16 MB of measurements, four times the catalog's limit, in batches of 2,000.
    let (total, per) = (160_000i64, 2_000i64);
    let mut most = 0;
    for from in (0..total).step_by(per as usize) {
        c.insert_many(&batch(from, per)).unwrap();
        let s = c.stats().unwrap();
        most = most.max(s.catalog_memory_bytes);
    }
    // The catalog counts closed buckets at twice their bytes: half the limit of them waiting,
    // a batch's more that came before the insert looked, and four open buckets.
    eprintln!(
        "most catalog memory {most} bytes; {} segments",
        fs.renamed.load(Ordering::Relaxed)
    );
    assert!(
        most < 3 * limit as u64 / 2,
        "{most} bytes against a limit of {limit}"
    );
    // Nothing was lost on the way.
    db.flush().unwrap();
    assert_eq!(c.count_documents(doc! {}).unwrap(), total as u64);
    assert!(fs.renamed.load(Ordering::Relaxed) > 1);
}

/// A catalog limit below the flush threshold, spread over several collections none of which
/// reaches the threshold alone: the flusher still takes the closed buckets inserts wait for,
/// so every insert returns.
#[test]
fn inserts_waiting_below_the_flush_threshold_still_go_on() {
    let dir = tempfile::tempdir().unwrap();
    let opts = DbOptions {
        sync: SyncMode::Never,
        catalog_memory_limit: 1 << 20,
        ..DbOptions::default()
    };
    let db = Database::open_with(dir.path(), opts).unwrap();
    let colls: Vec<_> = (0..3)
        .map(|k| {
            db.create_collection(
                &format!("c{k}"),
                TimeseriesOptions::new("t").meta_field("m"),
            )
            .unwrap()
        })
        .collect();
    let (done_tx, done) = std::sync::mpsc::channel();
    let writer = std::thread::spawn(move || {
        for from in (0..60_000i64).step_by(1_000) {
            for c in &colls {
                c.insert_many(&batch(from, 1_000)).unwrap();
            }
        }
        let _ = done_tx.send(colls);
    });
    let colls = done
        .recv_timeout(Duration::from_secs(120))
        .expect("the inserts stalled waiting for the flusher");
    writer.join().unwrap();
    for c in &colls {
        assert_eq!(c.count_documents(doc! {}).unwrap(), 60_000);
    }
}
