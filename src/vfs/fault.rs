//! A [`Vfs`] wrapper that fails chosen operations, for SQLite-style I/O-error loops.
//!
//! Every fallible operation is counted: each trait call except `exists` (it cannot report an
//! error) and each `append`, `sync_data` and `truncate` on a file it opened (`len` cannot fail
//! either). A test arms the wrapper to fail the n-th operation from now, once or persistently,
//! or every operation of one kind, and loops n = 1, 2, ... until the workload completes.
//!
//! A failed operation never reaches the wrapped file system, so the inner state is exactly what
//! the successful operations made of it; with [`FaultFs::set_partial_appends`] a failed append
//! first writes half of its buffer, like a short write before ENOSPC.

use super::{FileBytes, LockGuard, Vfs, WritableFile};
use parking_lot::Mutex;
use std::fmt;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// The kinds of operation [`FaultFs`] counts and can fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OpKind {
    /// [`Vfs::create_dir_all`].
    CreateDirAll,
    /// [`Vfs::list_dir`].
    ListDir,
    /// [`Vfs::open_append`].
    OpenAppend,
    /// [`Vfs::read`].
    Read,
    /// [`Vfs::map`].
    Map,
    /// [`Vfs::file_len`].
    FileLen,
    /// [`Vfs::rename`].
    Rename,
    /// [`Vfs::remove_file`].
    RemoveFile,
    /// [`Vfs::sync_dir`].
    SyncDir,
    /// [`Vfs::try_lock`].
    TryLock,
    /// [`WritableFile::append`].
    Append,
    /// [`WritableFile::sync_data`].
    SyncData,
    /// [`WritableFile::truncate`].
    Truncate,
    /// [`WritableFile::write_at`].
    WriteAt,
}

const KINDS: usize = 14;

impl OpKind {
    fn index(self) -> usize {
        self as usize
    }
}

/// The error an armed [`FaultFs`] returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Injected {
    /// An I/O error (EIO); its kind is `ErrorKind::Other`.
    Eio,
    /// No space left on the device: `from_raw_os_error(28)` (ENOSPC), kind `StorageFull`.
    NoSpace,
    /// Any other error kind.
    Kind(io::ErrorKind),
}

impl Injected {
    fn to_error(self, op: OpKind) -> io::Error {
        match self {
            Injected::Eio => io::Error::other(format!("injected EIO on {op:?}")),
            Injected::NoSpace => io::Error::from_raw_os_error(28),
            Injected::Kind(k) => io::Error::new(k, format!("injected {k:?} on {op:?}")),
        }
    }
}

/// When the armed fault fires.
#[derive(Debug, Clone, Copy)]
enum Trigger {
    /// At the operation whose count (since creation) is `at`; then also every later one when
    /// `persistent`.
    Nth { at: u64, persistent: bool },
    /// Every operation of this kind.
    Kind(OpKind),
}

#[derive(Default)]
struct Counters {
    total: AtomicU64,
    by_kind: [AtomicU64; KINDS],
    injected: AtomicU64,
    partial_appends: AtomicBool,
    armed: Mutex<Option<(Trigger, Injected)>>,
}

impl Counters {
    /// Counts one operation and decides whether it fails.
    fn check(&self, op: OpKind) -> io::Result<()> {
        let n = self.total.fetch_add(1, Ordering::SeqCst) + 1;
        if let Some(c) = self.by_kind.get(op.index()) {
            c.fetch_add(1, Ordering::SeqCst);
        }
        let armed = *self.armed.lock();
        let fire = match armed {
            None => None,
            Some((Trigger::Nth { at, persistent }, err)) => {
                (n == at || (persistent && n > at)).then_some(err)
            }
            Some((Trigger::Kind(k), err)) => (k == op).then_some(err),
        };
        match fire {
            Some(err) => {
                self.injected.fetch_add(1, Ordering::SeqCst);
                Err(err.to_error(op))
            }
            None => Ok(()),
        }
    }
}

/// Wraps another [`Vfs`]; counts its operations and fails the ones it is armed to fail.
///
/// Clones share the counters and the armed fault.
#[derive(Clone)]
pub struct FaultFs {
    inner: Arc<dyn Vfs>,
    counters: Arc<Counters>,
}

impl fmt::Debug for FaultFs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultFs")
            .field("inner", &self.inner)
            .field("ops", &self.op_count())
            .finish()
    }
}

impl FaultFs {
    /// Wraps `inner`, unarmed.
    pub fn new(inner: Arc<dyn Vfs>) -> FaultFs {
        FaultFs {
            inner,
            counters: Arc::new(Counters::default()),
        }
    }

    /// The wrapped file system.
    pub fn inner(&self) -> &Arc<dyn Vfs> {
        &self.inner
    }

    /// Operations counted since creation.
    pub fn op_count(&self) -> u64 {
        self.counters.total.load(Ordering::SeqCst)
    }

    /// Operations of one kind counted since creation (failed ones included).
    pub fn op_count_of(&self, kind: OpKind) -> u64 {
        self.counters
            .by_kind
            .get(kind.index())
            .map_or(0, |c| c.load(Ordering::SeqCst))
    }

    /// How many errors were injected so far.
    pub fn injected_count(&self) -> u64 {
        self.counters.injected.load(Ordering::SeqCst)
    }

    /// Fails the `n`-th operation from now (`n = 1` is the next one) with `err`; with
    /// `persistent`, every operation after it fails too (a device that went away).
    pub fn fail_nth(&self, n: u64, persistent: bool, err: Injected) {
        let at = self.op_count().saturating_add(n.max(1));
        *self.counters.armed.lock() = Some((Trigger::Nth { at, persistent }, err));
    }

    /// Fails every operation of `kind` with `err` until [`FaultFs::disarm`].
    pub fn fail_kind(&self, kind: OpKind, err: Injected) {
        *self.counters.armed.lock() = Some((Trigger::Kind(kind), err));
    }

    /// Clears the armed fault; later operations pass through.
    pub fn disarm(&self) {
        *self.counters.armed.lock() = None;
    }

    /// With `on`, a failing append first writes the first half of its buffer to the inner file.
    pub fn set_partial_appends(&self, on: bool) {
        self.counters.partial_appends.store(on, Ordering::SeqCst);
    }
}

struct FaultFile {
    inner: Box<dyn WritableFile>,
    counters: Arc<Counters>,
}

impl WritableFile for FaultFile {
    fn append(&mut self, buf: &[u8]) -> io::Result<()> {
        if let Err(e) = self.counters.check(OpKind::Append) {
            if self.counters.partial_appends.load(Ordering::SeqCst) {
                let half = buf.get(..buf.len() / 2).unwrap_or_default();
                // The short write's own outcome does not matter: the caller sees the injected error.
                let _ = self.inner.append(half);
            }
            return Err(e);
        }
        self.inner.append(buf)
    }
    fn sync_data(&mut self) -> io::Result<()> {
        self.counters.check(OpKind::SyncData)?;
        self.inner.sync_data()
    }
    fn truncate(&mut self, len: u64) -> io::Result<()> {
        self.counters.check(OpKind::Truncate)?;
        self.inner.truncate(len)
    }
    fn write_at(&mut self, offset: u64, buf: &[u8]) -> io::Result<()> {
        if let Err(e) = self.counters.check(OpKind::WriteAt) {
            if self.counters.partial_appends.load(Ordering::SeqCst) {
                let half = buf.get(..buf.len() / 2).unwrap_or_default();
                // The short write's own outcome does not matter: the caller sees the injected error.
                let _ = self.inner.write_at(offset, half);
            }
            return Err(e);
        }
        self.inner.write_at(offset, buf)
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
}

impl Vfs for FaultFs {
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        self.counters.check(OpKind::CreateDirAll)?;
        self.inner.create_dir_all(path)
    }
    fn list_dir(&self, path: &Path) -> io::Result<Vec<String>> {
        self.counters.check(OpKind::ListDir)?;
        self.inner.list_dir(path)
    }
    fn exists(&self, path: &Path) -> bool {
        self.inner.exists(path)
    }
    fn open_append(&self, path: &Path, truncate: bool) -> io::Result<Box<dyn WritableFile>> {
        self.counters.check(OpKind::OpenAppend)?;
        let inner = self.inner.open_append(path, truncate)?;
        Ok(Box::new(FaultFile {
            inner,
            counters: self.counters.clone(),
        }))
    }
    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        self.counters.check(OpKind::Read)?;
        self.inner.read(path)
    }
    fn map(&self, path: &Path) -> io::Result<FileBytes> {
        self.counters.check(OpKind::Map)?;
        self.inner.map(path)
    }
    fn file_len(&self, path: &Path) -> io::Result<u64> {
        self.counters.check(OpKind::FileLen)?;
        self.inner.file_len(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.counters.check(OpKind::Rename)?;
        self.inner.rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.counters.check(OpKind::RemoveFile)?;
        self.inner.remove_file(path)
    }
    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        self.counters.check(OpKind::SyncDir)?;
        self.inner.sync_dir(path)
    }
    fn try_lock(&self, dir: &Path, lock_file: &str) -> io::Result<Option<Box<dyn LockGuard>>> {
        self.counters.check(OpKind::TryLock)?;
        self.inner.try_lock(dir, lock_file)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vfs::MemFs;

    fn setup() -> (MemFs, FaultFs) {
        let mem = MemFs::new();
        mem.create_dir_all(Path::new("/db")).unwrap();
        let f = FaultFs::new(Arc::new(mem.clone()));
        (mem, f)
    }

    #[test]
    fn counts_every_fallible_operation() {
        let (_, f) = setup();
        let mut w = f.open_append(Path::new("/db/a"), false).unwrap();
        w.append(b"x").unwrap();
        w.sync_data().unwrap();
        w.truncate(0).unwrap();
        f.sync_dir(Path::new("/db")).unwrap();
        assert!(f.exists(Path::new("/db/a")));
        assert_eq!(f.op_count(), 5);
        assert_eq!(f.op_count_of(OpKind::SyncData), 1);
        assert_eq!(f.op_count_of(OpKind::SyncDir), 1);
    }

    #[test]
    fn nth_operation_fails_once_then_passes() {
        let (mem, f) = setup();
        let mut w = f.open_append(Path::new("/db/a"), false).unwrap();
        f.fail_nth(2, false, Injected::Eio);
        w.append(b"1").unwrap();
        let e = w.append(b"2").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::Other);
        w.append(b"3").unwrap();
        assert_eq!(mem.read(Path::new("/db/a")).unwrap(), b"13");
        assert_eq!(f.injected_count(), 1);
    }

    #[test]
    fn persistent_fault_fails_everything_after() {
        let (_, f) = setup();
        let mut w = f.open_append(Path::new("/db/a"), false).unwrap();
        f.fail_nth(1, true, Injected::NoSpace);
        let e = w.append(b"1").unwrap_err();
        assert_eq!(e.raw_os_error(), Some(28));
        assert_eq!(e.kind(), io::ErrorKind::StorageFull);
        assert!(w.sync_data().is_err());
        assert!(f.list_dir(Path::new("/db")).is_err());
        f.disarm();
        assert!(f.list_dir(Path::new("/db")).is_ok());
    }

    #[test]
    fn kind_fault_fails_only_that_kind() {
        let (mem, f) = setup();
        f.fail_kind(OpKind::SyncData, Injected::Eio);
        let mut w = f.open_append(Path::new("/db/a"), false).unwrap();
        w.append(b"abc").unwrap();
        assert!(w.sync_data().is_err());
        assert!(w.sync_data().is_err());
        f.sync_dir(Path::new("/db")).unwrap();
        // The failed sync did not reach the inner file system: nothing durable.
        assert_eq!(mem.durable_len(Path::new("/db/a")), Some(0));
    }

    #[test]
    fn partial_append_writes_half_then_fails() {
        let (mem, f) = setup();
        f.set_partial_appends(true);
        let mut w = f.open_append(Path::new("/db/a"), false).unwrap();
        f.fail_kind(OpKind::Append, Injected::NoSpace);
        assert!(w.append(b"abcd").is_err());
        assert_eq!(mem.read(Path::new("/db/a")).unwrap(), b"ab");
    }
}
