//! Shared pieces of the durability tests: a seeded generator, the batch oracle (every document
//! says which writer and batch it belongs to and how many documents that batch holds), and the
//! checks of what a reopened database returns: every acknowledged batch survived, no batch is
//! partial or duplicated, and each writer's batches form a prefix with no hole.
// Each test crate uses a different subset of these helpers.
#![allow(dead_code)]

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use tsbucket::bson::{doc, Bson, DateTime, Document};
use tsbucket::vfs::{MemFs, Vfs};
use tsbucket::{Collection, Database, DbOptions, Error, TimeseriesOptions};

/// The crate's seeded generator (SplitMix64): deterministic from a printed seed, so every
/// failure can be replayed.
#[derive(Debug, Clone)]
pub struct Rng(tsbucket_workload::rng::Rng);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(tsbucket_workload::rng::Rng::new(seed))
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }
    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo + 1)
    }
    pub fn chance(&mut self, one_in: u64) -> bool {
        self.next_u64() % one_in == 0
    }
}

/// Seed from `TSBUCKET_SEED` (to replay a failure) or a fixed default (CI stays reproducible).
pub fn seed_from_env(default: u64) -> u64 {
    std::env::var("TSBUCKET_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// Count from an environment variable, for the longer variants.
pub fn count_from_env(var: &str, default: u64) -> u64 {
    std::env::var(var)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

pub const TIME: &str = "t";
pub const META: &str = "m";
pub const BASE_MS: i64 = 1_700_000_000_000;

pub fn ts_options() -> TimeseriesOptions {
    TimeseriesOptions::new(TIME).meta_field(META)
}

/// The `n` documents of batch `batch` of `writer`. Times advance with the batch so buckets
/// fill, roll over and close as in a real ingest; a few series with document meta values.
pub fn batch_docs(writer: i32, batch: i64, n: usize, series: u64) -> Vec<Document> {
    (0..n)
        .map(|i| {
            let s = (batch as u64 + i as u64) % series.max(1);
            doc! {
                TIME: DateTime::from_millis(BASE_MS + batch * 10_000 + i as i64 * 7),
                META: {"host": format!("h{s}"), "dc": (s % 3) as i32},
                "writer": writer,
                "batch": batch,
                "n": n as i32,
                "i": i as i32,
                "v": (batch as f64) * 0.5 + i as f64,
            }
        })
        .collect()
}

/// What a verification found: per writer, the highest batch present (0 if none).
pub type Present = BTreeMap<i32, i64>;

/// The batch checks over `docs`, the whole content of one collection: every present batch is
/// complete and has no duplicate document, each writer's batches are a contiguous prefix 1..k,
/// and k is at least the writer's last acknowledged batch. Returns k per writer.
pub fn check_batches(
    docs: &[Document],
    acked: &BTreeMap<i32, i64>,
    context: &str,
) -> Result<Present, String> {
    let mut counts: BTreeMap<(i32, i64), (usize, i32)> = BTreeMap::new();
    let mut ids: HashSet<Vec<u8>> = HashSet::new();
    for d in docs {
        let w = d
            .get_i32("writer")
            .map_err(|e| format!("{context}: {e} in {d}"))?;
        let b = d
            .get_i64("batch")
            .map_err(|e| format!("{context}: {e} in {d}"))?;
        let n = d
            .get_i32("n")
            .map_err(|e| format!("{context}: {e} in {d}"))?;
        let id = match d.get("_id") {
            Some(Bson::ObjectId(o)) => o.bytes().to_vec(),
            other => {
                return Err(format!(
                    "{context}: document without an ObjectId _id: {other:?}"
                ))
            }
        };
        if !ids.insert(id) {
            return Err(format!("{context}: duplicate _id in {d}"));
        }
        let e = counts.entry((w, b)).or_insert((0, n));
        if e.1 != n {
            return Err(format!(
                "{context}: batch ({w},{b}) documents disagree on n"
            ));
        }
        e.0 += 1;
    }
    let mut present: Present = BTreeMap::new();
    for (&(w, b), &(count, n)) in &counts {
        if count != n as usize {
            return Err(format!(
                "{context}: batch ({w},{b}) is partial: {count} of {n} documents"
            ));
        }
        let k = present.entry(w).or_insert(0);
        if b != *k + 1 {
            return Err(format!(
                "{context}: writer {w} has batch {b} after batch {k}: a hole"
            ));
        }
        *k = b;
    }
    for (&w, &last) in acked {
        let k = present.get(&w).copied().unwrap_or(0);
        if k < last {
            return Err(format!(
                "{context}: writer {w} acknowledged batch {last} but only 1..{k} survived"
            ));
        }
    }
    Ok(present)
}

/// Every document of the collection, or the first error a read returns.
pub fn read_all(c: &Collection) -> tsbucket::Result<Vec<Document>> {
    c.find(doc! {})?.collect()
}

/// Options for a database on `fs` with background work that the tests control.
pub fn mem_options(fs: &MemFs) -> DbOptions {
    let mut o = DbOptions::default().vfs(Arc::new(fs.clone()));
    o.ttl_interval = None;
    o
}

/// Liveness: the database accepts, acknowledges and keeps a new batch after recovery.
pub fn check_liveness(fs: &MemFs, path: &str, opts: impl Fn(&MemFs) -> DbOptions) {
    let db = Database::open_with(path, opts(fs)).expect("liveness: reopen");
    let c = db
        .create_collection("live", ts_options())
        .expect("liveness: create");
    let before = c.count_documents(doc! {}).expect("liveness: count");
    c.insert_many(&batch_docs(99, 1, 3, 1))
        .expect("liveness: insert");
    db.close().expect("liveness: close");
    let db = Database::open_with(path, opts(fs)).expect("liveness: reopen after insert");
    let c = db.collection("live").expect("liveness: collection");
    assert_eq!(c.count_documents(doc! {}).unwrap(), before + 3, "liveness");
    db.close().unwrap();
}

/// The kind of an error, as the lock-test child prints it.
pub fn kind(e: &Error) -> &'static str {
    match e {
        Error::Locked(_) => "Locked",
        Error::Corruption { .. } => "Corruption",
        Error::Poisoned(_) => "Poisoned",
        Error::Io(_) => "Io",
        Error::Closed => "Closed",
        Error::InvalidDocument { .. } => "InvalidDocument",
        _ => "Other",
    }
}

/// Bytes of every file directly in `dir` of `fs`, by name.
pub fn file_sizes(fs: &dyn Vfs, dir: &str) -> BTreeMap<String, u64> {
    let dir = std::path::Path::new(dir);
    fs.list_dir(dir)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|n| fs.file_len(&dir.join(&n)).ok().map(|l| (n, l)))
        .collect()
}

/// One step of a scripted workload.
#[derive(Debug, Clone)]
pub enum Step {
    /// `Database::open_with` (only reported as a failing step; every run starts with it).
    Open,
    /// Create a collection; its batches are written by writer `w`.
    Create(&'static str, i32),
    /// Insert the next batch of `n` documents into a collection.
    Insert(&'static str, usize),
    /// `db.flush()`.
    Flush,
    /// `db.close()`.
    Close,
}

/// What a scripted run acknowledged, and where it first failed.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Collections whose creation returned Ok, with their writer.
    pub created: BTreeMap<&'static str, i32>,
    /// Per collection, the last batch whose insert returned Ok.
    pub acked: BTreeMap<&'static str, i64>,
    /// The step (index, description) whose call failed first, and its error.
    pub failure: Option<(usize, Step, Error)>,
    /// The database handle, if open succeeded and close was not reached.
    pub db: Option<Database>,
}

impl Outcome {
    /// The collection whose insert was in flight when the failure happened, if any.
    pub fn in_flight_insert(&self) -> Option<&'static str> {
        match &self.failure {
            Some((_, Step::Insert(name, _), _)) => Some(name),
            _ => None,
        }
    }
}

/// A workload touching every durability step: creates, batches of several sizes and series,
/// flushes that write segments and reclaim the log, a second collection, close.
pub fn standard_steps() -> Vec<Step> {
    use Step::*;
    vec![
        Create("a", 1),
        Insert("a", 5),
        Insert("a", 40),
        Flush,
        Insert("a", 1),
        Create("b", 2),
        Insert("b", 17),
        Insert("a", 23),
        Flush,
        Insert("b", 3),
        Insert("a", 9),
        Close,
    ]
}

/// Runs `steps` on a database opened with `open`, stopping at the first failing call.
pub fn run_steps(open: impl Fn() -> tsbucket::Result<Database>, steps: &[Step]) -> Outcome {
    let mut out = Outcome::default();
    let db = match open() {
        Ok(db) => db,
        Err(e) => {
            out.failure = Some((0, Step::Open, e));
            return out;
        }
    };
    let mut db = Some(db);
    for (i, step) in steps.iter().enumerate() {
        let Some(d) = db.as_ref() else { break };
        let r = match step {
            Step::Create(name, w) => d.create_collection(name, ts_options()).map(|_| {
                out.created.insert(name, *w);
            }),
            Step::Insert(name, n) => {
                let w = out.created[name];
                let b = out.acked.get(name).copied().unwrap_or(0) + 1;
                d.collection(name)
                    .and_then(|c| c.insert_many(&batch_docs(w, b, *n, 3)))
                    .map(|_| {
                        out.acked.insert(name, b);
                    })
            }
            Step::Flush => d.flush(),
            Step::Close => db.take().map_or(Ok(()), Database::close),
            Step::Open => Ok(()),
        };
        if let Err(e) = r {
            out.failure = Some((i + 1, step.clone(), e));
            break;
        }
    }
    out.db = db;
    out
}

/// The batch checks of a reopened database against a scripted run: every acknowledged batch is
/// there exactly once, nothing is partial, and the only batch that may exceed the acknowledged
/// ones is the insert whose call failed (its outcome is unknown, but it is all or nothing).
pub fn check_outcome(db: &Database, out: &Outcome, ctx: &str) {
    // Every file the reopened database relies on checks out.
    db.verify()
        .unwrap_or_else(|e| panic!("{ctx}: verify failed: {e}"));
    let in_flight = out.in_flight_insert();
    for (name, &w) in &out.created {
        let c = db
            .collection(name)
            .unwrap_or_else(|e| panic!("{ctx}: acknowledged collection {name} is gone: {e}"));
        let docs = read_all(&c).unwrap_or_else(|e| panic!("{ctx}: reading {name}: {e}"));
        let last = out.acked.get(name).copied().unwrap_or(0);
        let acked = BTreeMap::from([(w, last)]);
        let present = check_batches(&docs, &acked, &format!("{ctx}, collection {name}"))
            .unwrap_or_else(|e| panic!("{e}"));
        let k = present.get(&w).copied().unwrap_or(0);
        let max = if in_flight == Some(*name) {
            last + 1
        } else {
            last
        };
        assert!(
            k <= max,
            "{ctx}: {name} has batches 1..{k}, acknowledged 1..{last}"
        );
    }
    // A collection whose creation failed may exist or not, but holds nothing.
    for info in db.list_collections().unwrap() {
        if !out.created.contains_key(info.name.as_str()) && info.name != "live" {
            let c = db.collection(&info.name).unwrap();
            assert_eq!(
                c.count_documents(doc! {}).unwrap(),
                0,
                "{ctx}: {}",
                info.name
            );
        }
    }
}

/// Every way `MemFs` can lose unsynced data at a power cut.
pub const CRASH_MODES: [tsbucket::vfs::CrashMode; 5] = [
    tsbucket::vfs::CrashMode::DropUnsynced,
    tsbucket::vfs::CrashMode::KeepPrefix,
    tsbucket::vfs::CrashMode::TornSector,
    tsbucket::vfs::CrashMode::ZeroExtension,
    tsbucket::vfs::CrashMode::Random,
];

/// Every document of the collection, ordered by an int32 `_id`.
pub fn all_by_id(c: &Collection) -> Vec<Document> {
    let mut v: Vec<Document> = c
        .find(doc! {})
        .unwrap()
        .collect::<tsbucket::Result<_>>()
        .unwrap();
    v.sort_by_key(|d| d.get_i32("_id").unwrap_or(-1));
    v
}

/// The names of the database's collections.
pub fn collection_names(db: &Database) -> Vec<String> {
    db.list_collections()
        .unwrap()
        .into_iter()
        .map(|c| c.name)
        .collect()
}

/// Runs test `test` of this test binary in a child process with `var` set to `dir`, kills it
/// with SIGKILL after `delay`, and returns every line it printed before it died.
pub fn run_child_until_killed(
    test: &str,
    var: &str,
    dir: &std::path::Path,
    delay: std::time::Duration,
) -> Vec<String> {
    run_child_with_env_until_killed(test, var, dir, &[], delay)
}

/// [`run_child_until_killed`] with more variables set for the child.
pub fn run_child_with_env_until_killed(
    test: &str,
    var: &str,
    dir: &std::path::Path,
    env: &[(&str, String)],
    delay: std::time::Duration,
) -> Vec<String> {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(var, dir)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .collect::<Vec<String>>()
    });
    std::thread::sleep(delay);
    let _ = child.kill();
    let _ = child.wait();
    reader.join().unwrap()
}

/// The numbers the child reported after `tag` ("ACK 7" with tag "ACK "), in order.
pub fn reported(lines: &[String], tag: &str) -> Vec<i64> {
    lines
        .iter()
        .filter_map(|l| l.find(tag).map(|p| &l[p + tag.len()..]))
        .filter_map(|s| s.trim().parse::<i64>().ok())
        .collect()
}

/// Default options without the background TTL sweeper.
pub fn options_without_sweeper() -> DbOptions {
    DbOptions {
        ttl_interval: None,
        ..DbOptions::default()
    }
}

/// Documents in collection `coll`.
pub fn count_in(db: &Database, coll: &str) -> u64 {
    db.collection(coll)
        .unwrap()
        .count_documents(doc! {})
        .unwrap()
}

/// Loads `docs` into a new collection `c` of the database in `dir`: the first half flushed, a
/// quarter left open across a reopen (rebuilt from the log), the rest inserted after it, so
/// that reads meet all three places data lives.
pub fn load_split(
    dir: &std::path::Path,
    opts: TimeseriesOptions,
    docs: &[Document],
) -> (Database, Collection) {
    let (a, b) = (docs.len() / 2, docs.len() * 3 / 4);
    {
        let db = Database::open(dir).unwrap();
        let c = db.create_collection("c", opts).unwrap();
        for chunk in docs[..a].chunks(500) {
            c.insert_many(chunk).unwrap();
        }
        db.flush().unwrap();
        for chunk in docs[a..b].chunks(500) {
            c.insert_many(chunk).unwrap();
        }
        db.close().unwrap();
    }
    let db = Database::open(dir).unwrap();
    let c = db.collection("c").unwrap();
    for chunk in docs[b..].chunks(500) {
        c.insert_many(chunk).unwrap();
    }
    (db, c)
}
