//! `$dateTrunc` with MongoDB's exact bins, in UTC: units up to hours are fixed lengths counted
//! from 2000-01-01T00:00:00Z; days and weeks are counted in calendar days from the same
//! reference (weeks from the first `startOfWeek` on or after it); months, quarters and years
//! in calendar months from January 2000. With `binSize` 1 this is plain truncation.

use crate::error::{Error, Result};
use bson::{Bson, DateTime};

fn bad(msg: impl Into<String>) -> Error {
    Error::BadValue(msg.into())
}

/// Units of `$dateTrunc`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Milliseconds.
    Millisecond,
    /// Seconds.
    Second,
    /// Minutes.
    Minute,
    /// Hours.
    Hour,
    /// Days (UTC).
    Day,
    /// Weeks starting on `startOfWeek`.
    Week,
    /// Calendar months.
    Month,
    /// Calendar quarters.
    Quarter,
    /// Calendar years.
    Year,
}

/// `{$dateTrunc: {date, unit, binSize, timezone, startOfWeek}}` with constant options. `E` is
/// what the date is (an expression, in a pipeline); this file knows only the calendar.
#[derive(Debug, Clone, PartialEq)]
pub struct DateTrunc<E> {
    /// The date to truncate.
    pub date: E,
    /// The unit.
    pub unit: Unit,
    /// Units per bin (positive).
    pub bin_size: i64,
    /// First day of the week, ISO numbering (Monday 1 .. Sunday 7).
    pub start_of_week: u8,
}

/// 2000-01-01T00:00:00Z: MongoDB aligns bins of more than one unit to it.
const REF_MS: i64 = 946_684_800_000;
/// The same, in days since 1970-01-01.
const REF_DAYS: i64 = 10_957;
const DAY_MS: i64 = 86_400_000;
/// MongoDB's limit on `binSize` for units of a day or more.
const MAX_CALENDAR_BIN: i64 = 100_000_000_000;

fn overflow() -> Error {
    bad("$dateTrunc overflowed")
}

fn day_of_week(name: &str) -> Option<u8> {
    let n = name.to_ascii_lowercase();
    let days = [
        ("monday", "mon"),
        ("tuesday", "tue"),
        ("wednesday", "wed"),
        ("thursday", "thu"),
        ("friday", "fri"),
        ("saturday", "sat"),
        ("sunday", "sun"),
    ];
    days.iter()
        .position(|(full, short)| n == *full || n == *short)
        .map(|i| i as u8 + 1)
}

/// A constant integral number as i64 (`2`, `NumberLong(2)`, `2.0`).
fn integral(v: &Bson) -> Option<i64> {
    match v {
        Bson::Int32(i) => Some(i64::from(*i)),
        Bson::Int64(i) => Some(*i),
        Bson::Double(d) if d.fract() == 0.0 && d.abs() < 9.2e18 => Some(*d as i64),
        _ => None,
    }
}

impl<E> DateTrunc<E> {
    /// Parses the operator's argument, the date with `date`.
    pub(crate) fn parse(arg: &Bson, date: impl Fn(&Bson) -> Result<E>) -> Result<DateTrunc<E>> {
        let Bson::Document(d) = arg else {
            return Err(bad("$dateTrunc only supports an object as its argument"));
        };
        let parse_date = date;
        let (mut date, mut unit, mut bin, mut tz, mut sow) = (None, None, None, None, None);
        for (k, v) in d {
            match k.as_str() {
                "date" => date = Some(parse_date(v)?),
                "unit" => unit = Some(v),
                "binSize" => bin = Some(v),
                "timezone" => tz = Some(v),
                "startOfWeek" => sow = Some(v),
                other => return Err(bad(format!("unrecognized argument to $dateTrunc: {other}"))),
            }
        }
        let date = date.ok_or_else(|| bad("missing 'date' argument to $dateTrunc"))?;
        let unit = match unit {
            None => return Err(bad("missing 'unit' argument to $dateTrunc")),
            Some(Bson::String(u)) => match u.as_str() {
                "millisecond" => Unit::Millisecond,
                "second" => Unit::Second,
                "minute" => Unit::Minute,
                "hour" => Unit::Hour,
                "day" => Unit::Day,
                "week" => Unit::Week,
                "month" => Unit::Month,
                "quarter" => Unit::Quarter,
                "year" => Unit::Year,
                other => return Err(bad(format!("$dateTrunc: unknown time unit value: {other}"))),
            },
            Some(other) => {
                return Err(bad(format!(
                    "$dateTrunc requires 'unit' to be a constant string, got {other}"
                )))
            }
        };
        let bin_size = match bin {
            None => 1,
            Some(v) => match integral(v) {
                Some(b) if b > 0 => b,
                _ => {
                    return Err(bad(format!(
                        "$dateTrunc requires 'binSize' to be a positive 64-bit integer, got {v}"
                    )))
                }
            },
        };
        match tz {
            None => {}
            Some(Bson::String(z)) if z == "UTC" || z == "+00:00" => {}
            Some(other) => {
                return Err(bad(format!(
                    "$dateTrunc: only the UTC timezone (\"UTC\" or \"+00:00\") is supported, \
                     got {other}"
                )))
            }
        }
        // As in MongoDB, startOfWeek only matters (and is only checked) for weeks.
        let start_of_week = match (unit, sow) {
            (Unit::Week, Some(Bson::String(s))) => day_of_week(s)
                .ok_or_else(|| bad(format!("$dateTrunc: unknown day of week value: {s}")))?,
            (Unit::Week, Some(other)) => {
                return Err(bad(format!(
                    "$dateTrunc requires 'startOfWeek' to be a string, got {other}"
                )))
            }
            _ => 7,
        };
        Ok(DateTrunc {
            date,
            unit,
            bin_size,
            start_of_week,
        })
    }

    /// The operator's value for `date`'s value: null for a missing or null date, an error for
    /// one that is not a date, timestamp or ObjectId.
    pub(crate) fn apply(&self, date: Option<Bson>) -> Result<Option<Bson>> {
        let ms = match date {
            None | Some(Bson::Null) | Some(Bson::Undefined) => return Ok(Some(Bson::Null)),
            Some(Bson::DateTime(t)) => t.timestamp_millis(),
            Some(Bson::Timestamp(ts)) => i64::from(ts.time) * 1000,
            Some(Bson::ObjectId(o)) => o.timestamp().timestamp_millis(),
            Some(other) => {
                return Err(bad(format!(
                    "$dateTrunc requires 'date' to be a date, got {other}"
                )))
            }
        };
        Ok(Some(Bson::DateTime(DateTime::from_millis(
            self.truncate(ms)?,
        ))))
    }

    /// The start of the bin holding `ms` (milliseconds since the epoch, UTC).
    pub fn truncate(&self, ms: i64) -> Result<i64> {
        let b = self.bin_size;
        let fixed = |unit_ms: i64| -> Result<i64> {
            let bin = b.checked_mul(unit_ms).ok_or_else(overflow)?;
            let shifted = ms.checked_sub(REF_MS).ok_or_else(overflow)?;
            ms.checked_sub(shifted.rem_euclid(bin)).ok_or_else(overflow)
        };
        match self.unit {
            Unit::Millisecond => return fixed(1),
            Unit::Second => return fixed(1000),
            Unit::Minute => return fixed(60_000),
            Unit::Hour => return fixed(3_600_000),
            _ => {}
        }
        if b > MAX_CALENDAR_BIN {
            return Err(bad("$dateTrunc: unsupported binSize value"));
        }
        let days = ms.div_euclid(DAY_MS);
        let floor = |dist: i64| dist - dist.rem_euclid(b);
        let start_day = match self.unit {
            Unit::Day => REF_DAYS + floor(days - REF_DAYS),
            Unit::Week => {
                // The reference is the first week start on or after 2000-01-01 (a Saturday).
                let sow = i64::from(self.start_of_week);
                let adjust = (7 - (6 - sow + 7) % 7) % 7;
                let ref_day = REF_DAYS + adjust;
                let into_week = (iso_weekday(days) - sow + 7) % 7;
                let weeks = (days - into_week - ref_day) / 7;
                ref_day + floor(weeks) * 7
            }
            _ => {
                let (y, m, _) = civil_from_days(days);
                let months = match self.unit {
                    Unit::Month => floor((y - 2000) * 12 + (m - 1)),
                    Unit::Quarter => floor((y - 2000) * 4 + (m - 1) / 3) * 3,
                    _ => floor(y - 2000) * 12,
                };
                days_from_civil(2000 + months.div_euclid(12), months.rem_euclid(12) + 1, 1)
            }
        };
        start_day.checked_mul(DAY_MS).ok_or_else(overflow)
    }
}

impl<E> DateTrunc<E> {
    /// The length of every bin in milliseconds when bins have one length (units up to the
    /// week; months, quarters and years vary).
    pub fn fixed_width(&self) -> Option<i64> {
        let unit_ms = match self.unit {
            Unit::Millisecond => 1,
            Unit::Second => 1000,
            Unit::Minute => 60_000,
            Unit::Hour => 3_600_000,
            Unit::Day => DAY_MS,
            Unit::Week => 7 * DAY_MS,
            Unit::Month | Unit::Quarter | Unit::Year => return None,
        };
        self.bin_size.checked_mul(unit_ms)
    }

    /// `(width, origin)` when [`DateTrunc::truncate`] is `ms - (ms - origin).rem_euclid(width)`
    /// (units up to hours), so a caller can bin a time in a few instructions.
    pub fn fixed_bins(&self) -> Option<(i64, i64)> {
        let unit_ms = match self.unit {
            Unit::Millisecond => 1,
            Unit::Second => 1000,
            Unit::Minute => 60_000,
            Unit::Hour => 3_600_000,
            _ => return None,
        };
        Some((self.bin_size.checked_mul(unit_ms)?, REF_MS))
    }

    /// The bin holding `ms` as `[start, end)`, so that callers can tell whether later times
    /// fall in the same bin without truncating each (the end saturates at the largest date).
    pub fn bin_range(&self, ms: i64) -> Result<(i64, i64)> {
        let start = self.truncate(ms)?;
        let b = self.bin_size;
        let fixed = |unit_ms: i64| start.saturating_add(b.saturating_mul(unit_ms));
        let end = match self.unit {
            Unit::Millisecond => fixed(1),
            Unit::Second => fixed(1000),
            Unit::Minute => fixed(60_000),
            Unit::Hour => fixed(3_600_000),
            Unit::Day => fixed(DAY_MS),
            Unit::Week => fixed(7 * DAY_MS),
            Unit::Month | Unit::Quarter | Unit::Year => {
                let per = match self.unit {
                    Unit::Month => 1,
                    Unit::Quarter => 3,
                    _ => 12,
                };
                let (y, m, _) = civil_from_days(start.div_euclid(DAY_MS));
                let months = ((y - 2000) * 12 + (m - 1)).saturating_add(b.saturating_mul(per));
                days_from_civil(2000 + months.div_euclid(12), months.rem_euclid(12) + 1, 1)
                    .checked_mul(DAY_MS)
                    .unwrap_or(i64::MAX)
            }
        };
        Ok((start, end))
    }
}

/// ISO day of the week (Monday 1 .. Sunday 7) of a day counted from 1970-01-01 (a Thursday).
fn iso_weekday(days: i64) -> i64 {
    (days + 3).rem_euclid(7) + 1
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date (year, month, day) of a day counted from 1970-01-01.
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::{doc, Document};

    /// A `$dateTrunc` whose date is the value given to `apply`.
    fn parse(mut spec: Document) -> Result<DateTrunc<()>> {
        spec.insert("date", "$t");
        DateTrunc::parse(&Bson::Document(spec), |_| Ok(()))
    }

    fn ms(s: &str) -> i64 {
        DateTime::parse_rfc3339_str(s).unwrap().timestamp_millis()
    }

    fn trunc(spec: Document, date: &str) -> String {
        let t = parse(spec).unwrap();
        match t.apply(Some(Bson::DateTime(DateTime::from_millis(ms(date))))).unwrap() {
            Some(Bson::DateTime(d)) => d.try_to_rfc3339_string().unwrap(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn calendar_round_trip() {
        for z in [-800_000, -1, 0, 1, 10_957, 59, 60, 365, 20_000, 2_932_896] {
            let (y, m, d) = civil_from_days(z);
            assert_eq!(days_from_civil(y, m, d), z);
        }
        assert_eq!(civil_from_days(REF_DAYS), (2000, 1, 1));
        assert_eq!(iso_weekday(REF_DAYS), 6);
    }

    // Expected values from MongoDB's documentation and jstests of $dateTrunc.
    #[test]
    fn fixed_units_align_bins_to_2000() {
        let d = "2021-03-20T11:30:05.123Z";
        assert_eq!(trunc(doc! {"unit": "second"}, d), "2021-03-20T11:30:05Z");
        assert_eq!(
            trunc(doc! {"unit": "minute", "binSize": 7}, d),
            // 11159250 minutes after 2000-01-01, 11159250 % 7 = 4.
            "2021-03-20T11:26:00Z"
        );
        assert_eq!(
            trunc(doc! {"unit": "hour", "binSize": 5}, d),
            // 185987 hours after 2000-01-01, 185987 % 5 = 2.
            "2021-03-20T09:00:00Z"
        );
        assert_eq!(trunc(doc! {"unit": "day"}, d), "2021-03-20T00:00:00Z");
        assert_eq!(
            trunc(doc! {"unit": "day", "binSize": 3}, "2000-01-05T12:00:00Z"),
            "2000-01-04T00:00:00Z"
        );
        assert_eq!(
            trunc(doc! {"unit": "hour", "binSize": 2}, "1999-12-31T23:59:59Z"),
            "1999-12-31T22:00:00Z"
        );
    }

    #[test]
    fn weeks_start_on_the_given_day() {
        // 2021-03-20 is a Saturday.
        let d = "2021-03-20T11:30:05Z";
        assert_eq!(trunc(doc! {"unit": "week"}, d), "2021-03-14T00:00:00Z");
        assert_eq!(
            trunc(doc! {"unit": "week", "startOfWeek": "MONDAY"}, d),
            "2021-03-15T00:00:00Z"
        );
        assert_eq!(
            trunc(doc! {"unit": "week", "startOfWeek": "sat"}, d),
            "2021-03-20T00:00:00Z"
        );
        // Two-week bins count from the first Sunday after 2000-01-01 (2000-01-02).
        assert_eq!(
            trunc(doc! {"unit": "week", "binSize": 2}, "2000-01-10T00:00:00Z"),
            "2000-01-02T00:00:00Z"
        );
        assert_eq!(
            trunc(doc! {"unit": "week", "binSize": 2}, "2000-01-16T00:00:00Z"),
            "2000-01-16T00:00:00Z"
        );
        assert_eq!(
            trunc(doc! {"unit": "week"}, "2000-01-01T10:00:00Z"),
            "1999-12-26T00:00:00Z"
        );
    }

    #[test]
    fn months_quarters_years() {
        let d = "2021-08-20T11:30:05Z";
        assert_eq!(trunc(doc! {"unit": "month"}, d), "2021-08-01T00:00:00Z");
        assert_eq!(
            trunc(doc! {"unit": "month", "binSize": 5}, d),
            // 259 months after 2000-01; 259 - 259 % 5 = 255 -> 2021-04.
            "2021-04-01T00:00:00Z"
        );
        assert_eq!(trunc(doc! {"unit": "quarter"}, d), "2021-07-01T00:00:00Z");
        assert_eq!(
            trunc(doc! {"unit": "quarter", "binSize": 3}, d),
            // quarter 86 after 2000 Q1; 86 - 86 % 3 = 84 -> 2021 Q1.
            "2021-01-01T00:00:00Z"
        );
        assert_eq!(trunc(doc! {"unit": "year"}, d), "2021-01-01T00:00:00Z");
        assert_eq!(
            trunc(doc! {"unit": "year", "binSize": 10}, "1999-05-01T00:00:00Z"),
            "1990-01-01T00:00:00Z"
        );
    }

    #[test]
    fn fixed_bins_truncate_as_truncate_does() {
        for spec in [
            doc! {"unit": "millisecond", "binSize": 3},
            doc! {"unit": "second", "binSize": 7},
            doc! {"unit": "minute"},
            doc! {"unit": "hour", "binSize": 5},
        ] {
            let t = parse(spec.clone()).unwrap();
            let (w, o) = t.fixed_bins().unwrap();
            for ms in [0, -1, 1, 946_684_800_000, 1_428_777_123_456, -86_400_001] {
                assert_eq!(
                    t.truncate(ms).unwrap(),
                    ms - (ms - o).rem_euclid(w),
                    "{spec} {ms}"
                );
            }
        }
    }

    #[test]
    fn bin_ranges_hold_exactly_the_times_of_a_bin() {
        let specs = [
            doc! {"unit": "minute", "binSize": 7},
            doc! {"unit": "hour"},
            doc! {"unit": "day", "binSize": 2},
            doc! {"unit": "week", "startOfWeek": "mon"},
            doc! {"unit": "month", "binSize": 5},
            doc! {"unit": "quarter"},
            doc! {"unit": "year", "binSize": 3},
        ];
        for spec in specs {
            let t = parse(spec.clone()).unwrap();
            for ms in [
                ms("2021-03-20T11:30:05Z"),
                ms("1999-12-31T23:59:59.999Z"),
                0,
            ] {
                let (lo, hi) = t.bin_range(ms).unwrap();
                assert!(lo <= ms && ms < hi, "{spec}");
                assert_eq!(t.truncate(hi - 1).unwrap(), lo, "{spec}");
                assert_eq!(t.truncate(hi).unwrap(), hi, "{spec}");
            }
        }
    }

    #[test]
    fn bad_arguments_are_bad_value() {
        for spec in [
            doc! {},
            doc! {"unit": "fortnight"},
            doc! {"unit": "hour", "binSize": 0},
            doc! {"unit": "hour", "binSize": 1.5},
            doc! {"unit": "hour", "timezone": "Europe/Paris"},
            doc! {"unit": "week", "startOfWeek": "someday"},
            doc! {"unit": "hour", "extra": 1},
        ] {
            let e = parse(spec.clone()).unwrap_err();
            assert_eq!(e.code(), Some(2), "{spec}");
        }
        let t = parse(doc! {"unit": "hour"}).unwrap();
        assert!(t.apply(Some(Bson::from("x"))).is_err());
        assert_eq!(t.apply(None).unwrap(), Some(Bson::Null));
    }
}
