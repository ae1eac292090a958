//! All file I/O of the engine goes through the small [`Vfs`] trait.
//!
//! Three implementations exist: [`RealFs`] (the operating system), [`MemFs`] (in memory, keeping a
//! "durable" image beside the live one so that a test can simulate power loss by dropping every
//! write that was not synced) and [`FaultFs`] (wraps another and fails chosen operations). Crash and
//! I/O-error tests therefore need neither root nor a real power cut.
//!
//! The trait is deliberately narrow: writable files that grow at the end (and may be written
//! over from a given offset), whole-file reads or maps, rename, remove, directory sync and an
//! advisory lock on a directory. That is all the engine's formats need (the WAL appends,
//! writing its records over zeros it wrote ahead; segments and the manifest are written once
//! then renamed into place).

mod fault;
mod mem;
mod readonly;
mod real;

pub use fault::{FaultFs, Injected, OpKind};
pub use mem::{CrashMode, MemFs, SECTOR};
pub use readonly::ReadOnlyFs;
pub use real::RealFs;

use std::fmt;
use std::io;
use std::ops::Deref;
use std::path::Path;
use std::sync::Arc;

/// A file opened for writing at its end.
pub trait WritableFile: Send {
    /// Appends `buf` at the end of the file.
    fn append(&mut self, buf: &[u8]) -> io::Result<()>;
    /// Makes everything appended so far durable (fdatasync).
    fn sync_data(&mut self) -> io::Result<()>;
    /// Cuts the file to `len` bytes; later appends continue from there.
    fn truncate(&mut self, len: u64) -> io::Result<()>;
    /// Writes `buf` at `offset` (at most `len()`), over the bytes there and past the end as
    /// far as it reaches. The log writes its records over zeros it wrote ahead of them.
    fn write_at(&mut self, offset: u64, buf: &[u8]) -> io::Result<()>;
    /// Current length in bytes (including unsynced appends).
    fn len(&self) -> u64;
    /// True when the file is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The read-only bytes of a whole file: a memory map on a real file system.
#[derive(Clone)]
pub struct FileBytes(Arc<dyn Deref<Target = [u8]> + Send + Sync>);

impl FileBytes {
    /// Wraps an owned buffer.
    pub fn from_vec(v: Vec<u8>) -> FileBytes {
        FileBytes(Arc::new(v))
    }
    /// Wraps anything that dereferences to bytes (a memory map, for instance).
    pub fn from_deref(d: Arc<dyn Deref<Target = [u8]> + Send + Sync>) -> FileBytes {
        FileBytes(d)
    }
}

impl Deref for FileBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for FileBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FileBytes({} bytes)", self.len())
    }
}

/// A held directory lock; dropping it releases the lock.
pub trait LockGuard: Send + Sync {}

/// The file-system operations the engine uses.
pub trait Vfs: Send + Sync + fmt::Debug {
    /// Creates a directory and its parents (like `mkdir -p`).
    fn create_dir_all(&self, path: &Path) -> io::Result<()>;
    /// Names (not paths) of the entries of a directory, in no particular order.
    fn list_dir(&self, path: &Path) -> io::Result<Vec<String>>;
    /// True if a file or directory exists at `path`.
    fn exists(&self, path: &Path) -> bool;
    /// Opens a file for appending, creating it if missing; with `truncate` it is emptied first.
    fn open_append(&self, path: &Path, truncate: bool) -> io::Result<Box<dyn WritableFile>>;
    /// Reads a whole file.
    fn read(&self, path: &Path) -> io::Result<Vec<u8>>;
    /// Maps a whole file read-only (or reads it, where mapping is not possible).
    fn map(&self, path: &Path) -> io::Result<FileBytes>;
    /// Length of a file in bytes.
    fn file_len(&self, path: &Path) -> io::Result<u64>;
    /// Atomically renames `from` to `to`, replacing `to`.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Removes a file.
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    /// Makes the directory's entries (creates, renames, removes) durable.
    fn sync_dir(&self, path: &Path) -> io::Result<()>;
    /// Takes an exclusive advisory lock on the directory `dir` itself and one on the file
    /// `lock_file` inside it (created if missing); the guard holds both. `Ok(None)` means
    /// somebody else holds either.
    ///
    /// The directory's lock is the one that counts: a lock file can be unlinked from under its
    /// holder, after which a newcomer would create and lock a fresh one, whereas the directory
    /// lives as long as the database in it. The file's lock still excludes (and is honoured by)
    /// versions that lock only the file.
    fn try_lock(&self, dir: &Path, lock_file: &str) -> io::Result<Option<Box<dyn LockGuard>>>;
}

/// Writes `data` to `path` atomically and durably: write a temporary file beside it, sync it,
/// rename it over `path`, then sync the directory.
pub fn write_atomic(vfs: &dyn Vfs, path: &Path, data: &[u8]) -> io::Result<()> {
    let dir = path.parent().unwrap_or_else(|| Path::new("."));
    let mut tmp_name = path.file_name().unwrap_or_default().to_os_string();
    tmp_name.push(".tmp");
    let tmp = dir.join(tmp_name);
    {
        let mut f = vfs.open_append(&tmp, true)?;
        f.append(data)?;
        f.sync_data()?;
    }
    vfs.rename(&tmp, path)?;
    vfs.sync_dir(dir)
}
