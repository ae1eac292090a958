//! The public facade: [`crate::Database`] and [`crate::Collection`].

pub(crate) mod collection;
pub(crate) mod database;

use crate::engine::Engine;
use std::sync::Arc;

/// The embedder's share of an open engine, held by every [`crate::Database`] and
/// [`crate::Collection`] handle. The background threads hold the engine only weakly and
/// upgrade it for a moment at a time, so the last strong reference could fall to one of them,
/// and the directory lock outlive every handle. When the last handle goes, the engine is shut
/// down on that thread instead: the directory can be opened again as soon as the drop returns.
pub(crate) struct Handles(Arc<Engine>);

impl Handles {
    pub(crate) fn new(engine: Arc<Engine>) -> Arc<Handles> {
        Arc::new(Handles(engine))
    }
}

impl std::ops::Deref for Handles {
    type Target = Engine;
    fn deref(&self) -> &Engine {
        &self.0
    }
}

impl Drop for Handles {
    fn drop(&mut self) {
        // Errors of the final sync have no caller to go to; `Database::close` reports them.
        let _ = self.0.shutdown();
    }
}
