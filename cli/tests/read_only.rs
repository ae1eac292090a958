//! The CLI beside a writer: its read commands open the database read-only and answer while
//! another handle holds it for writing; its write commands fail at once, or wait for the lock
//! with `--wait`.

#[path = "../../tests/common/mod.rs"]
mod common;

use common::*;
use std::process::{Command, Output};
use std::time::Duration;
use tsbucket::{Database, DbOptions};

fn options() -> DbOptions {
    options_without_sweeper()
}

fn count(db: &Database, coll: &str) -> u64 {
    count_in(db, coll)
}

fn cli_args(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tsbucket"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn cli_reads_beside_a_writer_and_writers_wait_for_the_lock() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("db");
    let d = dir.to_str().unwrap();
    let w = Database::open_with(&dir, options()).unwrap();
    let c = w.create_collection("a", ts_options()).unwrap();
    c.insert_many(&batch_docs(1, 1, 30, 3)).unwrap();
    w.flush().unwrap();
    c.insert_many(&batch_docs(1, 2, 12, 3)).unwrap();

    let stdout = |o: &Output| {
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).to_string()
    };
    assert_eq!(stdout(&cli_args(&["count", d, "a"])).trim(), "42");
    assert_eq!(stdout(&cli_args(&["find", d, "a"])).lines().count(), 42);
    assert!(stdout(&cli_args(&["list", d])).starts_with("a:"));
    assert!(stdout(&cli_args(&["stats", d])).contains("recovery at open"));
    assert!(stdout(&cli_args(&["verify", d])).starts_with("ok:"));
    let dump = Command::new(env!("CARGO_BIN_EXE_segment-dump"))
        .args(["--check", d])
        .output()
        .unwrap();
    stdout(&dump);
    let pipeline = r#"[{"$count": "n"}]"#;
    assert!(stdout(&cli_args(&["aggregate", d, "a", pipeline])).contains("42"));

    // A writer fails at once, saying how to wait...
    let o = cli_args(&["create", d, "b", "--time-field", "t"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("locked") && err.contains("--wait"), "{err}");
    // ...or waits for the lock with --wait.
    let closer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(400));
        w.close().unwrap();
    });
    stdout(&cli_args(&[
        "--wait",
        "20",
        "create",
        d,
        "b",
        "--time-field",
        "t",
    ]));
    closer.join().unwrap();
    let r = Database::open_read_only(&dir).unwrap();
    assert_eq!(r.list_collections().unwrap().len(), 2);
    assert_eq!(count(&r, "a"), 42);
}
