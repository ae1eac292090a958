//! Segment write and read throughput on devops-cpu-shaped buckets (TSBS cpu-only: 10 string
//! tags as meta, 10 usage fields, one row per host every 10 s, 360 rows = one hour per bucket).
//!
//! Run: `cargo bench --bench segment`
//! The first lines printed give the file size per bucket, per row and per value.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use std::hint::black_box;
use tsbucket::bson::{doc, oid::ObjectId, Bson, DateTime, Document};
use tsbucket::bucket::{BucketData, Column, META_SLOT};
use tsbucket::segment::{write_segment, Segment, SegmentHeaderInfo};
use tsbucket::vfs::RealFs;

use tsbucket_workload::devops::FIELDS;

/// Seeded splitmix64, so every run measures the same bytes.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    /// Roughly N(0,1) (sum of 4 uniforms, rescaled).
    fn normalish(&mut self) -> f64 {
        let s: f64 = (0..4)
            .map(|_| (self.next() >> 11) as f64 / (1u64 << 53) as f64)
            .sum();
        (s - 2.0) * 1.732
    }
}

fn tags(rng: &mut Rng, host: usize) -> Document {
    let regions = [
        "us-east-1",
        "us-west-1",
        "us-west-2",
        "eu-west-1",
        "eu-central-1",
    ];
    let region = regions[rng.below(regions.len() as u64) as usize];
    let dc = format!("{region}{}", ["a", "b", "c"][rng.below(3) as usize]);
    let os = ["Ubuntu16.10", "Ubuntu16.04LTS", "Ubuntu15.10"][rng.below(3) as usize];
    let arch = ["x64", "x86"][rng.below(2) as usize];
    let team = ["SF", "NYC", "LON", "CHI"][rng.below(4) as usize];
    let env = ["production", "staging", "test"][rng.below(3) as usize];
    doc! {
        "hostname": format!("host_{host}"),
        "region": region,
        "datacenter": dc,
        "rack": rng.below(100).to_string(),
        "os": os,
        "arch": arch,
        "team": team,
        "service": rng.below(20).to_string(),
        "service_version": rng.below(2).to_string(),
        "service_environment": env,
    }
}

/// The `_id` an insert would give row `r` of host `h` when the hosts are inserted time-major,
/// one row per host every 10 s: the insertion second, a fixed process value and a counter
/// running over all hosts. Fixed rather than `ObjectId::new()`, so every run writes the same
/// bytes.
fn object_id(start_secs: u32, hosts: usize, h: usize, r: usize) -> ObjectId {
    let mut b = [0u8; 12];
    b[..4].copy_from_slice(&(start_secs + r as u32 * 10).to_be_bytes());
    b[4..9].copy_from_slice(&[0x5e, 0xed, 0x00, 0x12, 0x3b]);
    let counter = (r * hosts + h) as u32;
    b[9..].copy_from_slice(&counter.to_be_bytes()[1..]);
    ObjectId::from_bytes(b)
}

/// `hosts` buckets of `rows` rows; `float` selects the float64 (2-decimal) variant.
fn devops(hosts: usize, rows: usize, float: bool) -> Vec<BucketData> {
    let mut rng = Rng(123);
    let start_secs: u32 = 1_451_606_400; // 2016-01-01
    (0..hosts)
        .map(|h| {
            let meta = tags(&mut rng, h);
            let mut cols: Vec<Column> = Vec::with_capacity(12);
            cols.push(Column {
                name: "time".into(),
                values: (0..rows)
                    .map(|r| {
                        Some(Bson::DateTime(DateTime::from_millis(
                            (i64::from(start_secs) + r as i64 * 10) * 1000,
                        )))
                    })
                    .collect(),
            });
            cols.push(Column {
                name: "_id".into(),
                values: (0..rows)
                    .map(|r| Some(Bson::ObjectId(object_id(start_secs, hosts, h, r))))
                    .collect(),
            });
            let (mut min, mut max) = (Document::new(), Document::new());
            min.insert("time", DateTime::from_millis(i64::from(start_secs) * 1000));
            max.insert(
                "time",
                DateTime::from_millis((i64::from(start_secs) + (rows as i64 - 1) * 10) * 1000),
            );
            let ids: Vec<ObjectId> = cols[1]
                .values
                .iter()
                .flatten()
                .filter_map(|v| v.as_object_id())
                .collect();
            min.insert("_id", *ids.iter().min().unwrap());
            max.insert("_id", *ids.iter().max().unwrap());
            for f in FIELDS {
                let mut state = rng.below(10_000) as f64 / 100.0;
                let vals: Vec<f64> = (0..rows)
                    .map(|_| {
                        state = (state + rng.normalish()).clamp(0.0, 100.0);
                        if float {
                            (state * 100.0).round() / 100.0
                        } else {
                            state.trunc()
                        }
                    })
                    .collect();
                let to_bson = |v: f64| {
                    if float {
                        Bson::Double(v)
                    } else {
                        Bson::Int64(v as i64)
                    }
                };
                let lo = vals.iter().copied().fold(f64::INFINITY, f64::min);
                let hi = vals.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                min.insert(f, to_bson(lo));
                max.insert(f, to_bson(hi));
                cols.push(Column {
                    name: f.into(),
                    values: vals.into_iter().map(|v| Some(to_bson(v))).collect(),
                });
            }
            let mut shape: Vec<u32> = (0..cols.len() as u32).collect();
            shape.insert(1, META_SLOT);
            let id = {
                let mut b = [0u8; 12];
                b[..4].copy_from_slice(&start_secs.to_be_bytes());
                b[4..].copy_from_slice(&(h as u64).to_be_bytes());
                ObjectId::from_bytes(b)
            };
            // The measurements as inserted, as the catalog records them.
            let bson_bytes = (0..rows)
                .map(|r| {
                    let d: Document = shape
                        .iter()
                        .map(|&s| match cols.get(s as usize) {
                            Some(c) => (c.name.clone(), c.values[r].clone().unwrap()),
                            None => ("tags".to_string(), Bson::Document(meta.clone())),
                        })
                        .collect();
                    d.to_vec().unwrap().len() as u64
                })
                .sum();
            BucketData {
                id,
                meta: Some(Bson::Document(meta)),
                count: rows as u32,
                min,
                max,
                columns: cols,
                shapes: vec![shape],
                row_shapes: vec![],
                bson_bytes: Some(bson_bytes),
            }
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let info = SegmentHeaderInfo {
        collection_id: 1,
        time_field: "time".into(),
    };
    for (variant, float) in [("int64", false), ("float64", true)] {
        let buckets = devops(1000, 360, float);
        let refs: Vec<&BucketData> = buckets.iter().collect();
        let rows: u64 = buckets.iter().map(|b| u64::from(b.count)).sum();
        let path = dir.path().join(format!("{variant}.seg"));
        let len = write_segment(&RealFs, &path, &info, &refs).unwrap();
        let seg = Segment::open(&RealFs, &path).unwrap();
        seg.verify().unwrap();
        let st = seg.stats();
        eprintln!(
            "devops {variant}: {} buckets x 360 rows: {len} bytes = {:.1} B/bucket, {:.2} B/row, \
             {:.2} B/value (10 values/row); columns {} raw -> {} stored in {} pages ({} zstd), \
             directory {} raw -> {} stored, framing (header+directory+footer) {:.1} B/bucket",
            buckets.len(),
            len as f64 / buckets.len() as f64,
            len as f64 / rows as f64,
            len as f64 / (rows * 10) as f64,
            st.page_bytes_raw,
            st.page_bytes_stored,
            st.page_count,
            st.zstd_page_count,
            st.directory_bytes_raw,
            st.directory_bytes_stored,
            (st.header_bytes + st.directory_bytes_stored + st.footer_bytes) as f64
                / buckets.len() as f64,
        );

        let mut g = c.benchmark_group("Segment::write");
        g.sample_size(10);
        g.throughput(Throughput::Elements(rows));
        g.bench_function(BenchmarkId::new(variant, "1000x360"), |b| {
            let p = dir.path().join(format!("w-{variant}.seg"));
            b.iter(|| write_segment(&RealFs, &p, &info, black_box(&refs)).unwrap())
        });
        g.finish();

        let mut g = c.benchmark_group("Segment::read_bucket");
        g.sample_size(10);
        g.throughput(Throughput::Elements(rows));
        g.bench_function(BenchmarkId::new(variant, "full_scan"), |b| {
            b.iter(|| {
                let seg = Segment::open(&RealFs, &path).unwrap();
                let mut n = 0usize;
                for i in 0..seg.buckets().len() {
                    n += seg.read_bucket(i).unwrap().columns.len();
                }
                black_box(n)
            })
        });
        g.bench_function(BenchmarkId::new(variant, "one_column_scan"), |b| {
            b.iter(|| {
                let seg = Segment::open(&RealFs, &path).unwrap();
                let mut n = 0usize;
                for i in 0..seg.buckets().len() {
                    n += seg
                        .read_bucket_columns(i, &["usage_user"])
                        .unwrap()
                        .columns
                        .len();
                }
                black_box(n)
            })
        });
        g.finish();

        let mut g = c.benchmark_group("Segment::open");
        g.sample_size(10);
        g.bench_function(BenchmarkId::new(variant, "1000_buckets"), |b| {
            b.iter(|| Segment::open(&RealFs, black_box(&path)).unwrap())
        });
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
