//! Compacted records through the log: which files may hold them, that the writer and the
//! reader forget together (at each file, and after a reopen), and that recovery expands every
//! record a later one may refer to. The codec here is a toy: a payload already stored in the
//! file is stored as its number.

use super::codec::{Compact, Expand};
use super::reader::file_name;
use super::record::{decode_file_header, decode_record, encode_file_header, encode_record};
use super::record::{FILE_HEADER_LEN, KIND_BATCH, KIND_COMPACT};
use super::*;
use crate::vfs::{MemFs, Vfs};
use std::path::PathBuf;

const DIR: &str = "/db/wal";

fn dir() -> PathBuf {
    PathBuf::from(DIR)
}

/// `flags` byte (1 = forget), then `0 | payload` (remembered) or `1 | index`.
#[derive(Default)]
struct Repeats {
    seen: Vec<Vec<u8>>,
    stale: bool,
    started: bool,
}

impl Compact<()> for Repeats {
    fn reset(&mut self) {
        self.stale = true;
    }
    fn compact(&mut self, payload: &[u8], _: &(), out: &mut Vec<u8>) -> bool {
        let forget = self.stale || !self.started;
        if forget {
            self.seen.clear();
        }
        out.push(u8::from(forget));
        match self.seen.iter().position(|s| s == payload) {
            Some(i) => out.extend_from_slice(&[1, i as u8]),
            None => {
                out.push(0);
                out.extend_from_slice(payload);
                self.seen.push(payload.to_vec());
            }
        }
        (self.stale, self.started) = (false, true);
        true
    }
}

#[derive(Default)]
struct Expander {
    seen: Vec<Vec<u8>>,
    resets: usize,
}

impl Expand for Expander {
    fn reset(&mut self) {
        self.seen.clear();
        self.resets += 1;
    }
    fn expand(
        &mut self,
        b: &[u8],
        max: usize,
        out: &mut Vec<u8>,
    ) -> std::result::Result<(), String> {
        if b.first() == Some(&1) {
            self.seen.clear();
        }
        let p = match b.get(1) {
            Some(0) => {
                let p = b.get(2..).unwrap_or_default().to_vec();
                self.seen.push(p.clone());
                p
            }
            Some(1) => {
                let i = *b.get(2).ok_or("short")? as usize;
                self.seen
                    .get(i)
                    .cloned()
                    .ok_or(format!("{i} not defined"))?
            }
            _ => return Err("bad tag".into()),
        };
        if p.len() > max {
            return Err("too long".into());
        }
        out.extend_from_slice(&p);
        Ok(())
    }
}

/// Three payloads, repeated.
fn payload(i: u64) -> Vec<u8> {
    format!("payload {} of the log", i % 3).into_bytes()
}

fn options(rotate_bytes: u64) -> WalOptions {
    WalOptions {
        rotate_bytes,
        ..WalOptions::default()
    }
}

type Replayed = Vec<(u64, Vec<u8>)>;

/// Opens with the toy codec; returns the log and what was replayed.
fn open(
    fs: &MemFs,
    opts: WalOptions,
    checkpoint: u64,
    expander: &mut Expander,
) -> Result<(Wal<()>, Replayed)> {
    let mut replayed = Vec::new();
    let wal = Wal::open_with_codec(
        Arc::new(fs.clone()),
        &dir(),
        opts,
        checkpoint,
        &mut |seq, p| {
            replayed.push((seq, p.to_vec()));
            Ok(())
        },
        Box::new(|_, _, _| {}),
        Some((Box::new(Repeats::default()), expander)),
    )?;
    Ok((wal, replayed))
}

/// Every record of every file: (file's first seq, version, record seq, kind).
fn records(fs: &MemFs) -> Vec<(u64, u32, u64, u8)> {
    let mut out = Vec::new();
    let mut names = fs.list_dir(&dir()).unwrap();
    names.sort();
    for n in names.iter().filter(|n| n.ends_with(".log")) {
        let b = fs.read(&dir().join(n)).unwrap();
        let h = decode_file_header(&b).unwrap();
        let mut pos = FILE_HEADER_LEN;
        while let Ok(r) = decode_record(&b, pos, Some(h.salt), usize::MAX) {
            out.push((h.first_seq, h.version, r.seq, r.kind));
            pos = r.end;
        }
    }
    out
}

fn expected(from: u64, to: u64) -> Replayed {
    (from..=to).map(|i| (i, payload(i))).collect()
}

#[test]
fn compacted_records_come_back_across_rotations_and_reopens() {
    let fs = MemFs::new();
    let mut x = Expander::default();
    let (wal, _) = open(&fs, options(300), 0, &mut x).unwrap();
    for i in 1..=20 {
        assert_eq!(wal.append(payload(i), ()).unwrap(), i);
    }
    wal.close().unwrap();
    let recs = records(&fs);
    assert!(recs.iter().all(|r| r.3 == KIND_COMPACT));
    let files: std::collections::BTreeSet<u64> = recs.iter().map(|r| r.0).collect();
    assert!(files.len() >= 3, "rotated into {files:?}");

    // Reopened, the writer has forgotten what the last file holds: its next record says so.
    let mut x = Expander::default();
    let (wal, replayed) = open(&fs, options(300), 0, &mut x).unwrap();
    assert_eq!(replayed, expected(1, 20));
    assert_eq!(
        x.resets,
        files.len(),
        "the expander starts over at every file"
    );
    for i in 21..=25 {
        wal.append(payload(i), ()).unwrap();
    }
    wal.close().unwrap();
    let (_, replayed) = open(&fs, options(300), 0, &mut Expander::default()).unwrap();
    assert_eq!(replayed, expected(1, 25));
}

#[test]
fn records_below_the_checkpoint_are_expanded_for_the_ones_after_it() {
    let fs = MemFs::new();
    let (wal, _) = open(&fs, options(64 << 20), 0, &mut Expander::default()).unwrap();
    for i in 1..=9 {
        wal.append(payload(i), ()).unwrap();
    }
    wal.close().unwrap();
    // Records 7..9 only refer to payloads records 1..3 stored.
    let (_, replayed) = open(&fs, options(64 << 20), 6, &mut Expander::default()).unwrap();
    assert_eq!(replayed, expected(7, 9));
}

/// A log of one compacted record.
fn one_record_log() -> MemFs {
    let fs = MemFs::new();
    let (wal, _) = open(&fs, options(64 << 20), 0, &mut Expander::default()).unwrap();
    wal.append(payload(1), ()).unwrap();
    wal.close().unwrap();
    fs
}

#[test]
fn a_compacted_log_needs_the_expander() {
    let fs = one_record_log();
    let r = Wal::<()>::open(
        Arc::new(fs.clone()),
        &dir(),
        WalOptions::default(),
        0,
        &mut |_, _| Ok(()),
        Box::new(|_, _, _| {}),
    );
    match r {
        Err(Error::Corruption { offset, .. }) => assert_eq!(offset, FILE_HEADER_LEN as u64),
        other => panic!("expected corruption, got {other:?}"),
    }
}

#[test]
fn a_record_that_does_not_expand_is_corruption_at_its_offset() {
    let fs = one_record_log();
    // A second record that refers to a payload the file never stored.
    let path = dir().join(file_name(1));
    let b = fs.read(&path).unwrap();
    let at = b.len() as u64;
    let salt = decode_file_header(&b).unwrap().salt;
    let mut rec = Vec::new();
    super::record::encode_record_of(&mut rec, 2, salt, KIND_COMPACT, &[0, 1, 9]);
    let mut f = fs.open_append(&path, false).unwrap();
    f.append(&rec).unwrap();
    f.sync_data().unwrap();
    match open(&fs, options(64 << 20), 0, &mut Expander::default()) {
        Err(Error::Corruption { offset, .. }) => assert_eq!(offset, at),
        other => panic!("expected corruption, got {:?}", other.map(|w| w.1)),
    }
}

#[test]
fn an_older_version_last_file_gets_no_compacted_records() {
    // A version 2 file with one record, as an older build left it.
    let mut b = encode_file_header(1, 0).to_vec();
    b[8] = 2;
    let crc = crc32fast::hash(&b[..28]);
    b[28..32].copy_from_slice(&crc.to_le_bytes());
    encode_record(&mut b, 1, 0, &payload(1));
    let fs = MemFs::new();
    fs.create_dir_all(&dir()).unwrap();
    let mut f = fs.open_append(&dir().join(file_name(1)), true).unwrap();
    f.append(&b).unwrap();
    f.sync_data().unwrap();
    fs.sync_dir(&dir()).unwrap();
    let (wal, replayed) = open(&fs, options(200), 0, &mut Expander::default()).unwrap();
    assert_eq!(replayed, expected(1, 1));
    for i in 2..=8 {
        wal.append(payload(i), ()).unwrap();
    }
    wal.close().unwrap();
    let recs = records(&fs);
    for &(first, version, seq, kind) in &recs {
        match first {
            1 => assert_eq!((version, kind), (2, KIND_BATCH), "record {seq}"),
            _ => assert_eq!((version, kind), (3, KIND_COMPACT), "record {seq}"),
        }
    }
    assert!(recs.iter().any(|r| r.0 > 1), "rotated");
    let (_, replayed) = open(&fs, options(200), 0, &mut Expander::default()).unwrap();
    assert_eq!(replayed, expected(1, 8));
}
