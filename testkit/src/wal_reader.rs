//! `wal_reader`: bytes as one or several WAL files through recovery on `MemFs`, each replayed
//! payload through the insert-record decoder. Besides raw bytes, the input can describe a log
//! of well-formed records (so checksums pass and the torn-tail rules are reached) that is then
//! cut short: recovery must keep exactly the records that end before the cut.

use super::values;
use super::Input;
use std::path::Path;
use tsbucket::bson::{Bson, DateTime};
use tsbucket::ingest::compact::{InsertCompactor, InsertExpander};
use tsbucket::ingest::{decode_insert, prepare_batch, prepare_replayed, Prepared};
use tsbucket::schema::Schema;
use tsbucket::vfs::{MemFs, Vfs};
use tsbucket::wal::reader::{file_name, recover, Recovery, TailFix};
use tsbucket::wal::record::{encode_file_header, encode_record, encode_record_of, KIND_COMPACT};

const DIR: &str = "/wal";
/// Small, so that oversize records are reachable.
const MAX_RECORD: usize = 1 << 16;
fn fields() -> Schema {
    Schema::new("t", Some("m"), 3600, 60)
}

/// Runs one input.
pub fn run(data: &[u8]) {
    let mut inp = Input::new(data);
    match inp.u8() % 3 {
        0 => {
            let checkpoint = u64::from(inp.u8() % 4);
            replay(&[(1, inp.rest().to_vec())], checkpoint);
        }
        1 => {
            let checkpoint = u64::from(inp.u8() % 8);
            let n = 1 + inp.below(4);
            let mut files = Vec::with_capacity(n);
            let mut seq = 1u64;
            for _ in 0..n {
                seq += u64::from(inp.u8() % 4);
                let len = usize::from(inp.u16());
                files.push((seq, inp.bytes(len).to_vec()));
            }
            replay(&files, checkpoint);
        }
        _ => structured(&mut inp),
    }
}

/// A replayed record: seq and payload.
type Replayed = (u64, Vec<u8>);

/// Writes `files` (first seq, bytes) and recovers them; checks what any successful recovery
/// must satisfy. Returns the recovery and the replayed records.
fn replay(files: &[(u64, Vec<u8>)], checkpoint: u64) -> Option<(Recovery, Vec<Replayed>)> {
    let fs = MemFs::new();
    let dir = Path::new(DIR);
    fs.create_dir_all(dir).ok()?;
    for (seq, bytes) in files {
        let mut f = fs.open_append(&dir.join(file_name(*seq)), true).ok()?;
        f.append(bytes).ok()?;
    }
    let mut got: Vec<Replayed> = Vec::new();
    let rec = recover(
        &fs,
        dir,
        MAX_RECORD,
        checkpoint,
        false,
        &mut |seq, payload| {
            // The engine decodes every replayed record; damaged payloads must be errors.
            if let Ok(Some(r)) = decode_insert(payload) {
                let _ = prepare_replayed(payload, &r, &fields());
            }
            got.push((seq, payload.to_vec()));
            Ok(())
        },
        Some(&mut InsertExpander::new()),
    )
    .ok()?;
    for (k, (seq, _)) in got.iter().enumerate() {
        assert_eq!(
            *seq,
            checkpoint + 1 + k as u64,
            "replayed seqs must be consecutive"
        );
    }
    if let Some((last, _)) = got.last() {
        assert_eq!(*last, rec.last_seq, "last_seq is the last replayed record");
    }
    if let TailFix::Truncate(at) = rec.tail {
        let last = files.last().map_or(0, |f| f.1.len());
        assert!(
            at as usize <= last,
            "truncation point {at} beyond the file ({last})"
        );
        let cut = rec.dropped.as_ref().map(|d| (d.offset, d.bytes));
        assert_eq!(
            cut,
            Some((at, last as u64 - at)),
            "the reported cut is the truncation"
        );
    }
    // Strict recovery refuses exactly the logs whose cut tail may have held a record, and
    // otherwise replays the same records.
    let mut strict_got: Vec<Replayed> = Vec::new();
    let strict = recover(
        &fs,
        dir,
        MAX_RECORD,
        checkpoint,
        true,
        &mut |seq, payload| {
            strict_got.push((seq, payload.to_vec()));
            Ok(())
        },
        Some(&mut InsertExpander::new()),
    );
    let refuses = rec.dropped.as_ref().is_some_and(|d| d.may_hold_a_record());
    match strict {
        Ok(_) => {
            assert!(
                !refuses,
                "strict recovery cut a tail that may hold a record"
            );
            assert_eq!(strict_got, got, "strict recovery replayed other records");
        }
        Err(e) => assert!(refuses, "strict recovery refused a clean log: {e}"),
    }
    Some((rec, got))
}

/// A payload: an insert record of generated measurements, or raw bytes.
fn payload(inp: &mut Input<'_>) -> Vec<u8> {
    prepared_payload(inp).0
}

/// [`payload`], with the collection and documents the insert path prepared, if it did.
fn prepared_payload(inp: &mut Input<'_>) -> (Vec<u8>, Option<(u32, Vec<Prepared>)>) {
    if inp.one_in(3) {
        return (inp.short_bytes().to_vec(), None);
    }
    let n = 1 + inp.below(4);
    let docs: Vec<_> = (0..n)
        .map(|_| {
            let mut d = values::document(inp, 1);
            d.insert("t", DateTime::from_millis(values::int64(inp, 0)));
            if inp.one_in(2) {
                d.insert("m", Bson::Int32(i32::from(inp.u8())));
            }
            d
        })
        .collect();
    let coll = 1 + u32::from(inp.u8() % 2);
    match prepare_batch(coll, &docs, &fields()) {
        Ok((prepared, p, _)) => (p, Some((coll, prepared))),
        Err(_) => (Vec::new(), None),
    }
}

/// Well-formed files of consecutive records, then optionally the last file cut at a byte
/// offset and what follows the cut replaced by records of an earlier use of the file (as in a
/// reused file: lower seqs, another salt or by chance the same): the recovered records must be
/// exactly those that end at or before the cut.
fn structured(inp: &mut Input<'_>) {
    let nfiles = 1 + inp.below(3);
    let mut files: Vec<(u64, Vec<u8>, u32)> = Vec::new();
    // (seq, payload, file index, end offset)
    let mut records: Vec<(u64, Vec<u8>, usize, usize)> = Vec::new();
    let mut seq = 1u64;
    for fi in 0..nfiles {
        let first = seq;
        let salt = if inp.one_in(2) {
            0
        } else {
            u32::from(inp.u16()) + 1
        };
        let mut buf = encode_file_header(seq, salt).to_vec();
        // Each file's compacted records refer only to records of that file.
        let mut compactor = InsertCompactor::new();
        // Only the last file may be empty: the next file would take the same name.
        let n = inp.below(5) + usize::from(fi + 1 < nfiles);
        for _ in 0..n {
            let (p, prepared) = prepared_payload(inp);
            let mut stored = Vec::new();
            match prepared {
                Some((coll, docs))
                    if inp.one_in(2) && compactor.compact_payload(&p, coll, &docs, &mut stored) =>
                {
                    encode_record_of(&mut buf, seq, salt, KIND_COMPACT, &stored)
                }
                _ => encode_record(&mut buf, seq, salt, &p),
            }
            records.push((seq, p, fi, buf.len()));
            seq += 1;
        }
        files.push((first, buf, salt));
    }
    let checkpoint = 0;
    let cut = if inp.one_in(2) {
        files.last().map(|f| inp.below(f.1.len() + 1))
    } else {
        None
    };
    let last = files.len() - 1;
    let mut old_bytes = false;
    if let (Some(c), Some(f)) = (cut, files.last_mut()) {
        f.1.truncate(c);
        if inp.one_in(2) && f.0 > 1 {
            old_bytes = true;
            // Old records of the file's earlier use, as far as they reach past the cut.
            let old_salt = if inp.one_in(4) { f.2 } else { f.2 ^ 0x5A };
            let mut old = Vec::new();
            for k in 0..1 + inp.below(4) as u64 {
                let p = payload(inp);
                encode_record(&mut old, 1 + (f.0 - 2).min(k), old_salt, &p);
            }
            let skip = inp.below(old.len() + 1);
            f.1.extend_from_slice(&old[skip..]);
        }
    }
    let files: Vec<(u64, Vec<u8>)> = files.into_iter().map(|f| (f.0, f.1)).collect();
    let Some((rec, got)) = replay(&files, checkpoint) else {
        panic!("recovery refused an intact log (cut at {cut:?})");
    };
    let kept = records
        .iter()
        .filter(|r| r.2 != last || cut.is_none_or(|c| r.3 <= c))
        .count();
    let written: Vec<Replayed> = records.into_iter().map(|r| (r.0, r.1)).collect();
    if old_bytes {
        // Old bytes that happen to be the rest of a record cut short complete it: it was
        // written, so recovering it is right. Anything else is a prefix of what was written.
        assert!(
            got.len() >= kept && written.starts_with(&got),
            "recovered records (cut at {cut:?}, old bytes after it): {got:?}"
        );
    } else {
        assert_eq!(got, written[..kept], "recovered records (cut at {cut:?})");
    }
    if cut.is_none() {
        assert_eq!(rec.tail, TailFix::None, "intact log needs no tail fix");
    }
}
