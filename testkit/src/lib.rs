//! tsbucket's test kit: the fuzz harnesses, shared by the cargo-fuzz targets in `fuzz/` and by
//! `tests/fuzz_corpus.rs`, which replays the committed corpora on stable Rust, and the value
//! generators the library's unit tests draw from.
//!
//! Each module has one entry point, `run(data)`, that must never panic for any input unless
//! the library broke one of the invariants the harness checks (a decoded value that differs
//! from what was encoded, an acknowledged insert lost after a crash, ...). Structure is
//! decoded from the raw bytes with [`Input`] so the library needs no fuzzing dependency.

pub mod codec_decode;
pub mod codec_roundtrip;
pub mod filter_parse;
pub mod insert_bson;
pub mod model;
pub mod pipeline_parse;
pub mod segment_reader;
pub mod wal_codec;
pub mod wal_reader;

mod fixture;
mod input;
mod query_gen;
pub mod values;

pub use input::Input;
