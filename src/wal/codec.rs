//! Compacted records: a payload stored in a smaller form that only makes sense after the
//! records before it in the same file.
//!
//! Insert batches repeat themselves from one record to the next: the same element names in the
//! same order, the same meta values (a measurement of ten string tags and ten int64 fields is
//! about 470 bytes, of which some 100 are values). The log stores each such repeat once per
//! file and refers back to it, which shrinks what every insert must write and `fdatasync`, and
//! the zeros written ahead of it. The WAL itself knows nothing of the payload: the engine
//! supplies a [`Compact`] for the writer and an [`Expand`] for recovery, and the log keeps them
//! in step: both start over at every file, and a compactor that starts over in the middle of a
//! file (the writer restarted after a reopen) says so in the record it writes next.

/// Turns payloads into their compact form, on the writer thread. It may remember what it
/// wrote (element names, meta values) to refer back to it in later records of the same file.
pub trait Compact<T>: Send {
    /// Forgets everything remembered: the next record starts a new file, or follows a restart
    /// of the writer, and must be readable with no earlier record of the file. A compactor
    /// must also start in this state.
    fn reset(&mut self);

    /// Appends the compact form of `payload` (whose engine-side description is `item`) to
    /// `out` and returns true; or leaves `out` and its own state as they were and returns
    /// false, and the payload is stored as it is. What it returns true for is stored, so any
    /// state it updated must match what it wrote. The compact form must not be longer than
    /// `payload`.
    fn compact(&mut self, payload: &[u8], item: &T, out: &mut Vec<u8>) -> bool;
}

/// Turns compacted records back into their payloads during recovery. It is fed every
/// compacted record of a file in order, those older than the checkpoint included, and is
/// reset at the start of each file.
pub trait Expand {
    /// Forgets everything remembered (a new file starts).
    fn reset(&mut self);

    /// Appends the payload whose compact form is `stored` to `out`, at most `max` bytes of
    /// it. An error means the record cannot be expanded: the log is damaged, or was written
    /// by a compactor this expander does not match.
    fn expand(
        &mut self,
        stored: &[u8],
        max: usize,
        out: &mut Vec<u8>,
    ) -> std::result::Result<(), String>;
}
