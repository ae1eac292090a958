//! The server through its socket, with a minimal client written from the protocol: framing,
//! limits, cursors, and the same answers as the Rust API.

use bson::{doc, Bson, DateTime, Document, RawDocumentBuf};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;
use tsbucket_server::wire::{self, encode_msg, encode_query};
use tsbucket_server::{Server, ServerOptions};

fn start(dir: &std::path::Path, tune: impl FnOnce(&mut ServerOptions)) -> Server {
    let mut o = ServerOptions::new(dir);
    o.port = 0;
    tune(&mut o);
    Server::start(o).unwrap()
}

struct Client {
    s: TcpStream,
    next: i32,
}

impl Client {
    fn connect(server: &Server) -> Client {
        let s = TcpStream::connect(server.local_addr()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        Client { s, next: 1 }
    }

    fn send(&mut self, bytes: &[u8]) {
        self.s.write_all(bytes).unwrap();
    }

    fn read_reply(&mut self) -> Option<(i32, Document)> {
        let (h, bytes) = wire::read_message(&mut self.s, 64 << 20).ok()??;
        let doc_at = match h.op_code {
            wire::OP_MSG => 21,
            wire::OP_REPLY => 36,
            other => panic!("reply with opCode {other}"),
        };
        Some((h.op_code, Document::from_reader(&bytes[doc_at..]).unwrap()))
    }

    fn run_with(
        &mut self,
        db: &str,
        mut body: Document,
        seqs: &[(&str, Vec<RawDocumentBuf>)],
    ) -> Document {
        body.insert("$db", db);
        let raw = RawDocumentBuf::try_from(&body).unwrap();
        let seqs: Vec<(&str, Vec<&[u8]>)> = seqs
            .iter()
            .map(|(n, d)| (*n, d.iter().map(|d| d.as_bytes()).collect()))
            .collect();
        self.next += 1;
        let msg = encode_msg(self.next, raw.as_bytes(), &seqs, false);
        self.send(&msg);
        self.read_reply().expect("a reply").1
    }

    fn run(&mut self, db: &str, body: Document) -> Document {
        self.run_with(db, body, &[])
    }

    /// Every document of a cursor command, following getMore to the end.
    fn drain(&mut self, db: &str, coll: &str, body: Document, batch: i64) -> Vec<Document> {
        let mut r = self.run(db, body);
        assert_eq!(r.get_f64("ok").unwrap(), 1.0, "{r}");
        let mut out = Vec::new();
        let mut key = "firstBatch";
        loop {
            let c = r.get_document("cursor").unwrap();
            out.extend(
                c.get_array(key)
                    .unwrap()
                    .iter()
                    .map(|d| d.as_document().unwrap().clone()),
            );
            let id = c.get_i64("id").unwrap();
            if id == 0 {
                return out;
            }
            r = self.run(
                db,
                doc! {"getMore": id, "collection": coll, "batchSize": batch},
            );
            assert_eq!(r.get_f64("ok").unwrap(), 1.0, "{r}");
            key = "nextBatch";
        }
    }

    fn closed(&mut self) -> bool {
        let mut b = [0u8; 1];
        matches!(self.s.read(&mut b), Ok(0) | Err(_))
    }
}

/// A reply's `n`, an int32 or an int64 as MongoDB sends it.
fn n_of(d: &Document) -> i64 {
    match d.get("n") {
        Some(Bson::Int32(n)) => i64::from(*n),
        Some(Bson::Int64(n)) => *n,
        other => panic!("n is {other:?} in {d}"),
    }
}

fn measurements(n: usize) -> Vec<Document> {
    (0..n)
        .map(|i| {
            doc! {
                "t": DateTime::from_millis(1_700_000_000_000 + (i as i64 / 4) * 10_000),
                "m": {"host": format!("h{}", i % 4), "region": if i % 8 < 4 { "eu" } else { "us" }},
                "usage": (i % 97) as f64 / 3.0,
                "n": i as i64,
            }
        })
        .collect()
}

fn create(c: &mut Client) {
    let r = c.run(
        "db",
        doc! {"create": "cpu", "timeseries": {"timeField": "t", "metaField": "m"}},
    );
    assert_eq!(r.get_f64("ok").unwrap(), 1.0, "{r}");
}

#[test]
fn legacy_handshake_is_answered_and_other_legacy_queries_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), |_| {});
    let mut c = Client::connect(&server);
    let q = RawDocumentBuf::try_from(
        &doc! {"$query": {"isMaster": 1}, "$readPreference": {"mode": "primary"}},
    )
    .unwrap();
    c.send(&encode_query(1, "admin.$cmd", q.as_bytes()));
    let (op, r) = c.read_reply().unwrap();
    assert_eq!(op, wire::OP_REPLY);
    assert!(r.get_bool("ismaster").unwrap());
    assert_eq!(r.get_i32("maxWireVersion").unwrap(), 21);
    let q = RawDocumentBuf::try_from(&doc! {"find": "x"}).unwrap();
    c.send(&encode_query(2, "db.$cmd", q.as_bytes()));
    let (_, r) = c.read_reply().unwrap();
    assert_eq!(r.get_i32("code").unwrap(), 352);
    // The connection goes on with OP_MSG.
    assert_eq!(c.run("admin", doc! {"ping": 1}).get_f64("ok").unwrap(), 1.0);
}

/// A `ping` on database `a`, with or without a checksum.
fn ping(checksum: bool) -> Vec<u8> {
    let body = RawDocumentBuf::try_from(&doc! {"ping": 1, "$db": "a"}).unwrap();
    encode_msg(1, body.as_bytes(), &[], checksum)
}

#[test]
fn a_malformed_message_closes_only_its_own_connection() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), |_| {});
    let mut good = Client::connect(&server);
    create(&mut good);
    for garbage in [
        // A body document that claims more bytes than the message has.
        {
            let mut m = ping(false);
            m[21] = 0x7f;
            m
        },
        // A header over the size limit: refused before anything is allocated.
        {
            let mut m = vec![0u8; 16];
            m[..4].copy_from_slice(&(60_000_000i32).to_le_bytes());
            m[12..].copy_from_slice(&wire::OP_MSG.to_le_bytes());
            m
        },
        // A checksum that does not match.
        {
            let mut m = ping(true);
            let at = m.len() - 1;
            m[at] ^= 0xff;
            m
        },
        // An opCode that does not exist.
        {
            let mut m = ping(false);
            m[12] = 0x55;
            m
        },
    ] {
        let mut bad = Client::connect(&server);
        bad.send(&garbage);
        assert!(
            bad.closed(),
            "the server answered garbage instead of closing"
        );
        let r = good.run("db", doc! {"count": "cpu"});
        assert_eq!(r.get_f64("ok").unwrap(), 1.0, "{r}");
    }
    // A valid checksum is accepted.
    let mut c = Client::connect(&server);
    let body = RawDocumentBuf::try_from(&doc! {"ping": 1, "$db": "admin"}).unwrap();
    c.send(&encode_msg(5, body.as_bytes(), &[], true));
    assert_eq!(c.read_reply().unwrap().1.get_f64("ok").unwrap(), 1.0);
}

#[test]
fn inserts_in_a_sequence_or_unacknowledged_are_stored() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), |_| {});
    let mut c = Client::connect(&server);
    create(&mut c);
    let docs: Vec<RawDocumentBuf> = measurements(1000)
        .iter()
        .map(|d| RawDocumentBuf::try_from(d).unwrap())
        .collect();
    let r = c.run_with(
        "db",
        doc! {"insert": "cpu", "ordered": true},
        &[("documents", docs)],
    );
    assert_eq!(n_of(&r), 1000, "{r}");
    // w:0 sets moreToCome: no reply comes, and the next command sees the documents.
    let body = RawDocumentBuf::try_from(&doc! {"insert": "cpu", "documents": [measurements(1)[0].clone()], "writeConcern": {"w": 0}, "$db": "db"}).unwrap();
    let mut msg = encode_msg(99, body.as_bytes(), &[], false);
    msg[16] |= 2;
    c.send(&msg);
    let r = c.run("db", doc! {"count": "cpu"});
    assert_eq!(n_of(&r), 1001);
}

#[test]
fn unordered_inserts_report_each_bad_document_and_keep_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), |_| {});
    let mut c = Client::connect(&server);
    create(&mut c);
    let mut docs = measurements(6);
    docs[1].remove("t");
    docs[4].insert("t", "not a date");
    let arr: Vec<Bson> = docs.iter().cloned().map(Bson::Document).collect();
    let r = c.run(
        "db",
        doc! {"insert": "cpu", "documents": arr.clone(), "ordered": false},
    );
    assert_eq!(n_of(&r), 4, "{r}");
    let errs = r.get_array("writeErrors").unwrap();
    let idx: Vec<i32> = errs
        .iter()
        .map(|e| e.as_document().unwrap().get_i32("index").unwrap())
        .collect();
    assert_eq!(idx, vec![1, 4]);
    assert!(errs
        .iter()
        .all(|e| e.as_document().unwrap().get_i32("code").unwrap() == 2));
    // Ordered: stops at the first bad document, with the ones before it stored.
    let r = c.run(
        "db",
        doc! {"insert": "cpu", "documents": arr, "ordered": true},
    );
    assert_eq!(n_of(&r), 1, "{r}");
    assert_eq!(r.get_array("writeErrors").unwrap().len(), 1);
    assert_eq!(n_of(&c.run("db", doc! {"count": "cpu"})), 5);
}

#[test]
fn wire_answers_equal_the_rust_apis() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), |_| {});
    let mut c = Client::connect(&server);
    create(&mut c);
    let docs: Vec<Bson> = measurements(5000).into_iter().map(Bson::Document).collect();
    let r = c.run("db", doc! {"insert": "cpu", "documents": docs});
    assert_eq!(n_of(&r), 5000);
    let db = server.shared().dbs.get("db").unwrap().unwrap();
    let coll = db.collection("cpu").unwrap();
    let finds = [
        (doc! {}, None, None),
        (doc! {"m.host": "h1"}, Some(doc! {"t": -1}), Some(77i64)),
        (
            doc! {"usage": {"$gt": 20.0}, "m.region": "us"},
            Some(doc! {"usage": 1, "n": 1}),
            None,
        ),
        (
            doc! {"t": {"$gte": DateTime::from_millis(1_700_000_500_000)}},
            Some(doc! {"n": -1}),
            Some(1000),
        ),
    ];
    for (filter, sort, limit) in finds {
        let mut body = doc! {"find": "cpu", "filter": filter.clone(), "batchSize": 333};
        if let Some(s) = &sort {
            body.insert("sort", s.clone());
        }
        if let Some(l) = limit {
            body.insert("limit", l);
        }
        let got = c.drain("db", "cpu", body, 1000);
        let want: Vec<Document> = coll
            .find_with(
                filter.clone(),
                tsbucket::FindOptions {
                    sort,
                    limit,
                    ..Default::default()
                },
            )
            .unwrap()
            .map(|d| d.unwrap())
            .collect();
        assert_eq!(got.len(), want.len(), "{filter}");
        assert!(got == want, "{filter}: the wire and the API differ");
    }
    let pipelines = [
        vec![
            doc! {"$group": {"_id": "$m.host", "avg": {"$avg": "$usage"}, "max": {"$max": "$n"}}},
            doc! {"$sort": {"_id": 1}},
        ],
        vec![
            doc! {"$match": {"m.region": "eu"}},
            doc! {"$sort": {"t": -1}},
            doc! {"$limit": 10},
        ],
        vec![
            doc! {"$group": {"_id": {"$dateTrunc": {"date": "$t", "unit": "minute"}}, "n": {"$sum": 1}}},
            doc! {"$sort": {"_id": 1}},
        ],
    ];
    for p in pipelines {
        let body = doc! {"aggregate": "cpu", "pipeline": p.clone(), "cursor": {"batchSize": 5}};
        let got = c.drain("db", "cpu", body, 7);
        let want: Vec<Document> = coll
            .aggregate(p.clone())
            .unwrap()
            .map(|d| d.unwrap())
            .collect();
        assert!(!want.is_empty());
        assert!(got == want, "{p:?}: the wire and the API differ");
    }
    let n = c.run("db", doc! {"count": "cpu", "query": {"m.host": "h2"}});
    assert_eq!(
        n_of(&n) as u64,
        coll.count_documents(doc! {"m.host": "h2"}).unwrap()
    );
}

#[test]
fn cursors_are_limited_and_time_out() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), |o| {
        o.max_cursors = 2;
        o.cursor_timeout = Duration::from_millis(300);
    });
    let mut c = Client::connect(&server);
    create(&mut c);
    let docs: Vec<Bson> = measurements(50).into_iter().map(Bson::Document).collect();
    c.run("db", doc! {"insert": "cpu", "documents": docs});
    let open = |c: &mut Client| c.run("db", doc! {"find": "cpu", "batchSize": 1});
    let a = open(&mut c);
    let id = a.get_document("cursor").unwrap().get_i64("id").unwrap();
    assert_ne!(id, 0);
    open(&mut c);
    let third = open(&mut c);
    assert_eq!(third.get_i32("code").unwrap(), 96, "{third}");
    // A killed cursor is gone.
    let k = c.run("db", doc! {"killCursors": "cpu", "cursors": [id]});
    assert_eq!(
        k.get_array("cursorsKilled").unwrap(),
        &vec![Bson::Int64(id)]
    );
    let g = c.run("db", doc! {"getMore": id, "collection": "cpu"});
    assert_eq!(g.get_i32("code").unwrap(), 43);
    // An idle cursor closes after the timeout.
    let b = open(&mut c);
    let id = b.get_document("cursor").unwrap().get_i64("id").unwrap();
    std::thread::sleep(Duration::from_millis(600));
    let g = c.run("db", doc! {"getMore": id, "collection": "cpu"});
    assert_eq!(g.get_i32("code").unwrap(), 43, "{g}");
    // A getMore must name the cursor's own collection.
    let b = open(&mut c);
    let id = b.get_document("cursor").unwrap().get_i64("id").unwrap();
    let g = c.run("db", doc! {"getMore": id, "collection": "other"});
    assert_eq!(g.get_i32("code").unwrap(), 13, "{g}");
}

#[test]
fn connections_over_the_limit_are_closed() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), |o| o.max_connections = 1);
    let mut first = Client::connect(&server);
    assert_eq!(
        first.run("admin", doc! {"ping": 1}).get_f64("ok").unwrap(),
        1.0
    );
    let mut second = Client::connect(&server);
    assert!(second.closed());
    assert_eq!(
        first.run("admin", doc! {"ping": 1}).get_f64("ok").unwrap(),
        1.0
    );
}

#[test]
fn a_non_loopback_bind_needs_users() {
    let dir = tempfile::tempdir().unwrap();
    let mut o = ServerOptions::new(dir.path());
    o.port = 0;
    o.bind = "0.0.0.0".parse().unwrap();
    let e = Server::start(o).err().expect("refused");
    assert!(e.to_string().contains("without authentication"), "{e}");
}

#[test]
fn shutdown_closes_the_databases_with_everything_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), |_| {});
    let mut c = Client::connect(&server);
    create(&mut c);
    let docs: Vec<Bson> = measurements(300).into_iter().map(Bson::Document).collect();
    c.run("db", doc! {"insert": "cpu", "documents": docs});
    assert!(server.shutdown().is_empty());
    assert!(c.closed());
    let db = tsbucket::Database::open(dir.path().join("db")).unwrap();
    assert_eq!(
        db.collection("cpu")
            .unwrap()
            .count_documents(doc! {})
            .unwrap(),
        300
    );
}

#[test]
fn commands_fail_with_mongodb_codes() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), |_| {});
    let mut c = Client::connect(&server);
    let code = |r: Document| {
        (
            r.get_i32("code").unwrap(),
            r.get_str("codeName").unwrap().to_string(),
        )
    };
    assert_eq!(
        code(c.run("db", doc! {"frobnicate": 1})),
        (59, "CommandNotFound".into())
    );
    assert_eq!(
        code(c.run("db", doc! {"create": "plain"})),
        (72, "InvalidOptions".into())
    );
    assert_eq!(
        code(c.run("db", doc! {"insert": "missing", "documents": [{"a": 1}]})).0,
        26
    );
    assert_eq!(
        code(c.run(
            "bad.name",
            doc! {"create": "x", "timeseries": {"timeField": "t"}}
        ))
        .0,
        73
    );
    assert_eq!(
        code(c.run(
            "db",
            doc! {"find": "x", "txnNumber": 1i64, "autocommit": false}
        ))
        .0,
        20
    );
    create(&mut c);
    // A statement's error is a writeError of a command that succeeded.
    let r = c.run(
        "db",
        doc! {"delete": "cpu", "deletes": [{"q": {"m.host": "h1"}, "limit": 1}]},
    );
    assert_eq!(r.get_f64("ok").unwrap(), 1.0);
    let e = r.get_array("writeErrors").unwrap()[0]
        .as_document()
        .unwrap()
        .clone();
    assert_eq!(e.get_i32("code").unwrap(), 20);
    let r = c.run(
        "db",
        doc! {"update": "cpu", "updates": [{"q": {}, "u": {"$set": {"usage": 1}}, "multi": true}]},
    );
    let e = r.get_array("writeErrors").unwrap()[0]
        .as_document()
        .unwrap()
        .clone();
    assert_eq!(e.get_i32("code").unwrap(), 72, "{r}");
}
