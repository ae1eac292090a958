//! Expiry (`expireAfterSeconds`): deleting whole buckets whose measurements are all older than
//! now − expireAfterSeconds, on demand ([`crate::Database::sweep_expired`]) or from a background thread.
//!
//! The rule and its crash safety are in `format-spec/ttl.md`. In short: a bucket is expired
//! when its latest time (`control.max` of the time field) is older than the cutoff; open buckets
//! that are wholly expired are closed and flushed first, so every deletion is a manifest change
//! (the commit point); a bucket is deleted by listing it in the manifest's `expiredBuckets`, and
//! a segment file goes once all its buckets are listed and the log can no longer replay any of
//! its rows.

use super::Engine;
use crate::error::{Error, Result};
use crate::index::id::id_key;
use crate::manifest::segment_path;
use crate::manifest::SEG_DIR;
use crate::segment::Segment;
use bson::DateTime;
use crossbeam_channel::Receiver;
use std::collections::BTreeMap;
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

/// What a TTL sweep deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SweepResult {
    /// Buckets deleted (no query returns them any more).
    pub buckets_deleted: u64,
    /// Measurements in those buckets.
    pub measurements_deleted: u64,
    /// Bytes of segment files deleted by this sweep. A segment is deleted once all its buckets
    /// are expired, which may be a later sweep than the one that deleted its last bucket.
    pub bytes_reclaimed: u64,
}

/// Buckets whose latest measurement is older than this (milliseconds) are expired.
pub fn cutoff_ms(now: DateTime, expire_after_seconds: u64) -> i64 {
    let secs = i64::try_from(expire_after_seconds).unwrap_or(i64::MAX);
    now.timestamp_millis()
        .saturating_sub(secs.saturating_mul(1000))
}

fn max_seq(seg: &Segment) -> u64 {
    seg.buckets().iter().map(|b| b.max_seq()).max().unwrap_or(0)
}

pub(crate) fn sweep(db: &Engine, now: DateTime) -> Result<SweepResult> {
    let mut res = SweepResult::default();
    // The manifest lock keeps flushes and DDL out; inserts only wait for the short state-lock
    // sections below.
    let mut man = db.manifest.lock();
    let cutoffs: BTreeMap<u32, i64> = man
        .collections
        .iter()
        .filter_map(|c| {
            c.options
                .get_expire_after_seconds()
                .map(|e| (c.id, cutoff_ms(now, e)))
        })
        .collect();
    if cutoffs.is_empty() {
        return Ok(res);
    }
    // Wholly expired open buckets are closed and flushed like any other, so deleting them is a
    // manifest change and a replay of the log cannot bring them back.
    {
        let mut st = db.state.write();
        for (id, &cut) in &cutoffs {
            if let Some(c) = st.colls.get_mut(id) {
                c.catalog.close_expired(cut);
            }
        }
    }
    db.flush_locked(&mut man, false)?;

    let generation = man.generation;
    let checkpoint = man.wal_checkpoint;
    let gone = db.commit(&mut man, |next| {
        let mut gone: Vec<(u32, u64)> = Vec::new();
        {
            // Segments are immutable and, with the manifest lock held, no other thread adds or
            // removes any: take handles and decide without holding the state lock.
            let segs: BTreeMap<u64, Arc<Segment>> = {
                let st = db.state.read();
                cutoffs
                    .keys()
                    .filter_map(|id| st.colls.get(id))
                    .flat_map(|c| c.segments.iter().map(|(&k, v)| (k, v.clone())))
                    .collect()
            };
            for entry in next.collections.iter_mut() {
                let Some(&cut) = cutoffs.get(&entry.id) else {
                    continue;
                };
                for sid in entry.segments.clone() {
                    let Some(seg) = segs.get(&sid) else {
                        continue;
                    };
                    for (i, b) in seg.buckets().iter().enumerate() {
                        let i = i as u32;
                        if b.time_range().1 < cut && !entry.is_expired(sid, i) {
                            entry.expired.entry(sid).or_default().insert(i);
                            res.buckets_deleted += 1;
                            res.measurements_deleted += u64::from(b.count);
                        }
                    }
                    let n = seg.buckets().len();
                    let all = entry.expired.get(&sid).is_some_and(|s| s.len() == n);
                    // Rows the log would replay must stay in a file that names them (replay skips
                    // rows a segment holds), so the file waits for the checkpoint to pass them.
                    if all && max_seq(seg) <= checkpoint {
                        entry.expired.remove(&sid);
                        entry.segments.retain(|&s| s != sid);
                        res.bytes_reclaimed += seg.len_bytes();
                        gone.push((entry.id, sid));
                    }
                }
            }
        }
        Ok(gone)
    })?;
    if man.generation == generation {
        return Ok(res);
    }
    {
        let mut st = db.state.write();
        for entry in &man.collections {
            if !cutoffs.contains_key(&entry.id) {
                continue;
            }
            let Some(c) = st.colls.get_mut(&entry.id) else {
                continue;
            };
            let mut dead = Vec::new();
            for (&sid, idx) in &entry.expired {
                if let Some(seg) = c.segments.get(&sid) {
                    for &i in idx {
                        if !c.entry.is_expired(sid, i) {
                            if let Some(b) = seg.buckets().get(i as usize) {
                                dead.push(id_key(b));
                            }
                        }
                    }
                }
            }
            for &(cid, sid) in &gone {
                if cid != entry.id {
                    continue;
                }
                if let Some(seg) = c.segments.remove(&sid) {
                    for (i, b) in seg.buckets().iter().enumerate() {
                        if !c.entry.is_expired(sid, i as u32) {
                            dead.push(id_key(b));
                        }
                    }
                }
            }
            for k in dead {
                c.index.remove(&k);
            }
            c.entry.segments = entry.segments.clone();
            c.entry.expired = entry.expired.clone();
        }
    }
    drop(man);
    // The manifest no longer names these files; if removing one fails (or the process dies
    // first), the next open removes it as a leftover.
    for (_, sid) in &gone {
        let _ = db.vfs.remove_file(&segment_path(&db.path, *sid));
    }
    if !gone.is_empty() {
        let _ = db.vfs.sync_dir(&db.path.join(SEG_DIR));
    }
    Ok(res)
}

/// Starts the background sweeper: every `every`, a sweep with the database clock's time. It
/// stops when `stop` is disconnected (close or drop) or the database is gone.
pub(crate) fn spawn_sweeper(
    inner: Weak<Engine>,
    every: Duration,
    stop: Receiver<()>,
) -> Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("tsbucket-ttl".into())
        .spawn(move || {
            if let Some(db) = inner.upgrade() {
                crate::priority::apply_to_this_thread(db.opts.background_priority);
            }
            sweep_every(inner, every, stop)
        })
        .map_err(Error::Io)
}

/// The sweeper thread's loop.
fn sweep_every(inner: Weak<Engine>, every: Duration, stop: Receiver<()>) {
    loop {
        crossbeam_channel::select! {
            recv(stop) -> _ => return,
            default(every) => {}
        }
        let Some(db) = inner.upgrade() else { return };
        if db.check_writable().is_err() {
            continue;
        }
        // A failed sweep poisons the database (the manifest write failed) or leaves
        // nothing changed; the next write reports it.
        let _ = sweep(&db, db.opts.clock.now());
    }
}
