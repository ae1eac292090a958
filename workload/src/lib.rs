//! Seeded, deterministic generators of tsbucket's benchmark workloads: the TSBS devops
//! cpu-only shape and the seed 004 shape (see `docs/performance.md`), the queries run on them,
//! and a loader that creates or reuses a database of them.

pub mod devops;
pub mod formulations;
pub mod load;
pub mod queries;
pub mod rng;
pub mod seed004;

pub use devops::Devops;
pub use load::{bench_collections, bench_scale, load_or_create};
pub use seed004::Seed004;
