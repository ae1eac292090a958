//! Vectors for decoded integer columns, recycled within a thread.
//!
//! A query decodes a column of a few hundred values per bucket, thousands of buckets in a row.
//! Allocating each column's vector and freeing it after the bucket went through the
//! allocator's slow path every time (the vectors are too large for its per-thread cache): about
//! a twelfth of a scan. A reader that is done with a bucket's column hands its vector back
//! ([`give_back`]), and the next decode takes it ([`zeroed`]).

use std::cell::RefCell;

/// Vectors kept per thread.
const KEPT: usize = 8;
/// Longer vectors are not kept (values).
const KEPT_LEN: usize = 1 << 16;

thread_local! {
    static SPARE: RefCell<Vec<Vec<i64>>> = const { RefCell::new(Vec::new()) };
}

/// A vector of `n` zeros: a spare one when the thread has one.
pub(crate) fn zeroed(n: usize) -> Vec<i64> {
    match SPARE.with(|s| s.borrow_mut().pop()) {
        Some(mut v) => {
            v.clear();
            v.resize(n, 0);
            v
        }
        None => vec![0; n],
    }
}

/// A vector of `n` values for a decoder that writes every one of them before reading any:
/// a spare one keeps whatever its earlier column left (any `i64` is a valid value, so this
/// is stale data, never undefined), which spares the pass [`zeroed`] makes over it.
pub(crate) fn reused(n: usize) -> Vec<i64> {
    match SPARE.with(|s| s.borrow_mut().pop()) {
        Some(mut v) => {
            if v.len() >= n {
                v.truncate(n);
            } else {
                v.resize(n, 0);
            }
            v
        }
        None => vec![0; n],
    }
}

/// Keeps `v` for a later [`zeroed`] or [`reused`] on this thread, unless enough are kept or it
/// is large.
pub fn give_back(v: Vec<i64>) {
    if v.capacity() == 0 || v.capacity() > KEPT_LEN {
        return;
    }
    SPARE.with(|s| {
        let mut s = s.borrow_mut();
        if s.len() < KEPT {
            s.push(v);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_vector_given_back_comes_back_zeroed_at_the_asked_length() {
        let mut v = zeroed(300);
        v.iter_mut()
            .enumerate()
            .for_each(|(i, x)| *x = i as i64 + 1);
        let at = v.as_ptr();
        give_back(v);
        let w = zeroed(200);
        assert_eq!(w.as_ptr(), at, "the spare vector is reused");
        assert_eq!(w, vec![0; 200]);
        give_back(w);
        assert_eq!(zeroed(500), vec![0; 500]);
        // A reused vector has the asked length, whatever it held.
        let mut v = zeroed(400);
        v.fill(9);
        give_back(v);
        assert_eq!(reused(100).len(), 100);
        assert_eq!(reused(700).len(), 700);
        // Large vectors are not kept.
        give_back(vec![7; KEPT_LEN + 1]);
        assert!(zeroed(3).capacity() <= KEPT_LEN);
    }
}
