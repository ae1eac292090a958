//! Size measurements on the TSBS devops cpu-only shape: one bucket = one host over one hour at
//! 10 s intervals (360 rows), 10 fields each a clamped N(0,1) random walk on [0,100].
//! Run with `cargo test --release codec::devops -- --nocapture` to see the figures.
// Tests may panic: a panic is how a test fails.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

use bson::oid::ObjectId;
use bson::{Bson, DateTime};

use super::{decode_column, encode_column};

/// splitmix64: tiny, seedable and good enough for a statistical stand-in of Go's math/rand.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub(crate) fn f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Standard normal via Box-Muller.
    pub(crate) fn normal(&mut self) -> f64 {
        let u1 = 1.0 - self.f64();
        let u2 = self.f64();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }
}

/// Ten columns of `rows` values for one host: the walks, as Int64 (`trunc`) or as Double
/// rounded to 2 decimals.
pub(crate) fn devops_columns(seed: u64, rows: usize, as_float: bool) -> Vec<Vec<Option<Bson>>> {
    let mut rng = Rng::new(seed);
    let mut state: Vec<f64> = (0..10).map(|_| rng.f64() * 100.0).collect();
    let mut cols: Vec<Vec<Option<Bson>>> = (0..10).map(|_| Vec::with_capacity(rows)).collect();
    for _ in 0..rows {
        for (s, col) in state.iter_mut().zip(cols.iter_mut()) {
            *s = (*s + rng.normal()).clamp(0.0, 100.0);
            col.push(Some(if as_float {
                Bson::Double((*s * 100.0).round() / 100.0)
            } else {
                Bson::Int64(s.trunc() as i64)
            }));
        }
    }
    cols
}

/// The time column of a bucket: regular 10 s steps.
pub(crate) fn time_column(rows: usize) -> Vec<Option<Bson>> {
    (0..rows)
        .map(|i| {
            Some(Bson::DateTime(DateTime::from_millis(
                1_451_606_400_000 + i as i64 * 10_000,
            )))
        })
        .collect()
}

/// Engine-generated `_id`s: one insert batch per timestamp with one row per series (4000
/// hosts), so consecutive rows of one bucket are 4000 counter steps apart.
pub(crate) fn id_column(rows: usize) -> Vec<Option<Bson>> {
    (0..rows)
        .map(|i| {
            let c = (0x12_3456 + i as u32 * 4000) & 0xff_ffff;
            let [_, c0, c1, c2] = c.to_be_bytes();
            let [t0, t1, t2, t3] = (1_700_000_000u32 + (i as u32 / 25)).to_be_bytes();
            Some(Bson::ObjectId(ObjectId::from_bytes([
                t0, t1, t2, t3, 0xa1, 0xb2, 0xc3, 0xd4, 0xe5, c0, c1, c2,
            ])))
        })
        .collect()
}

fn encoded_size(col: &[Option<Bson>]) -> usize {
    let mut buf = Vec::new();
    encode_column(col, &mut buf);
    assert_eq!(decode_column(&buf, col.len()).ok().as_deref(), Some(col));
    buf.len()
}

/// Bytes per value of the 10 value columns over `buckets` hosts.
fn value_bytes_per_value(as_float: bool, buckets: u64) -> f64 {
    let mut total = 0usize;
    for seed in 0..buckets {
        for col in devops_columns(seed, 360, as_float) {
            total += encoded_size(&col);
        }
    }
    total as f64 / (buckets as f64 * 3600.0)
}

#[test]
fn devops_int_columns_fit_the_size_budget() {
    let bpv = value_bytes_per_value(false, 20);
    println!("devops int: {bpv:.4} bytes/value");
    assert!(bpv <= 0.296, "{bpv}");
}

#[test]
fn devops_float_columns_fit_the_size_budget() {
    let bpv = value_bytes_per_value(true, 20);
    println!("devops float: {bpv:.4} bytes/value");
    assert!(bpv <= 1.115, "{bpv}");
}

#[test]
fn regular_time_and_generated_id_columns_cost_a_few_bytes() {
    let t = encoded_size(&time_column(360));
    let id = encoded_size(&id_column(360));
    println!("time column: {t} bytes, _id column: {id} bytes (360 rows)");
    assert!(t <= 12, "{t}");
    assert!(id <= 40, "{id}");
}

/// Short-lived series make buckets of 1-3 rows (the seed 004 workload, ~285k of them): framing,
/// not entropy, decides their size.
#[test]
fn tiny_seed004_buckets_cost_a_few_bytes_per_column() {
    let oid = |i: u8| {
        Bson::ObjectId(ObjectId::from_bytes([
            0x55, 0x2a, 0x4c, 0x20, 1, 2, 3, 4, 5, 0, 0x10, i,
        ]))
    };
    let date = |s: i64| Bson::DateTime(DateTime::from_millis(s * 1000));
    for rows in 1..=3usize {
        let cols: Vec<(&str, Vec<Option<Bson>>, usize)> = vec![
            (
                "timestamp",
                (0..rows).map(|_| Some(date(1_428_777_120))).collect(),
                9,
            ),
            ("_id", (0..rows).map(|i| Some(oid(i as u8))).collect(), 22),
            (
                "totalCount",
                (0..rows)
                    .map(|i| Some(Bson::Int64(17 + 3 * i as i64)))
                    .collect(),
                5,
            ),
            (
                "dProcessTime",
                (0..rows)
                    .map(|i| Some(Bson::Double(12.5 + i as f64 * 0.25)))
                    .collect(),
                8,
            ),
        ];
        for (name, col, max) in cols {
            let size = encoded_size(&col);
            println!("{rows} row(s) {name}: {size} bytes");
            assert!(size <= max, "{rows} rows of {name}: {size} bytes");
        }
    }
}
