#![no_main]

use libfuzzer_sys::fuzz_target;
use tsbucket_bsoncolumn::{decode_with_limits, Limits};

// Arbitrary bytes as a BSONColumn binary: the decoder returns rows or an error, never panics,
// and never gives more rows than the values it may read. The limits are below the defaults so
// that inputs made of run-length words stay fast.
fuzz_target!(|data: &[u8]| {
    let limits = Limits {
        max_values: 1 << 20,
        max_bytes: 64 << 20,
    };
    if let Ok(rows) = decode_with_limits(data, &limits) {
        assert!(rows.len() <= limits.max_values);
    }
});
