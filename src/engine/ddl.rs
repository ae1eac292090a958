//! Collections and their options and indexes: create, drop, `collMod` (coarsening the
//! bucketing and setting or removing expiry, with MongoDB's rules: granularity only coarsens,
//! custom spans only grow) and index definitions. Each change is one manifest commit, then is
//! published to readers.

use super::Engine;
use crate::catalog::FitLimits;
use crate::collstate::CollState;
use crate::error::{Error, Result};
use crate::manifest::SEG_DIR;
use crate::manifest::{segment_path, CollectionEntry, IndexDef};
use crate::options::{validate_expire, Granularity, TimeseriesOptions};
use crate::schema::Schema;
use bson::Document;
use std::sync::Arc;

/// Changes to a collection's options, for [`crate::Database::coll_mod`]. The default changes nothing.
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

/// A collection as `list_collections` reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct CollectionInfo {
    /// Collection name.
    pub name: String,
    /// Its options.
    pub options: TimeseriesOptions,
}

impl Engine {
    /// Creates a collection, or finds one of that name with identical options (as MongoDB
    /// does); returns its id. Other options are `Error::NamespaceExists`.
    pub(crate) fn create_collection(&self, name: &str, options: TimeseriesOptions) -> Result<u32> {
        self.check_writable()?;
        validate_collection_name(name)?;
        options.validate()?;
        let mut man = self.manifest.lock();
        if let Some(existing) = man.collections.iter().find(|c| c.name == name) {
            if existing.options == options {
                return Ok(existing.id);
            }
            return Err(Error::NamespaceExists(name.to_string()));
        }
        let id = man.next_collection_id;
        let entry = CollectionEntry {
            id,
            name: name.to_string(),
            options,
            segments: Vec::new(),
            expired: Default::default(),
            indexes: Vec::new(),
        };
        self.commit(&mut man, |next| {
            next.next_collection_id += 1;
            next.collections.push(entry.clone());
            Ok(())
        })?;
        let mut st = self.state.write();
        self.inserting
            .write()
            .insert(id, Arc::new(Schema::of(&entry.options)));
        st.names.insert(name.to_string(), id);
        st.colls
            .insert(id, CollState::new(entry, FitLimits::of(&self.opts)));
        Ok(id)
    }

    /// The id of the collection `name`, `Error::NamespaceNotFound` if there is none.
    pub(crate) fn collection_id(&self, name: &str) -> Result<u32> {
        self.check_open()?;
        let st = self.state.read();
        st.names
            .get(name)
            .copied()
            .ok_or_else(|| Error::NamespaceNotFound(name.to_string()))
    }

    /// Every collection with its options, by name.
    pub(crate) fn list_collections(&self) -> Result<Vec<CollectionInfo>> {
        self.check_open()?;
        let st = self.state.read();
        Ok(st
            .names
            .values()
            .filter_map(|id| st.colls.get(id))
            .map(|c| CollectionInfo {
                name: c.entry.name.clone(),
                options: c.entry.options.clone(),
            })
            .collect())
    }

    /// Drops a collection and its files; returns whether it existed. Durable once it returns:
    /// the manifest no longer lists it, and log records of the old collection are ignored.
    pub(crate) fn drop_collection(&self, name: &str) -> Result<bool> {
        self.check_writable()?;
        let mut man = self.manifest.lock();
        let Some(pos) = man.collections.iter().position(|c| c.name == name) else {
            return Ok(false);
        };
        let entry = self.commit(&mut man, |next| Ok(next.collections.remove(pos)))?;
        let removed = {
            let mut st = self.state.write();
            self.inserting.write().remove(&entry.id);
            st.names.remove(name);
            st.colls.remove(&entry.id)
        };
        // The manifest no longer names these files; leftovers are removed at the next open too.
        if let Some(cs) = removed {
            for (sid, _) in cs.segments {
                let _ = self.vfs.remove_file(&segment_path(&self.path, sid));
            }
        }
        let _ = self.vfs.sync_dir(&self.path.join(SEG_DIR));
        Ok(true)
    }

    /// Replaces the index definitions of collection `id`: computed by `f` from the current ones
    /// under the manifest lock, committed, then published to readers. `f` returning an error
    /// or `None` changes nothing.
    pub(crate) fn update_indexes<R>(
        &self,
        id: u32,
        name: &str,
        f: impl FnOnce(&[IndexDef]) -> Result<(Option<Vec<IndexDef>>, R)>,
    ) -> Result<R> {
        self.check_writable()?;
        let mut man = self.manifest.lock();
        let cur = man
            .collections
            .iter()
            .find(|c| c.id == id)
            .ok_or_else(|| Error::NamespaceNotFound(name.to_string()))?;
        let (new, r) = f(&cur.indexes)?;
        let Some(new) = new else {
            return Ok(r);
        };
        self.commit(&mut man, |next| {
            if let Some(c) = next.collections.iter_mut().find(|c| c.id == id) {
                c.indexes = new.clone();
            }
            Ok(())
        })?;
        if let Some(c) = self.state.write().colls.get_mut(&id) {
            c.entry.indexes = new;
        }
        Ok(r)
    }

    /// Changes a collection's options as MongoDB's `collMod` does (see
    /// [`crate::Database::coll_mod`]).
    pub(crate) fn coll_mod(&self, name: &str, m: CollMod) -> Result<()> {
        self.check_writable()?;
        let mut man = self.manifest.lock();
        let Some(cur) = man.collections.iter().find(|c| c.name == name) else {
            return Err(Error::NamespaceNotFound(name.to_string()));
        };
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
        self.commit(&mut man, |next| {
            if let Some(c) = next.collections.iter_mut().find(|c| c.id == id) {
                c.options = options.clone();
            }
            Ok(())
        })?;
        let mut st = self.state.write();
        if let Some(c) = st.colls.get_mut(&id) {
            let schema = c.schema().rebucketed(&options);
            self.inserting.write().insert(id, Arc::new(schema.clone()));
            c.catalog.set_schema(schema);
            c.entry.options = options;
        }
        Ok(())
    }
}

impl Engine {
    /// See [`crate::Collection::create_index_with`].
    pub(crate) fn create_index_with(
        &self,
        id: u32,
        name: &str,
        keys: Document,
        options: Document,
    ) -> Result<String> {
        let opts = self.coll_options(id, name)?;
        self.update_indexes(id, name, |existing| {
            let (def, exists) = crate::manifest::parse_index(&keys, &options, &opts, existing)?;
            if exists {
                return Ok((None, def.name));
            }
            let mut next = existing.to_vec();
            let name = def.name.clone();
            next.push(def);
            Ok((Some(next), name))
        })
    }

    /// See [`crate::Collection::list_indexes`].
    pub(crate) fn list_indexes(&self, id: u32, name: &str) -> Result<Vec<Document>> {
        self.with_coll(id, name, |c| {
            c.entry.indexes.iter().map(|i| i.user_doc()).collect()
        })
    }

    /// See [`crate::Collection::list_bucket_indexes`].
    pub(crate) fn list_bucket_indexes(&self, id: u32, name: &str) -> Result<Vec<Document>> {
        self.with_coll(id, name, |c| {
            c.entry
                .indexes
                .iter()
                .map(|i| {
                    bson::doc! {
                        "v": 2,
                        "key": crate::manifest::bucket_key(&i.key, &c.entry.options),
                        "name": &i.name,
                    }
                })
                .collect()
        })
    }

    /// See [`crate::Collection::drop_index`].
    pub(crate) fn drop_index(&self, id: u32, name: &str, index: &str) -> Result<()> {
        self.update_indexes(id, name, |existing| {
            if !existing.iter().any(|i| i.name == index) {
                return Err(Error::IndexNotFound(index.to_string()));
            }
            let next = existing
                .iter()
                .filter(|i| i.name != index)
                .cloned()
                .collect();
            Ok((Some(next), ()))
        })
    }
}

fn validate_collection_name(name: &str) -> Result<()> {
    if name.is_empty() || name.contains('\0') || name.starts_with("system.") || name.len() > 255 {
        return Err(Error::InvalidOptions(format!(
            "invalid collection name '{name}': it must be 1-255 bytes, without NUL, and not start with 'system.'"
        )));
    }
    Ok(())
}
