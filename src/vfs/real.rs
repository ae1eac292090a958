//! The operating system's file system.

use super::{FileBytes, LockGuard, Vfs, WritableFile};
use fs2::FileExt;
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// [`Vfs`] over `std::fs`, memory-mapping files for reads and locking with `flock`.
#[derive(Debug, Default, Clone, Copy)]
pub struct RealFs;

/// An I/O error that says what was being done to which path: the operating system's own
/// message ("Permission denied") names neither. It keeps the kind of the error it wraps, so
/// that callers matching on `kind()` (a missing file, a full disk) still can, and that error as
/// its `source()`, raw OS code included.
#[derive(Debug)]
struct OnPath {
    doing: String,
    source: io::Error,
}

impl fmt::Display for OnPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.doing, self.source)
    }
}

impl std::error::Error for OnPath {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// Wraps `e` as having happened `doing` (e.g. "opening") `path`.
fn on(doing: &str, path: &Path, e: io::Error) -> io::Error {
    let doing = format!("{doing} {}", path.display());
    io::Error::new(e.kind(), OnPath { doing, source: e })
}

struct RealFile {
    file: File,
    path: PathBuf,
    len: u64,
}

impl RealFile {
    /// [`on`] this file, for `map_err`; it costs nothing until an error comes.
    fn on(&self, doing: &'static str) -> impl FnOnce(io::Error) -> io::Error + '_ {
        move |e| on(doing, &self.path, e)
    }
}

impl WritableFile for RealFile {
    fn append(&mut self, buf: &[u8]) -> io::Result<()> {
        self.file.write_all(buf).map_err(self.on("appending to"))?;
        self.len += buf.len() as u64;
        Ok(())
    }
    fn sync_data(&mut self) -> io::Result<()> {
        self.file.sync_data().map_err(self.on("syncing"))
    }
    fn truncate(&mut self, len: u64) -> io::Result<()> {
        self.file.set_len(len).map_err(self.on("truncating"))?;
        self.file.sync_all().map_err(self.on("syncing"))?;
        // Without O_APPEND the write position stays where it was.
        self.file
            .seek(SeekFrom::Start(len))
            .map_err(self.on("seeking in"))?;
        self.len = len;
        Ok(())
    }
    fn write_at(&mut self, offset: u64, buf: &[u8]) -> io::Result<()> {
        if offset > self.len {
            let past = io::Error::new(io::ErrorKind::InvalidInput, "past the end of the file");
            return Err(on("writing to", &self.path, past));
        }
        self.file
            .seek(SeekFrom::Start(offset))
            .map_err(self.on("seeking in"))?;
        let written = self.file.write_all(buf).map_err(self.on("writing to"));
        let end = offset + buf.len() as u64;
        if written.is_ok() {
            self.len = self.len.max(end);
        }
        // Appends continue at the end whatever happened.
        self.file
            .seek(SeekFrom::Start(self.len))
            .map_err(self.on("seeking in"))?;
        written
    }
    fn len(&self) -> u64 {
        self.len
    }
}

/// The directory and the lock file, each open with an exclusive `flock` on it. A `flock`
/// belongs to the open file description, so another open of either (in this process too)
/// conflicts, and the kernel releases both when the process dies.
struct DirLock {
    dir: File,
    file: File,
}
impl LockGuard for DirLock {}
impl Drop for DirLock {
    fn drop(&mut self) {
        let _ = FileExt::unlock(&self.file);
        let _ = FileExt::unlock(&self.dir);
    }
}

/// `try_lock_exclusive` on `file`: whether the lock was taken (false: somebody holds it).
fn try_flock(file: &File) -> io::Result<bool> {
    match file.try_lock_exclusive() {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(false),
        Err(e) if e.raw_os_error() == fs2::lock_contended_error().raw_os_error() => Ok(false),
        Err(e) => Err(e),
    }
}

impl Vfs for RealFs {
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        fs::create_dir_all(path).map_err(|e| on("creating directory", path, e))
    }
    fn list_dir(&self, path: &Path) -> io::Result<Vec<String>> {
        let listing = |e| on("listing", path, e);
        let mut out = Vec::new();
        for e in fs::read_dir(path).map_err(listing)? {
            out.push(
                e.map_err(listing)?
                    .file_name()
                    .to_string_lossy()
                    .into_owned(),
            );
        }
        Ok(out)
    }
    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }
    fn open_append(&self, path: &Path, truncate: bool) -> io::Result<Box<dyn WritableFile>> {
        // Not O_APPEND, under which Linux would put `write_at`'s writes at the end too; the
        // position is kept at the end instead.
        let opening = |e| on("opening", path, e);
        let mut file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .map_err(opening)?;
        if truncate {
            file.set_len(0).map_err(|e| on("truncating", path, e))?;
        }
        let len = file.metadata().map_err(opening)?.len();
        file.seek(SeekFrom::Start(len)).map_err(opening)?;
        let path = path.to_path_buf();
        Ok(Box::new(RealFile { file, path, len }))
    }
    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        fs::read(path).map_err(|e| on("reading", path, e))
    }
    fn map(&self, path: &Path) -> io::Result<FileBytes> {
        let mapping = |e| on("mapping", path, e);
        let file = File::open(path).map_err(mapping)?;
        if file.metadata().map_err(mapping)?.len() == 0 {
            return Ok(FileBytes::from_vec(Vec::new()));
        }
        // SAFETY: segment files are immutable once renamed into place and are only removed
        // (never rewritten in place) while mapped; unlinking keeps the mapping valid on Unix.
        let map = unsafe { memmap2::Mmap::map(&file).map_err(mapping)? };
        Ok(FileBytes::from_deref(Arc::new(map)))
    }
    fn file_len(&self, path: &Path) -> io::Result<u64> {
        let meta = fs::metadata(path).map_err(|e| on("reading the length of", path, e))?;
        Ok(meta.len())
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::rename(from, to).map_err(|e| {
            let doing = format!("renaming {} to", from.display());
            on(&doing, to, e)
        })
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        fs::remove_file(path).map_err(|e| on("removing", path, e))
    }
    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        let syncing = |e| on("syncing directory", path, e);
        File::open(path)
            .map_err(syncing)?
            .sync_all()
            .map_err(syncing)
    }
    fn try_lock(&self, dir: &Path, lock_file: &str) -> io::Result<Option<Box<dyn LockGuard>>> {
        // Read-only is all `flock` needs, and all a directory can be opened as.
        let locking = |e| on("locking", dir, e);
        let dir_file = File::open(dir).map_err(locking)?;
        if !try_flock(&dir_file).map_err(locking)? {
            return Ok(None);
        }
        let path = dir.join(lock_file);
        let locking = |e| on("locking", &path, e);
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(locking)?;
        // On refusal, dropping `dir_file` closes it and so releases the directory's lock.
        if !try_flock(&file).map_err(locking)? {
            return Ok(None);
        }
        Ok(Some(Box::new(DirLock {
            dir: dir_file,
            file,
        })))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_at_an_offset_appends_and_truncation_agree_on_the_end() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let fs = RealFs;
        let mut f = fs.open_append(&path, true).unwrap();
        f.append(&[0u8; 10]).unwrap();
        f.write_at(4, b"abcdefgh").unwrap();
        assert_eq!(f.len(), 12);
        f.append(b"XY").unwrap();
        assert!(f.write_at(15, b"z").is_err(), "past the end");
        assert_eq!(fs.read(&path).unwrap(), b"\0\0\0\0abcdefghXY");
        f.truncate(6).unwrap();
        f.append(b"!").unwrap();
        f.sync_data().unwrap();
        assert_eq!(fs.read(&path).unwrap(), b"\0\0\0\0ab!");
        drop(f);
        // Reopened, appends continue at the end.
        let mut f = fs.open_append(&path, false).unwrap();
        f.append(b"?").unwrap();
        assert_eq!(fs.read(&path).unwrap(), b"\0\0\0\0ab!?");
    }

    #[test]
    fn a_holder_of_the_lock_file_alone_still_excludes() {
        let dir = tempfile::tempdir().unwrap();
        // What a version that locks only the file holds.
        let old = File::create(dir.path().join("LOCK")).unwrap();
        old.try_lock_exclusive().unwrap();
        assert!(RealFs.try_lock(dir.path(), "LOCK").unwrap().is_none());
        // The refusal let go of the directory again.
        drop(old);
        let g = RealFs.try_lock(dir.path(), "LOCK").unwrap();
        assert!(g.is_some());
        // Deleting the file does not release the directory.
        std::fs::remove_file(dir.path().join("LOCK")).unwrap();
        assert!(RealFs.try_lock(dir.path(), "LOCK").unwrap().is_none());
        drop(g);
        assert!(RealFs.try_lock(dir.path(), "LOCK").unwrap().is_some());
    }

    #[test]
    fn errors_name_what_was_done_to_which_path_and_keep_their_kind() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("gone").join("00000003.seg");
        let shown = missing.display().to_string();
        let fs = RealFs;
        let cases = [
            ("opening", fs.open_append(&missing, false).err().unwrap()),
            ("reading", fs.read(&missing).unwrap_err()),
            ("mapping", fs.map(&missing).unwrap_err()),
            ("reading the length of", fs.file_len(&missing).unwrap_err()),
            ("listing", fs.list_dir(&missing).unwrap_err()),
            ("removing", fs.remove_file(&missing).unwrap_err()),
            ("syncing directory", fs.sync_dir(&missing).unwrap_err()),
            ("locking", fs.try_lock(&missing, "LOCK").err().unwrap()),
            (
                "renaming",
                fs.rename(&missing, &dir.path().join("x")).unwrap_err(),
            ),
        ];
        for (doing, e) in cases {
            let msg = e.to_string();
            assert_eq!(e.kind(), io::ErrorKind::NotFound, "{msg}");
            assert!(msg.starts_with(doing), "{msg}");
            assert!(msg.contains(&shown), "{msg}");
            assert!(msg.ends_with("(os error 2)"), "{msg}");
            // The operating system's error stays reachable, code and all.
            let os = std::error::Error::source(&e)
                .and_then(|s| s.downcast_ref::<io::Error>())
                .and_then(io::Error::raw_os_error);
            assert_eq!(os, Some(2), "{msg}");
        }
        // A directory that cannot be made: a regular file is in the way.
        let file = dir.path().join("plain");
        std::fs::write(&file, b"").unwrap();
        let e = fs.create_dir_all(&file.join("db")).unwrap_err();
        let msg = e.to_string();
        assert!(msg.starts_with("creating directory"), "{msg}");
        assert!(
            msg.contains(&file.join("db").display().to_string()),
            "{msg}"
        );
        let mut f = fs.open_append(&file, false).unwrap();
        let e = f.write_at(1, b"x").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert!(e.to_string().contains(&file.display().to_string()), "{e}");
    }
}
