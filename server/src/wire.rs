//! The MongoDB wire protocol's framing: message headers, `OP_MSG` with its sections and
//! checksum, the legacy `OP_QUERY` that older clients open with, and the replies to both.
//!
//! Every length and offset in a message comes from the peer, so parsing checks each against
//! the bytes actually received and reports what is wrong instead of panicking.

use bson::RawDocumentBuf;
use std::io::{self, Read, Write};

/// `OP_REPLY`: the answer to an `OP_QUERY`.
pub const OP_REPLY: i32 = 1;
/// `OP_QUERY`: the legacy request, kept for the handshake of older clients.
pub const OP_QUERY: i32 = 2004;
/// `OP_COMPRESSED`: never sent to us, because the handshake offers no compressor.
pub const OP_COMPRESSED: i32 = 2012;
/// `OP_MSG`: every command of a modern driver.
pub const OP_MSG: i32 = 2013;

/// The MongoDB version whose behaviour the server follows (time-series collections with
/// custom bucketing), and its wire version. Every command of that version that a driver
/// needs for these collections is served; the rest are refused by name.
pub const MONGODB_VERSION: &str = "7.0.0";
/// Wire version 21 is MongoDB 7.0.
pub const MAX_WIRE_VERSION: i32 = 21;
/// The largest message accepted, MongoDB's `maxMessageSizeBytes`.
pub const MAX_MESSAGE_BYTES: usize = 48_000_000;
/// The largest document, MongoDB's `maxBsonObjectSize`.
pub const MAX_DOCUMENT_BYTES: usize = 16 * 1024 * 1024;

const HEADER_BYTES: usize = 16;
/// `OP_MSG` flag: a CRC-32C of the message follows the sections.
const CHECKSUM_PRESENT: u32 = 1;
/// `OP_MSG` flag: the sender expects no reply (unacknowledged writes).
const MORE_TO_COME: u32 = 1 << 1;
/// `OP_MSG` flag: the client accepts exhaust replies; a hint we may ignore.
const EXHAUST_ALLOWED: u32 = 1 << 16;
/// Bits 0-15 are required flags: a receiver must refuse a message with one it does not know.
const REQUIRED_FLAGS: u32 = 0xffff;

/// A message that cannot be understood. The connection it came on is closed after the error
/// is logged: once framing is lost, nothing later on the stream can be trusted.
#[derive(Debug)]
pub enum WireError {
    /// The socket failed or closed.
    Io(io::Error),
    /// The bytes do not form a valid message.
    Malformed(String),
}

impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WireError::Io(e) => write!(f, "{e}"),
            WireError::Malformed(m) => write!(f, "malformed message: {m}"),
        }
    }
}

impl From<io::Error> for WireError {
    fn from(e: io::Error) -> WireError {
        WireError::Io(e)
    }
}

fn malformed(m: impl Into<String>) -> WireError {
    WireError::Malformed(m.into())
}

/// The fixed header every message starts with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Length of the whole message, header included.
    pub length: usize,
    /// The sender's id for this message; replies carry it in `response_to`.
    pub request_id: i32,
    /// For a reply, the request it answers.
    pub response_to: i32,
    /// What kind of message follows.
    pub op_code: i32,
}

/// One request, parsed.
#[derive(Debug)]
pub enum Request {
    /// An `OP_MSG` command.
    Msg(Msg),
    /// A legacy `OP_QUERY` on a `<db>.$cmd` namespace.
    Query(Query),
}

/// An `OP_MSG`: the command body and its document sequences.
#[derive(Debug)]
pub struct Msg {
    /// The body (section kind 0).
    pub body: RawDocumentBuf,
    /// Document sequences (section kind 1), by identifier, in message order. Drivers send the
    /// documents of `insert`, `update` and `delete` this way.
    pub sequences: Vec<(String, Vec<RawDocumentBuf>)>,
    /// The sender wants no reply.
    pub more_to_come: bool,
}

/// A legacy `OP_QUERY`.
#[derive(Debug)]
pub struct Query {
    /// `<db>.<collection>`; commands use `<db>.$cmd`.
    pub namespace: String,
    /// The query document, possibly wrapped as `{$query: …}`.
    pub query: RawDocumentBuf,
}

/// Reads one message: `Ok(None)` when the peer closed the connection between messages.
pub fn read_message(
    r: &mut impl Read,
    max_bytes: usize,
) -> Result<Option<(Header, Vec<u8>)>, WireError> {
    let mut head = [0u8; HEADER_BYTES];
    let mut got = 0;
    while got < HEADER_BYTES {
        let n = match r.read(head.get_mut(got..).unwrap_or_default()) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e.into()),
        };
        if n == 0 {
            return if got == 0 {
                Ok(None)
            } else {
                Err(malformed(format!(
                    "the connection closed {got} bytes into a header"
                )))
            };
        }
        got += n;
    }
    let header = parse_header(&head, max_bytes)?;
    let mut msg = vec![0u8; header.length];
    msg.get_mut(..HEADER_BYTES)
        .ok_or_else(|| malformed("short message"))?
        .copy_from_slice(&head);
    r.read_exact(msg.get_mut(HEADER_BYTES..).unwrap_or_default())
        .map_err(|e| match e.kind() {
            io::ErrorKind::UnexpectedEof => malformed(format!(
                "the connection closed inside a message of {} bytes",
                header.length
            )),
            _ => WireError::Io(e),
        })?;
    Ok(Some((header, msg)))
}

/// Checks a header's length against the limit before anything is allocated for it.
pub fn parse_header(b: &[u8], max_bytes: usize) -> Result<Header, WireError> {
    let length = i32_at(b, 0)?;
    let header = Header {
        length: usize::try_from(length).unwrap_or(0),
        request_id: i32_at(b, 4)?,
        response_to: i32_at(b, 8)?,
        op_code: i32_at(b, 12)?,
    };
    if header.length < HEADER_BYTES {
        return Err(malformed(format!(
            "message length {length} is shorter than a header"
        )));
    }
    if header.length > max_bytes {
        return Err(malformed(format!(
            "message length {length} is over the limit of {max_bytes} bytes"
        )));
    }
    Ok(header)
}

/// Parses a whole message (header included) into a request.
pub fn parse_request(msg: &[u8]) -> Result<(Header, Request), WireError> {
    let header = parse_header(msg, usize::MAX)?;
    if header.length != msg.len() {
        return Err(malformed(format!(
            "the header says {} bytes and the message has {}",
            header.length,
            msg.len()
        )));
    }
    let body = msg.get(HEADER_BYTES..).unwrap_or_default();
    let request = match header.op_code {
        OP_MSG => Request::Msg(parse_msg(msg, body)?),
        OP_QUERY => Request::Query(parse_query(body)?),
        OP_COMPRESSED => {
            return Err(malformed(
                "OP_COMPRESSED, though the handshake offered no compressor",
            ))
        }
        other => return Err(malformed(format!("unsupported opCode {other}"))),
    };
    Ok((header, request))
}

fn parse_msg(whole: &[u8], b: &[u8]) -> Result<Msg, WireError> {
    let flags = u32_at(b, 0)?;
    let unknown = flags & REQUIRED_FLAGS & !(CHECKSUM_PRESENT | MORE_TO_COME);
    if unknown != 0 {
        return Err(malformed(format!(
            "unknown required OP_MSG flag bits {unknown:#x}"
        )));
    }
    let _ = EXHAUST_ALLOWED;
    let mut end = b.len();
    if flags & CHECKSUM_PRESENT != 0 {
        end = end.checked_sub(4).filter(|&e| e >= 4).ok_or_else(|| {
            malformed("the checksum flag is set but the message has no room for it")
        })?;
        let want = u32_at(b, end)?;
        let covered = whole
            .get(..whole.len() - 4)
            .ok_or_else(|| malformed("short message"))?;
        let got = crc32c::crc32c(covered);
        if got != want {
            return Err(malformed(format!(
                "checksum mismatch: the message says {want:#010x}, its bytes give {got:#010x}"
            )));
        }
    }
    let mut at = 4;
    let mut body = None;
    let mut sequences = Vec::new();
    while at < end {
        let kind = *b.get(at).ok_or_else(|| malformed("short section"))?;
        at += 1;
        match kind {
            0 => {
                let (doc, len) = document_at(b, at, end, true)?;
                if body.replace(doc).is_some() {
                    return Err(malformed("more than one body section"));
                }
                at += len;
            }
            1 => {
                let size = usize::try_from(i32_at(b, at)?).unwrap_or(0);
                let sec_end = at
                    .checked_add(size)
                    .filter(|&e| e <= end && size >= 5)
                    .ok_or_else(|| {
                        malformed(format!(
                            "document sequence of {size} bytes at {at} overruns the message"
                        ))
                    })?;
                let (name, name_len) = cstring_at(b, at + 4, sec_end)?;
                let mut p = at + 4 + name_len;
                let mut docs = Vec::new();
                while p < sec_end {
                    let (doc, len) = document_at(b, p, sec_end, false)?;
                    docs.push(doc);
                    p += len;
                }
                sequences.push((name, docs));
                at = sec_end;
            }
            k => return Err(malformed(format!("unknown section kind {k} at {at}"))),
        }
    }
    let body = body.ok_or_else(|| malformed("no body section"))?;
    Ok(Msg {
        body,
        sequences,
        more_to_come: flags & MORE_TO_COME != 0,
    })
}

fn parse_query(b: &[u8]) -> Result<Query, WireError> {
    let _flags = i32_at(b, 0)?;
    let (namespace, len) = cstring_at(b, 4, b.len())?;
    let at = 4 + len + 8; // numberToSkip and numberToReturn: commands ignore both
    let (query, _) = document_at(b, at, b.len(), true)?;
    Ok(Query { namespace, query })
}

fn document_at(
    b: &[u8],
    at: usize,
    end: usize,
    deep: bool,
) -> Result<(RawDocumentBuf, usize), WireError> {
    let len = usize::try_from(i32_at(b, at)?).unwrap_or(0);
    let bytes = at
        .checked_add(len)
        .filter(|&e| e <= end && len >= 5)
        .and_then(|e| b.get(at..e))
        .ok_or_else(|| {
            malformed(format!(
                "a document of {len} bytes at {at} overruns its section"
            ))
        })?;
    let doc = RawDocumentBuf::from_bytes(bytes.to_vec())
        .map_err(|e| malformed(format!("invalid document at {at}: {e}")))?;
    // The raw type checks only the frame; a walk checks every element of a body, so that
    // commands can read its fields without meeting bad BSON later. Documents of a sequence
    // (measurements to insert, statements) are checked where they are read: the engine
    // validates the measurements it is given in full anyway.
    if !deep {
        return Ok((doc, len));
    }
    for el in doc.iter() {
        if let Err(e) = el.and_then(|(_, v)| deep_check(v)) {
            return Err(malformed(format!("invalid document at {at}: {e}")));
        }
    }
    Ok((doc, len))
}

fn deep_check(v: bson::RawBsonRef<'_>) -> bson::error::Result<()> {
    match v {
        bson::RawBsonRef::Document(d) => d.iter().try_for_each(|el| deep_check(el?.1)),
        bson::RawBsonRef::Array(a) => a.into_iter().try_for_each(|el| deep_check(el?)),
        _ => Ok(()),
    }
}

fn cstring_at(b: &[u8], at: usize, end: usize) -> Result<(String, usize), WireError> {
    let tail = b.get(at..end).ok_or_else(|| malformed("short string"))?;
    let nul = tail
        .iter()
        .position(|&c| c == 0)
        .ok_or_else(|| malformed(format!("unterminated string at {at}")))?;
    let s = std::str::from_utf8(tail.get(..nul).unwrap_or_default())
        .map_err(|_| malformed(format!("string at {at} is not UTF-8")))?;
    Ok((s.to_string(), nul + 1))
}

fn i32_at(b: &[u8], at: usize) -> Result<i32, WireError> {
    Ok(u32_at(b, at)? as i32)
}

fn u32_at(b: &[u8], at: usize) -> Result<u32, WireError> {
    b.get(at..at + 4)
        .and_then(|s| <[u8; 4]>::try_from(s).ok())
        .map(u32::from_le_bytes)
        .ok_or_else(|| malformed(format!("the message ends before byte {}", at + 4)))
}

/// Writes an `OP_MSG` reply with one body section.
pub fn write_msg(
    w: &mut impl Write,
    request_id: i32,
    response_to: i32,
    body: &[u8],
) -> io::Result<()> {
    let len = HEADER_BYTES + 4 + 1 + body.len();
    let mut out = Vec::with_capacity(HEADER_BYTES + 5);
    put_header(&mut out, len, request_id, response_to, OP_MSG);
    out.extend_from_slice(&0u32.to_le_bytes());
    out.push(0);
    w.write_all(&out)?;
    w.write_all(body)?;
    w.flush()
}

/// Writes an `OP_REPLY` with one document, the answer to a legacy `OP_QUERY` command.
pub fn write_reply(
    w: &mut impl Write,
    request_id: i32,
    response_to: i32,
    doc: &[u8],
) -> io::Result<()> {
    let len = HEADER_BYTES + 20 + doc.len();
    let mut out = Vec::with_capacity(len);
    put_header(&mut out, len, request_id, response_to, OP_REPLY);
    out.extend_from_slice(&8i32.to_le_bytes()); // AwaitCapable, as mongod sets it
    out.extend_from_slice(&0i64.to_le_bytes());
    out.extend_from_slice(&0i32.to_le_bytes());
    out.extend_from_slice(&1i32.to_le_bytes());
    out.extend_from_slice(doc);
    w.write_all(&out)?;
    w.flush()
}

fn put_header(out: &mut Vec<u8>, len: usize, request_id: i32, response_to: i32, op: i32) {
    out.extend_from_slice(&(len as i32).to_le_bytes());
    out.extend_from_slice(&request_id.to_le_bytes());
    out.extend_from_slice(&response_to.to_le_bytes());
    out.extend_from_slice(&op.to_le_bytes());
}

/// Builds an `OP_MSG` request: for tests, benchmarks and the fuzz target's seeds.
pub fn encode_msg(
    request_id: i32,
    body: &[u8],
    sequences: &[(&str, Vec<&[u8]>)],
    checksum: bool,
) -> Vec<u8> {
    let mut out = vec![0u8; HEADER_BYTES];
    let flags = if checksum { CHECKSUM_PRESENT } else { 0 };
    out.extend_from_slice(&flags.to_le_bytes());
    out.push(0);
    out.extend_from_slice(body);
    for (name, docs) in sequences {
        out.push(1);
        let size = 4 + name.len() + 1 + docs.iter().map(|d| d.len()).sum::<usize>();
        out.extend_from_slice(&(size as i32).to_le_bytes());
        out.extend_from_slice(name.as_bytes());
        out.push(0);
        for d in docs {
            out.extend_from_slice(d);
        }
    }
    let len = out.len() + if checksum { 4 } else { 0 };
    let mut head = Vec::with_capacity(HEADER_BYTES);
    put_header(&mut head, len, request_id, 0, OP_MSG);
    out.splice(..HEADER_BYTES, head);
    if checksum {
        let sum = crc32c::crc32c(&out);
        out.extend_from_slice(&sum.to_le_bytes());
    }
    out
}

/// Builds an `OP_QUERY` request on `namespace`.
pub fn encode_query(request_id: i32, namespace: &str, query: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let len = HEADER_BYTES + 4 + namespace.len() + 1 + 8 + query.len();
    put_header(&mut out, len, request_id, 0, OP_QUERY);
    out.extend_from_slice(&0i32.to_le_bytes());
    out.extend_from_slice(namespace.as_bytes());
    out.push(0);
    out.extend_from_slice(&0i32.to_le_bytes());
    out.extend_from_slice(&(-1i32).to_le_bytes());
    out.extend_from_slice(query);
    out
}

/// The fuzz target's check, also run on the kept corpus by `cargo test`: arbitrary bytes as a
/// stream of messages never panic the reader or the parser, and every `OP_MSG` that parses
/// encodes back to a message that parses to the same body and sequences.
#[doc(hidden)]
pub fn fuzz_one(data: &[u8]) {
    let mut r = data;
    while let Ok(Some((_, bytes))) = read_message(&mut r, 1 << 20) {
        let Ok((header, request)) = parse_request(&bytes) else {
            continue;
        };
        if let Request::Msg(m) = request {
            let seqs: Vec<(&str, Vec<&[u8]>)> = m
                .sequences
                .iter()
                .map(|(n, d)| (n.as_str(), d.iter().map(|d| d.as_bytes()).collect()))
                .collect();
            let again = encode_msg(header.request_id, m.body.as_bytes(), &seqs, true);
            match parse_request(&again) {
                Ok((_, Request::Msg(m2))) => {
                    assert_eq!(m2.body, m.body, "body changed in a round trip");
                    assert_eq!(
                        m2.sequences, m.sequences,
                        "sequences changed in a round trip"
                    );
                }
                other => panic!("a parsed message does not parse again: {other:?}"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::rawdoc;

    fn body() -> RawDocumentBuf {
        rawdoc! {"insert": "weather", "$db": "test"}
    }

    #[test]
    fn a_message_with_sequences_and_a_checksum_parses_back() {
        let d1 = rawdoc! {"a": 1};
        let d2 = rawdoc! {"a": 2};
        let msg = encode_msg(
            7,
            body().as_bytes(),
            &[("documents", vec![d1.as_bytes(), d2.as_bytes()])],
            true,
        );
        let (h, req) = parse_request(&msg).unwrap();
        assert_eq!(h.request_id, 7);
        let Request::Msg(m) = req else {
            panic!("not OP_MSG")
        };
        assert_eq!(m.body, body());
        assert_eq!(m.sequences.len(), 1);
        assert_eq!(m.sequences[0].0, "documents");
        assert_eq!(m.sequences[0].1, vec![d1, d2]);
        assert!(!m.more_to_come);
    }

    #[test]
    fn a_flipped_byte_fails_the_checksum() {
        let mut msg = encode_msg(1, body().as_bytes(), &[], true);
        let at = msg.len() - 8;
        msg[at] ^= 1;
        let err = parse_request(&msg).unwrap_err();
        assert!(err.to_string().contains("checksum mismatch"), "{err}");
    }

    #[test]
    fn lengths_that_overrun_are_refused_not_trusted() {
        let mut msg = encode_msg(1, body().as_bytes(), &[], false);
        // The body document claims more bytes than the message holds.
        msg[21] = 0xff;
        assert!(parse_request(&msg)
            .unwrap_err()
            .to_string()
            .contains("overruns"));
        let big = (MAX_MESSAGE_BYTES as i32 + 1).to_le_bytes();
        let mut head = [0u8; 16];
        head[..4].copy_from_slice(&big);
        assert!(parse_header(&head, MAX_MESSAGE_BYTES)
            .unwrap_err()
            .to_string()
            .contains("over the limit"));
    }

    #[test]
    fn unknown_required_flags_and_sections_are_refused() {
        let mut msg = encode_msg(1, body().as_bytes(), &[], false);
        msg[16] = 0x04;
        assert!(parse_request(&msg)
            .unwrap_err()
            .to_string()
            .contains("flag"));
        let mut msg = encode_msg(1, body().as_bytes(), &[], false);
        msg[20] = 9;
        assert!(parse_request(&msg)
            .unwrap_err()
            .to_string()
            .contains("section kind 9"));
    }

    #[test]
    fn legacy_queries_parse() {
        let q = rawdoc! {"isMaster": 1};
        let msg = encode_query(3, "admin.$cmd", q.as_bytes());
        let (_, req) = parse_request(&msg).unwrap();
        let Request::Query(q2) = req else {
            panic!("not OP_QUERY")
        };
        assert_eq!(q2.namespace, "admin.$cmd");
        assert_eq!(q2.query, q);
    }

    #[test]
    fn read_message_tells_a_clean_close_from_a_cut_one() {
        let msg = encode_msg(1, body().as_bytes(), &[], false);
        assert!(read_message(&mut &[][..], MAX_MESSAGE_BYTES)
            .unwrap()
            .is_none());
        let cut = &msg[..msg.len() - 3];
        assert!(read_message(&mut &cut[..], MAX_MESSAGE_BYTES).is_err());
        let (h, bytes) = read_message(&mut &msg[..], MAX_MESSAGE_BYTES)
            .unwrap()
            .unwrap();
        assert_eq!(h.length, msg.len());
        assert_eq!(bytes, msg);
    }
}
