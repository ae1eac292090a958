//! The seed 004 workload: per-minute rows `[timestamp, iResult, vCmdid, vAppid, totalCount,
//! dProcessTime]` over 272 periods, ~30,922 rows per period at scale 1 (8.4 M rows), with
//! 5,927 recurring dimension combinations and ~280 K dirty one-offs (an id field holding a user
//! id or garbage), several rows per combination and period, some with an empty `vAppid`.
//! Documents: `{timestamp, dims: {iResult, vCmdid, vAppid}, totalCount, dProcessTime}` with
//! `dims` as the meta field.

use super::rng::Rng;
use tsbucket::bson::{doc, DateTime, Document};

/// First period, epoch seconds (that of the data set this workload imitates).
pub const FIRST_PERIOD_S: i64 = 1_428_777_120;
/// Number of periods.
pub const PERIODS: u64 = 272;
/// Rows per period at scale 1.
pub const ROWS_PER_PERIOD: f64 = 30_922.0;
/// Recurring combinations at scale 1.
pub const RECURRING: f64 = 5_927.0;
/// One-off combinations at scale 1.
pub const ONE_OFFS: f64 = 279_595.0;

/// Parameters of the workload.
#[derive(Debug, Clone)]
pub struct Seed004 {
    /// 1.0 = the full size, 8.4 M rows.
    pub scale: f64,
    /// PRNG seed.
    pub seed: u64,
}

impl Default for Seed004 {
    fn default() -> Self {
        Seed004 {
            scale: 0.25,
            seed: 4,
        }
    }
}

#[derive(Clone)]
struct Combo {
    result: i32,
    cmd: String,
    app: String,
}

/// Generates rows period by period.
pub struct Seed004Gen {
    rng: Rng,
    recurring: Vec<Combo>,
    period: u64,
    in_period: u64,
    per_period: u64,
    one_off_per_period: f64,
}

impl Seed004 {
    /// Approximate number of rows.
    pub fn rows(&self) -> u64 {
        (ROWS_PER_PERIOD * self.scale) as u64 * PERIODS
    }
    /// A generator of the rows as documents.
    pub fn generate(&self) -> Seed004Gen {
        let mut rng = Rng::new(self.seed);
        let n = ((RECURRING * self.scale) as usize).max(1);
        let recurring = (0..n)
            .map(|_| Combo {
                result: if rng.below(10) == 0 {
                    -(rng.below(50) as i32) - 1
                } else {
                    0
                },
                cmd: format!("cmd{}", rng.below(300)),
                app: if rng.below(8) == 0 {
                    String::new()
                } else {
                    format!("app{:05}", rng.below(3000))
                },
            })
            .collect();
        Seed004Gen {
            rng,
            recurring,
            period: 0,
            in_period: 0,
            per_period: ((ROWS_PER_PERIOD * self.scale) as u64).max(1),
            one_off_per_period: ONE_OFFS * self.scale / PERIODS as f64,
        }
    }
}

impl Iterator for Seed004Gen {
    type Item = Document;
    fn next(&mut self) -> Option<Document> {
        if self.period >= PERIODS {
            return None;
        }
        let ts = DateTime::from_millis((FIRST_PERIOD_S + self.period as i64 * 60) * 1000);
        let one_off_share = self.one_off_per_period / self.per_period as f64;
        let combo = if self.rng.f64() < one_off_share {
            // A dirty row: the app id field holds a user id or garbage.
            Combo {
                result: 0,
                cmd: format!("cmd{}", self.rng.below(300)),
                app: format!("{}", 10_000_000 + self.rng.below(90_000_000)),
            }
        } else {
            // Skewed popularity: a few combinations carry most rows.
            let u = self.rng.f64();
            let i = ((u * u) * self.recurring.len() as f64) as usize;
            self.recurring[i.min(self.recurring.len() - 1)].clone()
        };
        let total = 1 + (self.rng.f64().powi(3) * 1000.0) as i32;
        let time = (self.rng.f64() * 5000.0 * 1000.0).round() / 1000.0;
        self.in_period += 1;
        if self.in_period == self.per_period {
            self.in_period = 0;
            self.period += 1;
        }
        Some(doc! {
            "timestamp": ts,
            "dims": {"iResult": combo.result, "vCmdid": combo.cmd, "vAppid": combo.app},
            "totalCount": total,
            "dProcessTime": time,
        })
    }
}
