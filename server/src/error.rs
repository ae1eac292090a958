//! Command failures as MongoDB reports them: `{ok: 0, errmsg, code, codeName}`.

use bson::{doc, Document};

/// A command that failed: the reply carries the code and name drivers raise it with.
#[derive(Debug, Clone, PartialEq)]
pub struct CommandError {
    /// MongoDB's numeric error code.
    pub code: i32,
    /// What went wrong, for a person.
    pub message: String,
}

/// The result of running a command.
pub type CmdResult<T> = std::result::Result<T, CommandError>;

// MongoDB's codes that the server sends.
/// MongoDB's `InternalError`.
pub const INTERNAL_ERROR: i32 = 1;
/// MongoDB's `BadValue`.
pub const BAD_VALUE: i32 = 2;
/// MongoDB's `FailedToParse`.
pub const FAILED_TO_PARSE: i32 = 9;
/// MongoDB's `Unauthorized`.
pub const UNAUTHORIZED: i32 = 13;
/// MongoDB's `TypeMismatch`.
pub const TYPE_MISMATCH: i32 = 14;
/// MongoDB's `AuthenticationFailed`.
pub const AUTHENTICATION_FAILED: i32 = 18;
/// MongoDB's `IllegalOperation`.
pub const ILLEGAL_OPERATION: i32 = 20;
/// MongoDB's `NamespaceNotFound`.
pub const NAMESPACE_NOT_FOUND: i32 = 26;
/// MongoDB's `CursorNotFound`.
pub const CURSOR_NOT_FOUND: i32 = 43;
/// MongoDB's `CommandNotFound`.
pub const COMMAND_NOT_FOUND: i32 = 59;
/// MongoDB's `InvalidOptions`.
pub const INVALID_OPTIONS: i32 = 72;
/// MongoDB's `InvalidNamespace`.
pub const INVALID_NAMESPACE: i32 = 73;
/// MongoDB's `OperationFailed`.
pub const OPERATION_FAILED: i32 = 96;
/// MongoDB's `NotImplemented`.
pub const NOT_IMPLEMENTED: i32 = 238;

impl CommandError {
    /// A failure with `code`.
    pub fn new(code: i32, message: impl Into<String>) -> CommandError {
        CommandError {
            code,
            message: message.into(),
        }
    }

    /// A malformed argument (`BadValue`).
    pub fn bad_value(message: impl Into<String>) -> CommandError {
        CommandError::new(BAD_VALUE, message)
    }

    /// A field of the wrong BSON type (`TypeMismatch`).
    pub fn type_mismatch(message: impl Into<String>) -> CommandError {
        CommandError::new(TYPE_MISMATCH, message)
    }

    /// The reply document.
    pub fn to_document(&self) -> Document {
        doc! {
            "ok": 0.0,
            "errmsg": self.message.clone(),
            "code": self.code,
            "codeName": code_name(self.code),
        }
    }
}

impl From<tsbucket::Error> for CommandError {
    fn from(e: tsbucket::Error) -> CommandError {
        let code = match &e {
            tsbucket::Error::ReadOnly(_) => ILLEGAL_OPERATION,
            tsbucket::Error::Locked(_) => OPERATION_FAILED,
            other => other.code().unwrap_or(INTERNAL_ERROR),
        };
        CommandError::new(code, e.to_string())
    }
}

/// MongoDB's name for a code, as drivers show it.
pub fn code_name(code: i32) -> &'static str {
    match code {
        INTERNAL_ERROR => "InternalError",
        BAD_VALUE => "BadValue",
        FAILED_TO_PARSE => "FailedToParse",
        UNAUTHORIZED => "Unauthorized",
        TYPE_MISMATCH => "TypeMismatch",
        AUTHENTICATION_FAILED => "AuthenticationFailed",
        ILLEGAL_OPERATION => "IllegalOperation",
        NAMESPACE_NOT_FOUND => "NamespaceNotFound",
        27 => "IndexNotFound",
        CURSOR_NOT_FOUND => "CursorNotFound",
        48 => "NamespaceExists",
        COMMAND_NOT_FOUND => "CommandNotFound",
        67 => "CannotCreateIndex",
        INVALID_OPTIONS => "InvalidOptions",
        INVALID_NAMESPACE => "InvalidNamespace",
        85 => "IndexOptionsConflict",
        86 => "IndexKeySpecsConflict",
        OPERATION_FAILED => "OperationFailed",
        NOT_IMPLEMENTED => "NotImplemented",
        292 => "QueryExceededMemoryLimitNoDiskUseAllowed",
        334 => "MechanismUnavailable",
        352 => "UnsupportedOpQueryCommand",
        // Codes MongoDB raises at one place in its sources are named by that place.
        31254 => "Location31254",
        40414 => "Location40414",
        40415 => "Location40415",
        40571 => "Location40571",
        _ => "UnknownError",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_errors_keep_their_mongodb_codes() {
        let e = CommandError::from(tsbucket::Error::NamespaceNotFound("w".into()));
        let d = e.to_document();
        assert_eq!(d.get_i32("code").unwrap(), 26);
        assert_eq!(d.get_str("codeName").unwrap(), "NamespaceNotFound");
        assert_eq!(d.get_f64("ok").unwrap(), 0.0);
        let e = CommandError::from(tsbucket::Error::Unsupported("x".into()));
        assert_eq!(e.code, ILLEGAL_OPERATION);
    }
}
