//! CPU priority of the engine's background threads.
//!
//! Under `SyncMode::Always` an insert waits for two threads: its own (validation and encoding)
//! and the log writer (write and `fdatasync`). The applier, which puts durable batches into the
//! bucket catalog, and the flusher, which encodes segments, only have to keep up on average;
//! bounded queues make inserts wait once they fall far behind. Yet at equal priority they take
//! the cores an insert's threads need the moment they wake: on two cores an ingest of a
//! thousand series of ten int64 fields ran at about 1.15-1.35 M measurements/s that way, and at
//! about 1.45-1.58 M/s with the background threads at nice 19 (RocksDB's "low" priority for its
//! compaction threads is the same setting).

use crate::options::BackgroundPriority;

/// Nice value of a background thread at [`BackgroundPriority::Low`].
pub const LOW_NICE: i32 = 19;

/// Applies `p` to the calling thread. Best effort: where the system refuses, or has no
/// per-thread nice value, the thread keeps the priority it has.
pub fn apply_to_this_thread(p: BackgroundPriority) {
    if p == BackgroundPriority::Low {
        set_nice(LOW_NICE);
    }
}

#[cfg(target_os = "linux")]
fn set_nice(nice: i32) {
    // SAFETY: `gettid` and `setpriority` take no pointers; on Linux a thread id names the
    // calling thread alone for PRIO_PROCESS (threads have their own nice values).
    unsafe {
        let tid = libc::gettid();
        let _ = libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, nice);
    }
}

#[cfg(not(target_os = "linux"))]
fn set_nice(_: i32) {}
