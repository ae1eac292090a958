//! Verifying a database: every segment against its checksums and statistics, the files in
//! `seg/` against the manifest, and the `_id` index against one rebuilt from the segments.

use super::Engine;
use crate::catalog::FitLimits;
use crate::collstate::CollState;
use crate::error::{Error, Result};
use crate::manifest::SEG_DIR;
use crate::manifest::{parse_segment_name, segment_path};
use std::collections::HashSet;

/// What [`crate::Database::verify`] checked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VerifyReport {
    /// Segment files verified.
    pub segments: u64,
    /// Buckets in them.
    pub buckets: u64,
    /// Measurements in them.
    pub measurements: u64,
}

impl Engine {
    /// [`Database::verify`], calling `progress(segments_done, segments_total)` after each
    /// segment, for a progress display on large databases.
    pub(crate) fn verify(&self, mut progress: impl FnMut(u64, u64)) -> Result<VerifyReport> {
        self.check_open()?;
        // Holding the manifest lock keeps flushes and DDL out while files are compared.
        let man = self.manifest.lock();
        let st = self.state.read();
        let mut report = VerifyReport::default();
        let seg_dir = self.path.join(SEG_DIR);
        let listed: HashSet<u64> = man
            .collections
            .iter()
            .flat_map(|c| c.segments.iter().copied())
            .collect();
        let names = match self.vfs.list_dir(&seg_dir) {
            Ok(names) => names,
            // A database that never flushed, copied by a tool that keeps no empty directory
            // (git does not), has no seg/; a reader creates nothing, so it stays missing.
            // Opening for writing creates it.
            Err(e) if self.read_only && e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(e.into()),
        };
        for name in names {
            let known = parse_segment_name(&name).is_some_and(|id| listed.contains(&id));
            // Beside a writer, seg/ also holds what it is flushing now, and files it unlisted
            // since this snapshot was read.
            if !known && !self.read_only {
                return Err(Error::corruption(
                    seg_dir.join(&name),
                    0,
                    "file in seg/ that the manifest does not list",
                ));
            }
        }
        let total: u64 = man
            .collections
            .iter()
            .map(|c| c.segments.len() as u64)
            .sum();
        for entry in &man.collections {
            let Some(c) = st.colls.get(&entry.id) else {
                return Err(Error::corruption(
                    self.path.join(crate::manifest::MANIFEST_FILE),
                    0,
                    format!("collection '{}' is listed but not loaded", entry.name),
                ));
            };
            let mut rebuilt = CollState::new(entry.clone(), FitLimits::of(&self.opts));
            for &sid in &entry.segments {
                let seg = c.segments.get(&sid).ok_or_else(|| {
                    Error::corruption(
                        segment_path(&self.path, sid),
                        0,
                        "segment listed in the manifest is not loaded",
                    )
                })?;
                seg.verify()?;
                report.segments += 1;
                report.buckets += seg.buckets().len() as u64;
                report.measurements += seg
                    .buckets()
                    .iter()
                    .map(|b| u64::from(b.count))
                    .sum::<u64>();
                rebuilt.add_segment(sid, seg.clone());
                progress(report.segments, total);
            }
            if rebuilt.index != c.index {
                return Err(Error::corruption(
                    &seg_dir,
                    0,
                    format!(
                        "the _id index of '{}' holds {} entries, a scan finds {}",
                        entry.name,
                        c.index.len(),
                        rebuilt.index.len()
                    ),
                ));
            }
        }
        Ok(report)
    }
}
