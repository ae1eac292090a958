//! Back-compatibility of the files. Every directory under `tests/golden/` holds a small
//! database written by the build of some format versions (its `golden.json` says which, and
//! `tests/golden/README.md` how it was written). Each is opened read-only where it lies and
//! as a writable copy, and must read back exactly the documents of its `expected-*.json`,
//! answer a few queries that use bucket summaries, pass `verify` with the counts it had when
//! written, and take new writes on top of its old files. The committed files are never
//! changed: a format change adds a directory (`write_golden_databases`) beside these, and
//! this test keeps the old ones readable.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use tsbucket::bson::{doc, Bson, DateTime, Document};
use tsbucket::{Database, DbOptions, Granularity, TimeseriesOptions, VerifyReport};

#[path = "golden/dataset.rs"]
mod dataset;

use dataset::{oid, Coll, BASE_MS};

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

/// Options for the writable opens: no background TTL sweep (the data is from 2024, and the
/// TTL collection would otherwise lose its rows to the clock).
fn options() -> DbOptions {
    DbOptions {
        ttl_interval: None,
        ..DbOptions::default()
    }
}

macro_rules! golden_tests {
    ($($test:ident => $dir:literal,)*) => {
        $(
            #[test]
            fn $test() {
                check_directory($dir);
            }
        )*
        /// Every committed directory, each with its test above.
        const DIRECTORIES: &[&str] = &[$($dir),*];
    };
}

golden_tests! {
    manifest1_seg1_wal1 => "manifest1-seg1-wal1",
    manifest1_seg2_wal1 => "manifest1-seg2-wal1",
    manifest1_seg3_wal1 => "manifest1-seg3-wal1",
    manifest1_seg4_wal1 => "manifest1-seg4-wal1",
    manifest1_seg5_wal2 => "manifest1-seg5-wal2",
    manifest1_wal3_walonly => "manifest1-wal3-walonly",
    manifest1_seg5_wal3 => "manifest1-seg5-wal3",
    manifest2_seg5_wal3_rich => "manifest2-seg5-wal3-rich",
}

/// A directory added under `tests/golden/` needs its test; one removed fails its test.
#[test]
fn every_golden_directory_has_a_test() {
    let mut found: Vec<String> = std::fs::read_dir(golden_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("golden.json").exists())
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    found.sort();
    let mut listed: Vec<String> = DIRECTORIES.iter().map(|s| s.to_string()).collect();
    listed.sort();
    assert_eq!(found, listed);
}

/// A collection as an `expected-*.json` file holds it.
#[derive(Debug, Clone)]
struct Expected {
    name: String,
    /// As `dataset::options_doc` spells them.
    options: Document,
    /// By `_id`.
    docs: Vec<Document>,
}

fn read_json(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn ext_json_doc(v: &serde_json::Value) -> Document {
    match v {
        serde_json::Value::Object(m) => Document::try_from(m.clone()).unwrap(),
        other => panic!("not a document: {other}"),
    }
}

/// Reads `tests/golden/expected-<name>.json`.
fn load_expected(name: &str) -> Vec<Expected> {
    let v = read_json(&golden_dir().join(format!("expected-{name}.json")));
    v["collections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| Expected {
            name: c["name"].as_str().unwrap().to_string(),
            options: ext_json_doc(&c["options"]),
            docs: c["documents"]
                .as_array()
                .unwrap()
                .iter()
                .map(ext_json_doc)
                .collect(),
        })
        .collect()
}

/// The text of an `expected-*.json` file: canonical extended JSON, one document a line.
fn expected_json(colls: &[Expected]) -> String {
    let ext = |d: &Document| {
        serde_json::to_string(&Bson::Document(d.clone()).into_canonical_extjson()).unwrap()
    };
    let mut s = String::from("{\n  \"collections\": [\n");
    for (i, c) in colls.iter().enumerate() {
        s += &format!("    {{\n      \"name\": {:?},\n", c.name);
        s += &format!("      \"options\": {},\n", ext(&c.options));
        s += "      \"documents\": [\n";
        for (j, d) in c.docs.iter().enumerate() {
            let comma = if j + 1 < c.docs.len() { "," } else { "" };
            s += &format!("        {}{comma}\n", ext(d));
        }
        let comma = if i + 1 < colls.len() { "," } else { "" };
        s += &format!("      ]\n    }}{comma}\n");
    }
    s += "  ]\n}\n";
    s
}

/// Every file under `dir` with its bytes.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let rel = p.strip_prefix(dir).unwrap().to_path_buf();
                out.insert(rel, std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

fn copy_tree(from: &Path, to: &Path) {
    for (rel, bytes) in snapshot(from) {
        let p = to.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, bytes).unwrap();
    }
}

fn u64_of(v: &serde_json::Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

fn list_of(v: &serde_json::Value) -> Vec<u64> {
    v.as_array().unwrap().iter().map(u64_of).collect()
}

/// The files carry the versions `golden.json` says they do.
fn check_versions(db: &Path, desc: &serde_json::Value) {
    let v = dataset::versions(db);
    assert_eq!(u64::from(v.manifest), u64_of(&desc["manifest_version"]));
    let wal: Vec<u64> = v.wal.iter().map(|&x| u64::from(x)).collect();
    assert_eq!(wal, list_of(&desc["wal_versions"]));
    let salts: Vec<u64> = v.wal_salts.iter().map(|&x| u64::from(x)).collect();
    assert_eq!(salts, list_of(&desc["wal_salts"]));
    assert_eq!(v.wal_spares as u64, u64_of(&desc["wal_spares"]));
    let kinds: Vec<u64> = v.wal_record_kinds.iter().map(|&x| u64::from(x)).collect();
    assert_eq!(kinds, list_of(&desc["wal_record_kinds"]));
    let dirs: Vec<u64> = v.segment_dirs.iter().map(|&x| u64::from(x)).collect();
    assert_eq!(dirs, list_of(&desc["segment_directory_versions"]));
}

fn verify_report(v: &serde_json::Value) -> VerifyReport {
    VerifyReport {
        segments: u64_of(&v["segments"]),
        buckets: u64_of(&v["buckets"]),
        measurements: u64_of(&v["measurements"]),
    }
}

/// Opens the golden database `name` read-only where it lies, then a writable copy of it, and
/// checks both; writes to the copy; checks that no committed file changed.
fn check_directory(name: &str) {
    let root = golden_dir().join(name);
    let db_dir = root.join("db");
    let before = snapshot(&root);
    let desc = read_json(&root.join("golden.json"));
    check_versions(&db_dir, &desc);
    let expected = load_expected(desc["expected"].as_str().unwrap());
    let report = verify_report(&desc["verify"]);

    let db = Database::open_read_only(&db_dir).unwrap();
    check_clean_recovery(&db);
    check_reads(&db, &expected, &report);
    db.close().unwrap();

    let tmp = tempfile::tempdir().unwrap();
    let copy = tmp.path().join("db");
    copy_tree(&db_dir, &copy);
    let db = Database::open_with(&copy, options()).unwrap();
    check_clean_recovery(&db);
    check_reads(&db, &expected, &report);
    let more = add_one_each(&db, &expected);
    check_reads_unverified(&db, &more);
    db.flush().unwrap();
    let after = db.verify().unwrap();
    let total: usize = more.iter().map(|c| c.docs.len()).sum();
    assert!(after.measurements >= total as u64, "{after:?}");
    db.close().unwrap();
    let db = Database::open_with(&copy, options()).unwrap();
    check_reads(&db, &more, &after);
    db.close().unwrap();

    assert!(
        snapshot(&root) == before,
        "the files of {name} changed; golden databases must never be written"
    );
}

/// Every golden database was closed cleanly: its log ends with its last record and no file is
/// a leftover.
fn check_clean_recovery(db: &Database) {
    let r = db.recovery_report();
    assert!(r.dropped_tail.is_none(), "{r}");
    assert!(r.removed.is_empty(), "{r}");
}

/// Inserts a document into each collection (into a new bucket, since its time is later than
/// every other); returns the expected contents with it.
fn add_one_each(db: &Database, expected: &[Expected]) -> Vec<Expected> {
    let mut more = expected.to_vec();
    for (i, c) in more.iter_mut().enumerate() {
        let mut d = doc! {"_id": oid(0x99, i as u32)};
        let time_field = c.options.get_str("timeField").unwrap();
        d.insert(time_field, DateTime::from_millis(BASE_MS + 30 * 86_400_000));
        if let Ok(meta) = c.options.get_str("metaField") {
            d.insert(meta, "added");
        }
        d.insert("added", 1);
        db.collection(&c.name)
            .unwrap()
            .insert_many(std::slice::from_ref(&d))
            .unwrap();
        c.docs.push(d);
    }
    more
}

/// Collections, options, documents and queries; then `verify`, which must report `report`.
fn check_reads(db: &Database, expected: &[Expected], report: &VerifyReport) {
    check_reads_unverified(db, expected);
    assert_eq!(&db.verify().unwrap(), report);
}

fn check_reads_unverified(db: &Database, expected: &[Expected]) {
    let mut listed: Vec<(String, Vec<u8>)> = db
        .list_collections()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c.name.clone(),
                dataset::bytes(&dataset::options_doc(&c.options)),
            )
        })
        .collect();
    listed.sort();
    let mut want: Vec<(String, Vec<u8>)> = expected
        .iter()
        .map(|c| (c.name.clone(), dataset::bytes(&c.options)))
        .collect();
    want.sort();
    assert_eq!(listed, want, "collections and their options");
    let docs: Vec<(String, Vec<Document>)> = expected
        .iter()
        .map(|c| (c.name.clone(), c.docs.clone()))
        .collect();
    dataset::check_documents(db, &docs);
    for c in expected {
        check_queries(db, c);
    }
}

/// The value at a dotted `path` of `d`, if any.
fn get_path<'a>(d: &'a Document, path: &str) -> Option<&'a Bson> {
    let mut parts = path.split('.');
    let mut v = d.get(parts.next()?)?;
    for p in parts {
        v = v.as_document()?.get(p)?;
    }
    Some(v)
}

fn count(db: &Database, coll: &str, filter: Document) -> u64 {
    db.collection(coll)
        .unwrap()
        .count_documents(filter)
        .unwrap()
}

/// Counts by time range and by meta value, and a `$group` of counts, sums, minima and maxima
/// over every field that holds only integers (or only doubles): answered from bucket
/// summaries (control min/max, sums) where the reader can, so those are read too.
fn check_queries(db: &Database, c: &Expected) {
    let name = c.name.as_str();
    let n = c.docs.len() as u64;
    assert_eq!(count(db, name, doc! {}), n, "{name}: count");
    let tf = c.options.get_str("timeField").unwrap();
    let mut times: Vec<DateTime> = c
        .docs
        .iter()
        .map(|d| *d.get_datetime(tf).unwrap())
        .collect();
    times.sort();
    if let Some(&mid) = times.get(times.len() / 2) {
        let later = times.iter().filter(|&&t| t >= mid).count() as u64;
        assert_eq!(count(db, name, doc! {tf: {"$gte": mid}}), later, "{name}");
        assert_eq!(
            count(db, name, doc! {tf: {"$lt": mid}}),
            n - later,
            "{name}"
        );
    }
    if let Ok(mf) = c.options.get_str("metaField") {
        // Each meta value, or each value of each meta subfield.
        let mut filters: Vec<(String, Bson)> = Vec::new();
        for d in &c.docs {
            match d.get(mf) {
                Some(Bson::Document(m)) => {
                    for (k, v) in m {
                        filters.push((format!("{mf}.{k}"), v.clone()));
                    }
                }
                Some(v) => filters.push((mf.to_string(), v.clone())),
                None => {}
            }
        }
        filters.dedup();
        for (path, v) in filters {
            let want = c
                .docs
                .iter()
                .filter(|d| get_path(d, &path) == Some(&v))
                .count() as u64;
            let got = count(db, name, doc! {path.clone(): v.clone()});
            assert_eq!(got, want, "{name}: {path} = {v}");
        }
    }

    let mut group = doc! {"_id": Bson::Null, "n": {"$sum": 1}};
    let mut want = doc! {"_id": Bson::Null, "n": n as i32};
    let mut fields: Vec<String> = Vec::new();
    for d in &c.docs {
        for k in d.keys() {
            if !fields.contains(k) && k != "_id" {
                fields.push(k.clone());
            }
        }
    }
    for f in fields {
        let vals: Vec<&Bson> = c.docs.iter().filter_map(|d| d.get(&f)).collect();
        let ints = vals
            .iter()
            .all(|v| matches!(v, Bson::Int32(_)) || matches!(v, Bson::Int64(_)));
        let doubles = vals.iter().all(|v| matches!(v, Bson::Double(_)));
        let dates = vals.iter().all(|v| matches!(v, Bson::DateTime(_)));
        let same_type = vals
            .iter()
            .all(|v| v.element_type() == vals[0].element_type());
        if !(ints || doubles || dates) || !same_type {
            continue;
        }
        let key = f.replace('.', "_");
        group.insert(format!("min_{key}"), doc! {"$min": format!("${f}")});
        group.insert(format!("max_{key}"), doc! {"$max": format!("${f}")});
        let lo = vals.iter().copied().min_by(|a, b| cmp_num(a, b)).unwrap();
        let hi = vals.iter().copied().max_by(|a, b| cmp_num(a, b)).unwrap();
        want.insert(format!("min_{key}"), lo.clone());
        want.insert(format!("max_{key}"), hi.clone());
        if ints {
            group.insert(format!("sum_{key}"), doc! {"$sum": format!("${f}")});
            let s: i64 = vals.iter().map(|v| as_i64(v).unwrap()).sum();
            want.insert(format!("sum_{key}"), s);
        }
    }
    let got: Vec<Document> = db
        .collection(name)
        .unwrap()
        .aggregate(vec![doc! {"$group": group}])
        .unwrap()
        .map(|d| d.unwrap())
        .collect();
    assert_eq!(got.len(), 1, "{name}: {got:?}");
    for (k, w) in &want {
        let g = got[0]
            .get(k)
            .unwrap_or_else(|| panic!("{name}: no {k} in {}", got[0]));
        let same = match (as_i64(g), as_i64(w)) {
            // $sum and the count may widen int32 to int64.
            (Some(a), Some(b)) if k.starts_with("sum_") || k == "n" => a == b,
            _ => g == w && g.element_type() == w.element_type(),
        };
        assert!(same, "{name}: {k} is {g}, expected {w}");
    }
}

fn as_i64(v: &Bson) -> Option<i64> {
    match v {
        Bson::Int32(x) => Some(i64::from(*x)),
        Bson::Int64(x) => Some(*x),
        _ => None,
    }
}

fn cmp_num(a: &Bson, b: &Bson) -> std::cmp::Ordering {
    match (a, b) {
        (Bson::Double(x), Bson::Double(y)) => x.total_cmp(y),
        (Bson::DateTime(x), Bson::DateTime(y)) => x.cmp(y),
        _ => as_i64(a).unwrap().cmp(&as_i64(b).unwrap()),
    }
}

// ---------------------------------------------------------------------------------------------
// The generator of today's directories.
// ---------------------------------------------------------------------------------------------

/// `logs`: a TTL collection (a day), granularity seconds, a bucket per source and hour; the
/// sweep of the `rich` directory deletes the first two hours, whose buckets share a segment
/// with the third, so the manifest lists them in `expiredBuckets`. The tail is a fourth hour.
fn logs() -> Coll {
    let row = |n: u32, src: &str, hour: i64, minute: i64| {
        doc! {
            "_id": oid(4, n),
            "at": DateTime::from_millis(BASE_MS + hour * 3_600_000 + minute * 60_000),
            "src": src,
            "level": if n % 4 == 3 { "error" } else { "info" },
            "msg": format!("message {n}"),
            "code": n as i32,
        }
    };
    let mut head = Vec::new();
    let mut n = 0;
    for hour in 0..3 {
        for src in ["a", "b"] {
            for minute in [0, 10, 20] {
                head.push(row(n, src, hour, minute));
                n += 1;
            }
        }
    }
    let tail = (0..2)
        .map(|i| row(n + i, "a", 3, i64::from(i) * 10))
        .collect();
    Coll {
        name: "logs",
        options: TimeseriesOptions::new("at")
            .meta_field("src")
            .granularity(Granularity::Seconds)
            .expire_after_seconds(86_400),
        head,
        tail,
    }
}

/// The time of the `rich` directory's sweep: a day after the end of the second hour.
const SWEEP_MS: i64 = BASE_MS + 86_400_000 + 2 * 3_600_000;

/// The `rich` data set: `basic` and `logs`, and what the changes of [`write_rich`] make of
/// them.
fn rich() -> (Vec<Coll>, Vec<Expected>) {
    let mut colls = dataset::basic();
    colls.push(logs());
    let mut model: Vec<Coll> = dataset::basic();
    model.push(logs());
    for c in &mut model {
        match c.name {
            "weather" => {
                for d in &mut c.head {
                    let meta = d.get_document_mut("meta").unwrap();
                    if meta.get_i32("sensor").unwrap() == 2 {
                        meta.insert("site", "south-2");
                    }
                }
            }
            "metrics" => c.head.retain(|d| d.get_str("host").unwrap() != "h2"),
            "logs" => c.head.retain(|d| {
                d.get_datetime("at").unwrap().timestamp_millis() >= SWEEP_MS - 86_400_000
            }),
            _ => {}
        }
    }
    (colls, expected_of(&model))
}

fn expected_of(colls: &[Coll]) -> Vec<Expected> {
    colls
        .iter()
        .zip(dataset::expected(colls))
        .map(|(c, (name, docs))| Expected {
            name,
            options: dataset::options_doc(&c.options),
            docs,
        })
        .collect()
}

/// Writes the `rich` directory: small log files, so that the log rotates and keeps spare
/// files and a file started in a spare carries a salt; heads flushed; two secondary indexes;
/// a meta update and a meta delete (which rewrite segments); a TTL sweep that leaves
/// `expiredBuckets`; tails only in the log.
fn write_rich(out: &Path, written_by: &str) -> Option<PathBuf> {
    let tmp = out.join(format!(".writing-rich-{}", std::process::id()));
    let opts = DbOptions {
        wal_file_bytes: 4096,
        wal_spare_files: 2,
        ..options()
    };
    let db = Database::open_with(tmp.join("db"), opts).unwrap();
    let (colls, expected) = rich();
    dataset::create(&db, &colls).unwrap();
    dataset::insert_heads(&db, &colls).unwrap();
    db.flush().unwrap();
    let weather = db.collection("weather").unwrap();
    let metrics = db.collection("metrics").unwrap();
    weather
        .create_index(doc! {"meta.sensor": 1, "ts": 1})
        .unwrap();
    metrics.create_index(doc! {"host": 1, "t": -1}).unwrap();
    let up = weather
        .update_many(
            doc! {"meta.sensor": 2},
            doc! {"$set": {"meta.site": "south-2"}},
        )
        .unwrap();
    assert_eq!(up.modified_count, 10);
    let del = metrics.delete_many(doc! {"host": "h2"}).unwrap();
    assert_eq!(del.deleted_count, 8);
    let swept = db.sweep_expired(DateTime::from_millis(SWEEP_MS)).unwrap();
    assert_eq!(swept.buckets_deleted, 4, "{swept:?}");
    dataset::insert_tails(&db, &colls).unwrap();
    let docs: Vec<(String, Vec<Document>)> = expected
        .iter()
        .map(|c| (c.name.clone(), c.docs.clone()))
        .collect();
    dataset::check_documents(&db, &docs);
    let report = db.verify().unwrap();
    db.close().unwrap();
    dataset::publish(&tmp, out, "rich", written_by, "rich", &report)
}

/// Writes `expected-<name>.json` under `out`, or, if it exists, checks that it is what the
/// data set gives (it never changes).
fn write_expected(out: &Path, name: &str, colls: &[Expected]) {
    let path = out.join(format!("expected-{name}.json"));
    let text = expected_json(colls);
    match std::fs::read_to_string(&path) {
        Ok(old) => assert!(old == text, "{} differs from the data set", path.display()),
        Err(_) => std::fs::write(&path, text).unwrap(),
    }
    // The file reads back as the documents it was written from, bit for bit.
    let back = read_json(&path);
    for (c, b) in colls.iter().zip(back["collections"].as_array().unwrap()) {
        let docs: Vec<Vec<u8>> = b["documents"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| dataset::bytes(&ext_json_doc(d)))
            .collect();
        let want: Vec<Vec<u8>> = c.docs.iter().map(dataset::bytes).collect();
        assert!(
            docs == want,
            "{}: {} does not read back",
            path.display(),
            c.name
        );
    }
}

/// Writes the golden directories of the format versions this build writes, under
/// `tests/golden` (or `$TSBUCKET_GOLDEN_OUT`): `walonly` (all in the log), the flushed
/// `basic` set (log records stored as they are, not compacted) and `rich`. A directory whose
/// name (its versions) exists is refused, never rewritten; the run fails when all three are.
/// See `tests/golden/README.md`.
#[test]
#[ignore = "writes new golden databases; run by hand when a format version changes"]
fn write_golden_databases() {
    let out = std::env::var_os("TSBUCKET_GOLDEN_OUT")
        .map(PathBuf::from)
        .unwrap_or_else(golden_dir);
    std::fs::create_dir_all(&out).unwrap();
    let commit = std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let by = format!("tests/golden.rs write_golden_databases, on commit {commit}");
    write_expected(&out, "basic", &expected_of(&dataset::basic()));
    write_expected(&out, "rich", &rich().1);
    let mut wrote = 0;
    if dataset::generate_basic(&out, options(), false, "walonly", &by).is_some() {
        wrote += 1;
    }
    let uncompacted = DbOptions {
        wal_compact: false,
        ..options()
    };
    if dataset::generate_basic(&out, uncompacted, true, "", &by).is_some() {
        wrote += 1;
    }
    if write_rich(&out, &by).is_some() {
        wrote += 1;
    }
    assert!(wrote > 0, "every directory of this build's versions exists");
}
