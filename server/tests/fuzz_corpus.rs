//! Replays the fuzzer's corpus and crash reproducers for the wire-protocol parser
//! (`fuzz/corpus/wire_message/`, `fuzz/regressions/wire_message/`) on stable Rust, with the
//! fuzz target's check.

use std::path::Path;

#[test]
fn every_kept_fuzz_input_parses_or_fails_cleanly() {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    let mut n = 0;
    for kind in ["corpus", "regressions"] {
        let Ok(entries) = std::fs::read_dir(fuzz.join(kind).join("wire_message")) else {
            continue;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            let data = std::fs::read(&path).unwrap();
            if std::panic::catch_unwind(|| tsbucket_server::wire::fuzz_one(&data)).is_err() {
                panic!("{} panics the parser", path.display());
            }
            n += 1;
        }
    }
    assert!(n > 0, "no corpus under {}", fuzz.display());
}
