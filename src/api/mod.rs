//! The public facade: [`crate::Database`] and [`crate::Collection`].

pub(crate) mod collection;
pub(crate) mod database;
