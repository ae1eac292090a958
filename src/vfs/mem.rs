//! An in-memory file system that can simulate power loss.
//!
//! Every file (inode) keeps two images: the *live* bytes that reads see, and the *durable* bytes
//! that would survive a power cut. `sync_data` makes the live bytes durable. Directory entries are
//! modelled the same way: creating, renaming or removing a file changes the live namespace only;
//! `sync_dir` of the parent makes that directory's entries durable. This is the behaviour the
//! "All File Systems Are Not Created Equal" study (OSDI 2014) found applications must assume: a
//! file that was fsynced but whose directory was not can vanish, and an unsynced rename can be
//! undone.
//!
//! [`MemFs::crash`] and [`MemFs::crash_with`] build a *new* `MemFs` from what a power cut could
//! leave behind, so a test can run a workload, "pull the plug" at any point, and reopen the image.
//!
//! Assumption (documented in `format-spec/crash-model.md`): bytes that were synced are never
//! damaged by a later torn write ("powersafe overwrite" in SQLite's terms); only bytes written
//! after the last sync can be lost, torn or read back as zeros.

use super::{FileBytes, LockGuard, Vfs, WritableFile};
use parking_lot::Mutex;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Size of the unit a torn write damages in [`CrashMode::TornSector`].
pub const SECTOR: usize = 512;

/// How [`MemFs::crash_with`] treats bytes written after a file's last `sync_data`.
///
/// Whatever the mode, synced bytes survive and directory entries are those of the last
/// `sync_dir` (use [`MemFs::crash_with_dir_entries`] for images where unsynced entries survived).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashMode {
    /// Every unsynced write is lost: files hold exactly their durable image.
    DropUnsynced,
    /// Each file keeps a random prefix of its unsynced writes (appends and truncations, in the
    /// order they were made); the prefix may end in the middle of an append, because appends are
    /// not atomic.
    KeepPrefix,
    /// Like `KeepPrefix`, then the last 512-byte sector that holds unsynced bytes is filled with
    /// garbage in its unsynced part (a write torn inside the drive).
    TornSector,
    /// The file's size reached the disk but its unsynced data did not: the file has its live
    /// length and every byte written since the last sync reads as zero (ext4 `data=writeback`).
    ZeroExtension,
    /// Each file independently picks one of the other modes at random.
    Random,
}

/// One write made since the inode's last sync, replayable onto the durable image.
#[derive(Clone)]
enum PendingOp {
    Append(Vec<u8>),
    Truncate(u64),
    WriteAt(usize, Vec<u8>),
}

#[derive(Clone, Default)]
struct Inode {
    live: Vec<u8>,
    durable: Vec<u8>,
    /// Writes since the last sync, in order; applying them to `durable` gives `live`.
    pending: Vec<PendingOp>,
}

type Ino = u64;

#[derive(Default)]
struct State {
    next_ino: Ino,
    inodes: HashMap<Ino, Inode>,
    /// Live namespace: file path -> inode.
    files: BTreeMap<PathBuf, Ino>,
    /// Durable namespace, as of each directory's last `sync_dir`.
    durable_files: BTreeMap<PathBuf, Ino>,
    dirs: BTreeSet<PathBuf>,
    durable_dirs: BTreeSet<PathBuf>,
    locks: BTreeSet<PathBuf>,
}

/// In-memory [`Vfs`] with a live and a durable image of every file and directory entry.
///
/// Cloning shares the same state (like two handles on one disk). Paths are used as given, with
/// no normalisation: use absolute, clean paths such as `/db/wal`.
#[derive(Clone, Default)]
pub struct MemFs {
    state: Arc<Mutex<State>>,
}

impl fmt::Debug for MemFs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let st = self.state.lock();
        f.debug_struct("MemFs")
            .field("files", &st.files.len())
            .field("dirs", &st.dirs.len())
            .finish()
    }
}

fn not_found(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("{}: no such file or directory", path.display()),
    )
}

fn parent_of(path: &Path) -> PathBuf {
    path.parent().map(Path::to_path_buf).unwrap_or_default()
}

/// Top-level directories (children of the root) count as durable from creation: the model
/// has to start somewhere, and tests create their database directory there.
fn is_top_level(dir: &Path) -> bool {
    match dir.parent() {
        None => true,
        Some(p) => p.as_os_str().is_empty() || p == Path::new("/"),
    }
}

impl State {
    fn dir_exists(&self, dir: &Path) -> bool {
        dir.as_os_str().is_empty() || dir == Path::new("/") || self.dirs.contains(dir)
    }

    fn require_parent(&self, path: &Path) -> io::Result<()> {
        let parent = parent_of(path);
        if self.dir_exists(&parent) {
            Ok(())
        } else {
            Err(not_found(&parent))
        }
    }

    fn inode(&mut self, ino: Ino) -> io::Result<&mut Inode> {
        self.inodes
            .get_mut(&ino)
            .ok_or_else(|| io::Error::other("memfs: stale inode"))
    }
}

/// A small deterministic generator (SplitMix64) so crash images are reproducible from a seed
/// without pulling a random-number crate into the library.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `0..=max`.
    fn upto(&mut self, max: u64) -> u64 {
        if max == u64::MAX {
            self.next()
        } else {
            self.next() % (max + 1)
        }
    }
}

fn apply_op(buf: &mut Vec<u8>, op: &PendingOp) {
    match op {
        PendingOp::Append(b) => buf.extend_from_slice(b),
        PendingOp::Truncate(len) => buf.resize(usize::try_from(*len).unwrap_or(usize::MAX), 0),
        PendingOp::WriteAt(at, b) => write_within(buf, *at, b),
    }
}

/// Writes `b` into `buf` at `at` (at most its length), extending it as far as `b` reaches.
fn write_within(buf: &mut Vec<u8>, at: usize, b: &[u8]) {
    let end = at.saturating_add(b.len());
    if buf.len() < end {
        buf.resize(end, 0);
    }
    if let Some(dst) = buf.get_mut(at..end) {
        dst.copy_from_slice(b);
    }
}

/// What a power cut leaves of one inode under `mode`.
fn crash_image(inode: &Inode, mode: CrashMode, rng: &mut Rng) -> Vec<u8> {
    let mode = if mode == CrashMode::Random {
        match rng.upto(3) {
            0 => CrashMode::DropUnsynced,
            1 => CrashMode::KeepPrefix,
            2 => CrashMode::TornSector,
            _ => CrashMode::ZeroExtension,
        }
    } else {
        mode
    };
    let mut img = inode.durable.clone();
    if inode.pending.is_empty() {
        return img;
    }
    match mode {
        CrashMode::DropUnsynced | CrashMode::Random => img,
        CrashMode::KeepPrefix | CrashMode::TornSector => {
            // Bytes [0, stable) are the same in the durable image and in every prefix image.
            let mut stable = img.len();
            let n = inode.pending.len() as u64;
            let keep = rng.upto(n) as usize;
            for (i, op) in inode.pending.iter().enumerate() {
                if i < keep {
                    apply_op(&mut img, op);
                    match op {
                        PendingOp::Truncate(l) => {
                            stable = stable.min(usize::try_from(*l).unwrap_or(usize::MAX))
                        }
                        PendingOp::WriteAt(at, _) => stable = stable.min(*at),
                        PendingOp::Append(_) => {}
                    }
                } else if i == keep {
                    // The first op not fully kept may be partly kept.
                    match op {
                        PendingOp::Append(b) => {
                            let part = rng.upto(b.len() as u64) as usize;
                            img.extend_from_slice(b.get(..part).unwrap_or_default());
                        }
                        PendingOp::WriteAt(at, b) => {
                            let part = rng.upto(b.len() as u64) as usize;
                            write_within(&mut img, *at, b.get(..part).unwrap_or_default());
                            stable = stable.min(*at);
                        }
                        PendingOp::Truncate(_) => {}
                    }
                    break;
                }
            }
            if mode == CrashMode::TornSector && img.len() > stable {
                let sector_start = (img.len() - 1) / SECTOR * SECTOR;
                let from = sector_start.max(stable);
                for b in img.iter_mut().skip(from) {
                    *b = rng.next() as u8;
                }
            }
            img
        }
        CrashMode::ZeroExtension => {
            let mut stable = img.len();
            let mut len = img.len();
            for op in &inode.pending {
                match op {
                    PendingOp::Append(b) => len += b.len(),
                    PendingOp::Truncate(l) => {
                        len = usize::try_from(*l).unwrap_or(usize::MAX);
                        stable = stable.min(len);
                    }
                    PendingOp::WriteAt(at, b) => {
                        len = len.max(at.saturating_add(b.len()));
                        stable = stable.min(*at);
                    }
                }
            }
            img.truncate(stable);
            img.resize(len, 0);
            img
        }
    }
}

impl MemFs {
    /// An empty file system.
    pub fn new() -> MemFs {
        MemFs::default()
    }

    /// Power loss: a new file system holding only what was durable (synced file data under
    /// directory entries that were dir-synced). The original is left untouched.
    pub fn crash(&self) -> MemFs {
        self.crash_with(CrashMode::DropUnsynced, 0)
    }

    /// Power loss with a richer image of unsynced file data (see [`CrashMode`]); directory
    /// entries are rolled back to their last `sync_dir`. The same `seed` gives the same image.
    pub fn crash_with(&self, mode: CrashMode, seed: u64) -> MemFs {
        self.build_crash(mode, seed, false)
    }

    /// Like [`MemFs::crash_with`], but every directory entry change survives, synced or not
    /// (the file system happened to commit its metadata journal), while file data follows `mode`.
    pub fn crash_with_dir_entries(&self, mode: CrashMode, seed: u64) -> MemFs {
        self.build_crash(mode, seed, true)
    }

    fn build_crash(&self, mode: CrashMode, seed: u64, keep_entries: bool) -> MemFs {
        let st = self.state.lock();
        let mut rng = Rng(seed);
        let (files, dirs) = if keep_entries {
            (&st.files, &st.dirs)
        } else {
            (&st.durable_files, &st.durable_dirs)
        };
        // A directory survives only if every ancestor does.
        let alive_dir = |d: &Path| -> bool {
            let mut cur = Some(d);
            while let Some(c) = cur {
                if c.as_os_str().is_empty() || c == Path::new("/") {
                    return true;
                }
                if !dirs.contains(c) {
                    return false;
                }
                cur = c.parent();
            }
            true
        };
        let mut out = State::default();
        for d in dirs.iter() {
            if alive_dir(d) {
                out.dirs.insert(d.clone());
                out.durable_dirs.insert(d.clone());
            }
        }
        // Inodes reachable under several names (an unsynced rename) get one image, copied.
        let mut images: HashMap<Ino, Vec<u8>> = HashMap::new();
        for (path, ino) in files.iter() {
            if !alive_dir(&parent_of(path)) {
                continue;
            }
            let Some(inode) = st.inodes.get(ino) else {
                continue;
            };
            let img = images
                .entry(*ino)
                .or_insert_with(|| crash_image(inode, mode, &mut rng))
                .clone();
            let new_ino = out.next_ino;
            out.next_ino += 1;
            out.inodes.insert(
                new_ino,
                Inode {
                    live: img.clone(),
                    durable: img,
                    pending: Vec::new(),
                },
            );
            out.files.insert(path.clone(), new_ino);
            out.durable_files.insert(path.clone(), new_ino);
        }
        MemFs {
            state: Arc::new(Mutex::new(out)),
        }
    }

    /// Length of the durable image of `path` if its entry is durable (for tests of the model).
    pub fn durable_len(&self, path: &Path) -> Option<u64> {
        let st = self.state.lock();
        let ino = st.durable_files.get(path)?;
        st.inodes.get(ino).map(|i| i.durable.len() as u64)
    }
}

struct MemFile {
    state: Arc<Mutex<State>>,
    ino: Ino,
    len: u64,
}

impl WritableFile for MemFile {
    fn append(&mut self, buf: &[u8]) -> io::Result<()> {
        let mut st = self.state.lock();
        let inode = st.inode(self.ino)?;
        inode.live.extend_from_slice(buf);
        inode.pending.push(PendingOp::Append(buf.to_vec()));
        self.len = inode.live.len() as u64;
        Ok(())
    }
    fn sync_data(&mut self) -> io::Result<()> {
        let mut st = self.state.lock();
        let inode = st.inode(self.ino)?;
        let pending = std::mem::take(&mut inode.pending);
        for op in &pending {
            apply_op(&mut inode.durable, op);
        }
        Ok(())
    }
    fn truncate(&mut self, len: u64) -> io::Result<()> {
        let mut st = self.state.lock();
        let inode = st.inode(self.ino)?;
        let op = PendingOp::Truncate(len);
        apply_op(&mut inode.live, &op);
        inode.pending.push(op);
        // RealFs makes a truncation durable at once (set_len + sync_all); match it, so code
        // tested here behaves as it would on disk.
        let pending = std::mem::take(&mut inode.pending);
        for op in &pending {
            apply_op(&mut inode.durable, op);
        }
        self.len = len;
        Ok(())
    }
    fn write_at(&mut self, offset: u64, buf: &[u8]) -> io::Result<()> {
        let mut st = self.state.lock();
        let inode = st.inode(self.ino)?;
        let at = usize::try_from(offset).unwrap_or(usize::MAX);
        if at > inode.live.len() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "write past the end of the file",
            ));
        }
        write_within(&mut inode.live, at, buf);
        inode.pending.push(PendingOp::WriteAt(at, buf.to_vec()));
        self.len = inode.live.len() as u64;
        Ok(())
    }
    fn len(&self) -> u64 {
        self.len
    }
}

/// Locks are kept by path, so removing or renaming a locked file does not release its lock.
struct MemLock {
    state: Arc<Mutex<State>>,
    paths: [PathBuf; 2],
}
impl LockGuard for MemLock {}
impl Drop for MemLock {
    fn drop(&mut self) {
        let mut st = self.state.lock();
        for p in &self.paths {
            st.locks.remove(p);
        }
    }
}

impl Vfs for MemFs {
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        let mut st = self.state.lock();
        let mut chain = Vec::new();
        let mut cur = Some(path);
        while let Some(c) = cur {
            if c.as_os_str().is_empty() || c == Path::new("/") {
                break;
            }
            if st.files.contains_key(c) {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!("{} is a file", c.display()),
                ));
            }
            chain.push(c.to_path_buf());
            cur = c.parent();
        }
        for d in chain.into_iter().rev() {
            if st.dirs.insert(d.clone()) && is_top_level(&d) {
                st.durable_dirs.insert(d);
            }
        }
        Ok(())
    }

    fn list_dir(&self, path: &Path) -> io::Result<Vec<String>> {
        let st = self.state.lock();
        if !st.dir_exists(path) {
            return Err(not_found(path));
        }
        let names = st
            .files
            .keys()
            .chain(st.dirs.iter())
            .filter(|p| p.parent() == Some(path))
            .filter_map(|p| p.file_name())
            .map(|n| n.to_string_lossy().into_owned())
            .collect();
        Ok(names)
    }

    fn exists(&self, path: &Path) -> bool {
        let st = self.state.lock();
        st.files.contains_key(path) || st.dir_exists(path)
    }

    fn open_append(&self, path: &Path, truncate: bool) -> io::Result<Box<dyn WritableFile>> {
        let mut st = self.state.lock();
        st.require_parent(path)?;
        if st.dirs.contains(path) {
            return Err(io::Error::new(
                io::ErrorKind::IsADirectory,
                format!("{} is a directory", path.display()),
            ));
        }
        let ino = match st.files.get(path) {
            Some(&ino) => ino,
            None => {
                let ino = st.next_ino;
                st.next_ino += 1;
                st.inodes.insert(ino, Inode::default());
                st.files.insert(path.to_path_buf(), ino);
                ino
            }
        };
        let inode = st.inode(ino)?;
        if truncate && !inode.live.is_empty() {
            inode.live.clear();
            inode.pending.push(PendingOp::Truncate(0));
        }
        let len = inode.live.len() as u64;
        Ok(Box::new(MemFile {
            state: self.state.clone(),
            ino,
            len,
        }))
    }

    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        let mut st = self.state.lock();
        let ino = *st.files.get(path).ok_or_else(|| not_found(path))?;
        Ok(st.inode(ino)?.live.clone())
    }

    fn map(&self, path: &Path) -> io::Result<FileBytes> {
        // A snapshot copy: later writes to the file do not show through, unlike a real map,
        // which the engine never relies on (it maps immutable files only).
        self.read(path).map(FileBytes::from_vec)
    }

    fn file_len(&self, path: &Path) -> io::Result<u64> {
        let mut st = self.state.lock();
        let ino = *st.files.get(path).ok_or_else(|| not_found(path))?;
        Ok(st.inode(ino)?.live.len() as u64)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut st = self.state.lock();
        let ino = *st.files.get(from).ok_or_else(|| not_found(from))?;
        st.require_parent(to)?;
        if st.dirs.contains(to) {
            return Err(io::Error::new(
                io::ErrorKind::IsADirectory,
                format!("{} is a directory", to.display()),
            ));
        }
        st.files.remove(from);
        st.files.insert(to.to_path_buf(), ino);
        Ok(())
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let mut st = self.state.lock();
        st.files.remove(path).ok_or_else(|| not_found(path))?;
        Ok(())
    }

    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        let mut st = self.state.lock();
        if !st.dir_exists(path) {
            return Err(not_found(path));
        }
        let st = &mut *st;
        // The directory's entries, and only its entries, become durable as they are now.
        st.durable_files.retain(|p, _| p.parent() != Some(path));
        for (p, ino) in st.files.iter() {
            if p.parent() == Some(path) {
                st.durable_files.insert(p.clone(), *ino);
            }
        }
        for d in st.dirs.iter() {
            if d.parent() == Some(path) {
                st.durable_dirs.insert(d.clone());
            }
        }
        Ok(())
    }

    fn try_lock(&self, dir: &Path, lock_file: &str) -> io::Result<Option<Box<dyn LockGuard>>> {
        let file = dir.join(lock_file);
        // Like RealFs, the lock file is created if missing (and the directory must exist).
        drop(self.open_append(&file, false)?);
        let mut st = self.state.lock();
        if st.locks.contains(dir) || st.locks.contains(&file) {
            return Ok(None);
        }
        st.locks.insert(dir.to_path_buf());
        st.locks.insert(file.clone());
        Ok(Some(Box::new(MemLock {
            state: self.state.clone(),
            paths: [dir.to_path_buf(), file],
        })))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(fs: &MemFs, path: &str, data: &[u8], sync: bool) {
        let mut f = fs.open_append(Path::new(path), false).unwrap();
        f.append(data).unwrap();
        if sync {
            f.sync_data().unwrap();
        }
    }

    fn read(fs: &MemFs, path: &str) -> Option<Vec<u8>> {
        fs.read(Path::new(path)).ok()
    }

    fn setup() -> MemFs {
        let fs = MemFs::new();
        fs.create_dir_all(Path::new("/db")).unwrap();
        fs
    }

    #[test]
    fn synced_file_in_synced_dir_survives_crash() {
        let fs = setup();
        write(&fs, "/db/a", b"hello", true);
        fs.sync_dir(Path::new("/db")).unwrap();
        write(&fs, "/db/a", b" world", false);
        assert_eq!(read(&fs, "/db/a").unwrap(), b"hello world");
        let c = fs.crash();
        assert_eq!(read(&c, "/db/a").unwrap(), b"hello");
        // The original is untouched by building an image.
        assert_eq!(read(&fs, "/db/a").unwrap(), b"hello world");
    }

    #[test]
    fn created_file_without_dir_sync_vanishes_at_crash() {
        let fs = setup();
        write(&fs, "/db/a", b"data", true);
        assert!(read(&fs.crash(), "/db/a").is_none());
        // ... unless the image keeps unsynced directory entries.
        let c = fs.crash_with_dir_entries(CrashMode::DropUnsynced, 1);
        assert_eq!(read(&c, "/db/a").unwrap(), b"data");
    }

    #[test]
    fn unsynced_rename_is_undone_by_crash() {
        let fs = setup();
        write(&fs, "/db/tmp", b"new", true);
        write(&fs, "/db/cur", b"old", true);
        fs.sync_dir(Path::new("/db")).unwrap();
        fs.rename(Path::new("/db/tmp"), Path::new("/db/cur"))
            .unwrap();
        assert_eq!(read(&fs, "/db/cur").unwrap(), b"new");
        let c = fs.crash();
        assert_eq!(read(&c, "/db/cur").unwrap(), b"old");
        assert_eq!(read(&c, "/db/tmp").unwrap(), b"new");
        fs.sync_dir(Path::new("/db")).unwrap();
        let c = fs.crash();
        assert_eq!(read(&c, "/db/cur").unwrap(), b"new");
        assert!(read(&c, "/db/tmp").is_none());
    }

    #[test]
    fn unsynced_remove_is_undone_by_crash() {
        let fs = setup();
        write(&fs, "/db/a", b"x", true);
        fs.sync_dir(Path::new("/db")).unwrap();
        fs.remove_file(Path::new("/db/a")).unwrap();
        assert!(!fs.exists(Path::new("/db/a")));
        assert_eq!(read(&fs.crash(), "/db/a").unwrap(), b"x");
        fs.sync_dir(Path::new("/db")).unwrap();
        assert!(read(&fs.crash(), "/db/a").is_none());
    }

    #[test]
    fn nested_dir_needs_parent_sync() {
        let fs = setup();
        fs.create_dir_all(Path::new("/db/wal")).unwrap();
        write(&fs, "/db/wal/1", b"x", true);
        fs.sync_dir(Path::new("/db/wal")).unwrap();
        // /db/wal itself was never made durable in /db.
        assert!(!fs.crash().exists(Path::new("/db/wal")));
        fs.sync_dir(Path::new("/db")).unwrap();
        assert_eq!(read(&fs.crash(), "/db/wal/1").unwrap(), b"x");
    }

    #[test]
    fn crash_modes_keep_synced_bytes_and_bound_the_tail() {
        let fs = setup();
        write(&fs, "/db/a", &[7u8; 1000], true);
        fs.sync_dir(Path::new("/db")).unwrap();
        let tail: Vec<u8> = (0..3000u32).map(|i| (i % 251) as u8 + 1).collect();
        write(&fs, "/db/a", &tail[..1000], false);
        write(&fs, "/db/a", &tail[1000..], false);
        let live = read(&fs, "/db/a").unwrap();
        let mut saw_partial = false;
        for seed in 0..200 {
            for mode in [
                CrashMode::DropUnsynced,
                CrashMode::KeepPrefix,
                CrashMode::TornSector,
                CrashMode::ZeroExtension,
                CrashMode::Random,
            ] {
                let img = read(&fs.crash_with(mode, seed), "/db/a").unwrap();
                assert!(img.len() >= 1000 && img.len() <= 4000, "{mode:?}");
                assert_eq!(
                    &img[..1000],
                    &[7u8; 1000][..],
                    "{mode:?} damaged synced bytes"
                );
                match mode {
                    CrashMode::DropUnsynced => assert_eq!(img.len(), 1000),
                    CrashMode::KeepPrefix => {
                        assert_eq!(&img[..], &live[..img.len()]);
                        saw_partial |= img.len() > 1000 && img.len() < 4000;
                    }
                    CrashMode::TornSector => {
                        // Everything before the last sector is an exact prefix.
                        let keep = ((img.len() - 1) / SECTOR * SECTOR).max(1000);
                        assert_eq!(&img[..keep], &live[..keep]);
                    }
                    CrashMode::ZeroExtension => {
                        assert_eq!(img.len(), 4000);
                        assert!(img[1000..].iter().all(|&b| b == 0));
                    }
                    CrashMode::Random => {}
                }
            }
        }
        assert!(saw_partial);
        // Same seed, same image.
        assert_eq!(
            read(&fs.crash_with(CrashMode::TornSector, 9), "/db/a"),
            read(&fs.crash_with(CrashMode::TornSector, 9), "/db/a")
        );
    }

    #[test]
    fn writes_over_synced_zeros_are_lost_or_kept_in_write_order() {
        let fs = setup();
        write(&fs, "/db/a", &[0u8; 100], true);
        fs.sync_dir(Path::new("/db")).unwrap();
        let mut f = fs.open_append(Path::new("/db/a"), false).unwrap();
        f.write_at(10, &[1u8; 20]).unwrap();
        f.write_at(30, &[2u8; 90]).unwrap();
        assert!(f.write_at(121, b"x").is_err(), "past the end");
        assert_eq!(f.len(), 120);
        let live = read(&fs, "/db/a").unwrap();
        assert_eq!(live.len(), 120);
        for seed in 0..100 {
            for mode in [
                CrashMode::DropUnsynced,
                CrashMode::KeepPrefix,
                CrashMode::ZeroExtension,
            ] {
                let img = read(&fs.crash_with(mode, seed), "/db/a").unwrap();
                match mode {
                    CrashMode::DropUnsynced => assert_eq!(img, vec![0u8; 100]),
                    // What a prefix of the writes gives: the first write in part or whole,
                    // then the second in part, growing the file only as far as it got.
                    CrashMode::KeepPrefix => {
                        let n = img.len().max(100);
                        assert_eq!(img.len(), n);
                        let written = img.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
                        assert_eq!(&img[..written], &live[..written], "seed {seed}");
                    }
                    CrashMode::ZeroExtension => {
                        assert_eq!(img.len(), 120);
                        assert!(img[10..].iter().all(|&b| b == 0));
                    }
                    _ => {}
                }
            }
        }
        f.sync_data().unwrap();
        assert_eq!(read(&fs.crash(), "/db/a").unwrap(), live);
    }

    #[test]
    fn truncate_is_durable_and_appends_continue() {
        let fs = setup();
        let mut f = fs.open_append(Path::new("/db/a"), false).unwrap();
        f.append(b"0123456789").unwrap();
        f.sync_data().unwrap();
        f.truncate(4).unwrap();
        f.append(b"ab").unwrap();
        assert_eq!(f.len(), 6);
        fs.sync_dir(Path::new("/db")).unwrap();
        assert_eq!(read(&fs, "/db/a").unwrap(), b"0123ab");
        assert_eq!(read(&fs.crash(), "/db/a").unwrap(), b"0123");
    }

    #[test]
    fn lock_is_exclusive_until_guard_drops() {
        let fs = setup();
        let dir = Path::new("/db");
        let g = fs.try_lock(dir, "LOCK").unwrap();
        assert!(g.is_some());
        assert!(fs.exists(Path::new("/db/LOCK")));
        assert!(fs.clone().try_lock(dir, "LOCK").unwrap().is_none());
        // Removing the lock file lets nobody in: the directory stays locked.
        fs.remove_file(Path::new("/db/LOCK")).unwrap();
        assert!(fs.try_lock(dir, "LOCK").unwrap().is_none());
        assert!(fs.try_lock(dir, "OTHER").unwrap().is_none());
        drop(g);
        assert!(fs.try_lock(dir, "LOCK").unwrap().is_some());
    }

    #[test]
    fn missing_parent_and_files_are_not_found() {
        let fs = setup();
        let e = fs.open_append(Path::new("/nope/a"), false).err().unwrap();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert_eq!(
            fs.read(Path::new("/db/x")).unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
        let mut names = {
            write(&fs, "/db/b", b"", false);
            fs.create_dir_all(Path::new("/db/sub")).unwrap();
            fs.list_dir(Path::new("/db")).unwrap()
        };
        names.sort();
        assert_eq!(names, vec!["b".to_string(), "sub".to_string()]);
    }

    #[test]
    fn map_is_a_snapshot() {
        let fs = setup();
        write(&fs, "/db/a", b"abc", false);
        let m = fs.map(Path::new("/db/a")).unwrap();
        write(&fs, "/db/a", b"def", false);
        assert_eq!(&m[..], b"abc");
        assert_eq!(fs.file_len(Path::new("/db/a")).unwrap(), 6);
    }
}
