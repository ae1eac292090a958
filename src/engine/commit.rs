//! The one path by which the manifest changes. A change is made on a copy, stored (the
//! write-temp-then-rename of the manifest is the commit point), and only then becomes the
//! manifest in memory; readers see its effects after that. A failed store poisons the
//! database: what is on disk is then unknown, so nothing more may be written.

use super::Engine;
use crate::error::Result;
use crate::manifest::Manifest;

impl Engine {
    /// Commits the change `edit` makes to `man` (the manifest, whose lock the caller holds).
    /// `edit` works on a copy; an error from it, or a copy left equal to `man`, changes
    /// nothing. Otherwise the generation is bumped, the copy is stored durably and replaces
    /// `man`. Returns what `edit` returned.
    pub(crate) fn commit<R>(
        &self,
        man: &mut Manifest,
        edit: impl FnOnce(&mut Manifest) -> Result<R>,
    ) -> Result<R> {
        let mut next = man.clone();
        let r = edit(&mut next)?;
        if next == *man {
            return Ok(r);
        }
        next.generation += 1;
        next.store(self.vfs.as_ref(), &self.path)
            .inspect_err(|e| self.poison(e))?;
        *man = next;
        Ok(r)
    }
}
