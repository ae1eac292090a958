//! Command dispatch: the body's first field names the command, `$db` the database.

mod admin;
mod ddl;
mod read;
mod write;

use crate::error::{CmdResult, CommandError, COMMAND_NOT_FOUND, ILLEGAL_OPERATION, UNAUTHORIZED};
use crate::reply::{bson_bytes, ok};
use crate::request::{Request, Session};
use crate::Shared;
use bson::Document;

/// Runs one command and returns the reply's BSON bytes: the result, or the error document.
pub fn run(shared: &Shared, session: &mut Session, req: Request<'_>) -> Vec<u8> {
    match dispatch(shared, session, &req) {
        Ok(bytes) => bytes,
        Err(e) => bson_bytes(&e.to_document()),
    }
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
    if shared.auth.is_some() && session.login.user.is_none() && !open_to_all(&name) {
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
            session.login.user = None;
            ok(Document::new())
        }
        "saslstart" => crate::auth::sasl_start(shared.auth.as_ref(), &mut session.login, &req.body),
        "saslcontinue" => crate::auth::sasl_continue(&mut session.login, &req.body),
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
