//! The one error type of the crate.
//!
//! Variants name what failed, not where in our code it failed. `Display` is written for the
//! person reading it: it says what went wrong and, where there is one, what to do about it.
//! `Error::code()` maps a variant to MongoDB's numeric error code so that engines embedding
//! tsbucket can hand the same codes to their clients.

use std::fmt;
use std::path::PathBuf;

/// Result alias used throughout the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in tsbucket.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A document of an insert batch is unacceptable; nothing of the batch was written.
    #[error(
        "document {index} of the batch is invalid: {message}; nothing of the batch was written"
    )]
    InvalidDocument {
        /// Position of the offending document in the batch (0-based).
        index: usize,
        /// What is wrong with it.
        message: String,
    },
    /// Collection or database options are invalid (MongoDB code 72).
    #[error("invalid options: {0}")]
    InvalidOptions(String),
    /// A filter, update, pipeline or other argument is malformed (MongoDB code 2).
    #[error("bad value: {0}")]
    BadValue(String),
    /// An operation that time-series collections do not allow (MongoDB code 20).
    #[error("operation not supported on a time-series collection: {0}")]
    Unsupported(String),
    /// A `$group` held more than the database's memory limit for a blocking stage
    /// (`DbOptions::sort_memory_limit`); groups are not written to disk (MongoDB's
    /// QueryExceededMemoryLimitNoDiskUseAllowed, code 292).
    #[error("memory limit exceeded: {0}")]
    MemoryLimit(String),
    /// The named collection does not exist (MongoDB code 26).
    #[error("collection '{0}' does not exist")]
    NamespaceNotFound(String),
    /// A collection of that name already exists with other options (MongoDB code 48).
    #[error("collection '{0}' already exists with different options")]
    NamespaceExists(String),
    /// An index cannot be created as specified (MongoDB code 67).
    #[error("cannot create index: {0}")]
    CannotCreateIndex(String),
    /// No index of that name exists (MongoDB code 27).
    #[error("index not found with name [{0}]")]
    IndexNotFound(String),
    /// An index with the same key pattern exists under another name (MongoDB code 85).
    #[error("index already exists with a different name: {0}")]
    IndexOptionsConflict(String),
    /// An index with the same name exists with another key pattern (MongoDB code 86).
    #[error("an existing index has the same name as the requested index but a different key: {0}")]
    IndexKeySpecsConflict(String),
    /// Another `Database` (in this or another process) holds the directory.
    #[error("database directory {} is locked by another open Database; close it first", .0.display())]
    Locked(PathBuf),
    /// A file's contents fail a check: bad magic, version, checksum or structure.
    #[error("corruption in {} at offset {offset}: {detail}", path.display())]
    Corruption {
        /// The file in which the problem was found.
        path: PathBuf,
        /// Byte offset in that file where the damaged unit starts.
        offset: u64,
        /// What check failed.
        detail: String,
    },
    /// A write on a database opened with [`crate::Database::open_read_only`].
    #[error("database {} is open read-only; writes are refused", .0.display())]
    ReadOnly(PathBuf),
    /// An earlier write or sync failed, so the on-disk state is unknown; the database refuses
    /// writes until it is reopened (reopening recovers from the log).
    #[error("database refuses writes after an earlier I/O failure ({0}); reopen it to recover")]
    Poisoned(String),
    /// The database was closed.
    #[error("database is closed")]
    Closed,
    /// A broken invariant inside tsbucket: a bug, not bad input and not damage on disk. Where
    /// it happened while applying durable data the database refuses writes until reopened.
    #[error("internal error (a bug in tsbucket, please report it): {0}")]
    Internal(String),
    /// An operating-system I/O error.
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
}

impl Error {
    /// MongoDB's numeric error code for this error, where one exists.
    pub fn code(&self) -> Option<i32> {
        match self {
            Error::InvalidDocument { .. } | Error::BadValue(_) => Some(2),
            Error::InvalidOptions(_) => Some(72),
            Error::Unsupported(_) => Some(20),
            Error::NamespaceNotFound(_) => Some(26),
            Error::NamespaceExists(_) => Some(48),
            Error::CannotCreateIndex(_) => Some(67),
            Error::IndexNotFound(_) => Some(27),
            Error::IndexOptionsConflict(_) => Some(85),
            Error::IndexKeySpecsConflict(_) => Some(86),
            Error::MemoryLimit(_) => Some(292),
            _ => None,
        }
    }

    /// Builds a `Corruption` error.
    pub fn corruption(path: impl Into<PathBuf>, offset: u64, detail: impl fmt::Display) -> Error {
        Error::Corruption {
            path: path.into(),
            offset,
            detail: detail.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_match_mongodb() {
        assert_eq!(Error::BadValue("x".into()).code(), Some(2));
        assert_eq!(Error::InvalidOptions("x".into()).code(), Some(72));
        assert_eq!(Error::Unsupported("x".into()).code(), Some(20));
        assert_eq!(Error::NamespaceNotFound("x".into()).code(), Some(26));
        assert_eq!(Error::NamespaceExists("x".into()).code(), Some(48));
        assert_eq!(Error::CannotCreateIndex("x".into()).code(), Some(67));
        assert_eq!(Error::IndexNotFound("x".into()).code(), Some(27));
        assert_eq!(Error::IndexOptionsConflict("x".into()).code(), Some(85));
        assert_eq!(Error::IndexKeySpecsConflict("x".into()).code(), Some(86));
        assert_eq!(Error::MemoryLimit("x".into()).code(), Some(292));
        assert_eq!(Error::Closed.code(), None);
    }

    #[test]
    fn corruption_names_file_and_offset() {
        let e = Error::corruption("/db/seg/1.seg", 4096, "bad checksum");
        let s = e.to_string();
        assert!(s.contains("/db/seg/1.seg") && s.contains("4096") && s.contains("bad checksum"));
    }
}
