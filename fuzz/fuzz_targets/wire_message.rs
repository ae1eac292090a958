#![no_main]

use libfuzzer_sys::fuzz_target;

// Arbitrary bytes as the stream a client sends the server: the reader and the parser return a
// message or an error, never panic, and what parses as OP_MSG round-trips.
fuzz_target!(|data: &[u8]| {
    tsbucket_server::wire::fuzz_one(data);
});
