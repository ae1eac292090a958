//! `collMod` for time-series collections: coarsening the bucketing and setting or removing
//! expiry, with MongoDB's rules (granularity only coarsens, custom spans only grow).

use crate::catalog::BucketParams;
use crate::engine::Database;
use crate::error::{Error, Result};
use crate::options::{validate_expire, Granularity, TimeseriesOptions};

/// Changes to a collection's options, for [`Database::coll_mod`]. The default changes nothing.
///
/// ```
/// use tsbucket::{CollMod, Granularity};
/// let m = CollMod::default().granularity(Granularity::Minutes);
/// let ttl_off = CollMod::default().expire_after_seconds(None);
/// # let _ = (m, ttl_off);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CollMod {
    granularity: Option<Granularity>,
    max_span_seconds: Option<u32>,
    rounding_seconds: Option<u32>,
    expire_after_seconds: Option<Option<u64>>,
}

impl CollMod {
    /// A coarser preset granularity (`timeseries.granularity`).
    pub fn granularity(mut self, g: Granularity) -> Self {
        self.granularity = Some(g);
        self
    }
    /// Custom bucketing (`timeseries.bucketMaxSpanSeconds` and `bucketRoundingSeconds`): both
    /// equal and not smaller than the current ones; removes the granularity.
    pub fn bucket_span(mut self, max_span_secs: u32, rounding_secs: u32) -> Self {
        self.max_span_seconds = Some(max_span_secs);
        self.rounding_seconds = Some(rounding_secs);
        self
    }
    /// `timeseries.bucketMaxSpanSeconds` alone (MongoDB refuses it without the rounding).
    pub fn bucket_max_span_seconds(mut self, secs: u32) -> Self {
        self.max_span_seconds = Some(secs);
        self
    }
    /// `timeseries.bucketRoundingSeconds` alone (MongoDB refuses it without the span).
    pub fn bucket_rounding_seconds(mut self, secs: u32) -> Self {
        self.rounding_seconds = Some(secs);
        self
    }
    /// Sets (`Some`) or removes (`None`) `expireAfterSeconds`.
    pub fn expire_after_seconds(mut self, secs: Option<u64>) -> Self {
        self.expire_after_seconds = Some(secs);
        self
    }

    fn touches_timeseries(&self) -> bool {
        self.granularity.is_some()
            || self.max_span_seconds.is_some()
            || self.rounding_seconds.is_some()
    }

    /// The options after applying this change to `cur`, or MongoDB's error.
    pub fn apply(&self, cur: &TimeseriesOptions) -> Result<TimeseriesOptions> {
        if self.touches_timeseries() && self.expire_after_seconds.is_some() {
            return Err(Error::InvalidOptions(
                "'timeseries' cannot be modified together with other collMod options".into(),
            ));
        }
        let mut next = cur.clone();
        if let Some(e) = self.expire_after_seconds {
            if let Some(secs) = e {
                validate_expire(secs)?;
            }
            next.expire_after_seconds = e;
        }
        match (
            self.granularity,
            self.max_span_seconds,
            self.rounding_seconds,
        ) {
            (None, None, None) => {}
            (Some(g), _, Some(_)) => {
                return Err(Error::InvalidOptions(format!(
                    "Timeseries 'bucketRoundingSeconds' cannot be set alongside the granularity \
                     parameter '{}'",
                    g.as_str()
                )))
            }
            (Some(g), Some(span), None) if span != g.max_span_seconds() => {
                return Err(Error::InvalidOptions(format!(
                    "Timeseries 'bucketMaxSpanSeconds' cannot be set to a value other than the \
                     default of {} for the provided granularity",
                    g.max_span_seconds()
                )))
            }
            // A granularity with its own default span is that granularity (as at creation).
            (Some(g), _, None) => {
                match cur.get_granularity() {
                    Some(old) if old == g => {}
                    Some(old) if old.max_span_seconds() < g.max_span_seconds() => {}
                    Some(_) => return Err(invalid_granularity()),
                    // From custom spans: the preset must not shrink either parameter.
                    None => {
                        if g.max_span_seconds() < cur.bucket_max_span_seconds()
                            || g.rounding_seconds() < cur.bucket_rounding_seconds()
                        {
                            return Err(invalid_granularity());
                        }
                    }
                }
                next.granularity = Some(g);
                next.custom_span = None;
            }
            (None, Some(span), Some(rounding)) => {
                let candidate = TimeseriesOptions {
                    granularity: None,
                    custom_span: Some((span, rounding)),
                    ..cur.clone()
                };
                candidate.validate()?;
                if span < cur.bucket_max_span_seconds() {
                    return Err(Error::InvalidOptions(
                        "Timeseries 'bucketMaxSpanSeconds' needs to be equal or greater to \
                         transition"
                            .into(),
                    ));
                }
                if rounding < cur.bucket_rounding_seconds() {
                    return Err(Error::InvalidOptions(
                        "Timeseries 'bucketRoundingSeconds' needs to be equal or greater to \
                         transition"
                            .into(),
                    ));
                }
                next.granularity = None;
                next.custom_span = Some((span, rounding));
            }
            (None, _, _) => {
                return Err(Error::InvalidOptions(
                    "Timeseries 'bucketRoundingSeconds' must be equal to 'bucketMaxSpanSeconds'"
                        .into(),
                ))
            }
        }
        next.validate()?;
        Ok(next)
    }
}

fn invalid_granularity() -> Error {
    Error::InvalidOptions(
        "Invalid transition for timeseries.granularity. Can only transition from 'seconds' to \
         'minutes' or 'minutes' to 'hours'."
            .into(),
    )
}

impl Database {
    /// Changes a collection's options as MongoDB's `collMod` does: the granularity may only
    /// coarsen, custom spans only grow, `expireAfterSeconds` may be set or removed. Refused
    /// changes are `Error::InvalidOptions` (code 72) or `Error::BadValue` and change nothing; a
    /// missing collection is `Error::NamespaceNotFound`. Durable once it returns. Open buckets
    /// take the new span at once (new data may join them); buckets already in segments keep
    /// theirs, which is never larger than the new one, so queries widened by the current span
    /// still find them.
    pub fn coll_mod(&self, name: &str, m: CollMod) -> Result<()> {
        self.inner.check_writable()?;
        let mut man = self.inner.manifest.lock();
        let Some(pos) = man.collections.iter().position(|c| c.name == name) else {
            return Err(Error::NamespaceNotFound(name.to_string()));
        };
        let cur = &man.collections[pos];
        let options = m.apply(&cur.options)?;
        // Equal options compare what is in force; the spelling may still differ (custom spans
        // replacing a granularity with the same values), so compare what is stored.
        if options == cur.options
            && options.granularity == cur.options.granularity
            && options.custom_span == cur.options.custom_span
        {
            return Ok(());
        }
        let id = cur.id;
        let mut next = man.clone();
        next.collections[pos].options = options.clone();
        next.generation += 1;
        self.inner.store_manifest(&next)?;
        *man = next;
        let mut st = self.inner.state.write();
        if let Some(c) = st.colls.get_mut(&id) {
            c.catalog.set_params(BucketParams::of(&options));
            c.entry.options = options;
        }
        Ok(())
    }
}
