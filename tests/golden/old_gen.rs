//! Writes the golden directory of an older commit with that commit's own build. Not compiled
//! in this tree: `make-old.sh` copies it, with `dataset.rs`, into an export of the commit as
//! the example `golden_gen`. See `README.md`.
//!
//! Usage: `golden_gen <out dir> <commit>`. With the cargo feature `golden_spares` (which
//! `make-old.sh` declares for builds whose `DbOptions` has the log file size and spare
//! files), the log files are small, so the log rotates, keeps spares and starts files in them.

mod dataset;

fn main() {
    let mut args = std::env::args().skip(1);
    let out = std::path::PathBuf::from(args.next().expect("usage: golden_gen <out dir> <commit>"));
    let commit = args.next().expect("usage: golden_gen <out dir> <commit>");
    #[allow(unused_mut)]
    let mut opts = tsbucket::DbOptions {
        ttl_interval: None,
        ..tsbucket::DbOptions::default()
    };
    #[cfg(feature = "golden_spares")]
    {
        opts.wal_file_bytes = 4096;
        opts.wal_spare_files = 2;
    }
    let by = format!("tests/golden/make-old.sh {commit} (the build of commit {commit})");
    if dataset::generate_basic(&out, opts, true, "", &by).is_none() {
        std::process::exit(1);
    }
}
