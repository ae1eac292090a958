//! A command as it arrived, the connection state it runs in, and the argument readers every
//! command shares.

use crate::error::{CmdResult, CommandError, BAD_VALUE, INVALID_NAMESPACE};
use bson::{Bson, Document, RawDocumentBuf};

/// One command as it arrived: its database, its body and its document sequences.
pub struct Request<'a> {
    /// The database the command runs on (`$db`, or the namespace of a legacy query).
    pub db: &'a str,
    /// The command's name, as the client spelled it.
    pub name: String,
    /// The body, parsed.
    pub body: Document,
    /// The body as it arrived, for fields read without parsing (insert documents).
    pub raw: &'a RawDocumentBuf,
    /// Document sequences, by identifier.
    pub sequences: Vec<(String, Vec<RawDocumentBuf>)>,
}

/// What a connection knows about itself between commands.
#[derive(Default)]
pub struct Session {
    /// The connection's id, as `hello` reports it.
    pub id: i64,
    /// Its login: the user it authenticated as, and a SCRAM conversation in progress.
    pub login: crate::auth::Login,
}

// Argument helpers. MongoDB accepts any number type where it wants a number, and reports a
// wrong type as TypeMismatch (14) or BadValue (2), naming the field.

/// The collection named by the command's first field.
pub fn collection_name(req: &Request<'_>) -> CmdResult<String> {
    match req.body.iter().next() {
        Some((_, Bson::String(s))) if !s.is_empty() => {
            if s.contains('\0') || s.starts_with('$') {
                Err(CommandError::new(
                    INVALID_NAMESPACE,
                    format!("invalid collection name '{s}'"),
                ))
            } else {
                Ok(s.clone())
            }
        }
        Some((k, v)) => Err(CommandError::new(
            INVALID_NAMESPACE,
            format!(
                "collection name has invalid type {:?} in {k}",
                v.element_type()
            ),
        )),
        None => Err(CommandError::bad_value("empty command")),
    }
}

/// The document at `key`, if present and not null.
pub fn opt_doc(d: &Document, key: &str) -> CmdResult<Option<Document>> {
    match d.get(key) {
        None | Some(Bson::Null) => Ok(None),
        Some(Bson::Document(v)) => Ok(Some(v.clone())),
        Some(v) => Err(CommandError::type_mismatch(format!(
            "BSON field '{key}' is the wrong type '{:?}', expected type 'object'",
            v.element_type()
        ))),
    }
}

/// The integer at `key` (any number type holding a whole number), if present and not null.
pub fn opt_i64(d: &Document, key: &str) -> CmdResult<Option<i64>> {
    match d.get(key) {
        None | Some(Bson::Null) => Ok(None),
        Some(Bson::Int32(v)) => Ok(Some(i64::from(*v))),
        Some(Bson::Int64(v)) => Ok(Some(*v)),
        Some(Bson::Double(v)) if v.fract() == 0.0 && v.abs() < 9.0e18 => Ok(Some(*v as i64)),
        Some(v) => Err(CommandError::type_mismatch(format!(
            "BSON field '{key}' is the wrong type '{:?}', expected a number",
            v.element_type()
        ))),
    }
}

/// The boolean at `key` (or a number, as MongoDB reads one), if present and not null.
pub fn opt_bool(d: &Document, key: &str) -> CmdResult<Option<bool>> {
    match d.get(key) {
        None | Some(Bson::Null) => Ok(None),
        Some(Bson::Boolean(b)) => Ok(Some(*b)),
        Some(Bson::Int32(v)) => Ok(Some(*v != 0)),
        Some(Bson::Int64(v)) => Ok(Some(*v != 0)),
        Some(Bson::Double(v)) => Ok(Some(*v != 0.0)),
        Some(v) => Err(CommandError::type_mismatch(format!(
            "BSON field '{key}' is the wrong type '{:?}', expected type 'bool'",
            v.element_type()
        ))),
    }
}

/// `v`, refused when negative.
pub fn non_negative(key: &str, v: Option<i64>) -> CmdResult<Option<u64>> {
    match v {
        Some(n) if n < 0 => Err(CommandError::new(
            BAD_VALUE,
            format!("{key} value must be non-negative, but received: {n}"),
        )),
        Some(n) => Ok(Some(n as u64)),
        None => Ok(None),
    }
}

/// `system.buckets.<name>` names the raw buckets of `<name>`.
pub fn buckets_of(coll: &str) -> Option<&str> {
    coll.strip_prefix("system.buckets.")
}
