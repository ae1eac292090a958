//! Segment tests: round trips, input checks, exhaustive corruption (every flipped byte and
//! every truncation is reported as corruption of that file) and size accounting for many
//! buckets of one to three rows (the shape of the seed 004 workload, `workload/src/seed004.rs`).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    reason = "test code: a panic is a test failure, which is what these lints would prevent"
)]

use super::order::{compare_bson, is_composite};
use super::writer::{write_segment_with, WriteOptions};
use super::*;
use crate::bucket::{BucketData, Column, EncodedBucket, META_SLOT};
use crate::error::Error;
use crate::vfs::RealFs;
use bson::oid::ObjectId;
use bson::spec::BinarySubtype;
use bson::{doc, Binary, Bson, DateTime, Decimal128, Document, Regex, Timestamp};
use std::cmp::Ordering;
use std::path::{Path, PathBuf};

/// Small deterministic PRNG (splitmix64): tests are reproducible without extra dependencies.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
    fn string(&mut self, len: usize) -> String {
        (0..len)
            .map(|_| (b'a' + self.below(26) as u8) as char)
            .collect()
    }
}

const TIME: &str = "t";

fn info() -> SegmentHeaderInfo {
    SegmentHeaderInfo {
        collection_id: 42,
        time_field: TIME.into(),
    }
}

/// A bucket `_id` as the catalog makes it: start seconds, then an 8-byte counter.
fn bucket_id(start_secs: u32, counter: u64) -> ObjectId {
    let mut b = [0u8; 12];
    b[..4].copy_from_slice(&start_secs.to_be_bytes());
    b[4..].copy_from_slice(&counter.to_be_bytes());
    ObjectId::from_bytes(b)
}

/// Builds a bucket from rows (field order = insertion order), computing columns, shapes,
/// row shapes and `control.min/max` the way `verify` expects them. `meta_pos` is where the meta
/// field stood in each row (None: no meta slot in the shape).
fn make_bucket(
    id: ObjectId,
    meta: Option<Bson>,
    rows: &[Vec<(String, Bson)>],
    meta_pos: Option<usize>,
) -> BucketData {
    let n = rows.len();
    let mut columns: Vec<Column> = Vec::new();
    let mut shapes: Vec<Vec<u32>> = Vec::new();
    let mut row_shapes = Vec::with_capacity(n);
    for (r, row) in rows.iter().enumerate() {
        let mut shape = Vec::new();
        for (k, v) in row {
            let ci = match columns.iter().position(|c| &c.name == k) {
                Some(i) => i,
                None => {
                    columns.push(Column {
                        name: k.clone(),
                        values: vec![None; n],
                    });
                    columns.len() - 1
                }
            };
            columns[ci].values[r] = Some(v.clone());
            shape.push(ci as u32);
        }
        if let (Some(p), Some(_)) = (meta_pos, &meta) {
            shape.insert(p.min(shape.len()), META_SLOT);
        }
        let si = match shapes.iter().position(|s| *s == shape) {
            Some(i) => i,
            None => {
                shapes.push(shape);
                shapes.len() - 1
            }
        };
        row_shapes.push(si as u32);
    }
    if row_shapes.iter().all(|&s| s == 0) {
        row_shapes.clear();
    }
    let (min, max) = control(&columns, id);
    let bson_bytes = rows
        .iter()
        .map(|row| {
            let mut d: Document = row.iter().cloned().collect();
            if let (Some(p), Some(m)) = (meta_pos, &meta) {
                let mut fields: Vec<(String, Bson)> = d.into_iter().collect();
                fields.insert(p.min(fields.len()), ("meta".into(), m.clone()));
                d = fields.into_iter().collect();
            }
            d.to_vec().unwrap().len() as u64
        })
        .sum();
    let mut b = BucketData {
        id,
        meta,
        count: n as u32,
        min,
        max,
        columns,
        shapes,
        row_shapes,
        bson_bytes: Some(bson_bytes),
    };
    // Every test bucket carries its sums, as the catalog's do.
    crate::sums::set_bucket_sums(&mut b, TIME);
    b
}

/// A measurement `_id` as `ObjectId::new()` makes them (seconds, a per-process 5-byte value, a
/// 3-byte counter), but deterministic, so that sizes and page boundaries do not vary between
/// runs (or with other tests creating ObjectIds on other threads).
fn row_id(secs: u32, counter: u32) -> ObjectId {
    let mut b = [0u8; 12];
    b[..4].copy_from_slice(&secs.to_be_bytes());
    b[4..9].copy_from_slice(&[0x5e, 0x1f, 0x3a, 0x07, 0xc2]);
    b[9..].copy_from_slice(&counter.to_be_bytes()[1..]);
    ObjectId::from_bytes(b)
}

/// `control.min/max`: value min/max per column; the time field's min is the bucket start.
fn control(columns: &[Column], id: ObjectId) -> (Document, Document) {
    let (mut min, mut max) = (Document::new(), Document::new());
    for c in columns {
        let mut vals = c.values.iter().flatten();
        let Some(first) = vals.next() else { continue };
        let (mut lo, mut hi) = (first, first);
        for v in vals {
            if compare_bson(v, lo) == Ordering::Less {
                lo = v;
            }
            if compare_bson(v, hi) == Ordering::Greater {
                hi = v;
            }
        }
        if c.name == TIME {
            let start = i64::from(u32::from_be_bytes(id.bytes()[..4].try_into().unwrap()));
            min.insert(c.name.clone(), DateTime::from_millis(start * 1000));
        } else {
            min.insert(c.name.clone(), lo.clone());
        }
        max.insert(c.name.clone(), hi.clone());
        let _ = is_composite(lo);
    }
    (min, max)
}

/// One value of every BSON type (NaN aside: `Bson`'s `==` cannot compare it).
fn all_types() -> Vec<Bson> {
    vec![
        Bson::Double(-0.0),
        Bson::Double(1.5e300),
        Bson::String("héllo".into()),
        Bson::String(String::new()),
        Bson::Array(vec![Bson::Int32(1), Bson::String("x".into()), Bson::Null]),
        Bson::Document(doc! {"a": 1, "b": {"c": [1, 2]}}),
        Bson::Boolean(true),
        Bson::Boolean(false),
        Bson::Null,
        Bson::RegularExpression(Regex {
            pattern: "^a.*b$".try_into().unwrap(),
            options: "i".try_into().unwrap(),
        }),
        Bson::JavaScriptCode("function(){}".into()),
        Bson::Int32(i32::MIN),
        Bson::Int32(7),
        Bson::Int64(i64::MAX),
        Bson::Timestamp(Timestamp {
            time: 1_700_000_000,
            increment: 9,
        }),
        Bson::Binary(Binary {
            subtype: BinarySubtype::Uuid,
            bytes: vec![7; 16],
        }),
        Bson::ObjectId(row_id(1_700_000_000, 77)),
        Bson::DateTime(DateTime::from_millis(-5)),
        Bson::Symbol("sym".into()),
        Bson::Decimal128("2.5".parse::<Decimal128>().unwrap()),
        Bson::Undefined,
        Bson::MaxKey,
        Bson::MinKey,
    ]
}

/// A mixed set of buckets: sparse fields, 1-row buckets, meta absent / null / scalar / doc,
/// field-order changes, every BSON type.
fn sample_buckets(n: usize, seed: u64) -> Vec<BucketData> {
    let mut rng = Rng::new(seed);
    let types = all_types();
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let start = 1_700_000_000 + (i as u32 / 4) * 60;
        let id = bucket_id(start, 1000 + i as u64);
        let meta = match rng.below(5) {
            0 => None,
            1 => Some(Bson::Null),
            2 => Some(Bson::String(format!("host_{}", rng.below(10)))),
            3 => Some(Bson::Document(
                doc! {"dc": format!("dc{}", rng.below(3)), "rack": rng.below(100) as i32},
            )),
            _ => Some(types[rng.below(types.len() as u64) as usize].clone()),
        };
        let rows_n = if rng.chance(30) {
            1
        } else {
            1 + rng.below(40) as usize
        };
        let mut rows = Vec::with_capacity(rows_n);
        for r in 0..rows_n {
            let t = i64::from(start) * 1000 + r as i64 * 1000 + rng.below(999) as i64;
            let mut row = vec![(TIME.to_string(), Bson::DateTime(DateTime::from_millis(t)))];
            row.push((
                "_id".into(),
                Bson::ObjectId(row_id((t / 1000) as u32, (i * 64 + r) as u32)),
            ));
            if rng.chance(80) {
                row.push(("v".into(), Bson::Double(rng.below(10_000) as f64 / 100.0)));
            }
            if rng.chance(50) {
                row.push(("n".into(), Bson::Int64(rng.below(1000) as i64 - 500)));
            }
            if rng.chance(20) {
                // A field whose type varies per bucket (one type per bucket keeps min/max simple).
                row.push(("any".into(), types[(i + r % 2) % types.len()].clone()));
            }
            if rng.chance(10) {
                row.swap(0, 1); // field order change → a second shape
            }
            rows.push(row);
        }
        let meta_pos = if rng.chance(50) { Some(1) } else { None };
        out.push(make_bucket(id, meta, &rows, meta_pos));
    }
    out
}

fn write_to(path: &Path, buckets: &[BucketData], opts: WriteOptions) -> u64 {
    let refs: Vec<&BucketData> = buckets.iter().collect();
    write_segment_with(&RealFs, path, &info(), &refs, opts).unwrap()
}

/// Opens, reads every bucket, verifies; returns what was read.
fn read_all(path: &Path) -> crate::Result<Vec<BucketData>> {
    let s = Segment::open(&RealFs, path)?;
    let mut out = Vec::new();
    for i in 0..s.buckets().len() {
        out.push(s.read_bucket(i)?);
    }
    s.verify()?;
    Ok(out)
}

fn tmp() -> (tempfile::TempDir, PathBuf) {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("000001.seg");
    (d, p)
}

#[test]
fn round_trip_many_buckets_across_pages() {
    let (_d, path) = tmp();
    let buckets = sample_buckets(600, 1);
    let len = write_to(&path, &buckets, WriteOptions::default());
    assert_eq!(len, std::fs::metadata(&path).unwrap().len());
    let seg = Segment::open(&RealFs, &path).unwrap();
    assert_eq!(seg.info(), &info());
    assert_eq!(seg.path(), path);
    assert_eq!(seg.len_bytes(), len);
    assert_eq!(seg.buckets().len(), buckets.len());
    for (i, b) in buckets.iter().enumerate() {
        let s = &seg.buckets()[i];
        assert_eq!(
            (s.id, seg.meta(i), s.count),
            (b.id, b.meta.as_ref(), b.count)
        );
        let ctl = seg.control(i).unwrap();
        assert_eq!((&ctl.min, &ctl.max), (&b.min, &b.max));
        assert_eq!(seg.decode_control(i, s).unwrap(), *ctl);
        assert_eq!(&seg.read_bucket(i).unwrap(), b, "bucket {i}");
    }
    seg.verify().unwrap();
    let st = seg.stats();
    assert_eq!(
        st.header_bytes + st.page_bytes_stored + st.directory_bytes_stored + st.footer_bytes,
        len
    );
    // Reading backwards (no cache hits) gives the same answers.
    for i in (0..buckets.len()).rev().step_by(7) {
        assert_eq!(seg.read_bucket(i).unwrap(), buckets[i]);
    }
    assert!(!path.with_file_name("000001.seg.tmp").exists());
}

#[test]
fn small_pages_large_buckets_and_both_page_kinds_round_trip() {
    let (_d, path) = tmp();
    let opts = WriteOptions {
        page_target: 512,
        large_bucket: 2048,
        ..WriteOptions::default()
    };
    let sample = sample_buckets(60, 2);
    let chatty = chatty_buckets(40, 3, 500);
    // An incompressible large bucket: a raw page of its own.
    let blob = blob_bucket(bucket_id(1_700_000_000, 5), 30, 100, 9);
    assert!(encoded_len(&blob) >= opts.large_bucket);
    // Mixed buckets (raw pages) and chatty ones (zstd pages) in runs, the large one in between.
    let mut buckets = Vec::new();
    for (s, c) in sample.chunks(20).zip(chatty.chunks(14)) {
        buckets.extend_from_slice(s);
        buckets.extend_from_slice(c);
    }
    buckets.insert(30, blob);
    write_to(&path, &buckets, opts);
    let seg = Segment::open(&RealFs, &path).unwrap();
    let st = seg.stats();
    assert!(st.page_count > 10, "{st:?}");
    assert!(
        st.zstd_page_count >= 3 && st.page_count - st.zstd_page_count >= 3,
        "{st:?}"
    );
    assert_eq!(read_all(&path).unwrap(), buckets);
}

#[test]
fn one_row_buckets_round_trip() {
    let (_d, path) = tmp();
    let buckets: Vec<_> = (0..300u32)
        .map(|i| {
            let row = vec![
                (
                    TIME.to_string(),
                    Bson::DateTime(DateTime::from_millis(
                        i64::from(1_700_000_000 + i * 60) * 1000 + 17,
                    )),
                ),
                ("x".to_string(), Bson::Int32(i as i32)),
            ];
            make_bucket(
                bucket_id(1_700_000_000 + i * 60, u64::from(i)),
                Some(Bson::Int32((i % 3) as i32)),
                &[row],
                Some(0),
            )
        })
        .collect();
    write_to(&path, &buckets, WriteOptions::default());
    assert_eq!(read_all(&path).unwrap(), buckets);
}

#[test]
fn meta_absent_and_meta_null_stay_distinct() {
    let (_d, path) = tmp();
    let row = |t: i64| vec![(TIME.to_string(), Bson::DateTime(DateTime::from_millis(t)))];
    let buckets = vec![
        make_bucket(bucket_id(1000, 1), None, &[row(1_000_000)], None),
        make_bucket(
            bucket_id(1000, 2),
            Some(Bson::Null),
            &[row(1_000_001)],
            Some(0),
        ),
        make_bucket(bucket_id(1000, 3), None, &[row(1_000_002)], None),
    ];
    write_to(&path, &buckets, WriteOptions::default());
    let seg = Segment::open(&RealFs, &path).unwrap();
    let metas: Vec<_> = (0..3).map(|i| seg.meta(i).cloned()).collect();
    assert_eq!(metas, vec![None, Some(Bson::Null), None]);
    assert_eq!(read_all(&path).unwrap(), buckets);
}

#[test]
fn every_bson_type_round_trips_in_columns_control_and_meta() {
    let (_d, path) = tmp();
    let types = all_types();
    let buckets: Vec<_> = types
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let rows: Vec<_> = (0..3)
                .map(|r| {
                    vec![
                        (
                            TIME.to_string(),
                            Bson::DateTime(DateTime::from_millis(5_000_000 + r)),
                        ),
                        ("v".to_string(), v.clone()),
                        (format!("f{i}"), types[(i + 1) % types.len()].clone()),
                    ]
                })
                .collect();
            make_bucket(bucket_id(5000, i as u64), Some(v.clone()), &rows, Some(2))
        })
        .collect();
    write_to(&path, &buckets, WriteOptions::default());
    let read = read_all(&path).unwrap();
    assert_eq!(read, buckets);
    // -0.0 must come back as -0.0 (Bson's == would accept 0.0).
    let neg = &read[0].max.get("v").unwrap();
    assert!(matches!(neg, Bson::Double(d) if d.is_sign_negative()));
}

#[test]
fn read_bucket_columns_returns_only_the_named_columns() {
    let (_d, path) = tmp();
    let buckets = sample_buckets(50, 3);
    write_to(&path, &buckets, WriteOptions::default());
    let seg = Segment::open(&RealFs, &path).unwrap();
    for (i, b) in buckets.iter().enumerate() {
        let part = seg.read_bucket_columns(i, &["v", TIME, "missing"]).unwrap();
        let want: Vec<_> = b
            .columns
            .iter()
            .filter(|c| c.name == "v" || c.name == TIME)
            .cloned()
            .collect();
        assert_eq!(part.columns, want);
        assert_eq!(
            (&part.shapes, &part.row_shapes, part.count, &part.meta),
            (&b.shapes, &b.row_shapes, b.count, &b.meta)
        );
        // Statistics are not data: a column read leaves them to `Segment::control`.
        assert!(part.min.is_empty() && part.max.is_empty());
        assert!(seg.read_bucket_columns(i, &[]).unwrap().columns.is_empty());
    }
}

#[test]
fn empty_segment_round_trips() {
    let (_d, path) = tmp();
    let len = write_to(&path, &[], WriteOptions::default());
    assert_eq!(
        len as usize,
        format::header_len(TIME.len()) + format::FOOTER_LEN + {
            let seg = Segment::open(&RealFs, &path).unwrap();
            seg.stats().directory_bytes_stored as usize
        }
    );
    let seg = Segment::open(&RealFs, &path).unwrap();
    assert!(seg.buckets().is_empty());
    seg.verify().unwrap();
    assert!(matches!(seg.read_bucket(0), Err(Error::BadValue(_))));
}

#[test]
fn rewriting_replaces_the_file_atomically() {
    let (_d, path) = tmp();
    write_to(&path, &sample_buckets(5, 4), WriteOptions::default());
    let second = sample_buckets(7, 5);
    write_to(&path, &second, WriteOptions::default());
    assert_eq!(read_all(&path).unwrap(), second);
}

#[test]
fn malformed_buckets_are_refused_before_writing() {
    let (_d, path) = tmp();
    let good = sample_buckets(1, 6).remove(0);
    let mut cases = Vec::new();
    let mut b = good.clone();
    b.count = 0;
    cases.push(b);
    let mut b = good.clone();
    b.columns.clear();
    cases.push(b);
    let mut b = good.clone();
    b.count += 1;
    cases.push(b);
    let mut b = good.clone();
    b.row_shapes = vec![0; b.count as usize + 1];
    cases.push(b);
    for b in cases {
        let r = write_segment(&RealFs, &path, &info(), &[&b]);
        assert!(matches!(r, Err(Error::BadValue(_))), "{r:?}");
        assert!(!path.exists());
    }
}

#[test]
fn encoded_buckets_write_the_same_file() {
    let (_d, path) = tmp();
    let buckets = sample_buckets(300, 11);
    write_to(&path, &buckets, WriteOptions::default());
    let plain = std::fs::read(&path).unwrap();
    let encoded: Vec<EncodedBucket> = buckets.iter().map(EncodedBucket::from_data).collect();
    let refs: Vec<&EncodedBucket> = encoded.iter().collect();
    write_encoded_segment(&RealFs, &path, &info(), &refs).unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), plain);
}

#[test]
fn malformed_encoded_buckets_are_refused_before_writing() {
    let (_d, path) = tmp();
    let good = EncodedBucket::from_data(&sample_buckets(1, 6).remove(0));
    let mut cases = Vec::new();
    let mut b = good.clone();
    b.lens.pop();
    cases.push(b);
    let mut b = good.clone();
    b.body.pop();
    cases.push(b);
    let mut b = good.clone();
    b.names.clear();
    b.lens.clear();
    b.body.clear();
    cases.push(b);
    let mut b = good.clone();
    b.head.columns = sample_buckets(1, 6).remove(0).columns;
    cases.push(b);
    for b in cases {
        let r = write_encoded_segment(&RealFs, &path, &info(), &[&b]);
        assert!(matches!(r, Err(Error::BadValue(_))), "{r:?}");
        assert!(!path.exists());
    }
}

#[test]
fn verify_reports_control_values_that_disagree_with_the_data() {
    let (_d, path) = tmp();
    let good = sample_buckets(3, 7);
    let mut damaged = good.clone();
    damaged[1].max.insert("_id", ObjectId::from_bytes([0; 12]));
    write_to(&path, &damaged, WriteOptions::default());
    let seg = Segment::open(&RealFs, &path).unwrap();
    match seg.verify() {
        Err(Error::Corruption {
            path: p, detail, ..
        }) => {
            assert_eq!(p, path);
            assert!(detail.contains("bucket 1"), "{detail}");
        }
        other => panic!("expected corruption, got {other:?}"),
    }
    // A time max below the data is also caught; a time min below the data is allowed.
    let mut damaged = good.clone();
    damaged[0].max.insert(TIME, DateTime::from_millis(0));
    write_to(&path, &damaged, WriteOptions::default());
    assert!(Segment::open(&RealFs, &path).unwrap().verify().is_err());
    let mut ok = good;
    ok[0].min.insert(TIME, DateTime::from_millis(0));
    write_to(&path, &ok, WriteOptions::default());
    Segment::open(&RealFs, &path).unwrap().verify().unwrap();
}

/// A bucket of `rows` rows with an Int32, an Int64, a Double and a sparse mixed numeric
/// field, plus a string field (no sum).
fn numeric_bucket(id: ObjectId, rows: usize, seed: u64) -> BucketData {
    let mut rng = Rng::new(seed);
    let start = i64::from(u32::from_be_bytes(id.bytes()[..4].try_into().unwrap())) * 1000;
    let rows: Vec<Vec<(String, Bson)>> = (0..rows)
        .map(|r| {
            let mut row = vec![
                (
                    TIME.to_string(),
                    Bson::DateTime(DateTime::from_millis(start + r as i64 * 1000)),
                ),
                ("i32".to_string(), Bson::Int32(rng.below(200) as i32 - 100)),
                ("i64".to_string(), Bson::Int64(rng.next() as i64 >> 3)),
                (
                    "f".to_string(),
                    Bson::Double(rng.below(10_000) as f64 / 100.0),
                ),
                ("s".to_string(), Bson::String(rng.string(3))),
            ];
            if rng.chance(50) {
                let v = if rng.chance(50) {
                    Bson::Int32(rng.below(9) as i32)
                } else {
                    Bson::Double(0.1)
                };
                row.push(("sparse".to_string(), v));
            }
            row
        })
        .collect();
    make_bucket(id, Some(Bson::String("m".into())), &rows, Some(1))
}

#[test]
fn sums_round_trip_and_one_row_buckets_get_theirs_back() {
    let (_d, path) = tmp();
    let buckets: Vec<BucketData> = [1usize, 2, 3, 360, 1, 1000]
        .iter()
        .enumerate()
        .map(|(i, &rows)| {
            numeric_bucket(
                bucket_id(1_700_000_000 + i as u32 * 3600, i as u64),
                rows,
                i as u64,
            )
        })
        .collect();
    for b in &buckets {
        let sums = b.max.get_document(crate::sums::SUM_KEY).unwrap();
        assert!(sums.contains_key("i32") && sums.contains_key("f"), "{sums}");
        assert!(!sums.contains_key("s") && !sums.contains_key(TIME));
    }
    write_to(&path, &buckets, WriteOptions::default());
    let seg = Segment::open(&RealFs, &path).unwrap();
    for (i, b) in buckets.iter().enumerate() {
        assert_eq!(&seg.control(i).unwrap().max, &b.max, "bucket {i}");
        assert_eq!(&seg.read_bucket(i).unwrap(), b, "bucket {i}");
    }
    seg.verify().unwrap();
    // One-row buckets store no sums: dropping them from the input changes no byte.
    let mut bare = buckets.clone();
    for b in bare.iter_mut().filter(|b| b.count == 1) {
        b.max.remove(crate::sums::SUM_KEY);
    }
    let other = path.with_file_name("000002.seg");
    write_to(&other, &bare, WriteOptions::default());
    assert_eq!(
        std::fs::read(&path).unwrap(),
        std::fs::read(&other).unwrap()
    );
}

#[test]
fn buckets_without_sums_read_back_without_them_and_verify() {
    let (_d, path) = tmp();
    let mut buckets = sample_buckets(20, 11);
    for b in buckets.iter_mut().filter(|b| b.count > 1) {
        b.max.remove(crate::sums::SUM_KEY);
    }
    write_to(&path, &buckets, WriteOptions::default());
    assert_eq!(read_all(&path).unwrap(), buckets);
    Segment::open(&RealFs, &path).unwrap().verify().unwrap();
}

#[test]
fn verify_reports_a_wrong_sum_with_path_and_offset() {
    let (_d, path) = tmp();
    let good: Vec<BucketData> = (0..3)
        .map(|i| numeric_bucket(bucket_id(1_700_000_000 + i * 3600, u64::from(i)), 50, 7))
        .collect();
    let wrong = |field: &str, v: Bson| {
        let mut damaged = good.clone();
        let mut sums = damaged[2]
            .max
            .get_document(crate::sums::SUM_KEY)
            .unwrap()
            .clone();
        sums.insert(field, v);
        damaged[2].max.insert(crate::sums::SUM_KEY, sums);
        damaged
    };
    let true_i32 = match crate::sums::bucket_sum(&good[2].max, "i32") {
        Some(Bson::Int32(x)) => *x,
        other => panic!("{other:?}"),
    };
    let true_f = match crate::sums::bucket_sum(&good[2].max, "f") {
        Some(Bson::Double(x)) => *x,
        other => panic!("{other:?}"),
    };
    for damaged in [
        wrong("i32", Bson::Int32(true_i32 + 1)),
        wrong("i32", Bson::Int64(i64::from(true_i32))),
        wrong("f", Bson::Double(true_f + 0.01)),
    ] {
        write_to(&path, &damaged, WriteOptions::default());
        let seg = Segment::open(&RealFs, &path).unwrap();
        match seg.verify() {
            Err(Error::Corruption {
                path: p,
                offset,
                detail,
            }) => {
                assert_eq!(p, path);
                assert_eq!(
                    offset,
                    seg.stats().header_bytes + seg.stats().page_bytes_stored
                );
                assert!(
                    detail.contains("bucket 2") && detail.contains("sum"),
                    "{detail}"
                );
            }
            other => panic!("expected corruption, got {other:?}"),
        }
    }
}

#[test]
fn non_numeric_sums_are_refused_before_writing() {
    let (_d, path) = tmp();
    let mut b = numeric_bucket(bucket_id(1_700_000_000, 1), 5, 1);
    b.max.insert(crate::sums::SUM_KEY, doc! {"i32": "x"});
    let r = write_segment(&RealFs, &path, &info(), &[&b]);
    assert!(matches!(r, Err(Error::BadValue(_))), "{r:?}");
    b.max.insert(crate::sums::SUM_KEY, 5);
    let r = write_segment(&RealFs, &path, &info(), &[&b]);
    assert!(matches!(r, Err(Error::BadValue(_))), "{r:?}");
    assert!(!path.exists());
}

#[test]
fn segment_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<Segment>();
    check::<BucketSummary>();
}

#[test]
fn unknown_version_is_reported_as_such() {
    let (_d, path) = tmp();
    write_to(&path, &sample_buckets(2, 8), WriteOptions::default());
    let mut bytes = std::fs::read(&path).unwrap();
    let n = bytes.len();
    bytes[n - format::FOOTER_LEN + format::FTR_VERSION] = 2;
    std::fs::write(&path, &bytes).unwrap();
    let e = Segment::open(&RealFs, &path).unwrap_err().to_string();
    assert!(e.contains("unsupported segment format version 2"), "{e}");
}

// ---------------------------------------------------------------------------------------------
// Exhaustive corruption
// ---------------------------------------------------------------------------------------------

/// Outcome counts of a corruption campaign.
#[derive(Debug, Default)]
struct Campaign {
    cases: usize,
    detected: usize,
    missed: Vec<String>,
    panics: Vec<String>,
}

impl Campaign {
    /// Writes `bytes` to `path` and checks that opening, reading every bucket and verifying
    /// fails with a corruption error naming `path`.
    fn check(&mut self, path: &Path, bytes: &[u8], what: String) {
        self.cases += 1;
        std::fs::write(path, bytes).unwrap();
        let r = std::panic::catch_unwind(|| read_all(path));
        match r {
            Err(_) => self.panics.push(what),
            Ok(Err(Error::Corruption { path: p, .. })) if p == path => self.detected += 1,
            Ok(Err(e)) => self.missed.push(format!("{what}: wrong error {e:?}")),
            Ok(Ok(_)) => self.missed.push(format!("{what}: undetected")),
        }
    }

    fn assert_perfect(&self) {
        assert!(
            self.missed.is_empty() && self.panics.is_empty(),
            "{} cases: {} missed (first: {:?}), {} panics (first: {:?})",
            self.cases,
            self.missed.len(),
            self.missed.first(),
            self.panics.len(),
            self.panics.first()
        );
        assert_eq!(self.detected, self.cases);
    }
}

/// A bucket of `rows` rows of `len` random bytes each: incompressible, so its page stays raw.
fn blob_bucket(id: ObjectId, rows: i64, len: usize, seed: u64) -> BucketData {
    let mut rng = Rng::new(seed);
    let start = i64::from(u32::from_be_bytes(id.bytes()[..4].try_into().unwrap())) * 1000;
    let rows: Vec<_> = (0..rows)
        .map(|r| {
            vec![
                (
                    TIME.to_string(),
                    Bson::DateTime(DateTime::from_millis(start + r)),
                ),
                (
                    "blob".to_string(),
                    Bson::Binary(Binary {
                        subtype: BinarySubtype::Generic,
                        bytes: (0..len).map(|_| rng.next() as u8).collect(),
                    }),
                ),
            ]
        })
        .collect();
    make_bucket(id, None, &rows, None)
}

/// One bucket whose `any` column holds every BSON type, one per row (a MIXED column).
fn every_type_bucket(id: ObjectId) -> BucketData {
    let start = i64::from(u32::from_be_bytes(id.bytes()[..4].try_into().unwrap())) * 1000;
    let rows: Vec<_> = all_types()
        .into_iter()
        .enumerate()
        .map(|(r, v)| {
            vec![
                (
                    TIME.to_string(),
                    Bson::DateTime(DateTime::from_millis(start + r as i64 * 10)),
                ),
                ("any".to_string(), v),
            ]
        })
        .collect();
    make_bucket(id, Some(Bson::Int32(3)), &rows, Some(2))
}

/// Bytes of a bucket's encoded columns (what the writer places in pages).
fn encoded_len(b: &BucketData) -> usize {
    let mut v = Vec::new();
    for c in &b.columns {
        crate::codec::encode_column(&c.values, &mut v);
    }
    v.len()
}

/// Small buckets of repetitive text, binary and documents. Their columns are too short for the
/// codecs' own zstd (and one bucket alone does not compress), but a page of them does: these
/// make the writer store zstd pages.
fn chatty_buckets(n: usize, seed: u64, first_counter: u64) -> Vec<BucketData> {
    let mut rng = Rng::new(seed);
    let words = [
        "disk", "memory", "swap", "inode", "socket", "thread", "handle", "queue",
    ];
    (0..n)
        .map(|i| {
            let start = 1_700_100_000 + i as u32 * 10;
            let rows: Vec<_> = (0..1 + rng.below(2) as i64)
                .map(|r| {
                    let w = words[rng.below(words.len() as u64) as usize];
                    vec![
                        (
                            TIME.to_string(),
                            Bson::DateTime(DateTime::from_millis(
                                i64::from(start) * 1000 + r * 250,
                            )),
                        ),
                        (
                            "msg".to_string(),
                            Bson::String(format!(
                                "warning: {w} usage above threshold on volume /var/lib/data{}",
                                rng.below(4)
                            )),
                        ),
                        (
                            "ctx".to_string(),
                            Bson::Document(doc! {"service": "ingest", "level": "warn", "w": w}),
                        ),
                        (
                            "raw".to_string(),
                            Bson::Binary(Binary {
                                subtype: BinarySubtype::Generic,
                                bytes: b"\x00\x01header:v1;".repeat(2),
                            }),
                        ),
                    ]
                })
                .collect();
            make_bucket(
                bucket_id(start, first_counter + i as u64),
                Some(Bson::String("app-7".into())),
                &rows,
                Some(0),
            )
        })
        .collect()
}

/// A small segment with several raw and several zstd pages, a large bucket on a page of its
/// own and every value kind (sparse columns, shapes, metas, a column of every BSON type).
fn small_segment(dir: &Path) -> (Vec<u8>, Vec<BucketData>) {
    let path = dir.join("orig.seg");
    let opts = WriteOptions {
        page_target: 400,
        large_bucket: 350,
        ..WriteOptions::default()
    };
    let sample = sample_buckets(14, 11);
    let chatty = chatty_buckets(12, 13, 100);
    let blob = blob_bucket(bucket_id(1_700_000_000, 5), 10, 40, 12);
    assert!(encoded_len(&blob) >= opts.large_bucket);
    let mut buckets = sample[..7].to_vec();
    buckets.extend_from_slice(&chatty[..6]);
    buckets.push(blob);
    buckets.push(every_type_bucket(bucket_id(1_700_000_000, 6)));
    buckets.extend_from_slice(&sample[7..]);
    buckets.extend_from_slice(&chatty[6..]);
    write_to(&path, &buckets, opts);
    let st = Segment::open(&RealFs, &path).unwrap().stats();
    assert!(
        st.page_count - st.zstd_page_count >= 3 && st.zstd_page_count >= 3,
        "{st:?}"
    );
    assert_eq!(read_all(&path).unwrap(), buckets);
    (std::fs::read(&path).unwrap(), buckets)
}

#[test]
fn every_flipped_byte_of_a_small_segment_is_reported_with_its_path() {
    let d = tempfile::tempdir().unwrap();
    let (orig, _) = small_segment(d.path());
    let path = d.path().join("bad.seg");
    let mut c = Campaign::default();
    for i in 0..orig.len() {
        let mut b = orig.clone();
        b[i] ^= 0xff;
        c.check(&path, &b, format!("byte {i} ^ 0xff"));
    }
    eprintln!("{} byte flips over a {}-byte segment", c.cases, orig.len());
    c.assert_perfect();
}

#[test]
fn every_flipped_bit_of_header_and_footer_is_reported_with_offset() {
    let d = tempfile::tempdir().unwrap();
    let (orig, _) = small_segment(d.path());
    let path = d.path().join("bad.seg");
    let header = format::header_len(TIME.len());
    let footer = orig.len() - format::FOOTER_LEN;
    let mut c = Campaign::default();
    for i in (0..header).chain(footer..orig.len()) {
        for bit in 0..8 {
            let mut b = orig.clone();
            b[i] ^= 1 << bit;
            std::fs::write(&path, &b).unwrap();
            let expected_offset = if i < header { 0 } else { footer as u64 };
            match Segment::open(&RealFs, &path) {
                Err(Error::Corruption { offset, .. }) if offset == expected_offset => {}
                other => c.missed.push(format!("byte {i} bit {bit}: {other:?}")),
            }
            c.check(&path, &b, format!("byte {i} bit {bit}"));
        }
    }
    c.detected -= 0;
    assert!(c.missed.is_empty(), "{:?}", c.missed.first());
    c.assert_perfect();
}

#[test]
fn random_body_flips_are_all_detected() {
    let d = tempfile::tempdir().unwrap();
    let (orig, _) = small_segment(d.path());
    let path = d.path().join("bad.seg");
    let header = format::header_len(TIME.len());
    let body = header..orig.len() - format::FOOTER_LEN;
    let mut rng = Rng::new(99);
    let mut c = Campaign::default();
    for k in 0..1000 {
        let mut b = orig.clone();
        // 1 to 3 flipped bits or bytes anywhere between header and footer.
        for _ in 0..1 + rng.below(3) {
            let i = body.start + rng.below(body.len() as u64) as usize;
            let mask = if rng.chance(50) {
                1 << rng.below(8)
            } else {
                1 + rng.below(255) as u8
            };
            b[i] ^= mask;
        }
        c.check(&path, &b, format!("random case {k}"));
    }
    c.assert_perfect();
}

#[test]
fn truncation_at_every_offset_is_detected() {
    let d = tempfile::tempdir().unwrap();
    let (orig, _) = small_segment(d.path());
    let path = d.path().join("bad.seg");
    let mut c = Campaign::default();
    for len in 0..orig.len() {
        c.check(&path, &orig[..len], format!("truncated to {len}"));
    }
    // Extra bytes after the footer are also refused (the footer is no longer at the end).
    let mut b = orig.clone();
    b.extend_from_slice(&[0; 7]);
    c.check(&path, &b, "7 zero bytes appended".into());
    c.assert_perfect();
}

// ---------------------------------------------------------------------------------------------
// Size: many buckets of one to three rows
// ---------------------------------------------------------------------------------------------

/// Buckets shaped like seed 004: 1-3 rows of `{timestamp, _id, totalCount, dProcessTime}`
/// with meta `{iResult, vCmdid, vAppid}`; most metas are one-offs, some recur.
pub(crate) fn seed004_buckets(n: usize, seed: u64) -> Vec<BucketData> {
    let mut rng = Rng::new(seed);
    let recurring: Vec<Document> = (0..600)
        .map(|_| {
            let app = if rng.chance(20) {
                String::new()
            } else {
                rng.string(10)
            };
            doc! {"iResult": rng.below(5) as i32, "vAppid": app, "vCmdid": rng.string(6)}
        })
        .collect();
    let mut out = Vec::with_capacity(n);
    let start0: u32 = 1_428_777_120;
    let mut oid_counter = 0u32;
    for i in 0..n {
        // ~1,050 buckets per 60 s period, as in the real data (285,522 buckets / 272 periods).
        let start = start0 + (i as u32 / 1050) * 60;
        let meta = if rng.chance(10) {
            recurring[rng.below(recurring.len() as u64) as usize].clone()
        } else {
            let app = if rng.chance(20) {
                String::new()
            } else {
                rng.string(10)
            };
            doc! {"iResult": rng.below(5) as i32, "vAppid": app, "vCmdid": rng.string(6)}
        };
        let rows_n = 1 + rng.below(3) as usize;
        let rows: Vec<_> = (0..rows_n)
            .map(|_| {
                oid_counter += 1;
                vec![
                    (
                        "timestamp".to_string(),
                        Bson::DateTime(DateTime::from_millis(i64::from(start) * 1000)),
                    ),
                    (
                        "_id".to_string(),
                        Bson::ObjectId(row_id(start, oid_counter)),
                    ),
                    (
                        "totalCount".to_string(),
                        Bson::Int32(1 + rng.below(40) as i32),
                    ),
                    (
                        "dProcessTime".to_string(),
                        Bson::Double(rng.below(100_000) as f64 / 1000.0),
                    ),
                ]
            })
            .collect();
        let mut b = make_bucket(
            bucket_id(start, 0x1234_0000 + i as u64),
            Some(Bson::Document(meta)),
            &rows,
            Some(1),
        );
        // This workload's time field is "timestamp"; control.min of it is the period start.
        b.min
            .insert("timestamp", DateTime::from_millis(i64::from(start) * 1000));
        out.push(b);
    }
    out
}

#[test]
fn seed004_sized_segment_has_small_per_bucket_overhead() {
    let (_d, path) = tmp();
    let buckets = seed004_buckets(20_000, 4);
    let rows: u64 = buckets.iter().map(|b| u64::from(b.count)).sum();
    let refs: Vec<&BucketData> = buckets.iter().collect();
    let info = SegmentHeaderInfo {
        collection_id: 4,
        time_field: "timestamp".into(),
    };
    let t0 = std::time::Instant::now();
    let len = write_segment(&RealFs, &path, &info, &refs).unwrap();
    let t1 = std::time::Instant::now();
    let seg = Segment::open(&RealFs, &path).unwrap();
    let t2 = std::time::Instant::now();
    assert_eq!(seg.buckets().len(), buckets.len());
    for (i, b) in buckets.iter().enumerate() {
        assert_eq!(&seg.read_bucket(i).unwrap(), b);
    }
    let t3 = std::time::Instant::now();
    seg.verify().unwrap();
    eprintln!(
        "seed004 timings (build profile of this test run): write {:?}, open {:?}, read all {:?}, verify {:?}",
        t1 - t0,
        t2 - t1,
        t3 - t2,
        t3.elapsed()
    );
    let st = seg.stats();
    let nb = buckets.len() as f64;
    eprintln!(
        "seed004: {} buckets, {rows} rows, {len} bytes: {:.1} B/bucket, {:.1} B/row, \
         {:.2} B/value (4 fields a row); \
         columns {:.1} B/bucket raw -> {:.1} stored ({} pages, {} zstd); \
         directory {:.1} B/bucket raw -> {:.1} stored; header+footer {} B",
        buckets.len(),
        len as f64 / nb,
        len as f64 / rows as f64,
        len as f64 / (rows * 4) as f64,
        st.page_bytes_raw as f64 / nb,
        st.page_bytes_stored as f64 / nb,
        st.page_count,
        st.zstd_page_count,
        st.directory_bytes_raw as f64 / nb,
        st.directory_bytes_stored as f64 / nb,
        st.header_bytes + st.footer_bytes,
    );
    // Ceilings just above what this version reaches with the real codecs (the sample is
    // deterministic: 42.3 B/bucket in all, 12.6 of it pages, 29.7 directory, of which the
    // sums of the two- and three-row buckets take 2.1 and the BSON sizes 0.8).
    assert!(len as f64 / nb < 42.5, "{} B/bucket", len as f64 / nb);
    assert!(
        (st.page_bytes_stored as f64) / nb < 13.0,
        "pages {} B/bucket",
        st.page_bytes_stored as f64 / nb
    );
    assert!(
        (st.directory_bytes_stored as f64) / nb < 30.0,
        "directory {} B/bucket",
        st.directory_bytes_stored as f64 / nb
    );
}

// ---------------------------------------------------------------------------------------------
// The worked example of format-spec/segment.md, byte for byte
// ---------------------------------------------------------------------------------------------

#[test]
fn worked_example_of_the_spec_is_byte_exact() {
    let (_d, path) = tmp();
    let start = DateTime::from_millis(1_710_855_960_000);
    let t = DateTime::from_millis(1_710_855_960_500);
    let b = BucketData {
        id: bucket_id(1_710_855_960, 1),
        meta: Some(Bson::String("sensor-1".into())),
        count: 1,
        min: doc! {"t": start, "v": 1.5},
        max: doc! {"t": t, "v": 1.5},
        columns: vec![
            Column {
                name: "t".into(),
                values: vec![Some(Bson::DateTime(t))],
            },
            Column {
                name: "v".into(),
                values: vec![Some(Bson::Double(1.5))],
            },
        ],
        shapes: vec![vec![0, META_SLOT, 1]],
        row_shapes: vec![],
        bson_bytes: Some(46),
    };
    // The measurement as inserted, with the meta field named "meta".
    let inserted = doc! {"t": t, "meta": "sensor-1", "v": 1.5};
    assert_eq!(inserted.to_vec().unwrap().len(), 46);
    let info = SegmentHeaderInfo {
        collection_id: 7,
        time_field: "t".into(),
    };
    write_segment(&RealFs, &path, &info, &[&b]).unwrap();
    let file = std::fs::read(&path).unwrap();
    let [header, page, dir_want] = spec_worked_example_blocks();

    assert_eq!(&file[..header.len()], &header[..], "header");
    assert_eq!(header.len(), format::header_len(1));
    let mut crc_input = header.clone();
    crc_input.truncate(header.len() - 4);
    assert_eq!(
        &header[header.len() - 4..],
        &crc32fast::hash(&crc_input).to_le_bytes()
    );

    // The page is the columns as the codecs encode them, concatenated.
    let mut cols = Vec::new();
    for c in &b.columns {
        crate::codec::encode_column(&c.values, &mut cols);
    }
    assert_eq!(page, cols, "page = encode_column(t) ++ encode_column(v)");
    let page_end = header.len() + page.len();
    assert_eq!(&file[header.len()..page_end], &page[..], "page");

    let footer = format::Footer::decode(&file[file.len() - format::FOOTER_LEN..]).unwrap();
    assert_eq!(footer.dir_offset, page_end as u64);
    assert_eq!(
        (
            footer.bucket_count,
            footer.page_count,
            footer.header_len,
            footer.dir_raw_len
        ),
        (1, 1, header.len() as u32, dir_want.len() as u32)
    );
    let stored = &file[page_end..file.len() - format::FOOTER_LEN];
    assert_eq!(footer.dir_stored_len as usize, stored.len());
    let dir = zstd::bulk::decompress(stored, footer.dir_raw_len as usize).unwrap();
    assert_eq!(
        hex_string(&dir),
        hex_string(&dir_want),
        "spec section 6 must match the writer"
    );
    // The page crc quoted in the spec's page table entry is the page's.
    assert_eq!(&dir[10..14], &crc32fast::hash(&page).to_le_bytes());
}

/// The three code blocks of section 6 of `format-spec/segment.md` (header, page, directory),
/// as bytes: on each line, the leading two-digit hex tokens (the rest is a comment).
fn spec_worked_example_blocks() -> [Vec<u8>; 3] {
    let spec = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("format-spec/segment.md"),
    )
    .unwrap();
    let section = spec
        .split("\n## 6. Worked example")
        .nth(1)
        .unwrap()
        .split("\n## 7.")
        .next()
        .unwrap();
    let blocks: Vec<Vec<u8>> = section
        .split("```")
        .skip(1)
        .step_by(2)
        .map(|block| {
            block
                .lines()
                .flat_map(|line| {
                    line.split_whitespace()
                        .take_while(|t| t.len() == 2 && t.bytes().all(|c| c.is_ascii_hexdigit()))
                        .map(|t| u8::from_str_radix(t, 16).unwrap())
                        .collect::<Vec<_>>()
                })
                .collect()
        })
        .collect();
    blocks.try_into().unwrap()
}

fn hex_string(b: &[u8]) -> String {
    b.iter()
        .map(|x| format!("{x:02x}"))
        .collect::<Vec<_>>()
        .join(" ")
}

// ---------------------------------------------------------------------------------------------
// Structure checks behind the checksums, and concurrent readers
// ---------------------------------------------------------------------------------------------

/// The decompressed directory of segment file `orig`.
fn raw_directory(orig: &[u8]) -> Vec<u8> {
    let footer = format::Footer::decode(&orig[orig.len() - format::FOOTER_LEN..]).unwrap();
    let stored = &orig[footer.dir_offset as usize..orig.len() - format::FOOTER_LEN];
    zstd::bulk::decompress(stored, footer.dir_raw_len as usize).unwrap()
}

/// Rebuilds `orig` with `dir_raw` as its directory (compressed, with a footer whose crc and
/// lengths match), so that the reader's structural checks, not the checksums, are exercised.
fn with_directory(orig: &[u8], dir_raw: &[u8]) -> Vec<u8> {
    let footer = format::Footer::decode(&orig[orig.len() - format::FOOTER_LEN..]).unwrap();
    let stored = zstd::bulk::compress(dir_raw, 1).unwrap();
    let mut out = orig[..footer.dir_offset as usize].to_vec();
    out.extend_from_slice(&stored);
    let f = format::Footer {
        dir_stored_len: stored.len() as u32,
        dir_raw_len: dir_raw.len() as u32,
        dir_crc: crc32fast::hash(&stored),
        ..footer
    };
    out.extend_from_slice(&f.encode());
    out
}

#[test]
fn older_directory_versions_still_read_and_newer_ones_are_refused() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("v.seg");
    let current = sample_buckets(30, 12);
    assert!(current.iter().all(|b| b.bson_bytes.is_some()));
    // Version 2 has no BSON sizes; version 1 neither sums entries.
    for version in [1, 2] {
        let opts = WriteOptions {
            directory_version: version,
            ..WriteOptions::default()
        };
        write_to(&path, &current, opts);
        let mut expected = current.clone();
        for b in expected.iter_mut() {
            b.bson_bytes = None;
            if version == 1 && b.count > 1 {
                b.max.remove(crate::sums::SUM_KEY);
            }
        }
        assert_eq!(read_all(&path).unwrap(), expected, "version {version}");
        let seg = Segment::open(&RealFs, &path).unwrap();
        assert_eq!(seg.bson_bytes(), None);
        assert!(seg.buckets().iter().all(|b| b.bson_bytes.is_none()));
        // Written again at the current version, the sizes stay unknown (stored as 0).
        write_to(
            &path.with_extension("v3"),
            &expected,
            WriteOptions::default(),
        );
        assert_eq!(read_all(&path.with_extension("v3")).unwrap(), expected);
    }
    // Version 3 differs from 4 only in the codecs its columns may use.
    let v3 = WriteOptions {
        directory_version: 3,
        ..WriteOptions::default()
    };
    write_to(&path, &current, v3);
    assert_eq!(read_all(&path).unwrap(), current);
    write_to(&path, &current, WriteOptions::default());
    let orig = std::fs::read(&path).unwrap();
    let mut dir = raw_directory(&orig);
    assert_eq!(dir[0], format::DIRECTORY_VERSION);
    dir[0] = format::DIRECTORY_VERSION + 1;
    std::fs::write(&path, with_directory(&orig, &dir)).unwrap();
    let e = Segment::open(&RealFs, &path).unwrap_err().to_string();
    let want = format!(
        "unsupported directory version {}",
        format::DIRECTORY_VERSION + 1
    );
    assert!(e.contains(&want), "{e}");
}

#[test]
fn bson_sizes_round_trip_and_impossible_ones_are_refused() {
    let (_d, path) = tmp();
    let buckets = sample_buckets(40, 13);
    write_to(&path, &buckets, WriteOptions::default());
    let seg = Segment::open(&RealFs, &path).unwrap();
    let total: u64 = buckets.iter().map(|b| b.bson_bytes.unwrap()).sum();
    assert_eq!(seg.bson_bytes(), Some(total));
    for (s, b) in seg.buckets().iter().zip(&buckets) {
        assert_eq!(s.bson_bytes, b.bson_bytes);
    }
    // A size below 5 bytes per measurement cannot be a BSON size: refused by the writer...
    let mut bad = buckets[0].clone();
    bad.bson_bytes = Some(5 * u64::from(bad.count) - 1);
    let r = write_segment(&RealFs, &path.with_extension("bad"), &info(), &[&bad]);
    assert!(matches!(r, Err(Error::BadValue(_))), "{r:?}");
    assert!(!path.with_extension("bad").exists());
    // ...and by the reader, as corruption naming the file.
    let one = vec![buckets[0].clone()];
    write_to(&path, &one, WriteOptions::default());
    let orig = std::fs::read(&path).unwrap();
    let mut dir = raw_directory(&orig);
    // The size is the entry's last varint; replace it with 1.
    let mut n = Vec::new();
    format::put_varint(&mut n, one[0].bson_bytes.unwrap());
    assert_eq!(&dir[dir.len() - n.len()..], &n[..]);
    dir.truncate(dir.len() - n.len());
    dir.push(1);
    std::fs::write(&path, with_directory(&orig, &dir)).unwrap();
    let e = Segment::open(&RealFs, &path).unwrap_err();
    assert!(matches!(e, Error::Corruption { .. }), "{e:?}");
    assert!(e.to_string().contains("BSON size 1"), "{e}");
}

/// Entries name fields by index into the name table; the same name under two indexes would
/// let `control.min` list a field twice unnoticed, so such a table is refused.
#[test]
fn a_name_listed_twice_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let (orig, _) = small_segment(d.path());
    let mut dir = raw_directory(&orig);
    // version, count, then (length, bytes) per name: find two names of one length.
    let mut c = format::Cursor::at(&dir, 1);
    let n = c.count().unwrap();
    let mut spans = Vec::new();
    for _ in 0..n {
        let len = c.count().unwrap();
        spans.push((c.pos(), len));
        c.bytes(len).unwrap();
    }
    let (a, b) = spans
        .iter()
        .enumerate()
        .find_map(|(i, x)| spans[i + 1..].iter().find(|y| y.1 == x.1).map(|y| (*x, *y)))
        .expect("two names of one length");
    let first = dir[a.0..a.0 + a.1].to_vec();
    dir[b.0..b.0 + b.1].copy_from_slice(&first);
    let path = d.path().join("twice.seg");
    std::fs::write(&path, with_directory(&orig, &dir)).unwrap();
    let e = Segment::open(&RealFs, &path).unwrap_err();
    assert!(matches!(e, Error::Corruption { .. }), "{e:?}");
    assert!(e.to_string().contains("is listed twice"), "{e}");
}

#[test]
fn mutated_directories_with_valid_checksums_never_panic() {
    let d = tempfile::tempdir().unwrap();
    let (orig, buckets) = small_segment(d.path());
    let dir = raw_directory(&orig);
    let path = d.path().join("mutated.seg");
    // Sanity: an unmodified directory rebuilt this way reads back identically.
    std::fs::write(&path, with_directory(&orig, &dir)).unwrap();
    assert_eq!(read_all(&path).unwrap(), buckets);

    let mut rng = Rng::new(2024);
    let (mut errors, mut oks, mut panics) = (0, 0, Vec::new());
    for k in 0..3000 {
        let mut m = dir.clone();
        match rng.below(4) {
            0 => m.truncate(rng.below(m.len() as u64) as usize),
            1 => {
                let i = rng.below(m.len() as u64) as usize;
                m.insert(i, rng.next() as u8);
            }
            _ => {
                for _ in 0..1 + rng.below(3) {
                    let i = rng.below(m.len() as u64) as usize;
                    m[i] = if rng.chance(30) {
                        0xff
                    } else {
                        rng.next() as u8
                    };
                }
            }
        }
        std::fs::write(&path, with_directory(&orig, &m)).unwrap();
        match std::panic::catch_unwind(|| read_all(&path)) {
            Err(_) => panics.push(k),
            Ok(Err(Error::Corruption { .. })) => errors += 1,
            Ok(Err(e)) => panic!("case {k}: non-corruption error {e:?}"),
            // A checksummed directory that still parses is a different, valid file.
            Ok(Ok(_)) => oks += 1,
        }
    }
    eprintln!(
        "mutated directories: {errors} rejected, {oks} accepted, {} panics",
        panics.len()
    );
    assert!(panics.is_empty(), "panics in cases {panics:?}");
    assert!(
        errors > 2500,
        "structure checks should reject most mutations: {errors}"
    );
}

#[test]
fn concurrent_readers_share_one_segment() {
    let (_d, path) = tmp();
    let buckets = sample_buckets(400, 21);
    write_to(
        &path,
        &buckets,
        WriteOptions {
            page_target: 2048,
            large_bucket: 1024,
            ..WriteOptions::default()
        },
    );
    let seg = Segment::open(&RealFs, &path).unwrap();
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let (seg, buckets) = (&seg, &buckets);
            s.spawn(move || {
                let mut rng = Rng::new(t);
                for _ in 0..600 {
                    let i = rng.below(buckets.len() as u64) as usize;
                    assert_eq!(&seg.read_bucket(i).unwrap(), &buckets[i]);
                }
            });
        }
    });
}

#[test]
fn bucket_layout_tiles_the_pages_and_matches_the_column_bytes() {
    let (_d, path) = tmp();
    let opts = WriteOptions {
        page_target: 512,
        large_bucket: 2048,
        ..WriteOptions::default()
    };
    let mut buckets = sample_buckets(40, 5);
    buckets.extend(chatty_buckets(30, 6, 900));
    write_to(&path, &buckets, opts);
    let seg = Segment::open(&RealFs, &path).unwrap();
    assert_eq!(seg.format_version(), format::FORMAT_VERSION);
    assert_eq!(seg.directory_version(), format::DIRECTORY_VERSION);
    let st = seg.stats();
    let (mut page, mut page_offset, mut in_page, mut stored_before) =
        (0u32, st.header_bytes, 0u32, 0u64);
    let mut compressed_pages = 0;
    for (i, b) in buckets.iter().enumerate() {
        let l = seg.bucket_layout(i).unwrap();
        if l.page != page {
            // The next page starts where the previous one's stored bytes end.
            assert_eq!(l.page, page + 1, "bucket {i}");
            page_offset += u64::from(seg.bucket_layout(i - 1).unwrap().page_stored_len);
            stored_before += u64::from(seg.bucket_layout(i - 1).unwrap().page_stored_len);
            page = l.page;
            in_page = 0;
        }
        assert_eq!((l.page_offset, l.offset_in_page), (page_offset, in_page));
        if in_page == 0 && l.page_compressed {
            compressed_pages += 1;
        }
        in_page += l.len;
        let names: Vec<&str> = l.columns.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, seg.column_names(i).unwrap());
        let want: Vec<&str> = b.columns.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, want);
        assert_eq!(l.columns.iter().map(|c| c.1).sum::<u32>(), l.len);
        let lens = seg
            .read_columns_with(i, &names, |bytes, _| Ok(bytes.len() as u32))
            .unwrap();
        let lens: Vec<u32> = lens.into_iter().map(Option::unwrap).collect();
        assert_eq!(lens, l.columns.iter().map(|c| c.1).collect::<Vec<_>>());
        // Names matched once per segment read the same columns, in the order asked, and
        // nothing for a name the segment lacks.
        let mut asked: Vec<&str> = names.iter().rev().copied().collect();
        asked.insert(1, "no such field");
        let mut got = Vec::new();
        seg.read_ids_into(i, &seg.name_ids(&asked), &mut got, |bytes, _| {
            Ok(bytes.len() as u32)
        })
        .unwrap();
        let mut want: Vec<Option<u32>> = l.columns.iter().rev().map(|c| Some(c.1)).collect();
        want.insert(1, None);
        assert_eq!(got, want);
    }
    let last = seg.bucket_layout(buckets.len() - 1).unwrap();
    assert_eq!(u64::from(page) + 1, st.page_count);
    assert_eq!(
        stored_before + u64::from(last.page_stored_len),
        st.page_bytes_stored
    );
    assert_eq!(compressed_pages, st.zstd_page_count);
    assert!(seg.bucket_layout(buckets.len()).is_err());
}

#[test]
fn meta_projections_number_references_by_projected_fields() {
    let (_d, path) = tmp();
    let metas = [
        doc! {"r": "eu", "h": "a"},
        doc! {"r": "eu", "h": "b"},
        doc! {"r": "us", "h": "a"},
        doc! {"r": 1, "h": "a"},
        doc! {"r": 1i64, "h": "a"},
        doc! {"h": "c"},
    ];
    let buckets: Vec<BucketData> = metas
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let row = vec![(TIME.to_string(), Bson::DateTime(DateTime::from_millis(0)))];
            make_bucket(
                bucket_id(0, i as u64),
                Some(Bson::Document(m.clone())),
                &[row],
                None,
            )
        })
        .collect();
    write_to(&path, &buckets, WriteOptions::default());
    let seg = Segment::open(&RealFs, &path).unwrap();
    let by_region = seg.meta_projection(&MetaFields::of_paths(["r"]));
    let ids: Vec<u32> = seg
        .buckets()
        .iter()
        .map(|b| by_region.id(b.meta_ref()))
        .collect();
    // Equal regions share a number; an int32 and an int64 1 do not; absent is its own value.
    assert_eq!(ids[0], ids[1]);
    assert_eq!(by_region.distinct(), 5);
    let mut sorted = ids[1..].to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), 5);
    // Each number carries its value cut down to the projected fields, and an encoding that
    // tells values apart.
    assert_eq!(
        by_region.value(ids[0]),
        Some(Some(&Bson::Document(doc! {"r": "eu"})))
    );
    assert_eq!(
        by_region.value(ids[5]),
        Some(Some(&Bson::Document(doc! {})))
    );
    assert_eq!(by_region.value(by_region.distinct()), None);
    let keys: Vec<&[u8]> = ids.iter().map(|&id| by_region.key(id).unwrap()).collect();
    assert_eq!(keys[0], keys[1]);
    assert_ne!(keys[3], keys[4], "int32 and int64 1 differ");
    let mut sorted_keys = keys.clone();
    sorted_keys.sort_unstable();
    sorted_keys.dedup();
    assert_eq!(sorted_keys.len(), 5);
    let whole = seg.meta_projection(&MetaFields::Whole);
    assert_eq!(whole.distinct(), 6);
    // Whole values are not copied: callers judge the bucket's own.
    assert_eq!(whole.value(0), None);
    // The encodings are the same in another segment holding the same values in another order.
    let (_d2, path2) = tmp();
    let mut rev = buckets.clone();
    rev.reverse();
    write_to(&path2, &rev, WriteOptions::default());
    let seg2 = Segment::open(&RealFs, &path2).unwrap();
    let by_region2 = seg2.meta_projection(&MetaFields::of_paths(["r"]));
    let mut keys2: Vec<&[u8]> = seg2
        .buckets()
        .iter()
        .map(|b| by_region2.key(by_region2.id(b.meta_ref())).unwrap())
        .collect();
    keys2.sort_unstable();
    keys2.dedup();
    assert_eq!(keys2, sorted_keys);
    // Kept: the same fields give the same projection.
    assert!(std::sync::Arc::ptr_eq(
        &by_region,
        &seg.meta_projection(&MetaFields::of_paths(["r.x", "r"]))
    ));
}

#[test]
fn field_bounds_are_the_control_bounds_of_every_bucket() {
    let (_d, path) = tmp();
    let buckets = sample_buckets(300, 7);
    write_to(&path, &buckets, WriteOptions::default());
    let seg = Segment::open(&RealFs, &path).unwrap();
    let controls: Vec<_> = (0..seg.buckets().len())
        .map(|i| seg.control(i).unwrap())
        .collect();
    let mut fields: Vec<String> = controls
        .iter()
        .flat_map(|c| c.min.keys().chain(c.max.keys()).cloned())
        .collect();
    fields.sort();
    fields.dedup();
    // The sums entry of control.max is not a field.
    fields.retain(|f| f != crate::sums::SUM_KEY);
    fields.push("nowhere".into());
    assert!(fields.len() > 3, "{fields:?}");
    for f in &fields {
        let gathered = seg.field_bounds(f);
        for (i, c) in controls.iter().enumerate() {
            assert_eq!(
                gathered.get(i),
                Some(BoundRef::of(&c.min, &c.max, f)),
                "{f} {i}"
            );
            let sum = crate::sums::bucket_sum(&c.max, f).cloned();
            assert_eq!(gathered.sum(i), sum, "{f} {i}");
        }
        assert_eq!(gathered.get(seg.buckets().len()), None);
        assert!(std::sync::Arc::ptr_eq(&gathered, &seg.field_bounds(f)));
    }
    assert!(
        controls
            .iter()
            .any(|c| c.max.contains_key(crate::sums::SUM_KEY)),
        "the sample has sums"
    );
    // Several at once: kept ones are shared, new ones gathered in one pass, in the order asked
    // (a name asked twice gets the same bounds twice).
    let asked = ["v", "new_a", "v", "new_b"];
    let got = seg.fields_bounds(&asked);
    assert_eq!(got.len(), asked.len());
    assert!(std::sync::Arc::ptr_eq(&got[0], &seg.field_bounds("v")));
    assert!(std::sync::Arc::ptr_eq(&got[0], &got[2]));
    assert!(std::sync::Arc::ptr_eq(&got[1], &seg.field_bounds("new_a")));
    assert!(std::sync::Arc::ptr_eq(&got[3], &seg.field_bounds("new_b")));
    assert!(seg.fields_bounds(&[]).is_empty());

    // A read of more fields than a segment keeps by default keeps all of them: asking again
    // gathers nothing.
    let many: Vec<String> = (0..20).map(|k| format!("f{k}")).collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    let first = seg.fields_bounds(&many);
    let again = seg.fields_bounds(&many);
    for (a, b) in first.iter().zip(&again) {
        assert!(std::sync::Arc::ptr_eq(a, b));
    }
}
