//! Decoding a bucket's `control.min` and `control.max` from the directory (see the writer's
//! `encode_entry` and `format-spec/segment.md`, "Directory" and "Reader rules").
//!
//! Most decodes want little of them: open wants the time bounds, the log sequence and a check
//! of every byte; field statistics want one or two fields of many buckets. Decoded into
//! documents, every field name was copied and hashed and every string copied, for each
//! bucket: most of the time to open a database of many small buckets, and of a first query
//! that reads statistics. So a decode fills flat lists of entries, by name index, and builds
//! only the values asked for; the others are checked in place and passed over.
#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

use super::format::{self as f, Cursor, ValueRefs};
use super::sum_entry::{get_sums_of, is_candidate, Candidate, TAG_SUMS};
use super::writer::max_refs;
use crate::sums::SUM_KEY;
use bson::spec::ElementType;
use bson::{Bson, Document};
use std::collections::HashMap;

/// A bucket's `control.min` and `control.max` (with its sums under
/// [`crate::sums::SUM_KEY`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Control {
    /// `control.min`.
    pub min: Document,
    /// `control.max`.
    pub max: Document,
}

/// What decoding a bucket's `control.min` needs besides its bytes: the reference each
/// ObjectId is stored against (the last one of its field in an earlier bucket).
pub(crate) enum OidRefs<'a> {
    /// At open, walking the buckets in order: the last ObjectId per field so far, and the
    /// table where each bucket's references are kept for decoding it again later.
    Walk {
        last: &'a mut HashMap<u32, [u8; 12]>,
        kept: &'a mut Vec<(u32, [u8; 12])>,
    },
    /// Decoding one bucket again: the references kept for it at open.
    Kept(&'a [(u32, [u8; 12])]),
}

impl OidRefs<'_> {
    fn reference(&mut self, name: u32) -> [u8; 12] {
        match self {
            OidRefs::Walk { last, kept } => {
                let r = last.get(&name).copied().unwrap_or_default();
                kept.push((name, r));
                r
            }
            OidRefs::Kept(k) => k
                .iter()
                .find(|(n, _)| *n == name)
                .map_or([0; 12], |(_, r)| *r),
        }
    }

    fn decoded(&mut self, name: u32, oid: [u8; 12]) {
        if let OidRefs::Walk { last, .. } = self {
            last.insert(name, oid);
        }
    }
}

/// Which values of `control.min/max` a decode builds. Numbers are always built (the sums are
/// stored against them) and so are ObjectIds (cheap, and each is the next one's reference);
/// every other value is checked and passed over unless asked for.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Keep<'a> {
    All,
    /// The fields with these name indexes.
    Only(&'a [u32]),
}

impl Keep<'_> {
    fn wants(&self, name: u32, tag: u8) -> bool {
        const BUILT: [u8; 4] = [
            ElementType::Double as u8,
            ElementType::Int32 as u8,
            ElementType::Int64 as u8,
            ElementType::ObjectId as u8,
        ];
        match self {
            Keep::All => true,
            Keep::Only(names) => BUILT.contains(&tag) || names.contains(&name),
        }
    }
}

/// A bucket's `control.min/max` as decoded: entries by name index in stored order, the value
/// `None` where it was passed over. Reused from bucket to bucket, so a walk over many buckets
/// allocates only for the values it builds.
#[derive(Debug, Default)]
pub(crate) struct ControlEntries {
    pub min: Vec<(u32, Option<Bson>)>,
    /// Without the sums entry.
    pub max: Vec<(u32, Option<Bson>)>,
    /// Each field's sum (see [`crate::sums`]), also for a one-row bucket whose sums are not
    /// stored: its numeric maxima.
    pub sums: Vec<(u32, Bson)>,
    /// One bit per name index, to find a field listed twice.
    seen: Vec<u64>,
    cands: Vec<(u32, usize, usize)>,
    cand_sums: Vec<(usize, Bson)>,
}

/// The value of field `name` among `entries`: `None` when it is absent, `Some(None)` when it
/// was passed over.
pub(crate) fn find(entries: &[(u32, Option<Bson>)], name: u32) -> Option<Option<&Bson>> {
    entries
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, v)| v.as_ref())
}

/// [`find`] for an entry expected at position `hint`, which is looked at first: a bucket's
/// `control.min` and `control.max` list its fields in the same order, so walking one list
/// against the other stays linear in the number of fields.
pub(crate) fn find_near(
    entries: &[(u32, Option<Bson>)],
    name: u32,
    hint: usize,
) -> Option<Option<&Bson>> {
    match entries.get(hint) {
        Some((n, v)) if *n == name => Some(v.as_ref()),
        _ => find(entries, name),
    }
}

/// Reads a name index, which must be below `names.len()`.
fn name_index(c: &mut Cursor<'_>, names: &[String]) -> Result<u32, String> {
    let n = c.varint_u32()?;
    match names.get(n as usize) {
        Some(_) => Ok(n),
        None => Err(c.err(format!("name index {n} out of range"))),
    }
}

/// Marks `name` in the bit set `seen`; false when it already was.
fn first_sight(seen: &mut Vec<u64>, name: u32) -> bool {
    let (w, b) = ((name / 64) as usize, name % 64);
    if seen.len() <= w {
        seen.resize(w + 1, 0);
    }
    match seen.get_mut(w) {
        Some(word) if *word & (1 << b) == 0 => {
            *word |= 1 << b;
            true
        }
        _ => false,
    }
}

/// Appends `entry` to `list` and marks its name in `seen`; `Err` when the name was marked
/// already. The entry is kept either way, so that [`forget`] clears the marks of a failed read.
fn push_once(
    list: &mut Vec<(u32, Option<Bson>)>,
    seen: &mut Vec<u64>,
    entry: (u32, Option<Bson>),
) -> Result<(), ()> {
    let first = first_sight(seen, entry.0);
    list.push(entry);
    first.then_some(()).ok_or(())
}

/// Clears from `seen` every bit [`first_sight`] set for `entries`.
fn forget(seen: &mut [u64], entries: &[(u32, Option<Bson>)]) {
    for (n, _) in entries {
        if let Some(word) = seen.get_mut((n / 64) as usize) {
            *word = 0;
        }
    }
}

/// Reads the value of field `k` whose tag is `tag`: built when `keep` wants it, else checked
/// and passed over (`None`).
fn value(
    c: &mut Cursor<'_>,
    k: u32,
    tag: u8,
    refs: &ValueRefs,
    keep: Keep<'_>,
) -> Result<Option<Bson>, String> {
    if keep.wants(k, tag) {
        return f::get_value_with_tag(c, tag, refs).map(Some);
    }
    f::skip_value_with_tag(c, tag, refs).map(|()| None)
}

impl ControlEntries {
    /// Decodes the `control.min/max` of a bucket of `count` rows whose `_id` time is `base`
    /// milliseconds (see the writer's `encode_entry`), building the values `keep` asks for.
    /// Every byte is checked as a full decode checks it.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn read(
        &mut self,
        c: &mut Cursor<'_>,
        names: &[String],
        count: u32,
        time_field: &str,
        base: i64,
        oids: &mut OidRefs<'_>,
        keep: Keep<'_>,
    ) -> Result<(), String> {
        self.min.clear();
        self.max.clear();
        self.sums.clear();
        // Each list's marks are cleared however its read ends, so that a failed read leaves
        // no stale marks behind for the next bucket decoded with these entries.
        let n = c.count()?;
        let result = self.read_min(c, names, n, base, oids, keep);
        forget(&mut self.seen, &self.min);
        result?;
        let n = c.count()?;
        let mut stored_sums = false;
        let result = self.read_max(c, names, n, base, keep, &mut stored_sums);
        forget(&mut self.seen, &self.max);
        result?;
        self.read_sums(c, names, count, time_field, stored_sums)
    }

    /// Reads the `n` entries of `control.min`.
    fn read_min(
        &mut self,
        c: &mut Cursor<'_>,
        names: &[String],
        n: usize,
        base: i64,
        oids: &mut OidRefs<'_>,
        keep: Keep<'_>,
    ) -> Result<(), String> {
        for _ in 0..n {
            let k = name_index(c, names)?;
            let tag = c.u8()?;
            let oid = match tag == ElementType::ObjectId as u8 {
                true => oids.reference(k),
                false => [0; 12],
            };
            let v = value(c, k, tag, &ValueRefs { oid, millis: base }, keep)?;
            if let Some(Bson::ObjectId(o)) = &v {
                oids.decoded(k, o.bytes());
            }
            push_once(&mut self.min, &mut self.seen, (k, v))
                .map_err(|()| c.err("duplicate control.min field"))?;
        }
        Ok(())
    }

    /// Reads the `n` entries of `control.max` up to its sums entry, if any (`stored_sums`).
    fn read_max(
        &mut self,
        c: &mut Cursor<'_>,
        names: &[String],
        n: usize,
        base: i64,
        keep: Keep<'_>,
        stored_sums: &mut bool,
    ) -> Result<(), String> {
        for i in 0..n {
            let k = name_index(c, names)?;
            let tag = c.u8()?;
            let is_sum = names.get(k as usize).is_some_and(|s| s == SUM_KEY);
            if is_sum != (tag == TAG_SUMS) {
                return Err(c.err(format!(
                    "value tag {tag:#04x} under control.max.{:?}",
                    names.get(k as usize).map_or("", |s| s.as_str())
                )));
            }
            if tag == TAG_SUMS {
                // Its layout depends on the entries before it, so nothing may follow it.
                if i + 1 != n {
                    return Err(c.err("the sums entry is not the last of control.max"));
                }
                *stored_sums = true;
                break;
            }
            let min_v = find_near(&self.min, k, i);
            let v = if tag == f::TAG_SAME_AS_MIN {
                match min_v {
                    Some(v) => v.cloned(),
                    None => {
                        return Err(c.err("control.max refers to a missing control.min"));
                    }
                }
            } else {
                value(c, k, tag, &max_refs(min_v.flatten(), base), keep)?
            };
            push_once(&mut self.max, &mut self.seen, (k, v))
                .map_err(|()| c.err("duplicate control.max field"))?;
        }
        Ok(())
    }

    /// Reads the sums entry (its tag read) when `stored`, or takes a one-row bucket's numeric
    /// maxima.
    fn read_sums(
        &mut self,
        c: &mut Cursor<'_>,
        names: &[String],
        count: u32,
        time_field: &str,
        stored: bool,
    ) -> Result<(), String> {
        if !stored && count != 1 {
            return Ok(());
        }
        // Candidates as (name, position in min, position in max), then borrowed.
        self.cands.clear();
        for (j, (k, v)) in self.max.iter().enumerate() {
            let (Some(v), Some(name)) = (v, names.get(*k as usize)) else {
                continue;
            };
            if is_candidate(name, v, time_field) {
                // Usually at the same place in both lists (see `find_near`).
                let i = match self.min.get(j) {
                    Some(e) if e.0 == *k => j,
                    _ => self
                        .min
                        .iter()
                        .position(|e| e.0 == *k)
                        .unwrap_or(usize::MAX),
                };
                self.cands.push((*k, i, j));
            }
        }
        if stored {
            self.read_stored_sums(c, names, count)?;
        }
        // A one-row bucket's sums are its numeric maxima, whether or not they are stored.
        if count == 1 && self.sums.is_empty() {
            for &(k, _, j) in &self.cands {
                if let Some((_, Some(v))) = self.max.get(j) {
                    self.sums.push((k, v.clone()));
                }
            }
        }
        Ok(())
    }

    fn read_stored_sums(
        &mut self,
        c: &mut Cursor<'_>,
        names: &[String],
        count: u32,
    ) -> Result<(), String> {
        let (min, max, cands) = (&self.min, &self.max, &self.cands);
        let cand = |i: usize| {
            let &(k, at_min, at_max) = cands.get(i)?;
            Some(Candidate {
                name: names.get(k as usize)?,
                min: min.get(at_min).and_then(|e| e.1.as_ref()),
                max: max.get(at_max)?.1.as_ref()?,
            })
        };
        self.cand_sums.clear();
        get_sums_of(c, cands.len(), cand, count, &mut self.cand_sums)?;
        for (i, v) in self.cand_sums.drain(..) {
            if let Some(&(k, _, _)) = self.cands.get(i) {
                self.sums.push((k, v));
            }
        }
        Ok(())
    }

    /// The decoded entries as documents (every value built: decoded with [`Keep::All`]), the
    /// sums under [`SUM_KEY`] of `max`.
    pub(crate) fn to_control(&self, names: &[String]) -> Control {
        let doc = |entries: &[(u32, Option<Bson>)]| -> Document {
            entries
                .iter()
                .filter_map(|(k, v)| Some((names.get(*k as usize)?.clone(), v.clone()?)))
                .collect()
        };
        let min = doc(&self.min);
        let mut max = doc(&self.max);
        if !self.sums.is_empty() {
            let sums: Document = self
                .sums
                .iter()
                .filter_map(|(k, v)| Some((names.get(*k as usize)?.clone(), v.clone())))
                .collect();
            max.insert(SUM_KEY, sums);
        }
        Control { min, max }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "test code: a panic is a test failure")]
mod tests {
    use super::*;

    fn read(e: &mut ControlEntries, bytes: &[u8]) -> Result<(), String> {
        let names = vec!["a".to_string()];
        let mut c = Cursor::new(bytes);
        e.read(
            &mut c,
            &names,
            2,
            "t",
            0,
            &mut OidRefs::Kept(&[]),
            Keep::All,
        )
    }

    /// Entries are reused from bucket to bucket: a read that fails part way must not leave
    /// its fields marked as seen, or the next bucket would look like it lists them twice.
    #[test]
    fn a_failed_read_leaves_nothing_for_the_next() {
        let int32 = ElementType::Int32 as u8;
        // control.min {a: 1}, control.max {a: 2}; zigzag varints.
        let good = [1, 0, int32, 2, 1, 0, int32, 4];
        let mut e = ControlEntries::default();
        read(&mut e, &good).unwrap();
        assert_eq!(e.min, [(0, Some(Bson::Int32(1)))]);
        assert_eq!(e.max, [(0, Some(Bson::Int32(2)))]);
        for bad in [
            &[2, 0, int32, 2][..],             // cut after the first control.min entry
            &[2, 0, int32, 2, 0, int32, 2],    // control.min lists `a` twice
            &[1, 0, int32, 2, 2, 0, int32, 4], // cut after the first control.max entry
            &[1, 0, int32, 2, 2, 0, int32, 4, 0, int32, 4], // control.max lists `a` twice
        ] {
            assert!(read(&mut e, bad).is_err(), "{bad:?}");
            read(&mut e, &good).unwrap();
        }
    }
}
