//! What the commands share: the result they return, opening a database and a collection, the
//! file formats, `-` for stdin and stdout, output files written whole, and Ctrl-C.

use clap::ValueEnum;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use tsbucket::{Database, DbOptions};

/// What commands return: any error is reported on stderr and ends the process with status 1.
pub type CliResult<T = ()> = Result<T, Box<dyn std::error::Error>>;

/// How long a command that writes waits for the database's lock (`--wait`).
pub static WAIT: OnceLock<Duration> = OnceLock::new();

/// Which seeded workload to generate.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Workload {
    /// The TSBS devops cpu-only shape: 10 string tags as meta, 10 CPU fields, every 10 s.
    Devops,
    /// The seed 004 shape: per-minute call counts with dimensions as meta.
    Seed004,
}

/// File formats of `gen` and `import`.
#[derive(Clone, Copy, PartialEq, Eq, Debug, ValueEnum)]
pub enum Format {
    /// From the file name's extension (.jsonl/.json/.ndjson, .bson, .csv, each possibly
    /// followed by .gz or .zst); when reading stdin or a file with another extension, from its
    /// first bytes. Input compressed with gzip or zstd is found by its first bytes.
    Auto,
    /// Relaxed or canonical MongoDB Extended JSON: one document per line (as mongoexport
    /// writes), pretty-printed over several lines, or a JSON array of documents (both found by
    /// the first line).
    Jsonl,
    /// Concatenated BSON documents (as mongodump writes).
    Bson,
    /// A header line and one row per document; nested fields as dotted column names.
    Csv,
    /// InfluxDB line protocol (.lp): the measurement and tags become the meta document.
    LineProtocol,
}

impl Format {
    /// The format a file name's extension names, if any.
    pub fn from_extension(path: &str) -> Option<Format> {
        let ext = Path::new(path).extension()?.to_str()?.to_ascii_lowercase();
        match ext.as_str() {
            "jsonl" | "json" | "ndjson" => Some(Format::Jsonl),
            "bson" => Some(Format::Bson),
            "csv" => Some(Format::Csv),
            "lp" | "line" => Some(Format::LineProtocol),
            _ => None,
        }
    }
}

/// The collection `name` of `db`; when there is none, the error names the collections with a
/// similar name.
pub fn collection(db: &Database, name: &str) -> CliResult<tsbucket::Collection> {
    match db.collection(name) {
        Err(tsbucket::Error::NamespaceNotFound(_)) => {
            let names: Vec<String> = db
                .list_collections()
                .map(|cs| cs.into_iter().map(|c| c.name).collect())
                .unwrap_or_default();
            let near: Vec<&str> = names
                .iter()
                .filter(|n| similar(n, name))
                .map(String::as_str)
                .collect();
            let hint = match (near.as_slice(), names.is_empty()) {
                ([], true) => " (the database has no collection)".to_string(),
                ([], false) => format!(" (its collections: {})", names.join(", ")),
                (near, _) => format!(" (did you mean {}?)", near.join(" or ")),
            };
            Err(format!("no collection '{name}' in {}{hint}", db.path().display()).into())
        }
        other => Ok(other?),
    }
}

/// Whether two names are a typo apart: at most two edits (of the shorter's length, at most a
/// third), or one the other's prefix.
fn similar(a: &str, b: &str) -> bool {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    if a.len().min(b.len()) >= 2 && (a.starts_with(&b) || b.starts_with(&a)) {
        return true;
    }
    // Levenshtein distance, one row at a time.
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut row = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev.get(j).copied().unwrap_or(0) + usize::from(ca != cb);
            let del = prev.get(j + 1).copied().unwrap_or(0) + 1;
            let ins = row.get(j).copied().unwrap_or(0) + 1;
            row.push(sub.min(del).min(ins));
        }
        prev = row;
    }
    let d = prev.last().copied().unwrap_or(0);
    d <= 2 && d * 3 <= a.len().min(b.len()).max(1)
}

/// A command stopped by SIGINT (Ctrl-C), with what it had done: the exit status is 130.
#[derive(Debug)]
pub struct Interrupted(pub String);

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Interrupted {}

/// A flag that Ctrl-C sets, for a command that stops cleanly at its next check instead of
/// dying mid-write. Only the commands that call this handle Ctrl-C; it may be called once.
pub fn ctrl_c_flag() -> CliResult<Arc<AtomicBool>> {
    let flag = Arc::new(AtomicBool::new(false));
    let set = flag.clone();
    ctrlc::set_handler(move || set.store(true, Ordering::Relaxed))
        .map_err(|e| format!("cannot handle Ctrl-C: {e}"))?;
    Ok(flag)
}

/// An output file written whole or not at all: the bytes go to a hidden temporary file beside
/// `path`, which takes its name only once complete and on disk. A failed or interrupted
/// command leaves any file already at `path` as it was, and no partial one.
pub struct AtomicFile {
    path: PathBuf,
    tmp: tempfile::NamedTempFile,
}

impl AtomicFile {
    /// Starts the file that will be `path`.
    pub fn create(path: &Path) -> CliResult<AtomicFile> {
        let dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let mut builder = tempfile::Builder::new();
        builder.prefix(".tsbucket-").suffix(".partial");
        // A temporary file is private (0600); the export gets the mode a created file has.
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            builder.permissions(std::fs::Permissions::from_mode(0o666));
        }
        let tmp = builder
            .tempfile_in(dir)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(AtomicFile {
            path: path.to_path_buf(),
            tmp,
        })
    }

    /// The temporary file, to write to.
    pub fn file(&self) -> CliResult<File> {
        Ok(self.tmp.as_file().try_clone()?)
    }

    /// Syncs the file, gives it its name and syncs the directory that holds it.
    pub fn commit(self) -> CliResult {
        let at = self.path.display().to_string();
        self.tmp
            .as_file()
            .sync_all()
            .map_err(|e| format!("{at}: {e}"))?;
        self.tmp
            .persist(&self.path)
            .map_err(|e| format!("{at}: {}", e.error))?;
        let dir = match self.path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| format!("{}: {e}", dir.display()))?;
        Ok(())
    }
}

/// Opens the database in `dir` for writing, which must already hold one: a mistyped path must
/// not leave an empty database behind. The TTL sweeper stays off, so that a command deletes
/// nothing it was not asked to. Waits for another process's lock as `--wait` says.
pub fn open_existing(dir: &Path) -> CliResult<Database> {
    if !dir.join(tsbucket::manifest::MANIFEST_FILE).is_file() {
        return Err(format!("no tsbucket database in {}", dir.display()).into());
    }
    open_for_writing(dir)
}

/// Opens (creating if missing) the database in `dir` for writing, waiting for another
/// process's lock as `--wait` says.
pub fn open_for_writing(dir: &Path) -> CliResult<Database> {
    let opts = || DbOptions {
        ttl_interval: None,
        ..DbOptions::default()
    };
    let deadline = Instant::now() + WAIT.get().copied().unwrap_or_default();
    loop {
        match Database::open_with(dir, opts()) {
            Err(tsbucket::Error::Locked(_)) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e @ tsbucket::Error::Locked(_)) if WAIT.get().is_none() => {
                return Err(format!("{e} (--wait SECONDS waits for it)").into())
            }
            r => return Ok(r?),
        }
    }
}

/// Opens the database in `dir` for a command that only reads: a snapshot read beside any
/// writer, taking no lock, so that reads and an import run at once.
pub fn open_for_reading(dir: &Path) -> CliResult<Database> {
    if !dir.join(tsbucket::manifest::MANIFEST_FILE).is_file() {
        return Err(format!("no tsbucket database in {}", dir.display()).into());
    }
    Ok(Database::open_read_only(dir)?)
}

/// Opens the database in `dir` for `stats` and `verify`: for writing when no other process
/// has it (an open that recovers, removes leftovers and sees the log as its writer does), else
/// read-only beside that process.
pub fn open_to_inspect(dir: &Path) -> CliResult<Database> {
    if !dir.join(tsbucket::manifest::MANIFEST_FILE).is_file() {
        return Err(format!("no tsbucket database in {}", dir.display()).into());
    }
    let opts = DbOptions {
        ttl_interval: None,
        ..DbOptions::default()
    };
    match Database::open_with(dir, opts) {
        Err(tsbucket::Error::Locked(_)) => Ok(Database::open_read_only(dir)?),
        r => Ok(r?),
    }
}

/// A path argument where `-` means stdin or stdout.
pub fn is_std(path: &Path) -> bool {
    path == Path::new("-")
}
