//! Column codec throughput on the devops cpu shape (one bucket: 10 columns x 360 rows) plus the
//! time and `_id` columns. Inputs are seeded; throughput is reported in values.
//! Run: `cargo bench --bench codec`.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use tsbucket::bson::oid::ObjectId;
use tsbucket::bson::{Bson, DateTime};
use tsbucket::codec::{
    decode_column, decode_f64, decode_f64_dense, decode_i64, decode_i64_dense, encode_column,
};

const ROWS: usize = 360;

/// splitmix64 + Box-Muller: a seeded stand-in for TSBS's Go generator.
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    fn normal(&mut self) -> f64 {
        let u1 = 1.0 - self.f64();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * self.f64()).cos()
    }
}

fn walk_columns(seed: u64, float: bool) -> Vec<Vec<Option<Bson>>> {
    let mut rng = Rng(seed);
    (0..10)
        .map(|_| {
            let mut s = rng.f64() * 100.0;
            (0..ROWS)
                .map(|_| {
                    s = (s + rng.normal()).clamp(0.0, 100.0);
                    Some(if float {
                        Bson::Double((s * 100.0).round() / 100.0)
                    } else {
                        Bson::Int64(s.trunc() as i64)
                    })
                })
                .collect()
        })
        .collect()
}

fn time_column() -> Vec<Option<Bson>> {
    (0..ROWS)
        .map(|i| {
            Some(Bson::DateTime(DateTime::from_millis(
                1_451_606_400_000 + i as i64 * 10_000,
            )))
        })
        .collect()
}

fn id_column() -> Vec<Option<Bson>> {
    (0..ROWS as u32)
        .map(|i| {
            let [_, c0, c1, c2] = (0x12_3456 + i * 4000).to_be_bytes();
            let [t0, t1, t2, t3] = (1_700_000_000 + i / 25).to_be_bytes();
            Some(Bson::ObjectId(ObjectId::from_bytes([
                t0, t1, t2, t3, 1, 2, 3, 4, 5, c0, c1, c2,
            ])))
        })
        .collect()
}

fn host_column() -> Vec<Option<Bson>> {
    (0..ROWS)
        .map(|i| Some(Bson::String(format!("host_{}", i / 90))))
        .collect()
}

fn encode_all(cols: &[Vec<Option<Bson>>]) -> Vec<Vec<u8>> {
    cols.iter()
        .map(|c| {
            let mut out = Vec::new();
            encode_column(c, &mut out);
            out
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let shapes: Vec<(&str, Vec<Vec<Option<Bson>>>)> = vec![
        ("int_walk", walk_columns(1, false)),
        ("float_walk", walk_columns(1, true)),
        ("time", vec![time_column()]),
        ("objectid", vec![id_column()]),
        ("string_repeats", vec![host_column()]),
    ];
    for (name, cols) in &shapes {
        let values = (cols.len() * ROWS) as u64;
        let enc = encode_all(cols);
        let bytes: usize = enc.iter().map(Vec::len).sum();
        eprintln!("{name}: {:.4} bytes/value", bytes as f64 / values as f64);

        let mut g = c.benchmark_group("codec::encode");
        g.throughput(Throughput::Elements(values));
        g.bench_function(*name, |b| b.iter(|| encode_all(black_box(cols))));
        g.finish();

        let mut g = c.benchmark_group("codec::decode");
        g.throughput(Throughput::Elements(values));
        g.bench_function(*name, |b| {
            b.iter(|| {
                for e in &enc {
                    black_box(decode_column(black_box(e), ROWS).ok());
                }
            })
        });
        g.finish();

        // decode_f64 answers None for DateTime columns, so only the walks are measured there.
        if matches!(*name, "int_walk" | "float_walk") {
            let mut g = c.benchmark_group("codec::decode_f64");
            g.throughput(Throughput::Elements(values));
            g.bench_function(*name, |b| {
                b.iter(|| {
                    for e in &enc {
                        black_box(decode_f64(black_box(e), ROWS).ok());
                    }
                })
            });
            g.finish();
            let mut g = c.benchmark_group("codec::decode_f64_dense");
            g.throughput(Throughput::Elements(values));
            g.bench_function(*name, |b| {
                b.iter(|| {
                    for e in &enc {
                        black_box(decode_f64_dense(black_box(e), ROWS).ok());
                    }
                })
            });
            g.finish();
        }
        if matches!(*name, "int_walk" | "time") {
            let mut g = c.benchmark_group("codec::decode_i64");
            g.throughput(Throughput::Elements(values));
            g.bench_function(*name, |b| {
                b.iter(|| {
                    for e in &enc {
                        black_box(decode_i64(black_box(e), ROWS).ok());
                    }
                })
            });
            g.finish();
            let mut g = c.benchmark_group("codec::decode_i64_dense");
            g.throughput(Throughput::Elements(values));
            g.bench_function(*name, |b| {
                b.iter(|| {
                    for e in &enc {
                        black_box(decode_i64_dense(black_box(e), ROWS).ok());
                    }
                })
            });
            g.finish();
        }
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(20)
        .warm_up_time(std::time::Duration::from_millis(500))
        .measurement_time(std::time::Duration::from_secs(2));
    targets = bench
}
criterion_main!(benches);
