//! How values map to the integers whose differences the Simple-8b slots carry.

/// Powers of ten a double may be scaled by, indexed by a control byte's scale index. Index 5
/// (not in the table) takes the double's bits as an integer instead.
const SCALES: [f64; 5] = [1.0, 10.0, 100.0, 10_000.0, 100_000_000.0];

/// The scale index that reinterprets a double's bits; the only one non-doubles accept.
pub(crate) const BITS_SCALE: u8 = 5;

/// Doubles scaled beyond ±2^53 are not exact integers.
const EXACT_LIMIT: f64 = 9_007_199_254_740_992.0;

/// Slots are zigzag-encoded: the sign moves to the lowest bit.
pub(crate) fn unzigzag64(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

pub(crate) fn unzigzag128(v: u128) -> i128 {
    ((v >> 1) as i128) ^ -((v & 1) as i128)
}

/// The scale index of a Simple-8b control byte (its high nibble), if it is one.
pub(crate) fn scale_index(control: u8) -> Option<u8> {
    match control >> 4 {
        0x8 => Some(BITS_SCALE),
        n @ 0x9..=0xD => Some(n - 0x9),
        _ => None,
    }
}

/// The integer a double becomes at a scale, if it is exactly representable there (bit for bit:
/// -0.0 is not 0.0).
pub(crate) fn scale_double(v: f64, scale: u8) -> Option<i64> {
    if scale == BITS_SCALE {
        return Some(v.to_bits() as i64);
    }
    let m = *SCALES.get(usize::from(scale))?;
    let scaled = v * m;
    // Also false for NaN.
    if !(-EXACT_LIMIT..=EXACT_LIMIT).contains(&scaled) {
        return None;
    }
    let n = scaled.round() as i64;
    ((n as f64 / m).to_bits() == v.to_bits()).then_some(n)
}

/// The double an integer stands for at a scale.
pub(crate) fn unscale_double(n: i64, scale: u8) -> f64 {
    match SCALES.get(usize::from(scale)) {
        Some(m) => n as f64 / m,
        None => f64::from_bits(n as u64),
    }
}

/// ObjectIds keep their timestamp and counter bytes, interleaved so that the bytes that change
/// most sit lowest: counter 2, time 3, counter 1, time 2, counter 0, time 1, time 0. The five
/// process-unique bytes in the middle are not encoded.
const OID_ORDER: [usize; 7] = [11, 3, 10, 2, 9, 1, 0];

pub(crate) fn oid_to_int(oid: &[u8; 12]) -> i64 {
    let mut b = [0u8; 8];
    for (dst, &src) in b.iter_mut().zip(OID_ORDER.iter()) {
        *dst = oid.get(src).copied().unwrap_or(0);
    }
    i64::from_le_bytes(b)
}

/// The ObjectId of an encoded integer, taking the process-unique bytes from `unique_from`.
pub(crate) fn int_to_oid(v: i64, unique_from: &[u8; 12]) -> [u8; 12] {
    let b = v.to_le_bytes();
    let mut oid = *unique_from;
    for (&src, &dst) in b.iter().zip(OID_ORDER.iter()) {
        if let Some(slot) = oid.get_mut(dst) {
            *slot = src;
        }
    }
    oid
}

/// Up to 16 bytes as a little-endian integer, zero-padded; `None` for longer ones.
pub(crate) fn bytes_to_int(bytes: &[u8]) -> Option<i128> {
    let mut b = [0u8; 16];
    b.get_mut(..bytes.len())?.copy_from_slice(bytes);
    Some(i128::from_le_bytes(b))
}

/// Strings are reversed before that (their ends differ most), and those of more than 16 bytes
/// or starting with a NUL byte (which the reversal would make ambiguous) become 0.
pub(crate) fn string_to_int(s: &[u8]) -> i128 {
    if s.first() == Some(&0) {
        return 0;
    }
    let mut rev: Vec<u8> = s.to_vec();
    rev.reverse();
    bytes_to_int(&rev).unwrap_or(0)
}

/// The bytes of an encoded string: the reversed little-endian bytes up to the last non-zero one.
pub(crate) fn int_to_string(v: i128) -> Vec<u8> {
    let b = v.to_le_bytes();
    let len = b.iter().rposition(|&x| x != 0).map_or(0, |i| i + 1);
    b.iter().take(len).rev().copied().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zigzag() {
        assert_eq!(unzigzag64(0), 0);
        assert_eq!(unzigzag64(1), -1);
        assert_eq!(unzigzag64(2), 1);
        assert_eq!(unzigzag64(u64::MAX), i64::MIN);
        assert_eq!(unzigzag64(u64::MAX - 1), i64::MAX);
        assert_eq!(unzigzag128(3), -2);
        assert_eq!(unzigzag128(u128::MAX), i128::MIN);
    }

    #[test]
    fn doubles() {
        assert_eq!(scale_index(0x80), Some(5));
        assert_eq!(scale_index(0x9F), Some(0));
        assert_eq!(scale_index(0xD0), Some(4));
        assert_eq!(scale_index(0xE0), None);
        assert_eq!(scale_index(0x70), None);
        assert_eq!(scale_double(1.1, 1), Some(11));
        assert_eq!(scale_double(1.1, 0), None);
        assert_eq!(scale_double(3.12345678, 4), Some(312345678));
        assert_eq!(scale_double(-0.0, 0), None);
        assert_eq!(scale_double(0.0, 0), Some(0));
        assert_eq!(scale_double(f64::NAN, 0), None);
        assert_eq!(scale_double(1e300, 0), None);
        assert_eq!(scale_double(-2.5, 5), Some((-2.5f64).to_bits() as i64));
        assert_eq!(unscale_double(11, 1), 1.1);
        assert_eq!(unscale_double(312345678, 4), 3.12345678);
        assert!(unscale_double(f64::NAN.to_bits() as i64, 5).is_nan());
    }

    #[test]
    fn object_ids() {
        let oid = [
            0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xAA, 0xBB, 0xCC,
        ];
        let v = oid_to_int(&oid);
        assert_eq!(
            v.to_le_bytes(),
            [0xCC, 0x44, 0xBB, 0x33, 0xAA, 0x22, 0x11, 0x00]
        );
        assert_eq!(int_to_oid(v, &oid), oid);
        assert_eq!(int_to_oid(v + 1, &oid)[11], 0xCD);
    }

    #[test]
    fn strings_and_binaries() {
        assert_eq!(string_to_int(b""), 0);
        assert_eq!(string_to_int(b"\0a"), 0);
        assert_eq!(string_to_int(&[b'a'; 17]), 0);
        // "hello" reversed is "olleh": 'o' lowest.
        assert_eq!(string_to_int(b"hello"), 0x68_65_6C_6C_6F);
        assert_eq!(int_to_string(0x68_65_6C_6C_6F), b"hello");
        assert_eq!(int_to_string(0), b"");
        let s = b"0123456789abcdef";
        assert_eq!(int_to_string(string_to_int(s)), s);
        assert_eq!(bytes_to_int(&[1, 2]), Some(0x0201));
        assert_eq!(bytes_to_int(&[0; 17]), None);
    }
}
