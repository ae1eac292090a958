//! Seeded, deterministic generators of the benchmark workloads (described in
//! `docs/performance.md`): the TSBS devops cpu-only shape and the seed 004 shape.

pub mod devops;
pub mod load;
pub mod queries;
pub mod rng;
pub mod seed004;

pub use devops::Devops;
pub use load::load_or_create;
pub use seed004::Seed004;
