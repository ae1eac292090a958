//! Replays the fuzzer's corpus and crash reproducers for the decoder
//! (`fuzz/corpus/bsoncolumn/`, `fuzz/regressions/bsoncolumn/`) on stable Rust, with the fuzz
//! target's limits: every input decodes to rows or an error, never a panic, and never to more
//! rows than the values allowed.

use std::path::Path;
use tsbucket_bsoncolumn::{decode_with_limits, Limits};

#[test]
fn every_kept_fuzz_input_decodes_or_fails_cleanly() {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    let limits = Limits {
        max_values: 1 << 20,
        max_bytes: 64 << 20,
    };
    let mut n = 0;
    for kind in ["corpus", "regressions"] {
        let Ok(entries) = std::fs::read_dir(fuzz.join(kind).join("bsoncolumn")) else {
            continue;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            let data = std::fs::read(&path).unwrap();
            let r = std::panic::catch_unwind(|| decode_with_limits(&data, &limits));
            match r {
                Ok(Ok(rows)) => assert!(rows.len() <= limits.max_values),
                Ok(Err(e)) => assert!(e.offset() <= data.len(), "{}: {e}", path.display()),
                Err(_) => panic!("{} panics the decoder", path.display()),
            }
            n += 1;
        }
    }
    assert!(n > 0, "no corpus under {}", fuzz.display());
}
