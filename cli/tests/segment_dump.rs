//! The `segment-dump` tool on real segment files written through the public API: its text and
//! JSON output agree with what the database holds, `--rows` prints exactly the stored
//! measurements, `--check` passes good files, and every truncated or damaged file, an empty
//! file, a stray text file and a missing path give a clear message and exit status, never a
//! panic.

use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use tsbucket::bson::{doc, Bson, DateTime, Document};
use tsbucket::{Database, Granularity, TimeseriesOptions};

/// What the database holds per collection: name, bucket `_id`s (hex) with counts, and the
/// measurements as relaxed Extended JSON lines.
struct Expected {
    name: String,
    buckets: BTreeMap<String, i64>,
    rows: Vec<String>,
    /// BSON size of the inserted documents, with the 17-byte `_id` the engine adds to each.
    bson_bytes: u64,
}

fn inserted_size(docs: &[Document]) -> u64 {
    docs.iter()
        .map(|d| d.to_vec().unwrap().len() as u64 + 17)
        .sum()
}

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_segment-dump"))
        .args(args)
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8(b.to_vec()).unwrap()
}

fn ms(m: i64) -> DateTime {
    DateTime::from_millis(1_700_000_000_000 + m)
}

/// Two collections: "weather" (meta field, several series, a one-row bucket, a series that spans
/// two buckets, doubles, ints, strings, missing fields) and "events" (no meta field, a column
/// mixing ints and doubles).
fn build(dir: &Path) -> Vec<Expected> {
    let db = Database::open(dir).unwrap();
    let weather = db
        .create_collection(
            "weather",
            TimeseriesOptions::new("ts")
                .meta_field("sensor")
                .granularity(Granularity::Seconds),
        )
        .unwrap();
    let mut docs = Vec::new();
    for i in 0..12i64 {
        // Series "a" crosses an hour: two buckets.
        let mut d = doc! {"ts": ms(i * 600_000), "sensor": {"id": "a", "floor": 1}, "temp": 20.5 + i as f64 / 4.0};
        if i % 3 != 0 {
            d.insert("hum", (40 + i) as i32);
        }
        d.insert("label", if i % 2 == 0 { "even" } else { "odd" });
        docs.push(d);
    }
    for i in 0..5i64 {
        docs.push(doc! {"ts": ms(i * 1000), "sensor": {"id": "b", "floor": 2}, "temp": -3.25, "n": i * 1_000_000_000_000});
    }
    // A series with one measurement: a one-row bucket.
    docs.push(doc! {"ts": ms(42), "sensor": {"id": "c", "floor": 3}, "note": "only one"});
    weather.insert_many(&docs).unwrap();
    let mut sizes = vec![inserted_size(&docs)];

    let events = db
        .create_collection("events", TimeseriesOptions::new("t"))
        .unwrap();
    let mut docs = Vec::new();
    for i in 0..7i64 {
        let v = if i % 2 == 0 {
            Bson::Int32(i as i32)
        } else {
            Bson::Double(i as f64 + 0.5)
        };
        docs.push(doc! {"t": ms(i * 10), "name": format!("e{i}"), "v": v});
    }
    events.insert_many(&docs).unwrap();
    sizes.push(inserted_size(&docs));
    db.flush().unwrap();

    let mut out = Vec::new();
    for (c, bson_bytes) in [&weather, &events].into_iter().zip(sizes) {
        let mut buckets = BTreeMap::new();
        for b in c.buckets(doc! {}).unwrap() {
            let id = b.get_object_id("_id").unwrap().to_hex();
            let count = match b.get_document("control").unwrap().get("count") {
                Some(Bson::Int64(n)) => *n,
                Some(Bson::Int32(n)) => i64::from(*n),
                other => panic!("{other:?}"),
            };
            buckets.insert(id, count);
        }
        let mut rows: Vec<String> = c
            .find(doc! {})
            .unwrap()
            .map(|d| extjson(d.unwrap()))
            .collect();
        rows.sort();
        out.push(Expected {
            name: c.name().to_string(),
            buckets,
            rows,
            bson_bytes,
        });
    }
    assert_eq!(out[0].buckets.len(), 4, "series a twice, b, c");
    assert!(out[0].buckets.values().any(|&n| n == 1));
    db.close().unwrap();
    out
}

fn extjson(d: Document) -> String {
    Bson::Document(d).into_relaxed_extjson().to_string()
}

fn seg_files(db: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(db.join("seg"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "seg"))
        .collect();
    v.sort();
    v
}

/// The stderr lines of a run that names `files` as damaged: one per file, with an offset.
fn assert_each_reported<P: AsRef<Path>>(out: &Output, files: &[P]) {
    let err = text(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(out.status.code(), Some(1), "{err}");
    for f in files {
        let f = f.as_ref();
        let prefix = format!("{}: offset ", f.display());
        let lines: Vec<&str> = err.lines().filter(|l| l.starts_with(&prefix)).collect();
        assert_eq!(lines.len(), 1, "{}: {err}", f.display());
        let rest = &lines[0][prefix.len()..];
        let (offset, what) = rest.split_once(": ").unwrap();
        offset.parse::<u64>().unwrap();
        assert!(!what.is_empty());
    }
}

#[test]
fn dumps_checks_and_reports_damage() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("db");
    let expected = build(&db);
    let files = seg_files(&db);
    assert_eq!(files.len(), 2, "{files:?}");
    let db_arg = db.to_str().unwrap();

    // Text: every bucket with its _id, count, columns and codecs.
    let out = run(&[db_arg]);
    let stdout = text(&out.stdout);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    // A database's own files beside seg/ are expected, not noted.
    assert!(!stderr.contains("skipping"), "{stderr}");
    for f in &files {
        assert!(
            stdout.contains(&format!("file {}", f.display())),
            "{stdout}"
        );
    }
    let total: usize = expected.iter().map(|e| e.buckets.len()).sum();
    assert_eq!(stdout.matches("\nbucket ").count(), total, "{stdout}");
    for e in &expected {
        for (id, count) in &e.buckets {
            let at = stdout.find(&format!(": _id {id} (")).unwrap();
            let tail = &stdout[at..];
            assert!(
                tail.contains(&format!("\n  count: {count}, inserted as ")),
                "{tail}"
            );
        }
        assert!(
            stdout.contains(&format!("\"{}\", meta field", e.name)),
            "{stdout}"
        );
    }
    assert!(stdout.contains("buckets: 4, rows: 18"), "{stdout}");
    for col in [
        "\"temp\"",
        "\"hum\"",
        "\"label\"",
        "\"note\"",
        "\"name\"",
        "\"v\"",
    ] {
        assert!(stdout.contains(&format!("\n  {col} ")), "{col}: {stdout}");
    }
    for codec in ["DOUBLE(6)", "STRING(7)", "DATETIME(5)", "CONST(1)"] {
        assert!(stdout.contains(codec), "{codec}: {stdout}");
    }
    assert!(stdout.contains("  sums: {"), "{stdout}");
    assert!(!stdout.contains("\\u0001sum"), "{stdout}");
    assert!(
        !stdout.lines().any(|l| l.starts_with('{')),
        "no rows without --rows"
    );

    // JSON: one document per file, with the database's buckets and consistent numbers.
    let out = run(&["--json", db_arg]);
    assert_eq!(out.status.code(), Some(0));
    let docs: Vec<Value> = text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(docs.len(), 2);
    for (d, f) in docs.iter().zip(&files) {
        assert_eq!(d["path"], f.to_str().unwrap());
        let name = d["collection"]["name"].as_str().unwrap();
        let e = expected.iter().find(|e| e.name == name).unwrap();
        let buckets = d["buckets"].as_array().unwrap();
        assert_eq!(d["bucket_count"], buckets.len());
        let got: BTreeMap<String, i64> = buckets
            .iter()
            .map(|b| {
                (
                    b["id"].as_str().unwrap().to_string(),
                    b["count"].as_i64().unwrap(),
                )
            })
            .collect();
        assert_eq!(got, e.buckets);
        assert_eq!(d["row_count"], e.rows.len());
        assert_eq!(d["header"]["format_version"], 1);
        assert_eq!(d["header"]["directory_version"], 5);
        assert_eq!(d["bson_bytes"], e.bson_bytes);
        let per_bucket: u64 = buckets
            .iter()
            .map(|b| b["bson_bytes"].as_u64().unwrap())
            .sum();
        assert_eq!(per_bucket, e.bson_bytes);
        assert_eq!(d["header"]["magic"], "TSBSEGH\u{1}");
        let l = &d["layout"];
        let parts = [
            "header_bytes",
            "page_bytes_stored",
            "directory_bytes_stored",
            "footer_bytes",
        ];
        let sum: u64 = parts.iter().map(|k| l[k].as_u64().unwrap()).sum();
        assert_eq!(d["file_size"].as_u64().unwrap(), sum);
        let data: u64 = buckets
            .iter()
            .map(|b| b["data"]["bytes"].as_u64().unwrap())
            .sum();
        assert_eq!(data, l["page_bytes_raw"].as_u64().unwrap());
        for b in buckets {
            let count = b["count"].as_u64().unwrap();
            assert!(
                b["id_time"].as_str().unwrap().starts_with("2023-11-14T"),
                "{b}"
            );
            let min = b["control"]["min"].as_object().unwrap();
            let max = b["control"]["max"].as_object().unwrap();
            assert!(!max.contains_key("\u{1}sum"));
            let time = d["header"]["time_field"].as_str().unwrap();
            assert!(min.contains_key(time) && max.contains_key(time));
            let cols = b["columns"].as_array().unwrap();
            let col_bytes: u64 = cols
                .iter()
                .map(|c| c["encoded_bytes"].as_u64().unwrap())
                .sum();
            assert_eq!(col_bytes, b["data"]["bytes"].as_u64().unwrap());
            for c in cols {
                let rows = c["rows"].as_u64().unwrap();
                assert!(rows >= 1 && rows <= count, "{c}");
                assert!(c["raw_bytes"].as_u64().unwrap() > 5, "{c}");
                let ratio = c["raw_bytes"].as_f64().unwrap() / c["encoded_bytes"].as_f64().unwrap();
                assert!((c["ratio"].as_f64().unwrap() - ratio).abs() < 1e-9);
                let codec = c["codec"].as_str().unwrap();
                assert_eq!(
                    tsbucket::codec::ids::name(c["codec_id"].as_u64().unwrap() as u8),
                    Some(codec)
                );
            }
            let col = |n: &str| cols.iter().find(|c| c["name"] == n);
            if name == "weather" {
                assert!(b["meta"]["id"].is_string(), "{b}");
                if let Some(t) = col("temp").filter(|_| count > 1) {
                    assert_eq!(t["codec"], "DOUBLE");
                    assert!(b["control"]["sums"]["temp"].is_number(), "{b}");
                }
                if let Some(h) = col("hum") {
                    assert!(
                        h["rows"].as_u64().unwrap() < count,
                        "missing in some rows: {h}"
                    );
                }
                if count > 1 {
                    assert_eq!(col("ts").unwrap()["codec"], "DATETIME");
                }
            } else {
                assert!(b.get("meta").is_none(), "{b}");
                assert_eq!(col("name").unwrap()["codec"], "STRING");
                assert_eq!(col("v").unwrap()["codec"], "MIXED");
            }
        }
    }

    // --rows: exactly the stored measurements, as find returns them.
    for (f, d) in files.iter().zip(&docs) {
        let e = expected
            .iter()
            .find(|e| d["collection"]["name"] == e.name.as_str())
            .unwrap();
        let out = run(&["--rows", f.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(0));
        let mut rows: Vec<String> = text(&out.stdout)
            .lines()
            .filter(|l| l.starts_with('{'))
            .map(|l| serde_json::from_str::<Value>(l).unwrap().to_string())
            .collect();
        rows.sort();
        let name = &e.name;
        assert_eq!(rows, e.rows, "{name}");
        let out = run(&["--rows", "--json", f.to_str().unwrap()]);
        let d: Value = serde_json::from_slice(&out.stdout).unwrap();
        let mut rows: Vec<String> = d["buckets"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|b| b["rows"].as_array().unwrap().iter().map(Value::to_string))
            .collect();
        rows.sort();
        assert_eq!(rows, e.rows, "{name}");
    }

    // --check passes the good files.
    let out = run(&["--check", db_arg]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    for f in &files {
        assert!(
            stdout.contains(&format!("{}: ok (", f.display())),
            "{stdout}"
        );
    }

    // Damage: truncations and flipped bytes of each file, each its own file, all in one run.
    let bad = tmp.path().join("bad");
    std::fs::create_dir(&bad).unwrap();
    let mut damaged = Vec::new();
    for (k, f) in files.iter().enumerate() {
        let bytes = std::fs::read(f).unwrap();
        for cut in (0..bytes.len()).step_by(11) {
            let p = bad.join(format!("{k}-cut-{cut:06}.seg"));
            std::fs::write(&p, &bytes[..cut]).unwrap();
            damaged.push(p);
        }
        for at in (0..bytes.len()).step_by(7) {
            let mut b = bytes.clone();
            b[at] ^= 1 << (at % 8);
            let p = bad.join(format!("{k}-flip-{at:06}.seg"));
            std::fs::write(&p, &b).unwrap();
            damaged.push(p);
        }
    }
    damaged.sort();
    let bad_arg = bad.to_str().unwrap();
    let out = run(&["--check", bad_arg]);
    assert_each_reported(&out, &damaged);
    assert!(!text(&out.stdout).contains(": ok"), "{}", text(&out.stdout));
    // Without --check, dumping every bucket reads every page: the same files fail.
    assert_each_reported(&run(&[bad_arg]), &damaged);
    let out = run(&["--json", "--rows", bad_arg]);
    assert_each_reported(&out, &damaged);
    assert!(out.stdout.is_empty(), "no JSON for a damaged file");

    // An empty file, a directory with only a text file, a missing path, no arguments.
    let empty = tmp.path().join("empty.seg");
    std::fs::write(&empty, b"").unwrap();
    assert_each_reported(&run(&[empty.to_str().unwrap()]), &[&empty]);
    assert_each_reported(&run(&["--check", empty.to_str().unwrap()]), &[&empty]);
    let texts = tmp.path().join("texts");
    std::fs::create_dir(&texts).unwrap();
    std::fs::write(texts.join("readme.txt"), b"not a segment\n").unwrap();
    let out = run(&[texts.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0));
    assert!(out.stdout.is_empty());
    let err = text(&out.stderr);
    assert!(
        err.contains("skipping") && err.contains("readme.txt"),
        "{err}"
    );
    // A text file named on the command line is read as a segment, and refused as one.
    let txt = texts.join("readme.txt");
    assert_each_reported(&run(&[txt.to_str().unwrap()]), &[&txt]);
    let missing = tmp.path().join("missing.seg");
    let out = run(&[missing.to_str().unwrap(), files[0].to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains(missing.to_str().unwrap()) && !err.contains("panicked"),
        "{err}"
    );
    assert!(
        text(&out.stdout).contains("bucket 0:"),
        "the good file is still dumped"
    );
    assert_eq!(run(&[]).status.code(), Some(2));
    assert_eq!(run(&["--bogus", db_arg]).status.code(), Some(2));
    assert_eq!(run(&["--help"]).status.code(), Some(0));
}

const NOW: i64 = 1_704_069_000_000;

fn ttl_docs(series: &str, times: &[i64]) -> Vec<tsbucket::bson::Document> {
    times
        .iter()
        .map(|&t| tsbucket::bson::doc! {"t": tsbucket::bson::DateTime::from_millis(t), "m": series, "v": t})
        .collect()
}

/// `segment-dump` marks the buckets a sweep deleted from a partly expired segment.
#[test]
fn segment_dump_marks_swept_buckets() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("db");
    let db = tsbucket::Database::open_with(
        &dir,
        tsbucket::DbOptions {
            ttl_interval: None,
            ..tsbucket::DbOptions::default()
        },
    )
    .unwrap();
    let c = db
        .create_collection(
            "c",
            tsbucket::TimeseriesOptions::new("t")
                .meta_field("m")
                .expire_after_seconds(60),
        )
        .unwrap();
    c.insert_many(&ttl_docs("old", &[NOW - 3_600_000])).unwrap();
    c.insert_many(&ttl_docs("young", &[NOW])).unwrap();
    db.flush().unwrap();
    assert_eq!(
        db.sweep_expired(tsbucket::bson::DateTime::from_millis(NOW))
            .unwrap()
            .buckets_deleted,
        1
    );
    db.close().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_segment-dump"))
        .arg("--json")
        .arg(&dir)
        .output()
        .unwrap();
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let buckets = v["buckets"].as_array().unwrap();
    assert_eq!(buckets.len(), 2);
    let flagged: Vec<bool> = buckets
        .iter()
        .map(|b| b.get("expired") == Some(&serde_json::Value::Bool(true)))
        .collect();
    let metas: Vec<&str> = buckets
        .iter()
        .map(|b| b["meta"].as_str().unwrap())
        .collect();
    for (m, f) in metas.iter().zip(&flagged) {
        assert_eq!(*f, *m == "old", "{m}");
    }
    let text = std::process::Command::new(env!("CARGO_BIN_EXE_segment-dump"))
        .arg(&dir)
        .output()
        .unwrap();
    let text = String::from_utf8(text.stdout).unwrap();
    assert_eq!(
        text.matches("deleted by the TTL sweeper").count(),
        1,
        "{text}"
    );
}
