//! BSON documents below every other layer: walking a document's elements in its bytes,
//! writing documents as BSON bytes, normalising meta values, and the names reserved for the
//! engine's bookkeeping.

pub mod elements;
pub mod encode;
pub mod meta;

use bson::raw::RawBsonRef;
use bson::Bson;

/// Prefix of the engine's hidden bookkeeping columns. Inserts refuse top-level fields that start
/// with it, so hidden columns cannot collide with user fields.
pub const HIDDEN_PREFIX: char = crate::bucket::BOOKKEEPING_PREFIX;

/// True for the engine's hidden bookkeeping columns.
pub fn is_hidden(name: &str) -> bool {
    is_hidden_name(name.as_bytes())
}

/// [`is_hidden`] for a name still in BSON bytes.
pub fn is_hidden_name(name: &[u8]) -> bool {
    // The prefix is one ASCII character, so its byte is the char's value.
    name.first() == Some(&(HIDDEN_PREFIX as u8))
}

/// Converts a raw value to an owned `Bson`; `Null` for bytes that do not convert (cannot happen
/// for documents this crate encoded itself).
pub fn to_bson(v: RawBsonRef<'_>) -> Bson {
    Bson::try_from(v).unwrap_or(Bson::Null)
}
