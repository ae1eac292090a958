//! Asking the processor for a cache line ahead of its use.

/// Asks for the cache line holding `p`. A hint only: it never faults and reads nothing into
/// the program, whatever the address.
#[inline(always)]
pub(crate) fn line(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is only a hint: it never faults and reads nothing into the program,
    // whatever the address.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(p.cast::<i8>())
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}
