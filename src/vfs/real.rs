//! The operating system's file system.

use super::{FileBytes, LockGuard, Vfs, WritableFile};
use fs2::FileExt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Seek, SeekFrom, Write};
use std::path::Path;
use std::sync::Arc;

/// [`Vfs`] over `std::fs`, memory-mapping files for reads and locking with `flock`.
#[derive(Debug, Default, Clone, Copy)]
pub struct RealFs;

struct RealFile {
    file: File,
    len: u64,
}

impl WritableFile for RealFile {
    fn append(&mut self, buf: &[u8]) -> io::Result<()> {
        self.file.write_all(buf)?;
        self.len += buf.len() as u64;
        Ok(())
    }
    fn sync_data(&mut self) -> io::Result<()> {
        self.file.sync_data()
    }
    fn truncate(&mut self, len: u64) -> io::Result<()> {
        self.file.set_len(len)?;
        self.file.sync_all()?;
        // Without O_APPEND the write position stays where it was.
        self.file.seek(SeekFrom::Start(len))?;
        self.len = len;
        Ok(())
    }
    fn write_at(&mut self, offset: u64, buf: &[u8]) -> io::Result<()> {
        if offset > self.len {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "write past the end of the file",
            ));
        }
        self.file.seek(SeekFrom::Start(offset))?;
        let written = self.file.write_all(buf);
        let end = offset + buf.len() as u64;
        if written.is_ok() {
            self.len = self.len.max(end);
        }
        // Appends continue at the end whatever happened.
        self.file.seek(SeekFrom::Start(self.len))?;
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
        fs::create_dir_all(path)
    }
    fn list_dir(&self, path: &Path) -> io::Result<Vec<String>> {
        let mut out = Vec::new();
        for e in fs::read_dir(path)? {
            out.push(e?.file_name().to_string_lossy().into_owned());
        }
        Ok(out)
    }
    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }
    fn open_append(&self, path: &Path, truncate: bool) -> io::Result<Box<dyn WritableFile>> {
        // Not O_APPEND, under which Linux would put `write_at`'s writes at the end too; the
        // position is kept at the end instead.
        let mut file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)?;
        if truncate {
            file.set_len(0)?;
        }
        let len = file.metadata()?.len();
        file.seek(SeekFrom::Start(len))?;
        Ok(Box::new(RealFile { file, len }))
    }
    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        fs::read(path)
    }
    fn map(&self, path: &Path) -> io::Result<FileBytes> {
        let file = File::open(path)?;
        if file.metadata()?.len() == 0 {
            return Ok(FileBytes::from_vec(Vec::new()));
        }
        // SAFETY: segment files are immutable once renamed into place and are only removed
        // (never rewritten in place) while mapped; unlinking keeps the mapping valid on Unix.
        let map = unsafe { memmap2::Mmap::map(&file)? };
        Ok(FileBytes::from_deref(Arc::new(map)))
    }
    fn file_len(&self, path: &Path) -> io::Result<u64> {
        Ok(fs::metadata(path)?.len())
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        fs::remove_file(path)
    }
    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        File::open(path)?.sync_all()
    }
    fn try_lock(&self, dir: &Path, lock_file: &str) -> io::Result<Option<Box<dyn LockGuard>>> {
        // Read-only is all `flock` needs, and all a directory can be opened as.
        let dir_file = File::open(dir)?;
        if !try_flock(&dir_file)? {
            return Ok(None);
        }
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join(lock_file))?;
        // On refusal, dropping `dir_file` closes it and so releases the directory's lock.
        if !try_flock(&file)? {
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
}
