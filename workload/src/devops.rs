//! The TSBS "devops cpu-only" workload: hosts with 10 string tags as the meta document and 10
//! CPU fields that follow clamped random walks, one measurement per host every 10 s, emitted
//! time-major (all hosts at one time, then the next), as TSBS emits them.

use super::rng::Rng;
use tsbucket::bson::{doc, Bson, DateTime, Document};

/// The 10 field names, in TSBS order.
pub const FIELDS: [&str; 10] = [
    "usage_user",
    "usage_system",
    "usage_idle",
    "usage_nice",
    "usage_iowait",
    "usage_irq",
    "usage_softirq",
    "usage_steal",
    "usage_guest",
    "usage_guest_nice",
];

const REGIONS: [(&str, &[&str]); 9] = [
    (
        "us-east-1",
        &["us-east-1a", "us-east-1b", "us-east-1c", "us-east-1e"],
    ),
    ("us-west-1", &["us-west-1a", "us-west-1b"]),
    ("us-west-2", &["us-west-2a", "us-west-2b", "us-west-2c"]),
    ("eu-west-1", &["eu-west-1a", "eu-west-1b", "eu-west-1c"]),
    ("eu-central-1", &["eu-central-1a", "eu-central-1b"]),
    ("ap-southeast-1", &["ap-southeast-1a", "ap-southeast-1b"]),
    ("ap-southeast-2", &["ap-southeast-2a", "ap-southeast-2b"]),
    ("ap-northeast-1", &["ap-northeast-1a", "ap-northeast-1c"]),
    ("sa-east-1", &["sa-east-1a", "sa-east-1b", "sa-east-1c"]),
];
const OS: [&str; 3] = ["Ubuntu16.10", "Ubuntu16.04LTS", "Ubuntu15.10"];
const ARCH: [&str; 2] = ["x64", "x86"];
const TEAM: [&str; 4] = ["SF", "NYC", "LON", "CHI"];
const ENV: [&str; 3] = ["production", "staging", "test"];

/// Parameters of the workload.
#[derive(Debug, Clone)]
pub struct Devops {
    /// Number of hosts (series).
    pub hosts: usize,
    /// Hours of data.
    pub hours: f64,
    /// Emit fields as doubles with 2 decimals instead of TSBS's int64.
    pub float: bool,
    /// PRNG seed.
    pub seed: u64,
    /// First timestamp (TSBS default 2016-01-01T00:00:00Z).
    pub start_ms: i64,
    /// Interval between measurements of a host.
    pub interval_ms: i64,
}

impl Default for Devops {
    fn default() -> Self {
        Devops {
            hosts: 100,
            hours: 1.0,
            float: false,
            seed: 123,
            start_ms: 1_451_606_400_000,
            interval_ms: 10_000,
        }
    }
}

struct Host {
    /// `{time, tags, <FIELDS>}` with this host's tags: each measurement is a copy with the
    /// values overwritten in place, which allocates far less than building a document.
    template: Document,
    state: [f64; 10],
}

/// Generates the measurements in TSBS order.
pub struct DevopsGen {
    cfg: Devops,
    hosts: Vec<Host>,
    rng: Rng,
    epoch: u64,
    epochs: u64,
    host: usize,
}

impl Devops {
    /// Number of measurements the workload holds.
    pub fn measurements(&self) -> u64 {
        self.epochs() * self.hosts as u64
    }
    fn epochs(&self) -> u64 {
        (self.hours * 3_600_000.0 / self.interval_ms as f64) as u64
    }
    /// A generator of the measurements.
    pub fn generate(&self) -> DevopsGen {
        let mut rng = Rng::new(self.seed);
        let pick = |rng: &mut Rng, xs: &[&str]| xs[rng.below(xs.len() as u64) as usize].to_string();
        let hosts = (0..self.hosts)
            .map(|i| {
                let mut state = [0.0; 10];
                for s in &mut state {
                    *s = rng.f64() * 100.0;
                }
                let (region, dcs) = REGIONS[rng.below(9) as usize];
                let datacenter = pick(&mut rng, dcs);
                let rack = rng.below(100).to_string();
                let arch = pick(&mut rng, &ARCH);
                let os = pick(&mut rng, &OS);
                let service = rng.below(20).to_string();
                let service_version = rng.below(2).to_string();
                let service_environment = pick(&mut rng, &ENV);
                let team = pick(&mut rng, &TEAM);
                let tags = doc! {
                        "hostname": format!("host_{i}"),
                        "region": region,
                        "datacenter": datacenter,
                        "rack": rack,
                        "os": os,
                        "arch": arch,
                        "team": team,
                        "service": service,
                        "service_version": service_version,
                        "service_environment": service_environment,
                };
                let mut template = doc! {"time": DateTime::from_millis(0), "tags": tags};
                for name in FIELDS {
                    template.insert(name, Bson::Null);
                }
                Host { template, state }
            })
            .collect();
        DevopsGen {
            cfg: self.clone(),
            hosts,
            rng,
            epoch: 0,
            epochs: self.epochs(),
            host: 0,
        }
    }
}

impl Iterator for DevopsGen {
    type Item = Document;
    fn next(&mut self) -> Option<Document> {
        if self.epoch >= self.epochs || self.hosts.is_empty() {
            return None;
        }
        let t = self.cfg.start_ms + self.epoch as i64 * self.cfg.interval_ms;
        let h = &mut self.hosts[self.host];
        let mut d = h.template.clone();
        let mut slots = d.iter_mut().map(|(_, v)| v);
        if let Some(time) = slots.next() {
            *time = Bson::DateTime(DateTime::from_millis(t));
        }
        // Past the tags, the fields in FIELDS order.
        for (slot, s) in slots.skip(1).zip(h.state.iter_mut()) {
            *slot = if self.cfg.float {
                Bson::Double((*s * 100.0).round() / 100.0)
            } else {
                Bson::Int64(s.trunc() as i64)
            };
            *s = (*s + self.rng.normal()).clamp(0.0, 100.0);
        }
        self.host += 1;
        if self.host == self.hosts.len() {
            self.host = 0;
            self.epoch += 1;
        }
        Some(d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn is_deterministic_and_time_major() {
        let cfg = Devops {
            hosts: 3,
            hours: 0.01,
            ..Devops::default()
        };
        let a: Vec<Document> = cfg.generate().collect();
        let b: Vec<Document> = cfg.generate().collect();
        assert_eq!(a, b);
        assert_eq!(a.len() as u64, cfg.measurements());
        assert_eq!(a[0].get("time"), a[2].get("time"));
        assert_ne!(a[2].get("time"), a[3].get("time"));
        assert_eq!(
            a[1].get_document("tags")
                .unwrap()
                .get_str("hostname")
                .unwrap(),
            "host_1"
        );
        let v = a[0].get_i64("usage_user").unwrap();
        assert!((0..=100).contains(&v));
    }
}
