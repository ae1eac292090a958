//! The manifest: which collections exist, with which options, which segment files are live, and
//! up to which log sequence number everything is in segments.
//!
//! Format (see `format-spec/manifest.md`):
//! `{ magic "TSBMANIF" | version: u16 | reserved: u16 = 0 | body_len: u32 | crc32: u32 | body }`
//! where the crc covers bytes 0..16 and the body, and the body is one BSON document. The file is
//! replaced atomically (write `MANIFEST.tmp`, fsync, rename, fsync the directory).

use crate::error::{Error, Result};
use crate::options::{Granularity, TimeseriesOptions};
use crate::vfs::{write_atomic, Vfs};
use bson::{doc, Bson, Document};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

mod index;

pub use index::{bucket_key, parse_index, IndexDef, MAX_INDEXES};

/// File name of the manifest inside the database directory.
pub const MANIFEST_FILE: &str = "MANIFEST";
/// Name of the lock file inside the database directory.
pub const LOCK_FILE: &str = "LOCK";
/// Directory of the write-ahead log, inside the database directory.
pub const WAL_DIR: &str = "wal";
/// Directory of segment files, inside the database directory.
pub const SEG_DIR: &str = "seg";
/// Magic bytes at offset 0.
pub const MAGIC: &[u8; 8] = b"TSBMANIF";
/// Current format version. Version 2 adds collections' optional `expiredBuckets` (TTL) and
/// `indexes`; version 1 is version 2 without them.
pub const VERSION: u16 = 2;
/// Oldest format version this build reads.
pub const MIN_VERSION: u16 = 1;
/// Size of the fixed header.
pub const HEADER_LEN: usize = 20;
/// Largest body accepted (a sanity bound against a damaged length field).
pub const MAX_BODY: usize = 1 << 30;

/// One collection's entry.
#[derive(Debug, Clone, PartialEq)]
pub struct CollectionEntry {
    /// Internal id, never reused; log records name collections by it.
    pub id: u32,
    /// User-visible name.
    pub name: String,
    /// Options in force.
    pub options: TimeseriesOptions,
    /// Ids of the live segment files of this collection.
    pub segments: Vec<u64>,
    /// Buckets deleted by the TTL sweeper from segments that still hold live buckets (or whose
    /// rows the log may still replay): segment id -> bucket positions in that segment. Readers
    /// treat these buckets as absent; the file goes once every bucket in it is listed here.
    pub expired: BTreeMap<u64, BTreeSet<u32>>,
    /// Secondary indexes, in creation order (manifest version 2; empty before).
    pub indexes: Vec<IndexDef>,
}

impl CollectionEntry {
    /// Whether bucket `index` of segment `segment` was deleted by the TTL sweeper.
    pub fn is_expired(&self, segment: u64, index: u32) -> bool {
        self.expired
            .get(&segment)
            .is_some_and(|s| s.contains(&index))
    }
}

/// The whole manifest.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Manifest {
    /// Incremented on every write.
    pub generation: u64,
    /// Every log record with a sequence number `<=` this is fully reflected in live segments.
    pub wal_checkpoint: u64,
    /// Next collection id to hand out.
    pub next_collection_id: u32,
    /// Next segment id to hand out.
    pub next_segment_id: u64,
    /// Live collections.
    pub collections: Vec<CollectionEntry>,
}

fn options_doc(o: &TimeseriesOptions) -> Document {
    let mut d = doc! {"timeField": o.get_time_field()};
    if let Some(m) = o.get_meta_field() {
        d.insert("metaField", m);
    }
    match o.custom_span {
        Some((span, rounding)) => {
            d.insert("bucketMaxSpanSeconds", i64::from(span));
            d.insert("bucketRoundingSeconds", i64::from(rounding));
        }
        None => {
            let g = o.granularity.unwrap_or(Granularity::Seconds);
            d.insert("granularity", g.as_str());
        }
    }
    if let Some(e) = o.expire_after_seconds {
        d.insert("expireAfterSeconds", e as i64);
    }
    d
}

fn options_from(d: &Document) -> std::result::Result<TimeseriesOptions, String> {
    let s = |k: &str| d.get_str(k).map_err(|e| format!("{k}: {e}"));
    let mut o = TimeseriesOptions::new(s("timeField")?);
    if let Ok(m) = d.get_str("metaField") {
        o = o.meta_field(m);
    }
    if let Ok(g) = d.get_str("granularity") {
        o = o.granularity(Granularity::parse(g).map_err(|e| e.to_string())?);
    }
    if let (Ok(a), Ok(b)) = (
        d.get_i64("bucketMaxSpanSeconds"),
        d.get_i64("bucketRoundingSeconds"),
    ) {
        let a = u32::try_from(a).map_err(|e| e.to_string())?;
        let b = u32::try_from(b).map_err(|e| e.to_string())?;
        o = o.bucket_span(a, b);
    }
    if let Ok(e) = d.get_i64("expireAfterSeconds") {
        o = o.expire_after_seconds(u64::try_from(e).map_err(|e| e.to_string())?);
    }
    o.validate().map_err(|e| e.to_string())?;
    Ok(o)
}

fn expired_doc(e: &BTreeMap<u64, BTreeSet<u32>>) -> Vec<Bson> {
    e.iter()
        .map(|(&seg, idx)| {
            Bson::Document(doc! {
                "segment": seg as i64,
                "buckets": idx.iter().map(|&i| Bson::Int64(i64::from(i))).collect::<Vec<_>>(),
            })
        })
        .collect()
}

fn expired_from(
    a: &[Bson],
    segments: &[u64],
) -> std::result::Result<BTreeMap<u64, BTreeSet<u32>>, String> {
    let mut out = BTreeMap::new();
    for e in a {
        let e = e
            .as_document()
            .ok_or("expiredBuckets entry is not a document")?;
        let seg = e.get_i64("segment").map_err(|e| format!("segment: {e}"))? as u64;
        if !segments.contains(&seg) {
            return Err(format!(
                "expiredBuckets names segment {seg}, which the collection does not list"
            ));
        }
        let mut set = BTreeSet::new();
        for i in e
            .get_array("buckets")
            .map_err(|e| format!("buckets: {e}"))?
        {
            let i = i
                .as_i64()
                .ok_or("expired bucket position is not an int64")?;
            set.insert(u32::try_from(i).map_err(|e| e.to_string())?);
        }
        out.insert(seg, set);
    }
    Ok(out)
}

impl Manifest {
    /// Encodes the manifest file.
    pub fn encode(&self) -> Vec<u8> {
        let colls: Vec<Bson> = self
            .collections
            .iter()
            .map(|c| {
                let mut d = doc! {
                    "id": i64::from(c.id),
                    "name": &c.name,
                    "options": options_doc(&c.options),
                    "segments": c.segments.iter().map(|&s| Bson::Int64(s as i64)).collect::<Vec<_>>(),
                };
                if !c.expired.is_empty() {
                    d.insert("expiredBuckets", expired_doc(&c.expired));
                }
                if !c.indexes.is_empty() {
                    let ix: Vec<Bson> = c
                        .indexes
                        .iter()
                        .map(|i| Bson::Document(doc! {"name": &i.name, "key": i.key.clone()}))
                        .collect();
                    d.insert("indexes", ix);
                }
                Bson::Document(d)
            })
            .collect();
        let body = doc! {
            "generation": self.generation as i64,
            "walCheckpoint": self.wal_checkpoint as i64,
            "nextCollectionId": i64::from(self.next_collection_id),
            "nextSegmentId": self.next_segment_id as i64,
            "collections": colls,
        };
        let mut body_bytes = Vec::new();
        // An in-memory document of plain values always serialises.
        let _ = body.to_writer(&mut body_bytes);
        let mut out = Vec::with_capacity(HEADER_LEN + body_bytes.len());
        let version = if self
            .collections
            .iter()
            .any(|c| !c.indexes.is_empty() || !c.expired.is_empty())
        {
            VERSION
        } else {
            MIN_VERSION
        };
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&version.to_le_bytes());
        out.extend_from_slice(&0u16.to_le_bytes());
        out.extend_from_slice(&(body_bytes.len() as u32).to_le_bytes());
        let mut h = crc32fast::Hasher::new();
        h.update(&out);
        h.update(&body_bytes);
        out.extend_from_slice(&h.finalize().to_le_bytes());
        out.extend_from_slice(&body_bytes);
        out
    }

    /// Decodes a manifest file; `path` names it in errors.
    pub fn decode(bytes: &[u8], path: &Path) -> Result<Manifest> {
        let bad = |off: u64, d: String| Error::corruption(path, off, d);
        let header = bytes.get(..HEADER_LEN).ok_or_else(|| {
            bad(
                0,
                format!("file is {} bytes, shorter than the header", bytes.len()),
            )
        })?;
        if header.get(..8) != Some(&MAGIC[..]) {
            return Err(bad(0, "bad magic: not a tsbucket manifest".into()));
        }
        let u16_at = |o: usize| {
            header
                .get(o..o + 2)
                .and_then(|b| b.try_into().ok())
                .map(u16::from_le_bytes)
        };
        let u32_at = |o: usize| {
            header
                .get(o..o + 4)
                .and_then(|b| b.try_into().ok())
                .map(u32::from_le_bytes)
        };
        let version = u16_at(8).unwrap_or(0);
        if !(MIN_VERSION..=VERSION).contains(&version) {
            return Err(bad(
                8,
                format!("unsupported manifest version {version} (this build reads {VERSION})"),
            ));
        }
        if u16_at(10) != Some(0) {
            return Err(bad(10, "reserved bytes are not zero".into()));
        }
        let body_len = u32_at(12).unwrap_or(0) as usize;
        if body_len > MAX_BODY || HEADER_LEN + body_len != bytes.len() {
            return Err(bad(
                12,
                format!(
                    "body length {body_len} does not match file length {}",
                    bytes.len()
                ),
            ));
        }
        let body = bytes.get(HEADER_LEN..).unwrap_or_default();
        let mut h = crc32fast::Hasher::new();
        h.update(header.get(..16).unwrap_or_default());
        h.update(body);
        if Some(h.finalize()) != u32_at(16) {
            return Err(bad(16, "checksum mismatch".into()));
        }
        let d = Document::from_reader(body).map_err(|e| bad(HEADER_LEN as u64, e.to_string()))?;
        Self::from_doc(&d).map_err(|e| bad(HEADER_LEN as u64, e))
    }

    fn from_doc(d: &Document) -> std::result::Result<Manifest, String> {
        let int = |k: &str| d.get_i64(k).map_err(|e| format!("{k}: {e}"));
        let mut m = Manifest {
            generation: int("generation")? as u64,
            wal_checkpoint: int("walCheckpoint")? as u64,
            next_collection_id: u32::try_from(int("nextCollectionId")?)
                .map_err(|e| e.to_string())?,
            next_segment_id: int("nextSegmentId")? as u64,
            collections: Vec::new(),
        };
        for c in d.get_array("collections").map_err(|e| e.to_string())? {
            let c = c
                .as_document()
                .ok_or("collection entry is not a document")?;
            let id = u32::try_from(c.get_i64("id").map_err(|e| e.to_string())?)
                .map_err(|e| e.to_string())?;
            let name = c.get_str("name").map_err(|e| e.to_string())?.to_string();
            let options = options_from(c.get_document("options").map_err(|e| e.to_string())?)?;
            let mut segments = Vec::new();
            for s in c.get_array("segments").map_err(|e| e.to_string())? {
                segments.push(s.as_i64().ok_or("segment id is not an int64")? as u64);
            }
            let expired = match c.get_array("expiredBuckets") {
                Ok(a) => expired_from(a, &segments)?,
                Err(_) if !c.contains_key("expiredBuckets") => BTreeMap::new(),
                Err(e) => return Err(format!("expiredBuckets: {e}")),
            };
            let mut indexes = Vec::new();
            if let Ok(ix) = c.get_array("indexes") {
                for i in ix {
                    let i = i.as_document().ok_or("index entry is not a document")?;
                    indexes.push(IndexDef {
                        name: i.get_str("name").map_err(|e| e.to_string())?.to_string(),
                        key: i.get_document("key").map_err(|e| e.to_string())?.clone(),
                    });
                }
            }
            m.collections.push(CollectionEntry {
                id,
                name,
                options,
                segments,
                expired,
                indexes,
            });
        }
        Ok(m)
    }

    /// Reads the manifest of `dir`; `Ok(None)` when there is none (a new database).
    pub fn load(vfs: &dyn Vfs, dir: &Path) -> Result<Option<Manifest>> {
        let path = dir.join(MANIFEST_FILE);
        if !vfs.exists(&path) {
            return Ok(None);
        }
        let bytes = vfs.read(&path)?;
        Manifest::decode(&bytes, &path).map(Some)
    }

    /// Writes the manifest durably (temporary file, fsync, rename, directory fsync).
    pub fn store(&self, vfs: &dyn Vfs, dir: &Path) -> Result<()> {
        write_atomic(vfs, &dir.join(MANIFEST_FILE), &self.encode())?;
        Ok(())
    }
}

/// Path of segment `id` inside the database directory.
pub fn segment_path(dir: &Path, id: u64) -> std::path::PathBuf {
    dir.join(SEG_DIR).join(format!("{id:016x}.seg"))
}

/// Parses a segment file name back to its id.
pub fn parse_segment_name(name: &str) -> Option<u64> {
    let hex = name.strip_suffix(".seg")?;
    // Exactly the names the writer makes: sixteen lowercase hex digits. Open removes unlisted
    // segments as leftovers, so a name that merely parses (`+`, uppercase) must not count.
    if hex.len() != 16 || !hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return None;
    }
    u64::from_str_radix(hex, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Manifest {
        Manifest {
            generation: 3,
            wal_checkpoint: 42,
            next_collection_id: 2,
            next_segment_id: 9,
            collections: vec![CollectionEntry {
                id: 1,
                name: "weather".into(),
                options: TimeseriesOptions::new("ts")
                    .meta_field("m")
                    .bucket_span(200, 200)
                    .expire_after_seconds(60),
                segments: vec![3, 8],
                expired: BTreeMap::new(),
                indexes: Vec::new(),
            }],
        }
    }

    #[test]
    fn round_trips() {
        let m = sample();
        assert_eq!(Manifest::decode(&m.encode(), Path::new("M")).unwrap(), m);
    }

    #[test]
    fn expired_buckets_round_trip() {
        let mut m = sample();
        m.collections[0].expired = BTreeMap::from([(3, BTreeSet::from([0, 2]))]);
        let back = Manifest::decode(&m.encode(), Path::new("M")).unwrap();
        assert_eq!(back, m);
        assert!(back.collections[0].is_expired(3, 2));
        assert!(!back.collections[0].is_expired(3, 1));
        assert!(!back.collections[0].is_expired(8, 0));
    }

    #[test]
    fn expired_buckets_of_an_unlisted_segment_are_corruption() {
        let mut m = sample();
        m.collections[0].expired = BTreeMap::from([(5, BTreeSet::from([0]))]);
        let e = Manifest::decode(&m.encode(), Path::new("M")).unwrap_err();
        assert!(matches!(e, Error::Corruption { .. }), "{e}");
    }

    #[test]
    fn version_1_manifests_still_load() {
        let m = sample();
        let mut bytes = m.encode();
        bytes[8..10].copy_from_slice(&1u16.to_le_bytes());
        let mut h = crc32fast::Hasher::new();
        h.update(&bytes[..16]);
        h.update(&bytes[HEADER_LEN..]);
        let crc = h.finalize().to_le_bytes();
        bytes[16..20].copy_from_slice(&crc);
        assert_eq!(Manifest::decode(&bytes, Path::new("M")).unwrap(), m);
    }

    #[test]
    fn default_granularity_round_trips_as_equal_options() {
        let mut m = sample();
        m.collections[0].options = TimeseriesOptions::new("ts").meta_field("m");
        assert_eq!(Manifest::decode(&m.encode(), Path::new("M")).unwrap(), m);
    }

    #[test]
    fn indexes_round_trip_as_version_2() {
        let mut m = sample();
        assert_eq!(m.encode()[8], 1, "no index: still version 1");
        m.collections[0].indexes = vec![IndexDef {
            name: "m.a_1_ts_-1".into(),
            key: doc! {"m.a": 1, "ts": -1},
        }];
        let bytes = m.encode();
        assert_eq!(bytes[8], 2);
        assert_eq!(Manifest::decode(&bytes, Path::new("M")).unwrap(), m);
    }

    #[test]
    fn every_flipped_byte_is_detected() {
        let bytes = sample().encode();
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0xFF;
            let e = Manifest::decode(&b, Path::new("M")).unwrap_err();
            assert!(matches!(e, Error::Corruption { .. }), "byte {i}: {e}");
        }
    }

    #[test]
    fn truncation_is_detected() {
        let bytes = sample().encode();
        for n in 0..bytes.len() {
            assert!(Manifest::decode(&bytes[..n], Path::new("M")).is_err());
        }
    }

    #[test]
    fn segment_names_round_trip() {
        let p = segment_path(Path::new("d"), 0xabc);
        let name = p.file_name().unwrap().to_str().unwrap();
        assert_eq!(parse_segment_name(name), Some(0xabc));
        assert_eq!(parse_segment_name("x.seg"), None);
        // Only the writer's own spelling: another file that happens to parse is not ours.
        assert_eq!(parse_segment_name("0000000000000ABC.seg"), None);
        assert_eq!(parse_segment_name("+000000000000abc.seg"), None);
        assert_eq!(parse_segment_name("0000000000000abc.seg.tmp"), None);
        assert_eq!(parse_segment_name("0000000000000abc.seg"), Some(0xabc));
    }
}
