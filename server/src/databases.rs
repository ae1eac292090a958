//! One tsbucket database directory per MongoDB database, under the server's directory, opened
//! when first used and kept open until the server stops or the database is dropped.

use crate::error::{CmdResult, CommandError, INVALID_NAMESPACE};
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tsbucket::{Database, DbOptions};

/// The databases under one directory.
pub struct Databases {
    dir: PathBuf,
    open: Mutex<BTreeMap<String, Arc<Database>>>,
    options: Box<dyn Fn() -> DbOptions + Send + Sync>,
}

/// Databases that hold no collections of ours and exist only as names clients address.
pub fn is_virtual(name: &str) -> bool {
    matches!(name, "admin" | "local" | "config")
}

/// Checks a database name as MongoDB does, plus what a directory name needs.
pub fn check_name(name: &str) -> CmdResult<()> {
    if name.is_empty() || name.len() >= 64 {
        return Err(CommandError::new(
            INVALID_NAMESPACE,
            format!("database name '{name}' must be 1 to 63 bytes long"),
        ));
    }
    if let Some(c) = name.chars().find(|c| {
        matches!(
            c,
            '/' | '\\' | '.' | ' ' | '"' | '$' | '*' | '<' | '>' | ':' | '|' | '?' | '\0'
        )
    }) {
        return Err(CommandError::new(
            INVALID_NAMESPACE,
            format!("database name '{name}' contains an invalid character '{c}'"),
        ));
    }
    Ok(())
}

impl Databases {
    /// The databases under `dir` (created if missing); each opens with `options()`.
    pub fn new(
        dir: &Path,
        options: Box<dyn Fn() -> DbOptions + Send + Sync>,
    ) -> std::io::Result<Databases> {
        std::fs::create_dir_all(dir)?;
        Ok(Databases {
            dir: dir.to_path_buf(),
            open: Mutex::new(BTreeMap::new()),
            options,
        })
    }

    /// The directory that holds the databases.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The database `name` if it exists on disk.
    pub fn get(&self, name: &str) -> CmdResult<Option<Arc<Database>>> {
        self.open(name, false)
    }

    /// The database `name`, created when missing (as MongoDB creates one on first write).
    pub fn get_or_create(&self, name: &str) -> CmdResult<Arc<Database>> {
        self.open(name, true)?.ok_or_else(|| {
            CommandError::new(
                INVALID_NAMESPACE,
                format!("the '{name}' database holds no collections in tsbucket"),
            )
        })
    }

    /// The open handle of `name`, opening it (and with `create`, creating it) when needed;
    /// `None` for a virtual database, or a missing one without `create`.
    fn open(&self, name: &str, create: bool) -> CmdResult<Option<Arc<Database>>> {
        check_name(name)?;
        let mut open = self.open.lock();
        if let Some(db) = open.get(name) {
            return Ok(Some(db.clone()));
        }
        let path = self.dir.join(name);
        if is_virtual(name) || !(create || path.is_dir()) {
            return Ok(None);
        }
        let db = Arc::new(Database::open_with(&path, (self.options)())?);
        open.insert(name.to_string(), db.clone());
        Ok(Some(db))
    }

    /// The names of the databases on disk, sorted.
    pub fn names(&self) -> CmdResult<Vec<String>> {
        let mut names = Vec::new();
        let entries = std::fs::read_dir(&self.dir).map_err(tsbucket::Error::from)?;
        for e in entries {
            let e = e.map_err(tsbucket::Error::from)?;
            if !e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                continue;
            }
            if let Some(name) = e.file_name().to_str() {
                if check_name(name).is_ok() && !is_virtual(name) {
                    names.push(name.to_string());
                }
            }
        }
        names.sort();
        Ok(names)
    }

    /// Closes and deletes the database `name`; false when there was none.
    pub fn drop_database(&self, name: &str) -> CmdResult<bool> {
        check_name(name)?;
        // The registry stays locked until the directory is gone, so that no command opens
        // the database again halfway through.
        let mut open = self.open.lock();
        let path = self.dir.join(name);
        if let Some(mut db) = open.remove(name) {
            // A command in flight on another connection holds the handle: wait for it to
            // finish rather than delete files under an open database.
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            loop {
                match Arc::try_unwrap(db) {
                    Ok(d) => {
                        d.close()?;
                        break;
                    }
                    Err(d) if std::time::Instant::now() < deadline => {
                        db = d;
                        std::thread::sleep(std::time::Duration::from_millis(2));
                    }
                    Err(d) => {
                        open.insert(name.to_string(), d);
                        return Err(CommandError::new(
                            crate::error::OPERATION_FAILED,
                            format!("database {name} is still in use by other commands; try again"),
                        ));
                    }
                }
            }
        }
        if is_virtual(name) || !path.is_dir() {
            return Ok(false);
        }
        std::fs::remove_dir_all(&path).map_err(tsbucket::Error::from)?;
        Ok(true)
    }

    /// Closes every open database. Buckets in memory are written to segments first: the log
    /// would bring them back at the next start, but reads of flushed buckets are faster.
    pub fn close_all(&self) -> Vec<(String, tsbucket::Error)> {
        let mut failed = Vec::new();
        let open = std::mem::take(&mut *self.open.lock());
        for (name, db) in open {
            let r = db.flush().and_then(|()| match Arc::try_unwrap(db) {
                Ok(db) => db.close(),
                Err(_) => Ok(()),
            });
            if let Err(e) = r {
                failed.push((name, e));
            }
        }
        failed
    }
}
