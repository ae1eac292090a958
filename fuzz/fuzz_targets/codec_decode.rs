#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| tsbucket_testkit::codec_decode::run(data));
