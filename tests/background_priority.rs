//! The background threads run at the priority `DbOptions::background_priority` asks for:
//! nice 19 by default on Linux, and as the opening thread with `Normal`.

#![cfg(target_os = "linux")]

use std::time::{Duration, Instant};
use tsbucket::{BackgroundPriority, Database, DbOptions};

/// Nice values of this process's threads named `name`.
fn nice_of(name: &str) -> Vec<i64> {
    let mut out = Vec::new();
    for t in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        if comm.trim() != name {
            continue;
        }
        let stat = std::fs::read_to_string(t.path().join("stat")).unwrap_or_default();
        // Fields after the parenthesised name: state is field 3, nice field 19.
        let rest = &stat[stat.rfind(')').unwrap() + 2..];
        out.push(rest.split_whitespace().nth(16).unwrap().parse().unwrap());
    }
    out
}

/// Waits until every thread named in `names` has set its priority (each does so as it starts).
fn wait_for(names: &[&str], nice: i64) -> Vec<(String, Vec<i64>)> {
    let t0 = Instant::now();
    loop {
        let seen: Vec<(String, Vec<i64>)> =
            names.iter().map(|n| (n.to_string(), nice_of(n))).collect();
        if seen
            .iter()
            .all(|(_, v)| !v.is_empty() && v.iter().all(|&x| x == nice))
            || t0.elapsed() > Duration::from_secs(10)
        {
            return seen;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

const BACKGROUND: [&str; 3] = ["tsbucket-apply", "tsbucket-flush", "tsbucket-ttl"];

#[test]
fn background_threads_run_at_the_priority_asked_for() {
    // One test, so that no other database of this process has threads with these names.
    let own = nice_of_self();
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open_with(dir.path(), DbOptions::default()).unwrap();
    for (name, nice) in wait_for(&BACKGROUND, 19) {
        assert!(!nice.is_empty(), "no thread {name}");
        assert!(nice.iter().all(|&n| n == 19), "{name} at nice {nice:?}");
    }
    // The threads an insert waits for keep the opening thread's priority. A thread takes its
    // name as it starts running, so it is waited for like the others.
    assert_eq!(
        wait_for(&["tsbucket-wal"], own),
        vec![("tsbucket-wal".to_string(), vec![own])]
    );
    db.close().unwrap();

    let opts = DbOptions {
        background_priority: BackgroundPriority::Normal,
        ..DbOptions::default()
    };
    let db = Database::open_with(dir.path(), opts).unwrap();
    for (name, nice) in wait_for(&BACKGROUND, own) {
        assert!(nice.iter().all(|&n| n == own), "{name} at nice {nice:?}");
    }
    db.close().unwrap();
}

fn nice_of_self() -> i64 {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap();
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    rest.split_whitespace().nth(16).unwrap().parse().unwrap()
}
