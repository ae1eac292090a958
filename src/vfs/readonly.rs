//! A view of a file system for a database opened read-only beside a writer: every change is
//! refused, and log files are read into memory instead of mapped.
//!
//! Segments are never changed once written, so mapping them is safe even while a writer runs.
//! Log files are not: the writer cuts the zeros ahead of its records at rotation and close and
//! reuses reclaimed files in place, and touching a mapped page past a file's new end kills the
//! process (`SIGBUS`). A copy read at one moment has no such hazard; what it holds is checked
//! by the log reader like any other bytes.

use super::{FileBytes, LockGuard, Vfs, WritableFile};
use std::io;
use std::path::Path;
use std::sync::Arc;

/// Refuses every change and copies log files instead of mapping them (see the module docs).
#[derive(Debug, Clone)]
pub struct ReadOnlyFs {
    inner: Arc<dyn Vfs>,
}

impl ReadOnlyFs {
    /// A read-only view of `inner`.
    pub fn new(inner: Arc<dyn Vfs>) -> ReadOnlyFs {
        ReadOnlyFs { inner }
    }
}

fn refused(op: &str, path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::PermissionDenied,
        format!(
            "{op} {}: the database is open read-only; nothing is written",
            path.display()
        ),
    )
}

impl Vfs for ReadOnlyFs {
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        Err(refused("creating", path))
    }
    fn list_dir(&self, path: &Path) -> io::Result<Vec<String>> {
        self.inner.list_dir(path)
    }
    fn exists(&self, path: &Path) -> bool {
        self.inner.exists(path)
    }
    fn open_append(&self, path: &Path, _truncate: bool) -> io::Result<Box<dyn WritableFile>> {
        Err(refused("writing", path))
    }
    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        self.inner.read(path)
    }
    fn map(&self, path: &Path) -> io::Result<FileBytes> {
        if path.extension().is_some_and(|x| x == "log") {
            return self.inner.read(path).map(FileBytes::from_vec);
        }
        self.inner.map(path)
    }
    fn file_len(&self, path: &Path) -> io::Result<u64> {
        self.inner.file_len(path)
    }
    fn rename(&self, from: &Path, _to: &Path) -> io::Result<()> {
        Err(refused("renaming", from))
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        Err(refused("removing", path))
    }
    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        Err(refused("syncing", path))
    }
    fn try_lock(&self, dir: &Path, _lock_file: &str) -> io::Result<Option<Box<dyn LockGuard>>> {
        Err(refused("locking", dir))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "test code: a panic is a test failure")]
    use super::*;
    use crate::vfs::MemFs;

    #[test]
    fn reads_pass_through_and_every_change_is_refused() {
        let fs = MemFs::new();
        fs.create_dir_all(Path::new("/d")).unwrap();
        let mut f = fs.open_append(Path::new("/d/a.log"), true).unwrap();
        f.append(b"abc").unwrap();
        let ro = ReadOnlyFs::new(Arc::new(fs.clone()));
        let p = Path::new("/d/a.log");
        assert_eq!(&*ro.map(p).unwrap(), b"abc");
        assert_eq!(ro.read(p).unwrap(), b"abc");
        assert_eq!(ro.list_dir(Path::new("/d")).unwrap(), vec!["a.log"]);
        let denied =
            |r: io::Result<()>| assert_eq!(r.unwrap_err().kind(), io::ErrorKind::PermissionDenied);
        denied(ro.create_dir_all(Path::new("/e")));
        denied(ro.open_append(p, false).map(|_| ()));
        denied(ro.rename(p, Path::new("/d/b.log")));
        denied(ro.remove_file(p));
        denied(ro.sync_dir(Path::new("/d")));
        denied(ro.try_lock(Path::new("/d"), "LOCK").map(|_| ()));
        assert_eq!(fs.read(p).unwrap(), b"abc");
    }
}
