//! One client connection: read a message, run its command, write the reply, until the client
//! closes or sends something that cannot be understood.

use crate::commands;
use crate::error::{CommandError, FAILED_TO_PARSE};
use crate::reply::bson_bytes;
use crate::request::{Request, Session};
use crate::wire::{self, WireError};
use crate::Shared;
use bson::{Document, RawDocumentBuf};
use std::io::{BufReader, BufWriter, Write};
use std::net::TcpStream;

/// MongoDB's code for an `OP_QUERY` that is not part of the handshake.
const UNSUPPORTED_OP_QUERY: i32 = 352;

pub fn serve(shared: &Shared, stream: TcpStream, id: i64) {
    let peer = stream
        .peer_addr()
        .map(|a| a.to_string())
        .unwrap_or_else(|_| "?".into());
    let _ = stream.set_nodelay(true);
    let Ok(read_half) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::with_capacity(64 * 1024, read_half);
    let mut writer = BufWriter::with_capacity(64 * 1024, stream);
    let mut session = Session {
        id,
        ..Session::default()
    };
    let mut next_id: i32 = 1;
    shared.log(format_args!("connection {id} accepted from {peer}"));
    loop {
        let (header, bytes) = match wire::read_message(&mut reader, shared.max_message_bytes) {
            Ok(Some(m)) => m,
            Ok(None) => break,
            Err(WireError::Io(e)) => {
                shared.log(format_args!("connection {id} from {peer}: {e}"));
                break;
            }
            Err(e) => {
                shared.warn(format_args!("connection {id} from {peer} closed: {e}"));
                break;
            }
        };
        let request = match wire::parse_request(&bytes) {
            Ok((_, r)) => r,
            Err(e) => {
                shared.warn(format_args!("connection {id} from {peer} closed: {e}"));
                break;
            }
        };
        drop(bytes);
        let reply_id = next_id;
        next_id = next_id.wrapping_add(1);
        let written = match request {
            wire::Request::Msg(m) => {
                let more_to_come = m.more_to_come;
                let reply = run_msg(shared, &mut session, m);
                if more_to_come {
                    Ok(())
                } else {
                    wire::write_msg(&mut writer, reply_id, header.request_id, &reply)
                }
            }
            wire::Request::Query(q) => {
                let reply = run_query(shared, &mut session, q);
                wire::write_reply(&mut writer, reply_id, header.request_id, &reply)
            }
        };
        if let Err(e) = written.and_then(|_| writer.flush()) {
            shared.log(format_args!("connection {id} from {peer}: {e}"));
            break;
        }
    }
    shared.log(format_args!("connection {id} from {peer} ended"));
}

fn error_reply(e: CommandError) -> Vec<u8> {
    bson_bytes(&e.to_document())
}

fn run_msg(shared: &Shared, session: &mut Session, m: wire::Msg) -> Vec<u8> {
    let db = match m.body.get_str("$db") {
        Ok(db) => db.to_string(),
        Err(_) => {
            return error_reply(CommandError::new(
                40571,
                "OP_MSG requests require a $db argument",
            ))
        }
    };
    run_body(shared, session, &db, &m.body, m.sequences)
}

fn run_body(
    shared: &Shared,
    session: &mut Session,
    db: &str,
    raw: &RawDocumentBuf,
    sequences: Vec<(String, Vec<RawDocumentBuf>)>,
) -> Vec<u8> {
    let body = match Document::try_from(raw.as_ref()) {
        Ok(b) => b,
        Err(e) => {
            return error_reply(CommandError::new(
                FAILED_TO_PARSE,
                format!("cannot read the command: {e}"),
            ))
        }
    };
    let Some(name) = body.keys().next().cloned() else {
        return error_reply(CommandError::new(FAILED_TO_PARSE, "empty command"));
    };
    let req = Request {
        db,
        name,
        body,
        raw,
        sequences,
    };
    commands::run(shared, session, req)
}

fn run_query(shared: &Shared, session: &mut Session, q: wire::Query) -> Vec<u8> {
    let Some(db) = q.namespace.strip_suffix(".$cmd") else {
        return error_reply(CommandError::new(
            UNSUPPORTED_OP_QUERY,
            format!(
                "OP_QUERY on {} is not served; use OP_MSG (any current driver does)",
                q.namespace
            ),
        ));
    };
    // Older clients wrap the command with read preferences: {$query: {...}, $readPreference}.
    let inner = match q.query.get("$query") {
        Ok(Some(bson::RawBsonRef::Document(d))) => d.to_owned(),
        _ => q.query.clone(),
    };
    let name = inner
        .iter()
        .next()
        .and_then(|e| e.ok())
        .map(|(k, _)| k.as_str().to_ascii_lowercase());
    match name.as_deref() {
        Some("hello" | "ismaster") => run_body(shared, session, db, &inner, Vec::new()),
        Some(other) => error_reply(CommandError::new(
            UNSUPPORTED_OP_QUERY,
            format!(
                "Unsupported OP_QUERY command: {other}. The client driver may require an upgrade."
            ),
        )),
        None => error_reply(CommandError::new(FAILED_TO_PARSE, "empty command")),
    }
}
