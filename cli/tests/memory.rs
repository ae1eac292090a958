//! An import's memory is bounded by its batches, chunks and the engine's limits, not by the
//! size of its input: four times the rows may not cost more than a little more memory.
//!
//! Each import runs as a child process whose own peak resident size the kernel reports when
//! it is reaped (`wait4`), so other tests' children do not count. This test has a file of its
//! own so that nothing else runs in its process.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

/// Writes `rows` rows of 10 series x 10 integer fields, one row per series every 10 s.
fn write_csv(path: &Path, rows: usize) {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    writeln!(f, "time,host,region,v0,v1,v2,v3,v4,v5,v6,v7,v8,v9").unwrap();
    let mut x: u64 = 1;
    for i in 0..rows {
        let h = i % 10;
        write!(f, "{},host_{h},r{}", 1_451_606_400 + (i / 10) * 10, h % 3).unwrap();
        for _ in 0..10 {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            write!(f, ",{}", (x >> 33) % 100).unwrap();
        }
        writeln!(f).unwrap();
    }
    f.flush().unwrap();
}

/// Runs `tsbucket ARGS` in `dir`; returns its exit status and peak resident size in KiB.
fn run_measured(dir: &Path, args: &[&str]) -> (i32, i64) {
    let child = Command::new(env!("CARGO_BIN_EXE_tsbucket"))
        .args(args)
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value, and wait4 writes only to the two locals.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let reaped = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(reaped, pid, "wait4 failed");
    // The child is reaped: its handle must not wait for it again.
    std::mem::forget(child);
    (status, usage.ru_maxrss)
}

fn import_peak_kib(dir: &Path, rows: usize) -> i64 {
    let file = format!("rows{rows}.csv");
    write_csv(&dir.join(&file), rows);
    let db = format!("db{rows}");
    let (status, peak) = run_measured(
        dir,
        &[
            "import",
            &db,
            "c",
            &file,
            "--create",
            "--time-field",
            "time",
            "--meta-field",
            "m",
            "--meta-columns",
            "host,region",
            "--time-unit",
            "s",
        ],
    );
    assert_eq!(status, 0, "the import of {rows} rows failed");
    std::fs::remove_file(dir.join(&file)).unwrap();
    peak
}

#[test]
fn four_times_the_rows_cost_little_more_memory() {
    let tmp = tempfile::tempdir().unwrap();
    let small = import_peak_kib(tmp.path(), 240_000);
    let large = import_peak_kib(tmp.path(), 960_000);
    eprintln!("peak resident size: {small} KiB for 240,000 rows, {large} KiB for 960,000");
    // Measured at about 89 MB and 110 MB; memory that grew with the input would add well over
    // 100 MB for the 720,000 more rows (a row is about 50 bytes of CSV and 230 of BSON).
    assert!(large < small + 64 * 1024, "{small} KiB, then {large} KiB");
    assert!(large < 1024 * 1024, "over 1 GB: {large} KiB");
}
