//! End-to-end tests of the `tsbucket` binary: generate, create, import, query, verify, and
//! the failure paths (bad input lines, corruption, closed pipes, usage errors).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// Rows of `gen devops --hosts 5 --hours 1`: 5 hosts every 10 s.
const ROWS: u64 = 5 * 360;

fn tsbucket(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tsbucket"))
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap()
}

/// Runs and expects success; returns stdout.
fn ok(dir: &Path, args: &[&str]) -> String {
    let out = tsbucket(dir, args);
    assert!(
        out.status.success(),
        "tsbucket {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Runs and expects exit status `code`; returns stderr.
fn fails(dir: &Path, args: &[&str], code: i32) -> String {
    let out = tsbucket(dir, args);
    assert_eq!(out.status.code(), Some(code), "tsbucket {args:?}: {out:?}");
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(!err.contains("panicked"), "{err}");
    err
}

/// Creates collection `coll` in `db` under `dir`.
fn create(dir: &Path, coll: &str, time: &str, meta: Option<&str>) {
    let mut args = vec!["create", "db", coll, "--time-field", time];
    if let Some(m) = meta {
        args.extend(["--meta-field", m]);
    }
    ok(dir, &args);
}

fn count(dir: &Path, coll: &str, filter: &str) -> u64 {
    ok(dir, &["count", "db", coll, filter])
        .trim()
        .parse()
        .unwrap()
}

fn json_lines(s: &str) -> Vec<serde_json::Value> {
    s.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), target).unwrap();
        }
    }
}

fn first_segment(db: &Path) -> PathBuf {
    let mut segs: Vec<PathBuf> = std::fs::read_dir(db.join("seg"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    segs.sort();
    segs.into_iter().next().unwrap()
}

#[test]
fn every_format_imports_to_the_same_answers_and_verify_finds_damage() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let gen = |file: &str| {
        ok(
            d,
            &[
                "gen", "devops", "--hosts", "5", "--hours", "1", "--out", file,
            ],
        )
    };
    for f in ["d.jsonl", "d.bson", "d.csv", "d.lp", "again.jsonl"] {
        gen(f);
    }
    let jsonl = std::fs::read_to_string(d.join("d.jsonl")).unwrap();
    assert_eq!(jsonl.lines().count() as u64, ROWS);
    assert_eq!(
        jsonl,
        std::fs::read_to_string(d.join("again.jsonl")).unwrap()
    );
    assert!(jsonl
        .starts_with(r#"{"time":{"$date":"2016-01-01T00:00:00Z"},"tags":{"hostname":"host_0""#));
    let csv = std::fs::read_to_string(d.join("d.csv")).unwrap();
    assert_eq!(csv.lines().count() as u64, ROWS + 1);
    assert!(csv.starts_with("time,tags.hostname,tags.region,"));
    let lp = std::fs::read_to_string(d.join("d.lp")).unwrap();
    assert_eq!(lp.lines().count() as u64, ROWS);
    assert!(
        lp.starts_with("cpu,hostname=host_0,region=") && lp.lines().all(|l| l.ends_with("000000")),
        "{}",
        lp.lines().next().unwrap_or_default()
    );

    create(d, "cpu", "time", Some("tags"));
    let summary = ok(d, &["import", "db", "cpu", "d.jsonl"]);
    assert!(
        summary.contains(&format!("imported {ROWS} rows")),
        "{summary}"
    );
    let create = ["--create", "--time-field", "time", "--meta-field", "tags"];
    ok(
        d,
        &[&["import", "db", "cpu_bson", "d.bson"][..], &create].concat(),
    );
    ok(
        d,
        &[&["import", "db", "cpu_csv", "d.csv"][..], &create].concat(),
    );
    // Line protocol's meta document gains the measurement's name; the groups are the same.
    ok(
        d,
        &[&["import", "db", "cpu_lp", "d.lp"][..], &create].concat(),
    );

    let group = r#"[{"$group": {"_id": "$tags.hostname", "n": {"$sum": 1}, "u": {"$sum": "$usage_user"}}}, {"$sort": {"_id": 1}}]"#;
    let reference = ok(d, &["aggregate", "db", "cpu", group]);
    let groups = json_lines(&reference);
    assert_eq!(groups.len(), 5);
    assert!(groups.iter().all(|g| g["n"] == 360));
    assert_eq!(groups[1]["_id"], "host_1");
    for coll in ["cpu", "cpu_bson", "cpu_csv", "cpu_lp"] {
        assert_eq!(count(d, coll, "{}"), ROWS);
        assert_eq!(count(d, coll, r#"{"tags.hostname": "host_1"}"#), 360);
        // The same data whatever the format it travelled in.
        assert_eq!(ok(d, &["aggregate", "db", coll, group]), reference);
    }

    let found = json_lines(&ok(
        d,
        &[
            "find",
            "db",
            "cpu",
            r#"{"tags.hostname": "host_2"}"#,
            "--limit",
            "7",
        ],
    ));
    assert_eq!(found.len(), 7);
    assert!(found.iter().all(|f| f["tags"]["hostname"] == "host_2"));
    let last = json_lines(&ok(
        d,
        &[
            "find",
            "db",
            "cpu_csv",
            "--sort",
            r#"{"time": -1}"#,
            "--limit",
            "1",
            "--projection",
            r#"{"time": 1, "_id": 0}"#,
        ],
    ));
    assert_eq!(
        last,
        [serde_json::json!({"time": {"$date": "2016-01-01T00:59:50Z"}})]
    );
    let canonical = r#"{"time": {"$gte": {"$date": {"$numberLong": "1451608200000"}}}}"#;
    assert_eq!(count(d, "cpu", canonical), ROWS / 2);

    let explain: serde_json::Value =
        serde_json::from_str(&ok(d, &["explain", "db", "cpu", canonical])).unwrap();
    assert_eq!(explain["buckets_total"], 5);
    assert_eq!(explain["index_used"], serde_json::Value::Null);
    let stats: serde_json::Value =
        serde_json::from_str(&ok(d, &["stats", "db", "--json"])).unwrap();
    assert_eq!(stats["cpu_csv"]["measurements"], ROWS);
    assert!(ok(d, &["list", "db"]).contains("cpu_bson: timeField 'time', metaField 'tags'"));

    let report = ok(d, &["verify", "db"]);
    assert!(
        report.contains(&format!("{} measurements", 4 * ROWS)),
        "{report}"
    );

    // The bundled inspector agrees: every segment checks out, and its JSON counts every row.
    let dump = Command::new(env!("CARGO_BIN_EXE_segment-dump"))
        .args(["--check", "--json"])
        .arg(d.join("db"))
        .output()
        .unwrap();
    assert!(dump.status.success(), "{dump:?}");
    let rows: u64 = json_lines(&String::from_utf8(dump.stdout).unwrap())
        .iter()
        .map(|f| f["row_count"].as_u64().unwrap())
        .sum();
    assert_eq!(rows, 4 * ROWS);

    // Damage the middle of a segment in a copy: verify must fail naming the file.
    copy_dir(&d.join("db"), &d.join("damaged"));
    let seg = first_segment(&d.join("damaged"));
    let mut bytes = std::fs::read(&seg).unwrap();
    let mid = bytes.len() / 2;
    for b in &mut bytes[mid..mid + 16] {
        *b ^= 0xa5;
    }
    std::fs::write(&seg, bytes).unwrap();
    let err = fails(d, &["verify", "damaged"], 1);
    let name = seg.file_name().unwrap().to_str().unwrap();
    assert!(err.contains(name) && err.contains("offset"), "{err}");
    let dump = Command::new(env!("CARGO_BIN_EXE_segment-dump"))
        .arg("--check")
        .arg(&seg)
        .output()
        .unwrap();
    assert_eq!(dump.status.code(), Some(1), "{dump:?}");
    let err = String::from_utf8(dump.stderr).unwrap();
    assert!(err.contains(name) && err.contains("offset"), "{err}");
}

#[test]
fn a_bad_line_stops_the_import_or_is_skipped() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    ok(
        d,
        &[
            "gen", "devops", "--hosts", "5", "--hours", "0.01", "--out", "d.jsonl",
        ],
    );
    let good: Vec<String> = std::fs::read_to_string(d.join("d.jsonl"))
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    assert!(good.len() >= 10);
    let with_bad = |n: usize, bad: &str| {
        let mut lines = good[..10].to_vec();
        lines[n - 1] = bad.to_string();
        lines.join("\n") + "\n"
    };
    std::fs::write(d.join("bad3.jsonl"), with_bad(3, r#"{"time": oops}"#)).unwrap();
    std::fs::write(d.join("bad7.jsonl"), with_bad(7, r#"{"usage_user": 1}"#)).unwrap();
    create(d, "c", "time", Some("tags"));

    // Line 3 is in the first batch of 4: nothing is written.
    let err = fails(d, &["import", "db", "c", "bad3.jsonl", "--batch", "4"], 1);
    assert!(err.contains("bad3.jsonl, line 3"), "{err}");
    assert!(
        err.contains("nothing of the current batch was written"),
        "{err}"
    );
    assert_eq!(count(d, "c", "{}"), 0);

    // Line 7 parses but has no time: the engine refuses its batch, the first batch stays.
    let err = fails(d, &["import", "db", "c", "bad7.jsonl", "--batch", "4"], 1);
    assert!(
        err.contains("bad7.jsonl, line 7") && err.contains("'time'"),
        "{err}"
    );
    assert_eq!(count(d, "c", "{}"), 4);

    let summary = ok(
        d,
        &[
            "import",
            "db",
            "c",
            "bad3.jsonl",
            "--skip-bad",
            "--batch",
            "4",
        ],
    );
    assert!(summary.contains("imported 9 rows, skipped 1"), "{summary}");
    assert_eq!(count(d, "c", "{}"), 13);
}

#[test]
fn a_closed_pipe_ends_find_and_export_quietly() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    ok(
        d,
        &[
            "gen", "devops", "--hosts", "20", "--hours", "0.5", "--out", "d.bson",
        ],
    );
    ok(
        d,
        &[
            "import",
            "db",
            "cpu",
            "d.bson",
            "--create",
            "--time-field",
            "time",
        ],
    );
    for command in [
        &["find", "db", "cpu"][..],
        &["export", "db", "cpu"],
        &["export", "db", "cpu", "--format", "csv"],
        &["export", "db", "cpu", "--format", "parquet"],
    ] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_tsbucket"))
            .current_dir(d)
            .args(command)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut first = [0u8; 4];
        child.stdout.take().unwrap().read_exact(&mut first).unwrap();
        let want: &[u8] = match command.last() {
            Some(&"parquet") => b"PAR1",
            Some(&"csv") => &first,
            _ => br#"{"_i"#,
        };
        assert_eq!(first, want, "{command:?}");
        // The reader is dropped here; the rest of the output (megabytes) cannot be written.
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{command:?}: {:?}: {err}", out.status);
        assert!(!err.contains("panicked"), "{err}");
    }
}

#[test]
fn usage_and_option_errors_have_distinct_statuses() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    fails(d, &["create", "db", "c"], 2);
    fails(
        d,
        &[
            "create",
            "db",
            "c",
            "--time-field",
            "t",
            "--granularity",
            "hours",
            "--bucket-span",
            "60",
        ],
        2,
    );
    fails(d, &["import", "db", "c", "x.jsonl", "--meta-field", "m"], 2);
    let err = fails(d, &["create", "db", "c", "--time-field", "_id"], 1);
    assert!(err.contains("MongoDB code 72"), "{err}");
    let err = fails(d, &["find", "nothing-here", "c"], 1);
    assert!(err.contains("no tsbucket database"), "{err}");
    assert!(!d.join("nothing-here").exists());
    create(d, "c", "t", None);
    let err = fails(d, &["find", "db", "c", r#"{"t": {"$bogus": 1}}"#], 1);
    assert!(err.contains("MongoDB code 2"), "{err}");
    let err = fails(d, &["find", "db", "c", "{not json"], 1);
    assert!(err.contains("filter: invalid JSON"), "{err}");
}

#[test]
fn lifecycle_commands_update_delete_index_coll_mod_sweep_and_drop() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    ok(
        d,
        &[
            "gen", "devops", "--hosts", "5", "--hours", "1", "--out", "d.jsonl",
        ],
    );
    ok(
        d,
        &[
            "import",
            "db",
            "cpu",
            "d.jsonl",
            "--create",
            "--time-field",
            "time",
            "--meta-field",
            "tags",
        ],
    );
    let per_host = ROWS / 5;

    let out = ok(
        d,
        &[
            "update",
            "db",
            "cpu",
            r#"{"tags.hostname": "host_1"}"#,
            r#"{"$set": {"tags.rack": "r9"}}"#,
        ],
    );
    assert_eq!(
        out.trim(),
        format!("matched {per_host} measurements, modified {per_host}")
    );
    assert_eq!(count(d, "cpu", r#"{"tags.rack": "r9"}"#), per_host);
    let err = fails(
        d,
        &[
            "update",
            "db",
            "cpu",
            r#"{"usage_user": 1}"#,
            r#"{"$set": {"tags.rack": "r1"}}"#,
        ],
        1,
    );
    assert!(err.contains("MongoDB code 72"), "{err}");

    let out = ok(
        d,
        &["delete", "db", "cpu", r#"{"tags.hostname": "host_2"}"#],
    );
    assert_eq!(out.trim(), format!("deleted {per_host} measurements"));
    assert_eq!(count(d, "cpu", "{}"), ROWS - per_host);

    let name = ok(
        d,
        &[
            "index",
            "db",
            "cpu",
            "create",
            r#"{"tags.hostname": 1, "time": -1}"#,
        ],
    );
    assert_eq!(name.trim(), "tags.hostname_1_time_-1");
    let list = json_lines(&ok(d, &["index", "db", "cpu", "list", "--buckets"]));
    assert_eq!(
        list[0]["key"],
        serde_json::json!({"meta.hostname": 1, "control.max.time": -1, "control.min.time": -1})
    );
    let explain: serde_json::Value = serde_json::from_str(&ok(
        d,
        &["explain", "db", "cpu", r#"{"tags.hostname": "host_1"}"#],
    ))
    .unwrap();
    assert_eq!(explain["index_used"], "tags.hostname_1_time_-1");
    assert_eq!(explain["meta_lookup"], serde_json::Value::Null);
    let err = fails(
        d,
        &["index", "db", "cpu", "create", r#"{"time": "text"}"#],
        1,
    );
    assert!(err.contains("MongoDB code"), "{err}");
    ok(
        d,
        &["index", "db", "cpu", "drop", "tags.hostname_1_time_-1"],
    );
    assert!(ok(d, &["index", "db", "cpu", "list"]).trim().is_empty());

    let err = fails(d, &["coll-mod", "db", "cpu", "--bucket-span", "60"], 1);
    assert!(err.contains("MongoDB code 72"), "{err}");
    let out = ok(d, &["coll-mod", "db", "cpu", "--granularity", "minutes"]);
    assert!(out.contains("granularity minutes"), "{out}");
    let out = ok(d, &["coll-mod", "db", "cpu", "--expire-after", "3600"]);
    assert!(out.contains("expireAfterSeconds 3600"), "{out}");
    fails(d, &["coll-mod", "db", "cpu"], 1);

    // The generated hour starts at 2016-01-01T00:00:00Z; two hours later all of it is older
    // than an hour.
    let out = ok(d, &["sweep", "db", "--now", "2016-01-01T01:30:00Z"]);
    assert!(out.starts_with("deleted 0 buckets"), "{out}");
    let out = ok(d, &["sweep", "db", "--now", "2016-01-01T02:00:01Z"]);
    assert!(
        out.contains(&format!("({} measurements)", ROWS - per_host)),
        "{out}"
    );
    assert_eq!(count(d, "cpu", "{}"), 0);
    fails(d, &["sweep", "db", "--now", "yesterday"], 1);

    assert_eq!(ok(d, &["drop", "db", "cpu"]).trim(), "dropped cpu");
    fails(d, &["drop", "db", "cpu"], 1);
    assert!(ok(d, &["list", "db"]).trim().is_empty());
    ok(d, &["verify", "db"]);
}

/// Dates before 1970, from the year 10000 on and at both ends of the range print as
/// `{"$date": {"$numberLong": ...}}` (they printed as the last instant of the year 9999), so
/// `find`'s output imports back to the same documents.
#[test]
fn find_output_of_dates_outside_1970_to_9999_imports_back_unchanged() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let times: [i64; 9] = [
        i64::MIN,
        i64::MIN + 1,
        -62_135_596_800_001,
        -1,
        0,
        1_451_606_400_123,
        253_402_300_799_999,
        253_402_300_800_000,
        i64::MAX,
    ];
    let input: String = times
        .iter()
        .enumerate()
        .map(|(i, ms)| {
            format!(
                r#"{{"_id": {i}, "t": {{"$date": {{"$numberLong": "{ms}"}}}}, "tags": {{"h": "a"}}, "at": [{{"$date": {{"$numberLong": "{ms}"}}}}]}}"#
            ) + "\n"
        })
        .collect();
    std::fs::write(d.join("in.jsonl"), input).unwrap();
    let create = ["--create", "--time-field", "t", "--meta-field", "tags"];
    ok(
        d,
        &[&["import", "db", "a", "in.jsonl"][..], &create].concat(),
    );
    let sort = ["--sort", r#"{"t": 1}"#];
    let first = ok(d, &[&["find", "db", "a"][..], &sort].concat());
    assert!(!first.contains("9999-12-31T23:59:59.999999999Z"), "{first}");
    let docs = json_lines(&first);
    assert_eq!(docs.len(), times.len());
    for (doc, &ms) in docs.iter().zip(&times) {
        let want = if (0..253_402_300_800_000).contains(&ms) {
            serde_json::Value::String(
                tsbucket::bson::DateTime::from_millis(ms)
                    .try_to_rfc3339_string()
                    .unwrap(),
            )
        } else {
            serde_json::json!({"$numberLong": ms.to_string()})
        };
        assert_eq!(doc["t"]["$date"], want, "{doc}");
        assert_eq!(doc["at"][0], doc["t"], "{doc}");
    }

    std::fs::write(d.join("out.jsonl"), &first).unwrap();
    ok(
        d,
        &[&["import", "db", "b", "out.jsonl"][..], &create].concat(),
    );
    assert_eq!(ok(d, &[&["find", "db", "b"][..], &sort].concat()), first);
    let year_10000 = r#"{"t": {"$gte": {"$date": {"$numberLong": "253402300800000"}}}}"#;
    assert_eq!(count(d, "b", year_10000), 2);

    // The bundled inspector prints rows and control.min/max the same way.
    let dump = Command::new(env!("CARGO_BIN_EXE_segment-dump"))
        .args(["--rows", "--json"])
        .arg(d.join("db"))
        .output()
        .unwrap();
    assert!(dump.status.success(), "{dump:?}");
    let dump = String::from_utf8(dump.stdout).unwrap();
    assert!(!dump.contains("9999-12-31T23:59:59.999999999Z"), "{dump}");
    assert!(
        dump.contains(r#"{"$date":{"$numberLong":"9223372036854775807"}}"#),
        "{dump}"
    );
}

#[test]
fn json_records_nest_as_deep_as_bson_and_deeper_ones_are_refused_by_line() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    // A record whose field "x" holds a value nested so that its innermost element sits
    // `levels` levels deep ("x" itself is at level 1).
    let record = |s: i64, levels: usize| {
        let inner = levels - 1;
        format!(
            r#"{{"t": {{"$date": "2024-01-01T00:00:{s:02}Z"}}, "x": {}1{}}}"#,
            r#"{"a": "#.repeat(inner),
            "}".repeat(inner)
        )
    };
    let lines = [
        record(0, 180),
        record(1, 181),
        record(2, 100_000),
        format!(
            r#"{{"t": {{"$date": "2024-01-01T00:00:03Z"}}, "x": {}"#,
            "[".repeat(100_000)
        ),
        record(4, 2),
    ];
    std::fs::write(d.join("deep.jsonl"), lines.join("\n") + "\n").unwrap();
    create(d, "c", "t", None);
    let err = fails(d, &["import", "db", "c", "deep.jsonl"], 1);
    assert!(
        err.contains("deep.jsonl, line 2: the document is nested more than 180 levels deep"),
        "{err}"
    );
    assert_eq!(count(d, "c", "{}"), 0, "the batch of line 2 is not written");
    let out = tsbucket(d, &["import", "db", "c", "deep.jsonl", "--skip-bad"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    for line in [2, 3, 4] {
        assert!(err.contains(&format!("line {line}: ")), "{err}");
    }
    assert!(String::from_utf8_lossy(&out.stdout).contains("imported 2 rows, skipped 3"));
    assert_eq!(count(d, "c", "{}"), 2);
    // The stored document reads back as deep as it went in.
    let found = ok(
        d,
        &[
            "find",
            "db",
            "c",
            r#"{"t": {"$date": "2024-01-01T00:00:00Z"}}"#,
        ],
    );
    // Deeper than serde_json reads by default, so counted in the text.
    assert_eq!(found.matches(r#"{"a":"#).count(), 179, "{found}");
    assert!(found.contains(r#""a":1}}"#), "{found}");
}

#[test]
fn bson_records_that_repeat_a_name_are_refused_not_collapsed() {
    use tsbucket::bson::{doc, DateTime, Document};
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let t = |s: i64| DateTime::from_millis(1_700_000_000_000 + s * 1000);
    // `d` as BSON in which the field named `dupB` is renamed `dupA`.
    let repeating = |d: &Document| {
        let mut bytes = d.to_vec().unwrap();
        let at = bytes.windows(5).position(|w| w == b"dupB\0").unwrap();
        bytes[at + 3] = b'A';
        bytes
    };
    let mut file = doc! {"t": t(0), "x": {"dupA": 1}}.to_vec().unwrap();
    file.extend(repeating(
        &doc! {"t": t(1), "x": [0, {"y": {"dupA": 1, "dupB": 2}}]},
    ));
    file.extend(repeating(&doc! {"t": t(2), "dupA": 1, "dupB": 2}));
    std::fs::write(d.join("dup.bson"), file).unwrap();
    create(d, "c", "t", None);
    let err = fails(d, &["import", "db", "c", "dup.bson"], 1);
    assert!(
        err.contains("document 2 at byte offset")
            && err.contains(r#"field name "x.1.y.dupA" appears more than once"#),
        "{err}"
    );
    assert_eq!(count(d, "c", "{}"), 0);
    let out = tsbucket(d, &["import", "db", "c", "dup.bson", "--skip-bad"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains(r#"field name "dupA" appears more than once"#),
        "{err}"
    );
    assert_eq!(count(d, "c", "{}"), 1);
}

#[test]
fn times_other_than_dates_are_read_in_the_stated_unit_or_format_and_never_guessed() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    create(d, "c", "t", None);
    // Epoch seconds, as InfluxDB and Telegraf export them.
    std::fs::write(
        d.join("s.jsonl"),
        "{\"t\": 1451606400, \"v\": 1}\n{\"t\": 1451606410, \"v\": 2}\n",
    )
    .unwrap();
    let err = fails(d, &["import", "db", "c", "s.jsonl"], 1);
    assert!(
        err.contains("s.jsonl, line 1")
            && err.contains("--time-unit")
            && err.contains("as seconds, 2016-01-01T00:00:00Z"),
        "{err}"
    );
    assert_eq!(count(d, "c", "{}"), 0);
    ok(d, &["import", "db", "c", "s.jsonl", "--time-unit", "s"]);
    let since = r#"{"t": {"$gte": {"$date": "2016-01-01T00:00:00Z"}}}"#;
    assert_eq!(count(d, "c", since), 2);
    // Nanoseconds in a CSV, and text times without a zone.
    std::fs::write(d.join("ns.csv"), "t,v\n1451606420000000000,3\n").unwrap();
    fails(d, &["import", "db", "c", "ns.csv"], 1);
    ok(d, &["import", "db", "c", "ns.csv", "--time-unit", "ns"]);
    std::fs::write(d.join("text.csv"), "t,v\n2016-01-01 00:00:30,4\n").unwrap();
    let err = fails(d, &["import", "db", "c", "text.csv"], 1);
    assert!(
        err.contains("no time zone") && err.contains("--time-format"),
        "{err}"
    );
    let fmt = ["--time-format", "%Y-%m-%d %H:%M:%S"];
    ok(d, &[&["import", "db", "c", "text.csv"][..], &fmt].concat());
    assert_eq!(count(d, "c", since), 4);
    let out = ok(d, &["find", "db", "c", r#"{"v": 4}"#]);
    assert!(out.contains("2016-01-01T00:00:30Z"), "{out}");
}

#[test]
fn import_drop_replaces_the_data_and_create_says_when_a_collection_exists() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let create = [
        "create",
        "db",
        "c",
        "--time-field",
        "t",
        "--meta-field",
        "m",
    ];
    assert!(ok(d, &create).starts_with("created 'c'"));
    let again = ok(d, &create);
    assert!(
        again.starts_with("exists, with the same options, unchanged"),
        "{again}"
    );
    let lines = "{\"t\": {\"$date\": \"2016-01-01T00:00:00Z\"}, \"m\": 1, \"v\": 1}\n";
    std::fs::write(d.join("a.jsonl"), lines).unwrap();
    ok(d, &["import", "db", "c", "a.jsonl"]);
    ok(d, &["import", "db", "c", "a.jsonl"]);
    assert_eq!(count(d, "c", "{}"), 2);
    // Dropped first, and made again with the options it had.
    let out = ok(d, &["import", "db", "c", "a.jsonl", "--drop"]);
    assert!(out.starts_with("dropped 'c' first"), "{out}");
    assert_eq!(count(d, "c", "{}"), 1);
    // The options it had: creating it as before is accepted as the same.
    assert!(ok(d, &create).starts_with("exists, with the same options"));
    fails(d, &["import", "db", "nope", "a.jsonl", "--drop"], 1);
}

#[test]
fn json_arrays_pretty_json_compressed_files_and_other_delimiters_import() {
    use std::io::Write;
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    create(d, "c", "t", None);
    let doc = |s: u32, v: &str| {
        format!("{{\"t\": {{\"$date\": \"2016-01-01T00:00:{s:02}Z\"}}, \"v\": {v}}}")
    };
    // mongoexport --jsonArray, with brackets and braces inside strings.
    let array = format!(
        "[\n  {},\n  {}\n]\n",
        doc(0, "1"),
        doc(1, r#""} ] [ \" {""#)
    );
    std::fs::write(d.join("a.json"), &array).unwrap();
    // mongoexport --pretty: documents over several lines, one after another.
    let pretty = format!("{}\n{}\n", doc(2, "3"), doc(3, "4")).replace(", ", ",\n  ");
    std::fs::write(d.join("p.json"), &pretty).unwrap();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(array.as_bytes()).unwrap();
    std::fs::write(d.join("a.json.gz"), gz.finish().unwrap()).unwrap();
    std::fs::write(
        d.join("p.zst"),
        zstd::encode_all(pretty.as_bytes(), 3).unwrap(),
    )
    .unwrap();
    std::fs::write(d.join("s.csv"), "t;v\n2016-01-01T00:00:04Z;5\n").unwrap();
    for f in ["a.json", "p.json", "a.json.gz", "p.zst"] {
        let out = ok(d, &["import", "db", "c", f]);
        assert!(out.contains("imported 2 rows"), "{f}: {out}");
    }
    assert_eq!(count(d, "c", r#"{"v": "} ] [ \" {"}"#), 2);
    assert_eq!(count(d, "c", r#"{"v": 4}"#), 2);
    // A file separated by another character says which option reads it.
    let err = fails(d, &["import", "db", "c", "s.csv"], 1);
    assert!(err.contains("--delimiter ';'"), "{err}");
    ok(d, &["import", "db", "c", "s.csv", "--delimiter", ";"]);
    assert_eq!(count(d, "c", r#"{"v": 5}"#), 1);
    // An array that is cut off, or holds something else than documents, stops the import.
    std::fs::write(d.join("cut.json"), &array[..array.len() - 3]).unwrap();
    let err = fails(d, &["import", "db", "c", "cut.json"], 1);
    assert!(err.contains("ends inside the JSON array"), "{err}");
    std::fs::write(d.join("five.json"), "[5]").unwrap();
    let err = fails(d, &["import", "db", "c", "five.json"], 1);
    assert!(err.contains("not a document"), "{err}");
    // An empty CSV file and a date without a time are told as such.
    std::fs::write(d.join("e.csv"), "").unwrap();
    assert!(fails(d, &["import", "db", "c", "e.csv"], 1).contains("the file is empty"));
    std::fs::write(
        d.join("day.jsonl"),
        "{\"t\": {\"$date\": \"2021-05-19\"}}\n",
    )
    .unwrap();
    let err = fails(d, &["import", "db", "c", "day.jsonl"], 1);
    assert!(
        err.contains("not an RFC 3339 date") && !err.contains("Kind"),
        "{err}"
    );
    assert_eq!(count(d, "c", "{}"), 9);
}

#[test]
fn wide_documents_import_in_batches_of_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    create(d, "c", "t", None);
    // 300 documents of 200 KB of text that does not compress: 60 MB in one batch of rows,
    // over the engine's 48 MiB.
    let mut x: u64 = 7;
    let mut wide = || -> String {
        (0..200_000)
            .map(|_| {
                x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                char::from(b'a' + (x >> 59) as u8)
            })
            .collect()
    };
    let lines: String = (0..300)
        .map(|i| {
            let wide = wide();
            format!(
                "{{\"t\": {{\"$date\": {{\"$numberLong\": \"{}\"}}}}, \"s\": \"{wide}\"}}\n",
                1_451_606_400_000i64 + i
            )
        })
        .collect();
    std::fs::write(d.join("wide.jsonl"), lines).unwrap();
    let out = ok(d, &["import", "db", "c", "wide.jsonl", "--batch", "1000"]);
    assert!(out.contains("imported 300 rows"), "{out}");
    assert_eq!(count(d, "c", "{}"), 300);
}

#[test]
fn an_interrupted_import_says_which_rows_are_written() {
    use std::io::Write;
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    create(d, "c", "t", None);
    let mut child = Command::new(env!("CARGO_BIN_EXE_tsbucket"))
        .current_dir(d)
        .args(["import", "db", "c", "-", "--batch", "100"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Two chunks of records reach the importer (it is handed 256 at a time); stdin stays
    // open, so the reader waits for more.
    let mut stdin = child.stdin.take().unwrap();
    for i in 0..600i64 {
        let t = 1_451_606_400_000 + i;
        writeln!(
            stdin,
            "{{\"t\": {{\"$date\": {{\"$numberLong\": \"{t}\"}}}}, \"i\": {i}}}"
        )
        .unwrap();
    }
    stdin.flush().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let kill = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");
    // However far it got, what it says is written is what the collection holds: whole
    // batches, through the line it names.
    drop(stdin);
    let n = count(d, "c", "{}");
    assert!(n % 100 == 0 && n <= 500, "{n}");
    let said = match n {
        0 => "import interrupted: no row is imported".to_string(),
        n => format!("import interrupted: the {n} rows through <stdin>, line {n} are imported"),
    };
    assert!(err.contains(&said), "{err}");
}

#[test]
fn line_protocol_imports_with_its_tags_as_the_meta_document() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    create(d, "c", "time", Some("tags"));
    let lines = "# from influx\n\
                 cpu,host=a,region=eu usage_user=12.5,n=3i 1451606400000000000\n\
                 cpu,region=eu,host=a usage_user=13.5,n=4i 1451606410000000000\n\
                 cpu,host=b,region=eu usage_user=1,n=5i 1451606400000000000\n";
    std::fs::write(d.join("p.lp"), lines).unwrap();
    let out = ok(d, &["import", "db", "c", "p.lp"]);
    assert!(out.contains("imported 3 rows"), "{out}");
    // Without the extension, it is found by its first line.
    std::fs::write(d.join("p.txt"), lines).unwrap();
    let out = ok(d, &["import", "db", "c", "p.txt", "--drop"]);
    assert!(out.contains("imported 3 rows"), "{out}");
    // The tags in either order are one series.
    assert_eq!(
        count(
            d,
            "c",
            r#"{"tags": {"measurement": "cpu", "host": "a", "region": "eu"}}"#
        ),
        2
    );
    let found = ok(d, &["find", "db", "c", r#"{"n": 3}"#]);
    assert!(
        found.contains("2016-01-01T00:00:00Z") && found.contains("12.5"),
        "{found}"
    );
    // Seconds, with --precision; a line without a timestamp is refused by its line.
    std::fs::write(
        d.join("s.lp"),
        "mem,host=a used=1i 1451606420\nmem,host=a used=2i\n",
    )
    .unwrap();
    let err = fails(d, &["import", "db", "c", "s.lp", "--precision", "s"], 1);
    assert!(
        err.contains("s.lp, line 2") && err.contains("no timestamp"),
        "{err}"
    );
    ok(
        d,
        &[
            "import",
            "db",
            "c",
            "s.lp",
            "--precision",
            "s",
            "--skip-bad",
        ],
    );
    assert_eq!(count(d, "c", r#"{"tags.measurement": "mem"}"#), 1);
    // A collection without a meta field has nowhere for the tags.
    create(d, "flat", "time", None);
    let err = fails(d, &["import", "db", "flat", "p.lp"], 1);
    assert!(
        err.contains("needs a collection with a meta field"),
        "{err}"
    );
}

#[test]
fn exports_import_again_to_identical_documents_for_every_type() {
    use tsbucket::bson::{doc, oid::ObjectId, spec::BinarySubtype, Binary, Bson, DateTime};
    use tsbucket::bson::{Decimal128, Regex, Timestamp};
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    create(d, "c", "t", Some("m"));
    let mut lines = String::new();
    for (i, t) in [
        0i64,
        1_451_606_400_123,
        -62_167_219_200_001,
        253_402_300_800_000,
    ]
    .into_iter()
    .enumerate()
    {
        let d = doc! {
            "t": DateTime::from_millis(t),
            "m": {"host": format!("h{i}"), "n": i as i32},
            "i32": i as i32, "i64": 1_i64 << 40, "small64": 3_i64, "f": 1.0, "g": -0.5,
            "inf": f64::INFINITY, "s": "héllo \"q\"", "b": true, "z": Bson::Null,
            "o": ObjectId::from_bytes([i as u8; 12]),
            "bin": Binary { subtype: BinarySubtype::Generic, bytes: vec![1, 2, 3] },
            "ts": Timestamp { time: 5, increment: 6 },
            "dec": "1.5".parse::<Decimal128>().unwrap(),
            "re": Regex { pattern: "^a".to_string().try_into().unwrap(), options: "i".to_string().try_into().unwrap() },
            "arr": [1, "x", {"k": [DateTime::from_millis(7)]}],
            "nested": {"a": {"b": 2.5}},
            "min": Bson::MinKey, "max": Bson::MaxKey,
        };
        lines += &Bson::Document(d).into_canonical_extjson().to_string();
        lines.push('\n');
    }
    std::fs::write(d.join("in.jsonl"), lines).unwrap();
    ok(d, &["import", "db", "c", "in.jsonl"]);
    let want = ok(d, &["find", "db", "c", "{}", "--sort", r#"{"t": 1}"#]);
    assert_eq!(want.lines().count(), 4);
    for (file, extra) in [
        ("out.jsonl", vec![]),
        ("out.bson", vec![]),
        ("out.json", vec![]),
        ("canon.jsonl", vec!["--canonical"]),
    ] {
        let export = [&["export", "db", "c", "--out", file][..], &extra].concat();
        ok(d, &export);
        let coll = file.replace('.', "_");
        let create = [
            "create",
            "db",
            &coll,
            "--time-field",
            "t",
            "--meta-field",
            "m",
        ];
        ok(d, &create);
        ok(d, &["import", "db", &coll, file]);
        let got = ok(d, &["find", "db", &coll, "{}", "--sort", r#"{"t": 1}"#]);
        assert_eq!(got, want, "{file}");
    }
    // To stdout, with a filter, projection, sort and limit; CSV with chosen columns.
    let out = ok(
        d,
        &[
            "export",
            "db",
            "c",
            r#"{"m.n": {"$gte": 1}}"#,
            "--projection",
            r#"{"_id": 0, "m.host": 1, "i32": 1}"#,
            "--sort",
            r#"{"i32": -1}"#,
            "--limit",
            "2",
        ],
    );
    let rows: Vec<serde_json::Value> = json_lines(&out);
    assert_eq!(
        rows,
        vec![
            serde_json::json!({"m": {"host": "h3"}, "i32": 3}),
            serde_json::json!({"m": {"host": "h2"}, "i32": 2}),
        ]
    );
    let csv = ok(
        d,
        &[
            "export",
            "db",
            "c",
            "--format",
            "csv",
            "--fields",
            "t,m.host,f,s",
            "--sort",
            r#"{"t": 1}"#,
        ],
    );
    let mut lines = csv.lines();
    assert_eq!(lines.next(), Some("t,m.host,f,s"));
    assert!(
        lines.any(|l| l == r##"1970-01-01T00:00:00Z,h0,1.0,"héllo ""q""""##),
        "{csv}"
    );
}

#[test]
fn parquet_exports_hold_every_matched_document_in_typed_columns() {
    use parquet::file::reader::{FileReader, SerializedFileReader};
    use parquet::record::Field;
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    ok(
        d,
        &[
            "gen",
            "devops",
            "--hosts",
            "5",
            "--hours",
            "1",
            "--out",
            "cpu.jsonl",
        ],
    );
    create(d, "cpu", "time", Some("tags"));
    ok(d, &["import", "db", "cpu", "cpu.jsonl"]);
    let filter = r#"{"tags.hostname": {"$in": ["host_1", "host_3"]}}"#;
    let out = tsbucket(d, &["export", "db", "cpu", filter, "--out", "cpu.parquet"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && err.contains("exported 720 documents"),
        "{err}"
    );
    let reader =
        SerializedFileReader::new(std::fs::File::open(d.join("cpu.parquet")).unwrap()).unwrap();
    assert_eq!(reader.metadata().file_metadata().num_rows(), 720);
    let want = json_lines(&ok(d, &["find", "db", "cpu", filter]));
    let mut hosts = std::collections::BTreeMap::new();
    for (row, want) in reader.get_row_iter(None).unwrap().zip(&want) {
        let row = row.unwrap().into_columns();
        let get = |name: &str| &row.iter().find(|(k, _)| k == name).unwrap().1;
        let Field::TimestampMillis(ms) = get("time") else {
            panic!("{:?}", get("time"))
        };
        let want_ms = chrono::DateTime::parse_from_rfc3339(want["time"]["$date"].as_str().unwrap())
            .unwrap()
            .timestamp_millis();
        assert_eq!(*ms, want_ms);
        let Field::Str(host) = get("tags.hostname") else {
            panic!()
        };
        assert_eq!(host, want["tags"]["hostname"].as_str().unwrap());
        *hosts.entry(host.clone()).or_insert(0) += 1;
        let Field::Str(id) = get("_id") else { panic!() };
        assert_eq!(id, want["_id"]["$oid"].as_str().unwrap());
        let usage = match get("usage_user") {
            Field::Int(i) => f64::from(*i),
            Field::Long(i) => *i as f64,
            Field::Double(f) => *f,
            other => panic!("{other:?}"),
        };
        assert_eq!(usage, want["usage_user"].as_f64().unwrap());
    }
    assert_eq!(hosts.len(), 2);
    assert_eq!(hosts.values().sum::<i32>(), 720);
}

#[test]
fn a_failed_export_leaves_the_file_it_would_have_replaced_and_nothing_else() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    create(d, "c", "t", None);
    std::fs::write(d.join("out.jsonl"), "keep me\n").unwrap();
    std::fs::write(d.join("out.parquet"), "keep me too\n").unwrap();
    for out in ["out.jsonl", "out.parquet"] {
        let err = fails(d, &["export", "db", "c", "{bad", "--out", out], 1);
        assert!(err.contains("filter"), "{err}");
    }
    assert_eq!(
        std::fs::read_to_string(d.join("out.jsonl")).unwrap(),
        "keep me\n"
    );
    assert_eq!(
        std::fs::read_to_string(d.join("out.parquet")).unwrap(),
        "keep me too\n"
    );
    let mut names: Vec<String> = std::fs::read_dir(d)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["db", "out.jsonl", "out.parquet"]);
    // A successful export replaces it, with the mode a created file has.
    ok(d, &["export", "db", "c", "--out", "out.jsonl"]);
    assert_eq!(std::fs::read_to_string(d.join("out.jsonl")).unwrap(), "");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = |f: &str| std::fs::metadata(d.join(f)).unwrap().permissions().mode();
        std::fs::write(d.join("created"), "").unwrap();
        assert_eq!(mode("out.jsonl"), mode("created"));
    }
}

#[test]
fn inputs_of_many_chunks_import_in_order_with_their_line_numbers() {
    // Files of several MiB go to the parsing workers in chunks of about 1 MiB: every row must
    // arrive, in order, and a bad one late in the file must be named by its line, with
    // quoted cells that hold newlines counted as the lines they take.
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    create(d, "c", "t", Some("m"));
    let rows = 25_000u64;
    let pad = "p".repeat(120);
    let mut csv = String::from("t,m,n,note\n");
    let mut jsonl = String::new();
    let mut lp = String::new();
    for i in 0..rows {
        let ms = 1_600_000_000_000 + i * 1000;
        let note = match i % 1000 {
            0 => format!("\"two\nlines, {pad}\""),
            _ => pad.clone(),
        };
        csv += &format!("{ms},h{},{i},{note}\n", i % 7);
        jsonl += &format!(
            "{{\"t\": {{\"$date\": {{\"$numberLong\": \"{ms}\"}}}}, \"m\": \"h{}\", \"n\": {i}, \"note\": \"{pad}\"}}\n",
            i % 7
        );
        lp += &format!("cpu,host=h{} n={i}i,note=\"{pad}\" {ms}\n", i % 7);
    }
    assert!(csv.len() > 3 << 20 && lp.len() > 3 << 20);
    std::fs::write(d.join("a.csv"), &csv).unwrap();
    std::fs::write(d.join("a.jsonl"), &jsonl).unwrap();
    std::fs::write(d.join("a.lp"), &lp).unwrap();
    for (coll, file, extra) in [
        ("csv", "a.csv", vec!["--time-unit", "ms"]),
        ("json", "a.jsonl", vec![]),
        ("lp", "a.lp", vec!["--precision", "ms"]),
    ] {
        let args = [
            &["import", "db", coll, file, "--create", "--time-field", "t"][..],
            &["--meta-field", "m"],
            &extra,
        ]
        .concat();
        ok(d, &args);
        assert_eq!(count(d, coll, "{}"), rows, "{file}");
        let ns: Vec<i64> = json_lines(&ok(
            d,
            &[
                "find",
                "db",
                coll,
                "{}",
                "--sort",
                "{t: 1}",
                "--projection",
                "{n: 1, _id: 0}",
            ],
        ))
        .iter()
        .map(|v| v["n"].as_i64().unwrap())
        .collect();
        assert!(ns.iter().copied().eq(0..rows as i64), "{file}");
    }
    // Exported as a JSON array and as JSON Lines, both formatted in runs on every core: one
    // whole array and one line per row, in order.
    ok(
        d,
        &[
            "export", "db", "json", "--sort", "{t: 1}", "--out", "all.json",
        ],
    );
    let all: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(d.join("all.json")).unwrap()).unwrap();
    let ns = all.iter().map(|v| v["n"].as_i64().unwrap());
    assert!(ns.eq(0..rows as i64));
    let lines = ok(d, &["export", "db", "json", "--sort", "{t: 1}"]);
    let ns = json_lines(&lines)
        .into_iter()
        .map(|v| v["n"].as_i64().unwrap());
    assert!(ns.eq(0..rows as i64));
    let two_lines = ok(d, &["find", "db", "csv", "{n: 5000}"]);
    assert!(two_lines.contains("two\\nlines"), "{two_lines}");
    // Row 22,222 (from 0) of the CSV made bad: its line counts the header and the 23 earlier rows
    // that take two lines.
    let bad = csv.replacen(
        &format!("{},", 1_600_000_000_000u64 + 22_222_000),
        "oops,",
        1,
    );
    std::fs::write(d.join("bad.csv"), bad).unwrap();
    let args = [
        "import",
        "db",
        "csv",
        "bad.csv",
        "--time-unit",
        "ms",
        "--skip-bad",
    ];
    let out = tsbucket(d, &args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains(&format!("bad.csv, line {}", 1 + 22_222 + 23 + 1)),
        "{err}"
    );
    assert_eq!(count(d, "csv", "{}"), 2 * rows - 1);
    let bad = jsonl.replacen("\"n\": 14444,", "\"n\": oops,", 1);
    std::fs::write(d.join("bad.jsonl"), bad).unwrap();
    let err = fails(d, &["import", "db", "json", "bad.jsonl"], 1);
    assert!(err.contains("bad.jsonl, line 14445"), "{err}");
}

#[test]
fn a_mistyped_collection_name_gets_the_names_near_it() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    create(d, "weather", "t", None);
    create(d, "cpu", "t", None);
    let err = fails(d, &["count", "db", "wether", "{}"], 1);
    assert!(
        err.contains("no collection 'wether'") && err.contains("did you mean weather?"),
        "{err}"
    );
    let err = fails(d, &["find", "db", "zzz"], 1);
    assert!(
        err.contains("its collections: ") && err.contains("cpu"),
        "{err}"
    );
}

#[test]
fn filters_take_mongosh_syntax_and_come_from_files_or_stdin() {
    use std::io::Write;
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    create(d, "c", "t", Some("metadata"));
    let lines: String = (0..10)
        .map(|i| format!("{{\"t\": {{\"$date\": \"2021-05-18T0{i}:00:00Z\"}}, \"metadata\": {{\"sensorId\": {}}}, \"temp\": {i}}}\n", i % 2))
        .collect();
    std::fs::write(d.join("w.jsonl"), lines).unwrap();
    ok(d, &["import", "db", "c", "w.jsonl"]);
    assert_eq!(count(d, "c", "{metadata.sensorId: 1}"), 5);
    assert_eq!(
        count(d, "c", "{t: {$gte: ISODate('2021-05-18T05:00:00Z')}, }"),
        5
    );
    assert_eq!(
        count(d, "c", "{t: {$lt: ISODate('2021-05-18T02:00:00')}}"),
        2
    );
    std::fs::write(d.join("f.json"), "{'temp': {$gt: 6}}").unwrap();
    assert_eq!(count(d, "c", "@f.json"), 3);
    let mut child = Command::new(env!("CARGO_BIN_EXE_tsbucket"))
        .current_dir(d)
        .args(["aggregate", "db", "c", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"[{$group: {_id: '$metadata.sensorId', n: {$sum: 1}}}, {$sort: {_id: 1}}]")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let rows = json_lines(&String::from_utf8(out.stdout).unwrap());
    assert_eq!(
        rows,
        vec![
            serde_json::json!({"_id": 0, "n": 5}),
            serde_json::json!({"_id": 1, "n": 5})
        ]
    );
    // Neither JSON nor shell syntax: the JSON error, with the forms that work.
    let err = fails(d, &["count", "db", "c", "{temp: > 3}"], 1);
    assert!(
        err.contains("mongosh syntax") && err.contains("@FILE"),
        "{err}"
    );
}

#[test]
fn find_and_aggregate_print_tables_csv_and_pretty_json() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    create(d, "c", "t", Some("m"));
    let lines: String = (0..3)
        .map(|i| format!("{{\"t\": {{\"$date\": \"2021-05-18T0{i}:00:00Z\"}}, \"m\": {{\"id\": {i}}}, \"temp\": {}}}\n", 20 + i))
        .collect();
    std::fs::write(d.join("w.jsonl"), lines).unwrap();
    ok(d, &["import", "db", "c", "w.jsonl"]);
    let projection = ["--projection", "{_id: 0}", "--sort", "{t: 1}"];
    let table = ok(
        d,
        &[
            &["find", "db", "c", "{}", "--format", "table"][..],
            &projection,
        ]
        .concat(),
    );
    let rows: Vec<&str> = table.lines().collect();
    assert_eq!(
        rows.first(),
        Some(&"t                     m.id  temp"),
        "{table}"
    );
    assert_eq!(
        rows.get(2),
        Some(&"2021-05-18T00:00:00Z  0     20"),
        "{table}"
    );
    assert_eq!(rows.len(), 5, "{table}");
    let csv = ok(
        d,
        &[
            &["find", "db", "c", "{}", "--format", "csv"][..],
            &projection,
        ]
        .concat(),
    );
    assert_eq!(csv.lines().next(), Some("t,m.id,temp"), "{csv}");
    assert_eq!(
        csv.lines().nth(3),
        Some("2021-05-18T02:00:00Z,2,22"),
        "{csv}"
    );
    let pipeline = "[{$group: {_id: null, avg: {$avg: '$temp'}}}]";
    let pretty = ok(d, &["aggregate", "db", "c", pipeline, "--format", "pretty"]);
    assert_eq!(pretty, "{\n  \"_id\": null,\n  \"avg\": 21.0\n}\n");
}

#[test]
fn a_mongodump_of_a_time_series_collection_imports_as_its_measurements() {
    use tsbucket::bson::{doc, DateTime};
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    std::fs::create_dir_all(d.join("dump/test")).unwrap();
    let t = |h: i64| DateTime::from_millis(1_621_296_000_000 + h * 3_600_000);
    // Two uncompressed buckets of MongoDB's weather example, as mongodump writes them.
    let buckets = [
        doc! {
            "_id": tsbucket::bson::oid::ObjectId::from_bytes([1; 12]),
            "control": {"version": 1, "min": {"timestamp": t(0), "temp": 11}, "max": {"timestamp": t(8), "temp": 15}},
            "meta": {"sensorId": 5, "type": "temperature"},
            "data": {
                "timestamp": {"0": t(0), "1": t(4), "2": t(8)},
                "temp": {"0": 12, "1": 11, "2": 15},
            },
        },
        doc! {
            "_id": tsbucket::bson::oid::ObjectId::from_bytes([2; 12]),
            "control": {"version": 1},
            "meta": {"sensorId": 7, "type": "temperature"},
            "data": {"timestamp": {"0": t(1)}, "temp": {"0": 30}},
        },
    ];
    let mut bytes = Vec::new();
    for b in &buckets {
        b.to_writer(&mut bytes).unwrap();
    }
    std::fs::write(d.join("dump/test/system.buckets.weather.bson"), &bytes).unwrap();
    std::fs::write(
        d.join("dump/test/weather.metadata.json"),
        r#"{"options":{"timeseries":{"timeField":"timestamp","metaField":"metadata","granularity":"hours","bucketMaxSpanSeconds":{"$numberInt":"2592000"}}},"indexes":[],"collectionName":"weather","type":"timeseries"}"#,
    )
    .unwrap();
    create(d, "other", "t", None);
    let out = tsbucket(
        d,
        &[
            "import",
            "db",
            "weather",
            "dump/test/system.buckets.weather.bson",
        ],
    );
    assert!(out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("creating 'weather' as"));
    assert_eq!(count(d, "weather", "{}"), 4);
    assert_eq!(
        count(d, "weather", "{metadata.sensorId: 5, temp: {$gte: 12}}"),
        2
    );
    let listed = ok(d, &["list", "db"]);
    assert!(
        listed.contains("weather") && listed.contains("hours"),
        "{listed}"
    );
    // A compressed bucket (control.version 2: BSONColumn binaries) unpacks too. Its columns'
    // bytes are the ones whose decoding the bsoncolumn crate's tests check value by value: times
    // 1, 2, 3, 4 and 6 s, temperatures 1.0, 1.1, 1.2, 1.0, 1.5, and `count` in rows 2 and 4.
    let column = |bytes: &[u8]| tsbucket::bson::Binary {
        subtype: tsbucket::bson::spec::BinarySubtype::Column,
        bytes: bytes.to_vec(),
    };
    let times = [
        0x09, 0x00, 0xE8, 0x03, 0, 0, 0, 0, 0, 0, 0x80, 0x0B, 0x7D, 0, 0, 0, 0, 0xA0, 0x0F, 0,
    ];
    let temps = [
        0x01, 0x00, 0, 0, 0, 0, 0, 0, 0xF0, 0x3F, 0xA0, 0x2B, 0x00, 0x10, 0x00, 0x0C, 0x00, 0x14,
        0x00, 0x00,
    ];
    let counts = [
        0x80, 0xFD, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x10, 0x00, 0x05, 0x00, 0x00, 0x00,
        0x80, 0xFD, 0xFF, 0xFF, 0xFF, 0x0B, 0x00, 0x00, 0x00, 0x00,
    ];
    let v2 = doc! {
        "_id": tsbucket::bson::oid::ObjectId::from_bytes([3; 12]),
        "control": {"version": 2, "count": 5},
        "meta": {"sensorId": 9},
        "data": {"timestamp": column(&times), "temp": column(&temps), "count": column(&counts)},
    };
    let mut bytes = Vec::new();
    v2.to_writer(&mut bytes).unwrap();
    std::fs::write(d.join("dump/test/system.buckets.weather.bson"), &bytes).unwrap();
    let dump = "dump/test/system.buckets.weather.bson";
    ok(d, &["import", "db", "weather", dump]);
    let got = json_lines(&ok(
        d,
        &[
            "find",
            "db",
            "weather",
            "{metadata.sensorId: 9}",
            "--sort",
            "{timestamp: 1}",
            "--projection",
            "{_id: 0, metadata: 0}",
        ],
    ));
    let ms = |v: &serde_json::Value| v["timestamp"]["$date"].as_str().unwrap().to_string();
    assert_eq!(
        got.iter().map(ms).collect::<Vec<_>>(),
        [1, 2, 3, 4, 6].map(|s| format!("1970-01-01T00:00:0{s}Z"))
    );
    let temps: Vec<f64> = got.iter().map(|v| v["temp"].as_f64().unwrap()).collect();
    assert_eq!(temps, [1.0, 1.1, 1.2, 1.0, 1.5]);
    let counts: Vec<Option<i64>> = got.iter().map(|v| v["count"].as_i64()).collect();
    assert_eq!(counts, [None, None, Some(5), None, Some(6)]);
    // A compressed bucket whose columns are not BSONColumn binaries is refused by its place in
    // the file.
    let mut bad = buckets[0].clone();
    bad.insert("control", doc! {"version": 2});
    let mut bytes = Vec::new();
    bad.to_writer(&mut bytes).unwrap();
    std::fs::write(d.join("dump/test/system.buckets.weather.bson"), &bytes).unwrap();
    let err = fails(d, &["import", "db", "weather", dump], 1);
    assert!(
        err.contains("document 1") && err.contains("not a BSONColumn"),
        "{err}"
    );
}
