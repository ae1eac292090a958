//! What a collection's measurements have in common: which field holds the time, which the meta
//! value, and how time is cut into buckets. The options a user passes are turned into one
//! `Schema`, and every layer that needs any of it (insert preparation, the catalog, replay,
//! queries) takes the whole value, so the four facts cannot drift apart.

use crate::options::TimeseriesOptions;

/// A collection's time and meta field names and its bucketing, in milliseconds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schema {
    time: String,
    meta: Option<String>,
    /// `bucketMaxSpanSeconds` in milliseconds.
    pub span_ms: i64,
    /// `bucketRoundingSeconds` in milliseconds.
    pub rounding_ms: i64,
}

impl Schema {
    /// The schema a collection's options set.
    pub fn of(o: &TimeseriesOptions) -> Schema {
        Schema {
            time: o.get_time_field().to_string(),
            meta: o.get_meta_field().map(str::to_string),
            span_ms: i64::from(o.bucket_max_span_seconds()) * 1000,
            rounding_ms: i64::from(o.bucket_rounding_seconds()) * 1000,
        }
    }

    /// A schema with the given fields and bucketing in seconds (span and rounding equal when
    /// set by granularity; tests set them apart).
    pub fn new(time: &str, meta: Option<&str>, span_s: i64, rounding_s: i64) -> Schema {
        Schema {
            time: time.to_string(),
            meta: meta.map(str::to_string),
            span_ms: span_s.saturating_mul(1000),
            rounding_ms: rounding_s.saturating_mul(1000),
        }
    }

    /// The time field.
    pub fn time(&self) -> &str {
        &self.time
    }

    /// The meta field, if the collection has one.
    pub fn meta(&self) -> Option<&str> {
        self.meta.as_deref()
    }

    /// The same fields with the bucketing of `o` (collMod changes bucketing, never fields).
    pub fn rebucketed(&self, o: &TimeseriesOptions) -> Schema {
        Schema {
            span_ms: i64::from(o.bucket_max_span_seconds()) * 1000,
            rounding_ms: i64::from(o.bucket_rounding_seconds()) * 1000,
            ..self.clone()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::Granularity;

    #[test]
    fn options_set_fields_and_bucketing_in_milliseconds() {
        let o = TimeseriesOptions::new("t")
            .meta_field("m")
            .granularity(Granularity::Minutes);
        let s = Schema::of(&o);
        assert_eq!((s.time(), s.meta()), ("t", Some("m")));
        assert_eq!((s.span_ms, s.rounding_ms), (86_400_000, 3_600_000));
        let custom = TimeseriesOptions::new("t").bucket_span(7200, 7200);
        let r = s.rebucketed(&custom);
        assert_eq!((r.time(), r.meta()), ("t", Some("m")));
        assert_eq!((r.span_ms, r.rounding_ms), (7_200_000, 7_200_000));
        assert_eq!(Schema::of(&custom).meta(), None);
    }
}
