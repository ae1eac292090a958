//! What every engine under comparison provides.

use crate::answer::Answer;
use std::time::Duration;
use tsbucket::bson::Document;

/// Errors of the harness: any engine's, or a file system's.
pub type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// One storage engine loaded with one workload.
pub trait Engine {
    /// Short name for the report.
    fn name(&self) -> &'static str;
    /// Writes one batch durably (per the configured durability) and returns the time spent in
    /// the engine's write calls; converting the documents to the engine's input is not timed.
    fn insert(&mut self, docs: &[Document]) -> Res<Duration>;
    /// Moves everything to its final on-disk form, closes, and returns the time taken.
    fn close(&mut self) -> Res<Duration>;
    /// Opens the closed data again and returns the time taken.
    fn reopen(&mut self) -> Res<Duration>;
    /// Runs the named query and returns its answer.
    fn query(&mut self, name: &str) -> Res<Answer>;
    /// How the engine answers `name` where that is not a native query, for the report.
    fn note(&self, name: &str) -> Option<&'static str>;
}

/// An error for a query name the engine does not know.
pub fn unknown(engine: &str, name: &str) -> Box<dyn std::error::Error + Send + Sync> {
    format!("{engine}: no query named {name}").into()
}
