//! Command dispatch: the body's first field names the command, `$db` the database.

mod admin;
mod ddl;
mod read;
mod write;

use crate::error::{
    CmdResult, CommandError, BAD_VALUE, COMMAND_NOT_FOUND, ILLEGAL_OPERATION, INVALID_NAMESPACE,
    UNAUTHORIZED,
};
use crate::reply::RawDoc;
use crate::Shared;
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
    /// The user this connection authenticated as, if any.
    pub user: Option<String>,
    /// A SCRAM conversation in progress.
    pub sasl: Option<crate::auth::Conversation>,
    /// Whether the peer is on a loopback address.
    pub loopback: bool,
}

/// Runs one command and returns the reply's BSON bytes: the result, or the error document.
pub fn run(shared: &Shared, session: &mut Session, req: Request<'_>) -> Vec<u8> {
    match dispatch(shared, session, &req) {
        Ok(bytes) => bytes,
        Err(e) => bson_bytes(&e.to_document()),
    }
}

/// A reply document as bytes.
pub fn bson_bytes(d: &Document) -> Vec<u8> {
    let mut out = Vec::new();
    if d.to_writer(&mut out).is_err() {
        out.clear();
        let _ = bson::doc! {"ok": 0.0, "errmsg": "the reply could not be encoded", "code": 1, "codeName": "InternalError"}
            .to_writer(&mut out);
    }
    out
}

fn ok(mut d: Document) -> CmdResult<Vec<u8>> {
    d.insert("ok", 1.0);
    Ok(bson_bytes(&d))
}

/// Commands a client may send before it authenticates.
fn open_to_all(name: &str) -> bool {
    matches!(
        name,
        "hello"
            | "ismaster"
            | "ping"
            | "buildinfo"
            | "saslstart"
            | "saslcontinue"
            | "endsessions"
            | "logout"
            | "getnonce"
    )
}

fn dispatch(shared: &Shared, session: &mut Session, req: &Request<'_>) -> CmdResult<Vec<u8>> {
    let name = req.name.to_ascii_lowercase();
    if shared.auth.is_some() && session.user.is_none() && !open_to_all(&name) {
        return Err(CommandError::new(
            UNAUTHORIZED,
            format!("command {} requires authentication", req.name),
        ));
    }
    if req.body.contains_key("txnNumber")
        || req.body.contains_key("startTransaction")
        || req.body.contains_key("autocommit")
    {
        return Err(CommandError::new(
            ILLEGAL_OPERATION,
            "Transaction numbers are only allowed on a replica set member or mongos",
        ));
    }
    match name.as_str() {
        "hello" | "ismaster" => admin::hello(shared, session, req),
        "ping" => ok(Document::new()),
        "buildinfo" => admin::build_info(),
        "hostinfo" => admin::host_info(),
        "getparameter" => admin::get_parameter(req),
        "getcmdlineopts" => admin::cmd_line_opts(shared),
        "getlog" => admin::get_log(req),
        "whatsmyuri" => ok(bson::doc! {"you": "127.0.0.1"}),
        "connectionstatus" => admin::connection_status(session),
        "serverstatus" => admin::server_status(shared),
        "endsessions" | "killsessions" | "refreshsessions" => ok(Document::new()),
        "logout" => {
            session.user = None;
            ok(Document::new())
        }
        "saslstart" => crate::auth::sasl_start(shared, session, req),
        "saslcontinue" => crate::auth::sasl_continue(shared, session, req),
        "listdatabases" => ddl::list_databases(shared, req),
        "dropdatabase" => ddl::drop_database(shared, req),
        "create" => ddl::create(shared, req),
        "listcollections" => ddl::list_collections(shared, req),
        "drop" => ddl::drop(shared, req),
        "collmod" => ddl::coll_mod(shared, req),
        "createindexes" => ddl::create_indexes(shared, req),
        "listindexes" => ddl::list_indexes(shared, req),
        "dropindexes" | "deleteindexes" => ddl::drop_indexes(shared, req),
        "collstats" => read::coll_stats(shared, req),
        "dbstats" => read::db_stats(shared, req),
        "insert" => write::insert(shared, req),
        "update" => write::update(shared, req),
        "delete" => write::delete(shared, req),
        "find" => read::find(shared, req),
        "getmore" => read::get_more(shared, req),
        "killcursors" => read::kill_cursors(shared, req),
        "aggregate" => read::aggregate(shared, req),
        "count" => read::count(shared, req),
        "distinct" => read::distinct(shared, req),
        "explain" => read::explain(shared, req),
        "committransaction" | "aborttransaction" => Err(CommandError::new(
            ILLEGAL_OPERATION,
            "Transaction numbers are only allowed on a replica set member or mongos",
        )),
        "findandmodify" | "mapreduce" | "renamecollection" | "compact" | "validate"
        | "shutdown" => Err(CommandError::new(
            crate::error::NOT_IMPLEMENTED,
            format!(
                "{} is a MongoDB command that tsbucket does not serve",
                req.name
            ),
        )),
        _ => Err(CommandError::new(
            COMMAND_NOT_FOUND,
            format!("no such command: '{}'", req.name),
        )),
    }
}

// Argument helpers. MongoDB accepts any number type where it wants a number, and reports a
// wrong type as TypeMismatch (14) or BadValue (2), naming the field.

/// The collection named by the command's first field.
fn collection_name(req: &Request<'_>) -> CmdResult<String> {
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

fn opt_doc(d: &Document, key: &str) -> CmdResult<Option<Document>> {
    match d.get(key) {
        None | Some(Bson::Null) => Ok(None),
        Some(Bson::Document(v)) => Ok(Some(v.clone())),
        Some(v) => Err(CommandError::type_mismatch(format!(
            "BSON field '{key}' is the wrong type '{:?}', expected type 'object'",
            v.element_type()
        ))),
    }
}

fn opt_i64(d: &Document, key: &str) -> CmdResult<Option<i64>> {
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

fn opt_bool(d: &Document, key: &str) -> CmdResult<Option<bool>> {
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

fn non_negative(key: &str, v: Option<i64>) -> CmdResult<Option<u64>> {
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
fn buckets_of(coll: &str) -> Option<&str> {
    coll.strip_prefix("system.buckets.")
}

/// A reply built with [`RawDoc`], closed with `ok: 1`.
fn raw_ok(mut r: RawDoc) -> CmdResult<Vec<u8>> {
    r.f64("ok", 1.0);
    Ok(r.finish())
}
