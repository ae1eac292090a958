//! Log files kept for reuse once their records are reclaimed.
//!
//! Writing a record into space the file system has never allocated makes the `fdatasync` that
//! acknowledges it commit metadata too, which costs about as much again as the data. A new
//! file avoids that only by having zeros written ahead (see `writer::ZERO_AHEAD`), which
//! writes every log byte twice. A reclaimed file's blocks are already allocated and written,
//! so instead of deleting it the writer renames it `<first seq>.free` and later starts a new
//! file in it: records go over the old ones with no zeros and no metadata to sync.
//!
//! The old records left in a reused file must never pass for new ones. Their seqs are all
//! below the new file's first, which already rules out replaying them; the new file also gets
//! a random nonzero salt that every record it holds carries (`record::FileHeader::salt`), so
//! not even bytes inside an old payload that happen to frame a record with a plausible seq can
//! be taken for one of its records.
#![deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use super::reader::{file_name, seq_of_name, WalFile};
use super::record::{encode_file_header, MAX_SALT};
use crate::vfs::{Vfs, WritableFile};
use std::hash::{BuildHasher, Hasher};
use std::io;
use std::path::{Path, PathBuf};

/// Name of a spare file: the name it had as a log file, with `.free` for `.log`.
pub fn spare_name(first_seq: u64) -> String {
    format!("{first_seq:020}.free")
}

/// Parses a spare file's name; `None` for names that are not ours.
fn parse_spare_name(name: &str) -> Option<u64> {
    seq_of_name(name, ".free")
}

/// A file waiting to be reused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spare {
    /// Full path.
    pub path: PathBuf,
    /// Its length when it was kept (or found at open).
    pub len: u64,
}

/// The spare files of a log, at most `max` of them.
#[derive(Debug, Default)]
pub struct Spares {
    files: Vec<Spare>,
    max: usize,
}

impl Spares {
    /// The spare files in `dir`; beyond `max`, the smallest are deleted (and the directory
    /// synced), so that lowering the option frees the space at the next open.
    pub fn open(vfs: &dyn Vfs, dir: &Path, max: usize) -> io::Result<Spares> {
        let mut files: Vec<Spare> = Vec::new();
        for name in vfs.list_dir(dir)? {
            if parse_spare_name(&name).is_some() {
                let path = dir.join(&name);
                let len = vfs.file_len(&path)?;
                files.push(Spare { path, len });
            }
        }
        let mut spares = Spares { files, max };
        spares.sort();
        if spares.files.len() > max {
            for extra in spares.files.split_off(max) {
                remove(vfs, &extra.path)?;
            }
            vfs.sync_dir(dir)?;
        }
        Ok(spares)
    }

    /// Bytes of the spare files.
    pub fn bytes(&self) -> u64 {
        self.files.iter().map(|s| s.len).sum()
    }

    /// True when there is none.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    /// Takes the largest spare file, if any.
    pub fn take(&mut self) -> Option<Spare> {
        if self.files.is_empty() {
            None
        } else {
            Some(self.files.remove(0))
        }
    }

    /// Puts back a spare that could not be reused.
    pub fn put_back(&mut self, s: Spare) {
        self.files.push(s);
        self.sort();
    }

    /// Largest first, so that [`Spares::take`] takes the largest and [`Spares::open`] drops
    /// the smallest.
    fn sort(&mut self) {
        self.files
            .sort_by(|a, b| b.len.cmp(&a.len).then_with(|| a.path.cmp(&b.path)));
    }

    /// Disposes of a log file all of whose records are reclaimed: keeps it as a spare when
    /// there is room and it is at least `min_len` long, deletes it otherwise. The caller syncs
    /// the directory.
    pub fn retire(
        &mut self,
        vfs: &dyn Vfs,
        file: &WalFile,
        len: u64,
        min_len: u64,
    ) -> io::Result<()> {
        if self.files.len() < self.max && len >= min_len {
            let to = match file.path.parent() {
                Some(dir) => dir.join(spare_name(file.first_seq)),
                None => PathBuf::from(spare_name(file.first_seq)),
            };
            vfs.rename(&file.path, &to)?;
            self.put_back(Spare { path: to, len });
            return Ok(());
        }
        remove(vfs, &file.path)
    }
}

fn remove(vfs: &dyn Vfs, path: &Path) -> io::Result<()> {
    match vfs.remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// A random salt in `1..=MAX_SALT`, so that no one writing payloads can predict it.
pub fn new_salt(first_seq: u64) -> u32 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(first_seq);
    if let Ok(d) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        h.write_u128(d.as_nanos());
    }
    match (h.finish() as u32) & MAX_SALT {
        0 => 1,
        s => s,
    }
}

/// Starts log file `first_seq` in the space of `spare`: writes the new header with a new salt
/// and syncs it *before* the rename, so a file under a log name always has a header naming it
/// (a crash before the rename leaves a spare file; after it, a log file with no record yet,
/// since what follows the header is old records of another salt). Returns the file, its handle
/// (its length is the spare's: the old bytes past the header are cut before the file gets a
/// successor) and the salt.
pub fn reuse(
    vfs: &dyn Vfs,
    dir: &Path,
    spare: &Spare,
    first_seq: u64,
) -> io::Result<(WalFile, Box<dyn WritableFile>, u32)> {
    let salt = new_salt(first_seq);
    let mut f = vfs.open_append(&spare.path, false)?;
    f.write_at(0, &encode_file_header(first_seq, salt))?;
    f.sync_data()?;
    let path = dir.join(file_name(first_seq));
    vfs.rename(&spare.path, &path)?;
    vfs.sync_dir(dir)?;
    Ok((WalFile { first_seq, path }, f, salt))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "test code")]
    use super::*;

    #[test]
    fn spare_names_round_trip_and_others_are_ignored() {
        assert_eq!(parse_spare_name(&spare_name(17)), Some(17));
        assert_eq!(parse_spare_name("00000000000000000017.log"), None);
        assert_eq!(parse_spare_name("17.free"), None);
        assert_eq!(parse_spare_name("0000000000000000001x.free"), None);
    }

    #[test]
    fn salts_are_nonzero_and_24_bits() {
        let salts: std::collections::BTreeSet<u32> = (0..64).map(new_salt).collect();
        assert!(salts.iter().all(|&s| (1..=MAX_SALT).contains(&s)));
        // Random: 64 draws of 24 bits all but never collide.
        assert!(salts.len() > 60);
    }
}
