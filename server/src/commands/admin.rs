//! The handshake and the commands drivers and shells send about the server itself.

use crate::error::{CmdResult, CommandError};
use crate::reply::ok;
use crate::request::{Request, Session};
use crate::wire::{MAX_DOCUMENT_BYTES, MAX_MESSAGE_BYTES, MAX_WIRE_VERSION, MONGODB_VERSION};
use crate::Shared;
use bson::{doc, Bson, DateTime, Document};

pub fn hello(shared: &Shared, session: &mut Session, req: &Request<'_>) -> CmdResult<Vec<u8>> {
    let mut d = doc! {
        "helloOk": true,
        "isWritablePrimary": true,
        "topologyVersion": {"processId": shared.process_id, "counter": 0i64},
        "maxBsonObjectSize": MAX_DOCUMENT_BYTES as i32,
        "maxMessageSizeBytes": MAX_MESSAGE_BYTES as i32,
        "maxWriteBatchSize": 100_000,
        "localTime": DateTime::now(),
        "logicalSessionTimeoutMinutes": 30,
        "connectionId": session.id,
        "minWireVersion": 0,
        "maxWireVersion": MAX_WIRE_VERSION,
        "readOnly": false,
    };
    if req.name.eq_ignore_ascii_case("ismaster") {
        d.insert("ismaster", true);
    }
    if shared.auth.is_some() {
        if let Some(Bson::String(_)) = req.body.get("saslSupportedMechs") {
            d.insert("saslSupportedMechs", vec!["SCRAM-SHA-256"]);
        }
        if let Some(Bson::Document(start)) = req.body.get("speculativeAuthenticate") {
            if let Some(first) = speculative_start(shared, session, start) {
                d.insert("speculativeAuthenticate", first);
            }
        }
    }
    ok(d)
}

/// A driver with credentials puts its `saslStart` in the handshake, saving a round trip. The
/// reply carries the server's first message; anything else, a failure included, is left
/// out, and the driver then authenticates the ordinary way.
fn speculative_start(shared: &Shared, session: &mut Session, start: &Document) -> Option<Document> {
    if start.get_str("mechanism").ok()? != crate::auth::MECHANISM {
        return None;
    }
    let reply = crate::auth::sasl_start(shared.auth.as_ref(), &mut session.login, start).ok()?;
    let mut reply = Document::from_reader(reply.as_slice()).ok()?;
    reply.remove("ok");
    Some(reply)
}

pub fn build_info() -> CmdResult<Vec<u8>> {
    ok(doc! {
        "version": MONGODB_VERSION,
        "gitVersion": "tsbucket",
        "versionArray": [7, 0, 0, 0],
        "tsbucketVersion": env!("CARGO_PKG_VERSION"),
        "bits": 64,
        "debug": false,
        "maxBsonObjectSize": MAX_DOCUMENT_BYTES as i32,
        "storageEngines": ["tsbucket"],
        "modules": [],
        "javascriptEngine": "none",
        "sysInfo": "deprecated",
        "openssl": {"running": "disabled", "compiled": "disabled"},
    })
}

pub fn host_info() -> CmdResult<Vec<u8>> {
    let cores = std::thread::available_parallelism()
        .map(|n| n.get() as i32)
        .unwrap_or(1);
    ok(doc! {
        "system": {
            "currentTime": DateTime::now(),
            "hostname": "localhost",
            "cpuAddrSize": 64,
            "numCores": cores,
            "cpuArch": std::env::consts::ARCH,
        },
        "os": {"type": std::env::consts::OS, "name": std::env::consts::OS},
        "extra": {},
    })
}

/// The parameters drivers and shells ask for; anything else is reported as unknown.
pub fn get_parameter(req: &Request<'_>) -> CmdResult<Vec<u8>> {
    let known = [
        (
            "featureCompatibilityVersion",
            Bson::Document(doc! {"version": "7.0"}),
        ),
        (
            "authenticationMechanisms",
            Bson::Array(vec!["SCRAM-SHA-256".into()]),
        ),
        ("timeseriesBucketMaxCount", Bson::Int32(1000)),
        ("timeseriesBucketMaxSize", Bson::Int32(128_000)),
        ("maxBSONDepth", Bson::Int32(100)),
    ];
    if matches!(req.body.get("getParameter"), Some(Bson::String(s)) if s == "*") {
        return ok(known.into_iter().map(|(k, v)| (k.to_string(), v)).collect());
    }
    let mut out = Document::new();
    let asked = req.body.keys().skip(1);
    for name in asked.filter(|k| !k.starts_with('$') && *k != "lsid" && *k != "comment") {
        let Some((_, v)) = known.iter().find(|(k, _)| k == name) else {
            return Err(CommandError::new(
                crate::error::INVALID_OPTIONS,
                format!("no option found to get: {name}"),
            ));
        };
        out.insert(name.clone(), v.clone());
    }
    ok(out)
}

pub fn cmd_line_opts(shared: &Shared) -> CmdResult<Vec<u8>> {
    ok(doc! {
        "argv": ["tsbucket", "serve"],
        "parsed": {"net": {"bindIp": shared.bind.clone(), "port": i32::from(shared.port)}, "storage": {"dbPath": shared.dbs.dir().display().to_string()}},
    })
}

pub fn get_log(req: &Request<'_>) -> CmdResult<Vec<u8>> {
    match req.body.get("getLog") {
        Some(Bson::String(s)) if s == "*" => ok(doc! {"names": ["startupWarnings"]}),
        Some(Bson::String(_)) => ok(doc! {"totalLinesWritten": 0, "log": []}),
        _ => Err(CommandError::type_mismatch(
            "getLog takes the name of a log",
        )),
    }
}

pub fn connection_status(session: &Session) -> CmdResult<Vec<u8>> {
    let users: Vec<Bson> = session
        .login
        .user
        .iter()
        .map(|u| Bson::Document(doc! {"user": u.clone(), "db": "admin"}))
        .collect();
    ok(doc! {"authInfo": {"authenticatedUsers": users, "authenticatedUserRoles": []}})
}

pub fn server_status(shared: &Shared) -> CmdResult<Vec<u8>> {
    let uptime = shared.started.elapsed();
    ok(doc! {
        "host": "localhost",
        "version": MONGODB_VERSION,
        "process": "tsbucket",
        "uptime": uptime.as_secs_f64().floor(),
        "uptimeMillis": uptime.as_millis() as i64,
        "localTime": DateTime::now(),
        "connections": {"current": shared.connections() as i64, "totalCreated": shared.connections_created()},
        "metrics": {"cursor": {"open": {"total": shared.cursors.len() as i64}}},
    })
}
