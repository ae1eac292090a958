//! How `import` reads a time that is not a BSON date: an epoch number in a stated unit, or
//! text in RFC 3339 or a stated format. Nothing is guessed: an epoch number with no
//! `--time-unit` is read as milliseconds only where that lands between 1973 and 5138, and a
//! text time without a zone needs `--time-format`; anything else is refused with a message
//! that names the option.

use chrono::{DateTime as ChronoTime, NaiveDateTime};
use tsbucket::bson::{Bson, DateTime};

/// The unit of epoch numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum TimeUnit {
    /// Seconds (InfluxDB's and Telegraf's `s` precision, Unix time).
    S,
    /// Milliseconds (BSON's own unit).
    Ms,
    /// Microseconds; the part below a millisecond is dropped.
    Us,
    /// Nanoseconds (line protocol's default); the part below a millisecond is dropped.
    Ns,
}

/// Epoch milliseconds read without `--time-unit`: 1973-03-03 to 5138-11-16. Seconds,
/// microseconds and nanoseconds of dates since 1973 all fall outside it.
const PLAIN_MS: std::ops::Range<i64> = 100_000_000_000..100_000_000_000_000;

/// How times are read.
#[derive(Clone, Debug, Default)]
pub struct TimeRead {
    /// The unit of epoch numbers, when stated.
    pub unit: Option<TimeUnit>,
    /// A `strftime` format of text times (read as UTC unless it has a zone).
    pub format: Option<String>,
}

impl TimeRead {
    /// An epoch number as a date.
    pub fn number(&self, v: f64) -> Result<DateTime, String> {
        let per_ms = match self.unit {
            Some(TimeUnit::S) => 1e-3,
            Some(TimeUnit::Ms) | None => 1.0,
            Some(TimeUnit::Us) => 1e3,
            Some(TimeUnit::Ns) => 1e6,
        };
        let ms = (v / per_ms).floor();
        // i64's range as doubles: beyond it `as` would saturate without a word.
        if !ms.is_finite() || !(-9.2e18..9.2e18).contains(&ms) {
            return Err(format!("time {v} is out of the range of dates"));
        }
        let ms = ms as i64;
        if self.unit.is_none() && !PLAIN_MS.contains(&ms) {
            return Err(ambiguous(v));
        }
        Ok(DateTime::from_millis(ms))
    }

    /// An integer epoch number as a date, exactly (a double has 53 bits).
    pub fn integer(&self, n: i64) -> Result<DateTime, String> {
        let ms = match self.unit {
            Some(TimeUnit::S) => n.checked_mul(1000),
            Some(TimeUnit::Ms) | None => Some(n),
            Some(TimeUnit::Us) => Some(n.div_euclid(1_000)),
            Some(TimeUnit::Ns) => Some(n.div_euclid(1_000_000)),
        }
        .ok_or_else(|| format!("time {n} is out of the range of dates"))?;
        if self.unit.is_none() && !PLAIN_MS.contains(&ms) {
            return Err(ambiguous(n as f64));
        }
        Ok(DateTime::from_millis(ms))
    }

    /// A text time: an integer (an epoch number), RFC 3339, or the `--time-format`.
    pub fn text(&self, s: &str) -> Result<DateTime, String> {
        let t = s.trim();
        if let Some(f) = &self.format {
            return parse_with(t, f)
                .ok_or_else(|| format!("time '{s}' does not match --time-format '{f}'"));
        }
        if let Ok(n) = t.parse::<i64>() {
            return self.integer(n);
        }
        if let Ok(d) = DateTime::parse_rfc3339_str(t) {
            return Ok(d);
        }
        // RFC 3339 with a space for the `T`, as SQL databases print it.
        if let Ok(d) = ChronoTime::parse_from_rfc3339(&t.replacen(' ', "T", 1)) {
            return Ok(DateTime::from_millis(d.timestamp_millis()));
        }
        let zoneless = ["%Y-%m-%d %H:%M:%S%.f", "%Y-%m-%dT%H:%M:%S%.f"]
            .iter()
            .find(|f| NaiveDateTime::parse_from_str(t, f).is_ok());
        Err(match zoneless {
            Some(f) => {
                format!("time '{s}' has no time zone; to read it as UTC, pass --time-format '{f}'")
            }
            None => format!(
                "time '{s}' is neither RFC 3339 nor an epoch number; give its format with \
                 --time-format (strftime, such as '%d/%m/%Y %H:%M')"
            ),
        })
    }

    /// `v` as the value of a time field: dates as they are, epoch numbers and text read as
    /// above; `None` for other values, which the engine refuses with its own message.
    pub fn value(&self, v: &Bson) -> Option<Result<DateTime, String>> {
        Some(match v {
            Bson::DateTime(d) => Ok(*d),
            Bson::Int32(n) => self.integer(i64::from(*n)),
            Bson::Int64(n) => self.integer(*n),
            Bson::Double(n) => self.number(*n),
            Bson::String(s) => self.text(s),
            _ => return None,
        })
    }
}

/// Text `t` in `strftime` format `f`: with its zone when the format has one, else as UTC.
fn parse_with(t: &str, f: &str) -> Option<DateTime> {
    if let Ok(d) = ChronoTime::parse_from_str(t, f) {
        return Some(DateTime::from_millis(d.timestamp_millis()));
    }
    let naive = NaiveDateTime::parse_from_str(t, f)
        .ok()
        // A format of a date alone: its midnight.
        .or_else(|| {
            chrono::NaiveDate::parse_from_str(t, f)
                .ok()
                .and_then(|d| d.and_hms_opt(0, 0, 0))
        })?;
    Some(DateTime::from_millis(naive.and_utc().timestamp_millis()))
}

/// The refusal of an epoch number without a unit, with what it would be in each unit that
/// gives a date after 1973.
fn ambiguous(v: f64) -> String {
    let as_unit = |u: TimeUnit, name: &str| {
        let t = TimeRead {
            unit: Some(u),
            format: None,
        };
        t.number(v)
            .ok()
            .filter(|d| PLAIN_MS.contains(&d.timestamp_millis()))
            .and_then(|d| d.try_to_rfc3339_string().ok())
            .map(|s| format!(" (as {name}, {s})"))
    };
    let hint = [
        as_unit(TimeUnit::S, "seconds"),
        as_unit(TimeUnit::Us, "microseconds"),
        as_unit(TimeUnit::Ns, "nanoseconds"),
    ]
    .into_iter()
    .flatten()
    .collect::<String>();
    format!(
        "time {v} as epoch milliseconds is before 1973 or after 5138; give the unit of epoch \
         numbers with --time-unit s|ms|us|ns{hint}"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iso(d: DateTime) -> String {
        d.try_to_rfc3339_string().unwrap()
    }

    #[test]
    fn epoch_numbers_are_read_in_the_stated_unit() {
        let at = |u| TimeRead {
            unit: Some(u),
            format: None,
        };
        let want = "2016-01-01T00:00:00Z";
        assert_eq!(iso(at(TimeUnit::S).number(1_451_606_400.0).unwrap()), want);
        assert_eq!(iso(at(TimeUnit::Ms).number(1.4516064e12).unwrap()), want);
        let v = Bson::Int64(1_451_606_400_000_000);
        assert_eq!(iso(at(TimeUnit::Us).value(&v).unwrap().unwrap()), want);
        // Nanoseconds beyond 2^53: read exactly, the part below a millisecond dropped.
        let v = Bson::Int64(1_451_606_400_123_999_999);
        let d = at(TimeUnit::Ns).value(&v).unwrap().unwrap();
        assert_eq!(d.timestamp_millis(), 1_451_606_400_123);
        // Before 1970 and at 1970 when the unit is stated.
        assert_eq!(
            at(TimeUnit::Ms).number(-5.0).unwrap().timestamp_millis(),
            -5
        );
        assert_eq!(at(TimeUnit::S).text("0").unwrap().timestamp_millis(), 0);
        assert!(at(TimeUnit::S)
            .value(&Bson::Int64(i64::MAX))
            .unwrap()
            .is_err());
    }

    #[test]
    fn epoch_numbers_without_a_unit_are_milliseconds_only_where_that_is_plain() {
        let t = TimeRead::default();
        assert_eq!(iso(t.number(1.4516064e12).unwrap()), "2016-01-01T00:00:00Z");
        for v in [1_451_606_400.0, 1.4516064e15, 1.4516064e18, 0.0, -1.0] {
            let e = t.number(v).unwrap_err();
            assert!(e.contains("--time-unit"), "{e}");
        }
        let e = t.number(1_451_606_400.0).unwrap_err();
        assert!(e.contains("as seconds, 2016-01-01T00:00:00Z"), "{e}");
        let e = t.text("1451606400000000000").unwrap_err();
        assert!(e.contains("as nanoseconds, 2016-01-01T00:00:00Z"), "{e}");
    }

    #[test]
    fn text_times_need_a_zone_or_a_format() {
        let t = TimeRead::default();
        let want = "2023-01-01T00:00:00Z";
        assert_eq!(iso(t.text("2023-01-01T00:00:00Z").unwrap()), want);
        assert_eq!(iso(t.text("2023-01-01 01:00:00+01:00").unwrap()), want);
        let e = t.text("2023-01-01 00:00:00").unwrap_err();
        assert!(
            e.contains("no time zone") && e.contains("--time-format '%Y-%m-%d %H:%M:%S%.f'"),
            "{e}"
        );
        let e = t.text("01/02/2023").unwrap_err();
        assert!(e.contains("--time-format"), "{e}");
        let f = |f: &str| TimeRead {
            unit: None,
            format: Some(f.into()),
        };
        assert_eq!(
            iso(f("%Y-%m-%d %H:%M:%S%.f")
                .text("2023-01-01 00:00:00")
                .unwrap()),
            want
        );
        assert_eq!(
            f("%Y-%m-%d %H:%M:%S%.f")
                .text("2023-01-01 00:00:00.250")
                .unwrap()
                .timestamp_millis(),
            1_672_531_200_250
        );
        assert_eq!(iso(f("%d/%m/%Y").text("01/01/2023").unwrap()), want);
        assert_eq!(
            iso(f("%d/%m/%Y %H:%M %z")
                .text("01/01/2023 02:00 +0200")
                .unwrap()),
            want
        );
        let e = f("%d/%m/%Y").text("2023-01-01").unwrap_err();
        assert!(e.contains("does not match --time-format"), "{e}");
    }

    #[test]
    fn values_other_than_numbers_text_and_dates_are_left_to_the_engine() {
        let t = TimeRead::default();
        assert!(t.value(&Bson::Boolean(true)).is_none());
        let d = DateTime::from_millis(5);
        assert_eq!(t.value(&Bson::DateTime(d)).unwrap().unwrap(), d);
    }
}
