//! Record buffers, recycled.
//!
//! A batch is encoded into one buffer of a few hundred kilobytes, which travels through the
//! log writer to the applier. Allocated fresh for every batch, it costs page faults and
//! zeroing each time, and freeing it on another thread lets the allocator hand the memory
//! back to the system, so the next batch faults it in again. The applier gives the buffer
//! back once the batch is applied, and the next batch takes it.

use parking_lot::Mutex;

/// Buffers kept for reuse: one per batch in flight is enough.
const KEPT: usize = 4;
/// Larger buffers (a rare huge batch) are not kept.
const KEPT_CAPACITY: usize = 64 << 20;

static SPARE: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());

/// An empty buffer with room for at least `capacity` bytes, recycled when one is spare.
pub fn take(capacity: usize) -> Vec<u8> {
    let spare = SPARE.lock().pop();
    match spare {
        Some(mut b) => {
            b.reserve(capacity);
            b
        }
        None => Vec::with_capacity(capacity),
    }
}

/// Hands a buffer back for a later batch.
pub fn give_back(mut buf: Vec<u8>) {
    if buf.capacity() > KEPT_CAPACITY {
        return;
    }
    buf.clear();
    let mut spare = SPARE.lock();
    if spare.len() < KEPT {
        spare.push(buf);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_come_back_empty_with_their_room() {
        let mut b = take(1000);
        b.extend_from_slice(&[7; 1000]);
        let cap = b.capacity();
        give_back(b);
        // Other tests share the pool: take until this buffer (or one like it) comes back.
        let again = take(10);
        assert!(again.is_empty());
        assert!(again.capacity() >= 10);
        assert!(cap >= 1000);
        give_back(Vec::with_capacity(KEPT_CAPACITY + 1));
    }
}
