//! `segment_reader`: bytes as a segment file, opened on `MemFs` and read through every
//! accessor. Two shapes of input: the raw file, or an "unsealed" file (header fields, the
//! decompressed directory and the raw pages) that the harness seals with valid checksums and
//! zstd frames, so the fuzzer reaches the directory and page decoders behind them.

use super::Input;
use std::path::Path;
use tsbucket::codec::decode_f64;
use tsbucket::segment::format::{self as f, put_varint, Cursor, Footer};
use tsbucket::segment::{BoundRef, Segment};
use tsbucket::vfs::{MemFs, Vfs};

/// First byte of an unsealed input (any other first byte: the rest is the raw file).
const UNSEALED: u8 = b'U';

/// Runs one input.
pub fn run(data: &[u8]) {
    let file = match data.split_first() {
        Some((&UNSEALED, rest)) => seal(rest),
        Some((_, rest)) => rest.to_vec(),
        None => return,
    };
    read_all(&file);
}

/// Opens `file` as a segment and exercises every accessor; checks that a segment that
/// verifies also reads.
pub fn read_all(file: &[u8]) {
    let fs = MemFs::new();
    let path = Path::new("/s/1.seg");
    let written = fs.create_dir_all(Path::new("/s")).and_then(|()| {
        let mut w = fs.open_append(path, true)?;
        w.append(file)
    });
    if written.is_err() {
        return;
    }
    let Ok(seg) = Segment::open(&fs, path) else {
        return;
    };
    let _ = seg.stats();
    let verified = seg.verify().is_ok();
    for (i, s) in seg.buckets().iter().enumerate() {
        let _ = s.time_range();
        // Open checked every bucket's control.min/max; decoding them again from the directory
        // must succeed and give the same each time, so reads never meet a control they cannot
        // decode.
        match (seg.decode_control(i, s), seg.control(i)) {
            (Ok(a), Ok(b)) => assert_eq!(&a, b, "bucket {i}: control decodes differently"),
            (a, b) => panic!("bucket {i} of an open segment: control does not decode: {a:?} {b:?}"),
        }
        let _ = seg.meta(i);
        let names: Vec<String> = match seg.column_names(i) {
            Ok(n) => n.into_iter().map(str::to_owned).collect(),
            Err(_) => Vec::new(),
        };
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        for n in &refs {
            let _ = seg.column_in_every_row(i, n);
        }
        let full = seg.read_bucket(i);
        if verified {
            let b = match &full {
                Ok(b) => b,
                Err(e) => panic!("bucket {i} of a verified segment does not read: {e}"),
            };
            assert_eq!(
                b.count, s.count,
                "bucket {i}: count differs from its summary"
            );
            for c in &b.columns {
                assert_eq!(
                    c.values.len(),
                    b.count as usize,
                    "bucket {i}: column {}",
                    c.name
                );
            }
        }
        let half: Vec<&str> = refs.iter().copied().step_by(2).collect();
        let part = seg.read_bucket_columns(i, &half);
        if let (Ok(full), Ok(part)) = (&full, &part) {
            for c in &part.columns {
                assert!(
                    full.columns.contains(c),
                    "bucket {i}: column {} read alone differs from the full read",
                    c.name
                );
            }
        }
        let _ = seg.read_columns_with(i, &refs, decode_f64);
    }
    let _ = seg.read_bucket(seg.buckets().len());
    check_field_bounds(&seg);
}

/// Field statistics decode only their fields of each control; they must agree with the
/// whole control documents.
fn check_field_bounds(seg: &Segment) {
    let mut fields: Vec<String> = Vec::new();
    for i in 0..seg.buckets().len() {
        if let Ok(c) = seg.control(i) {
            fields.extend(c.min.keys().chain(c.max.keys()).cloned());
        }
    }
    fields.sort();
    fields.dedup();
    fields.retain(|f| f != tsbucket::sums::SUM_KEY);
    fields.truncate(16);
    let names: Vec<&str> = fields.iter().map(String::as_str).collect();
    for (f, gathered) in names.iter().zip(seg.fields_bounds(&names)) {
        for i in 0..seg.buckets().len() {
            let Ok(c) = seg.control(i) else { continue };
            let (got, want) = (gathered.get(i), Some(BoundRef::of(&c.min, &c.max, f)));
            assert!(
                same(&got, &want),
                "bucket {i}: bounds of {f:?}: {got:?} {want:?}"
            );
            let (got, want) = (
                gathered.sum(i),
                tsbucket::sums::bucket_sum(&c.max, f).cloned(),
            );
            assert!(
                same(&got, &want),
                "bucket {i}: sum of {f:?}: {got:?} {want:?}"
            );
        }
    }
}

/// Builds a segment file from an unsealed description:
/// `collection id u32 | time field (u8 length, bytes) | bucket count u32 | directory length
/// u32 | directory (decompressed) | page bytes (decompressed, back to back)`.
/// Page entries of the directory get the stored length, checksum and (for zstd pages) frame
/// of the page bytes; the directory gets its frame and the footer its checksum.
pub fn seal(data: &[u8]) -> Vec<u8> {
    let mut inp = Input::new(data);
    let collection_id = inp.u32();
    let name = inp.short_bytes();
    let bucket_count = inp.u32();
    let dir_len = inp.u32() as usize;
    let dir = inp.bytes(dir_len);
    let mut pool = Input::new(inp.rest());

    let mut file = Vec::with_capacity(data.len() + 64);
    file.extend_from_slice(&f::HEADER_MAGIC);
    file.extend_from_slice(&f::FORMAT_VERSION.to_le_bytes());
    file.extend_from_slice(&0u16.to_le_bytes());
    file.extend_from_slice(&collection_id.to_le_bytes());
    file.extend_from_slice(&(name.len() as u16).to_le_bytes());
    file.extend_from_slice(&0u16.to_le_bytes());
    file.extend_from_slice(name);
    let crc = crc32fast::hash(&file);
    file.extend_from_slice(&crc.to_le_bytes());
    let header_len = file.len();

    // Rewrite the page table; keep everything else of the directory as given.
    let mut new_dir = Vec::with_capacity(dir.len() + 16);
    let mut page_count = 0u32;
    let mut c = Cursor::new(dir);
    let table = (|| -> Result<usize, String> {
        c.u8()?;
        for _ in 0..c.count()? {
            c.string()?;
        }
        Ok(c.pos())
    })();
    match table.and_then(|names_end| {
        let n = c.count()?;
        let mut entries = Vec::new();
        for _ in 0..n {
            let compression = c.u8()?;
            let _stored = c.varint_u32()?;
            let raw_len = c.varint_u32()?;
            let _crc = c.u32_le()?;
            entries.push((compression, raw_len));
        }
        Ok((names_end, entries, c.pos()))
    }) {
        Ok((names_end, entries, table_end)) => {
            new_dir.extend_from_slice(dir.get(..names_end).unwrap_or_default());
            put_varint(&mut new_dir, entries.len() as u64);
            page_count = entries.len() as u32;
            for (compression, raw_len) in entries {
                let raw = pool.bytes(raw_len as usize);
                let stored = if compression == f::PAGE_ZSTD {
                    zstd::bulk::compress(raw, f::ZSTD_LEVEL).unwrap_or_default()
                } else {
                    raw.to_vec()
                };
                new_dir.push(compression);
                put_varint(&mut new_dir, stored.len() as u64);
                put_varint(&mut new_dir, u64::from(raw_len));
                new_dir.extend_from_slice(&crc32fast::hash(&stored).to_le_bytes());
                file.extend_from_slice(&stored);
            }
            new_dir.extend_from_slice(dir.get(table_end..).unwrap_or_default());
        }
        Err(_) => new_dir.extend_from_slice(dir),
    }
    // Bytes the page table did not claim stay between the pages and the directory.
    file.extend_from_slice(pool.rest());

    let stored_dir = zstd::bulk::compress(&new_dir, f::ZSTD_LEVEL).unwrap_or_default();
    let footer = Footer {
        dir_offset: file.len() as u64,
        dir_stored_len: stored_dir.len() as u32,
        dir_raw_len: new_dir.len() as u32,
        dir_crc: crc32fast::hash(&stored_dir),
        bucket_count,
        page_count,
        header_len: header_len as u32,
    };
    file.extend_from_slice(&stored_dir);
    file.extend_from_slice(&footer.encode());
    file
}

/// The inverse of [`seal`] for a well-formed segment file: the unsealed input (with its
/// leading marker byte) that seals back to an equivalent file. Used to seed the corpus.
pub fn unseal(file: &[u8]) -> Option<Vec<u8>> {
    let footer = Footer::decode(file.get(file.len().checked_sub(f::FOOTER_LEN)?..)?).ok()?;
    let name_len = usize::from(f::le_u16(file, f::HDR_TIME_FIELD_LEN).ok()?);
    let mut out = vec![UNSEALED];
    out.extend_from_slice(&f::le_u32(file, f::HDR_COLLECTION_ID).ok()?.to_le_bytes());
    out.push(u8::try_from(name_len).ok()?);
    out.extend_from_slice(file.get(f::HDR_TIME_FIELD..f::HDR_TIME_FIELD + name_len)?);
    out.extend_from_slice(&footer.bucket_count.to_le_bytes());
    let dir_start = footer.dir_offset as usize;
    let stored = file.get(dir_start..dir_start + footer.dir_stored_len as usize)?;
    let dir = zstd::bulk::decompress(stored, footer.dir_raw_len as usize).ok()?;
    out.extend_from_slice(&(dir.len() as u32).to_le_bytes());
    out.extend_from_slice(&dir);
    // Pages, decompressed, in table order.
    let mut c = Cursor::new(&dir);
    c.u8().ok()?;
    for _ in 0..c.count().ok()? {
        c.string().ok()?;
    }
    let mut at = footer.header_len as usize;
    for _ in 0..c.count().ok()? {
        let compression = c.u8().ok()?;
        let stored_len = c.varint_u32().ok()? as usize;
        let raw_len = c.varint_u32().ok()? as usize;
        c.u32_le().ok()?;
        let stored = file.get(at..at + stored_len)?;
        if compression == f::PAGE_ZSTD {
            out.extend_from_slice(&zstd::bulk::decompress(stored, raw_len).ok()?);
        } else {
            out.extend_from_slice(stored);
        }
        at += stored_len;
    }
    Some(out)
}

/// Equal, or printed alike (a NaN is not equal to itself but prints the same).
fn same<T: PartialEq + std::fmt::Debug>(a: &T, b: &T) -> bool {
    a == b || format!("{a:?}") == format!("{b:?}")
}
