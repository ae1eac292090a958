//! The data of the golden databases (`tests/golden/README.md`), and how they are written and
//! described.
//!
//! Compiled by `tests/golden.rs`, and, copied into a checkout of an older commit as an
//! example, by the builds that wrote the older directories. So it uses only what every one
//! of those builds has: `Database::{open_with, create_collection, collection, flush,
//! verify, close}`, `Collection::{insert_many, find}`, `TimeseriesOptions` and its getters,
//! `DbOptions::default()` and the `bson` and `zstd` crates.
//!
//! Never change what it produces: the committed databases hold exactly these documents.

#![allow(dead_code)] // Each of the programs that include this file uses a part of it.

use std::fmt::Write as _;
use std::path::Path;

use tsbucket::bson::{doc, oid::ObjectId, spec::BinarySubtype, Binary, Bson, DateTime, Document};
use tsbucket::{Database, Granularity, TimeseriesOptions};

/// 2024-03-01T00:00:00Z.
pub const BASE_MS: i64 = 1_709_251_200_000;

/// A collection of the data set: its options, the documents inserted first (flushed to
/// segments in the directories that have segments) and those inserted last (never flushed,
/// so only in the log).
pub struct Coll {
    pub name: &'static str,
    pub options: TimeseriesOptions,
    pub head: Vec<Document>,
    pub tail: Vec<Document>,
}

/// A deterministic `_id`: collection tag, then a counter.
pub fn oid(tag: u8, n: u32) -> ObjectId {
    let mut b = [0u8; 12];
    b[0] = 0x65;
    b[1] = tag;
    b[8..].copy_from_slice(&n.to_be_bytes());
    ObjectId::from_bytes(b)
}

fn at(ms: i64) -> DateTime {
    DateTime::from_millis(ms)
}

/// `weather`: a document meta field, granularity minutes, three sensors of which the third
/// writes its meta fields in either order (segments keep the row's order in `\u0001meta`);
/// doubles with one decimal, an int64 counter, a string, a nested document, an int32 that
/// some rows lack. The tail adds rows of each sensor and a fourth sensor.
fn weather() -> Coll {
    let row = |n: u32, sensor: i32, i: i64, late: bool| {
        let site = ["north", "south", "west", "east"][(sensor - 1) as usize];
        let meta = if sensor == 3 && i % 2 == 1 {
            doc! {"site": site, "sensor": sensor}
        } else {
            doc! {"sensor": sensor, "site": site}
        };
        // A minute apart, now and then a quarter of a second late.
        let ms = BASE_MS + i * 60_000 + if i % 7 == 3 { 250 } else { 0 };
        let mut d = doc! {
            "_id": oid(1, n),
            "ts": at(ms),
            "meta": meta,
            "temp": f64::from(180 + sensor * 10 + (i % 9) as i32) / 10.0,
            "counter": 1_000_i64 + i + i64::from(sensor) * 100_000,
            "status": if i % 5 == 4 { "warn" } else { "ok" },
            "loc": {"lat": 45.5 + f64::from(sensor), "lon": -73.25, "alt": {"m": sensor * 12}},
        };
        if i % 4 != 1 {
            d.insert("humidity", 40 + (i % 11) as i32);
        }
        if late {
            d.insert("late", true);
        }
        d
    };
    let mut head = Vec::new();
    let mut n = 0;
    for sensor in 1..=3 {
        for i in 0..10 {
            head.push(row(n, sensor, i, false));
            n += 1;
        }
    }
    let mut tail = Vec::new();
    for sensor in 1..=4 {
        for i in 10..12 {
            tail.push(row(n, sensor, i, true));
            n += 1;
        }
    }
    Coll {
        name: "weather",
        options: TimeseriesOptions::new("ts")
            .meta_field("meta")
            .granularity(Granularity::Minutes),
        head,
        tail,
    }
}

/// `events`: no meta field, a custom bucket span of an hour; the time field is not the first
/// field; a field whose type changes from row to row (int32, int64, double, absent), booleans,
/// nulls, arrays, binary data, nested documents with fields missing, and extreme values.
fn events() -> Coll {
    let row = |i: u32| {
        let i64v = i64::from(i);
        let kind = ["start", "stop", "tick"][(i % 3) as usize];
        let mut d = doc! {
            "_id": oid(2, i),
            "kind": kind,
            "time": at(BASE_MS + i64v * 431_000),
        };
        match i % 4 {
            0 => d.insert("value", i as i32),
            1 => d.insert("value", i64v * 10_000_000_000),
            2 => d.insert("value", f64::from(i) * 1.5),
            _ => None,
        };
        d.insert("ok", i % 2 == 0);
        match i % 5 {
            0 => d.insert("note", Bson::Null),
            1 => d.insert("note", format!("n{i}")),
            _ => None,
        };
        let payload = if i % 4 == 0 {
            doc! {"a": i as i32}
        } else {
            doc! {"a": i as i32, "b": {"c": format!("c{}", i % 3), "d": [1, 2.5, "x"]}}
        };
        d.insert("payload", payload);
        match i % 6 {
            0 => d.insert("tags", vec![Bson::from("x"), Bson::from("y")]),
            1 => d.insert("tags", Vec::<Bson>::new()),
            _ => None,
        };
        if i % 10 == 0 {
            d.insert(
                "bin",
                Binary {
                    subtype: BinarySubtype::Generic,
                    bytes: vec![0, 1, 2, i as u8],
                },
            );
        }
        match i {
            2 => d.insert("extreme", i64::MAX),
            5 => d.insert("extreme", i64::MIN),
            8 => d.insert("extreme", f64::INFINITY),
            11 => d.insert("extreme", -0.0_f64),
            14 => d.insert("extreme", 1e-300_f64),
            17 => d.insert("extreme", i32::MIN),
            _ => None,
        };
        d
    };
    Coll {
        name: "events",
        options: TimeseriesOptions::new("time").bucket_span(3600, 3600),
        head: (0..18).map(row).collect(),
        tail: (18..22).map(row).collect(),
    }
}

/// `metrics`: a string meta field, granularity hours; one host's rows inserted newest first;
/// multiples of 4096, a field some rows lack, and a field that changes twice in the 24 rows
/// of one bucket (few nonzero residuals: a sparse intseq from segment directory 4 on).
fn metrics() -> Coll {
    let row = |n: u32, host: &str, k: i64| {
        let mut d = doc! {
            "_id": oid(3, n),
            "t": at(BASE_MS + k * 3_600_000),
            "host": host,
            "mem": (1_i64 << 30) + k * 4096,
            "up": k as i32,
            "level": (k / 8) as i32,
            "dc": "eu-1",
        };
        if k % 5 != 2 {
            d.insert("cpu", k as f64 * 0.5);
        }
        d
    };
    let mut head = Vec::new();
    for k in 0..24 {
        head.push(row(k as u32, "h1", k));
    }
    for k in (0..8).rev() {
        head.push(row(24 + k as u32, "h2", k));
    }
    let tail = (24..26).map(|k| row(8 + k as u32, "h1", k)).collect();
    Coll {
        name: "metrics",
        options: TimeseriesOptions::new("t")
            .meta_field("host")
            .granularity(Granularity::Hours),
        head,
        tail,
    }
}

/// The data set of the `basic` directories.
pub fn basic() -> Vec<Coll> {
    vec![weather(), events(), metrics()]
}

/// Creates `colls` in `db` and inserts their heads; then, with `flush`, flushes; then inserts
/// the tails.
pub fn write(db: &Database, colls: &[Coll], flush: bool) -> tsbucket::Result<()> {
    create(db, colls)?;
    insert_heads(db, colls)?;
    if flush {
        db.flush()?;
    }
    insert_tails(db, colls)
}

/// Creates `colls` in `db`.
pub fn create(db: &Database, colls: &[Coll]) -> tsbucket::Result<()> {
    for c in colls {
        db.create_collection(c.name, c.options.clone())?;
    }
    Ok(())
}

/// Inserts the heads of `colls`, in batches of at most 5 taken from the collections in turn.
pub fn insert_heads(db: &Database, colls: &[Coll]) -> tsbucket::Result<()> {
    insert_in_turn(db, colls, |c| &c.head)
}

/// Inserts the tails of `colls` as [`insert_heads`] does the heads.
pub fn insert_tails(db: &Database, colls: &[Coll]) -> tsbucket::Result<()> {
    insert_in_turn(db, colls, |c| &c.tail)
}

fn insert_in_turn(
    db: &Database,
    colls: &[Coll],
    part: impl Fn(&Coll) -> &Vec<Document>,
) -> tsbucket::Result<()> {
    let mut round = 0;
    loop {
        let mut any = false;
        for c in colls {
            let docs = part(c);
            if let Some(batch) = docs.chunks(5).nth(round) {
                db.collection(c.name)?.insert_many(batch)?;
                any = true;
            }
        }
        if !any {
            return Ok(());
        }
        round += 1;
    }
}

/// Every document of `name`, by `_id`.
pub fn read_back(db: &Database, name: &str) -> Vec<Document> {
    let mut docs: Vec<Document> = db
        .collection(name)
        .unwrap()
        .find(doc! {})
        .unwrap()
        .map(|d| d.unwrap())
        .collect();
    docs.sort_by_key(|d| d.get_object_id("_id").unwrap().bytes());
    docs
}

/// Bytes of a document: compares field order and types, which `Document`'s `==` does not.
pub fn bytes(d: &Document) -> Vec<u8> {
    d.to_vec().unwrap()
}

/// Panics unless `db` holds exactly `expected` (name, documents) and nothing else.
pub fn check_documents(db: &Database, expected: &[(String, Vec<Document>)]) {
    for (name, docs) in expected {
        let got = read_back(db, name);
        assert_eq!(got.len(), docs.len(), "{name}: document count");
        for (g, e) in got.iter().zip(docs) {
            assert_eq!(bytes(g), bytes(e), "{name}: read {g:?} expected {e:?}");
        }
    }
}

/// The expected contents of `colls`: heads and tails by `_id`.
pub fn expected(colls: &[Coll]) -> Vec<(String, Vec<Document>)> {
    colls
        .iter()
        .map(|c| {
            let mut docs: Vec<Document> = c.head.iter().chain(&c.tail).cloned().collect();
            docs.sort_by_key(|d| d.get_object_id("_id").unwrap().bytes());
            (c.name.to_string(), docs)
        })
        .collect()
}

/// Collection options as the manifest spells them (`format-spec/manifest.md`).
pub fn options_doc(o: &TimeseriesOptions) -> Document {
    let mut d = doc! {"timeField": o.get_time_field()};
    if let Some(m) = o.get_meta_field() {
        d.insert("metaField", m);
    }
    match o.get_granularity() {
        Some(g) => {
            d.insert("granularity", g.as_str());
        }
        None => {
            d.insert(
                "bucketMaxSpanSeconds",
                i64::from(o.bucket_max_span_seconds()),
            );
            d.insert(
                "bucketRoundingSeconds",
                i64::from(o.bucket_rounding_seconds()),
            );
        }
    }
    if let Some(s) = o.get_expire_after_seconds() {
        d.insert("expireAfterSeconds", s as i64);
    }
    d
}

/// Format versions of the files of a database, read from the files themselves as
/// `format-spec/` describes them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Versions {
    /// `MANIFEST` bytes 8..10.
    pub manifest: u16,
    /// Versions of the `wal/*.log` files (bytes 8..12), in file order.
    pub wal: Vec<u32>,
    /// Salts of the `wal/*.log` files (bytes 24..28; 0 in version 1, which has none).
    pub wal_salts: Vec<u32>,
    /// Number of spare log files (`wal/*.free`).
    pub wal_spares: usize,
    /// Kinds of the records in the log files (1: as it is, 2: compacted), each once.
    pub wal_record_kinds: Vec<u8>,
    /// First byte of each segment's decompressed directory, in file order.
    pub segment_dirs: Vec<u8>,
}

fn le_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

fn sorted_names(dir: &Path, ext: &str) -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = match std::fs::read_dir(dir) {
        Ok(rd) => rd
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == ext))
            .collect(),
        // A directory with no files is not kept by git.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => panic!("{}: {e}", dir.display()),
    };
    v.sort();
    v
}

/// Reads the versions of the files of the database in `db`.
pub fn versions(db: &Path) -> Versions {
    let man = std::fs::read(db.join("MANIFEST")).unwrap();
    assert_eq!(&man[..8], b"TSBMANIF");
    let mut wal = Vec::new();
    let mut wal_salts = Vec::new();
    let mut wal_record_kinds = Vec::new();
    for p in sorted_names(&db.join("wal"), "log") {
        let b = std::fs::read(&p).unwrap();
        assert_eq!(&b[..8], b"TSBWAL\r\n", "{}", p.display());
        wal.push(le_u32(&b, 8));
        wal_salts.push(le_u32(&b, 24));
        // Records: a 24-byte header (payload length at 4, kind at 16), then the payload.
        let mut at = 32;
        while at + 24 <= b.len() && le_u32(&b, at) != 0 {
            wal_record_kinds.push(b[at + 16]);
            at += 24 + le_u32(&b, at + 4) as usize;
        }
    }
    wal_record_kinds.sort();
    wal_record_kinds.dedup();
    let mut segment_dirs = Vec::new();
    for p in sorted_names(&db.join("seg"), "seg") {
        let b = std::fs::read(&p).unwrap();
        let f = &b[b.len() - 48..];
        assert_eq!(&f[40..], b"TSBSEGF\x01", "{}", p.display());
        let dir_offset = u64::from_le_bytes(f[..8].try_into().unwrap()) as usize;
        let stored = le_u32(f, 8) as usize;
        let dir = zstd::decode_all(&b[dir_offset..dir_offset + stored]).unwrap();
        segment_dirs.push(dir[0]);
    }
    Versions {
        manifest: u16::from_le_bytes([man[8], man[9]]),
        wal,
        wal_salts,
        wal_spares: sorted_names(&db.join("wal"), "free").len(),
        wal_record_kinds,
        segment_dirs,
    }
}

/// The description of a golden directory, `golden.json` (see `tests/golden/README.md`).
pub fn describe(
    db: &Path,
    written_by: &str,
    expected: &str,
    report: &tsbucket::VerifyReport,
) -> String {
    let v = versions(db);
    let list = |xs: Vec<String>| xs.join(", ");
    let mut s = String::new();
    writeln!(s, "{{").unwrap();
    writeln!(s, "  \"written_by\": \"{written_by}\",").unwrap();
    writeln!(s, "  \"expected\": \"{expected}\",").unwrap();
    writeln!(s, "  \"manifest_version\": {},", v.manifest).unwrap();
    let wal = list(v.wal.iter().map(|x| x.to_string()).collect());
    writeln!(s, "  \"wal_versions\": [{wal}],").unwrap();
    let salts = list(v.wal_salts.iter().map(|x| x.to_string()).collect());
    writeln!(s, "  \"wal_salts\": [{salts}],").unwrap();
    writeln!(s, "  \"wal_spares\": {},", v.wal_spares).unwrap();
    let kinds = list(v.wal_record_kinds.iter().map(|x| x.to_string()).collect());
    writeln!(s, "  \"wal_record_kinds\": [{kinds}],").unwrap();
    let dirs = list(v.segment_dirs.iter().map(|x| x.to_string()).collect());
    writeln!(s, "  \"segment_directory_versions\": [{dirs}],").unwrap();
    writeln!(
        s,
        "  \"verify\": {{\"segments\": {}, \"buckets\": {}, \"measurements\": {}}}",
        report.segments, report.buckets, report.measurements
    )
    .unwrap();
    writeln!(s, "}}").unwrap();
    s
}

/// The name of a golden directory: the versions its files carry, then `label`.
pub fn dir_name(v: &Versions, label: &str) -> String {
    let mut s = format!("manifest{}", v.manifest);
    if let Some(d) = v.segment_dirs.iter().max() {
        write!(s, "-seg{d}").unwrap();
    }
    if let Some(w) = v.wal.iter().max() {
        write!(s, "-wal{w}").unwrap();
    }
    if !label.is_empty() {
        write!(s, "-{label}").unwrap();
    }
    s
}

/// Finishes a golden directory written in `tmp` (its database in `tmp/db`): describes it in
/// `tmp/golden.json` and renames it into `out` under [`dir_name`]. Refuses (removes `tmp`
/// and returns `None`) when a directory of that name exists: committed databases are never
/// rewritten.
pub fn publish(
    tmp: &Path,
    out: &Path,
    label: &str,
    written_by: &str,
    expected: &str,
    report: &tsbucket::VerifyReport,
) -> Option<std::path::PathBuf> {
    let db = tmp.join("db");
    let name = dir_name(&versions(&db), label);
    let target = out.join(&name);
    if target.exists() {
        eprintln!(
            "refusing to write {}: it exists, and golden databases are never rewritten",
            target.display()
        );
        std::fs::remove_dir_all(tmp).unwrap();
        return None;
    }
    std::fs::write(
        tmp.join("golden.json"),
        describe(&db, written_by, expected, report),
    )
    .unwrap();
    std::fs::rename(tmp, &target).unwrap();
    eprintln!("wrote {}", target.display());
    Some(target)
}

/// Writes the `basic` data set with `opts` into a new directory under `out` (see
/// [`publish`]), checks that the database reads it back exactly, and returns the directory.
/// With `flush` the heads are in segments and the tails in the log; without, all is in the
/// log.
pub fn generate_basic(
    out: &Path,
    opts: tsbucket::DbOptions,
    flush: bool,
    label: &str,
    written_by: &str,
) -> Option<std::path::PathBuf> {
    let tmp = out.join(format!(".writing-{label}-{}", std::process::id()));
    assert!(!tmp.exists(), "{} exists", tmp.display());
    let db = Database::open_with(tmp.join("db"), opts).unwrap();
    let colls = basic();
    write(&db, &colls, flush).unwrap();
    check_documents(&db, &expected(&colls));
    let report = db.verify().unwrap();
    db.close().unwrap();
    publish(&tmp, out, label, written_by, "basic", &report)
}
