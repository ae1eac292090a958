//! SCRAM-SHA-256 authentication (RFC 5802 and RFC 7677), as MongoDB does it.
//!
//! # The auth file
//!
//! The users a server accepts are read from a UTF-8 text file with one user per line:
//!
//! ```text
//! USER:SCRAM-SHA-256:ITERATIONS:SALT_BASE64:STOREDKEY_BASE64:SERVERKEY_BASE64
//! ```
//!
//! Blank lines and lines starting with `#` are ignored. A user name may not be empty, start
//! with `#`, or contain `:` or a line break. `ITERATIONS` is the PBKDF2 iteration count (at
//! least 4096, as RFC 7677 asks); `SALT`, `STOREDKEY` and `SERVERKEY` are standard base64,
//! the keys 32 bytes each. The password itself is never stored: the keys are what SCRAM
//! needs to check a client's proof, and they cannot log in by themselves. [`entry`] makes a
//! line for a user and password (a fresh 28-byte salt, 15000 iterations, the password
//! prepared with SASLprep as MongoDB's drivers prepare it).
//!
//! A user name alone identifies a user: a client may name any database as its auth source
//! (drivers default to `admin`). User names are compared exactly, without SASLprep, as
//! MongoDB compares them.
//!
//! # The conversation
//!
//! `saslStart` carries the client-first message and is answered with the server-first
//! message; `saslContinue` carries the client's proof and is answered with the server's
//! signature. A client that did not ask for `skipEmptyExchange` sends one more, empty,
//! `saslContinue`. A wrong password and an unknown user fail alike, at the proof, with
//! MongoDB's `AuthenticationFailed` and its message, so a client cannot learn which user
//! names exist.

use crate::error::{CmdResult, CommandError, AUTHENTICATION_FAILED, BAD_VALUE, INTERNAL_ERROR};
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use bson::spec::BinarySubtype;
use bson::{doc, Binary, Bson, Document};
use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::fmt;
use std::path::Path;
use subtle::ConstantTimeEq;

/// The one mechanism the server offers.
pub const MECHANISM: &str = "SCRAM-SHA-256";
/// MongoDB's `MechanismUnavailable`.
pub const MECHANISM_UNAVAILABLE: i32 = 334;
/// The iteration count [`entry`] writes (MongoDB's default for SCRAM-SHA-256).
pub const DEFAULT_ITERATIONS: u32 = 15_000;
/// The smallest iteration count accepted in an auth file (RFC 7677).
pub const MIN_ITERATIONS: u32 = 4096;

/// The salt length [`entry`] writes (MongoDB's for SCRAM-SHA-256).
const SALT_BYTES: usize = 28;
/// Random bytes the server adds to the client's nonce.
const NONCE_BYTES: usize = 24;
/// The one conversation a connection has at a time, as MongoDB numbers it.
const CONVERSATION_ID: i32 = 1;
/// What MongoDB answers for a wrong user or password.
const FAILED: &str = "Authentication failed.";

type Key = [u8; 32];

/// What SCRAM keeps for a user instead of the password.
#[derive(Clone, PartialEq, Eq)]
struct Credential {
    iterations: u32,
    salt: Vec<u8>,
    stored_key: Key,
    server_key: Key,
}

impl Credential {
    /// Derives the keys from a password already prepared with SASLprep.
    fn derive(password: &str, salt: &[u8], iterations: u32) -> Credential {
        let mut salted: Key = [0; 32];
        pbkdf2::pbkdf2_hmac::<Sha256>(password.as_bytes(), salt, iterations, &mut salted);
        let client_key = hmac(&salted, b"Client Key");
        Credential {
            iterations,
            salt: salt.to_vec(),
            stored_key: sha256(&client_key),
            server_key: hmac(&salted, b"Server Key"),
        }
    }

    fn line(&self, user: &str) -> String {
        format!(
            "{user}:{MECHANISM}:{}:{}:{}:{}",
            self.iterations,
            B64.encode(&self.salt),
            B64.encode(self.stored_key),
            B64.encode(self.server_key)
        )
    }
}

/// The users a server accepts, read from an auth file (see the [module docs](self)).
pub struct Users {
    by_name: HashMap<String, Credential>,
    /// Derives a stable fake salt for a user who does not exist, so that saslStart answers
    /// an unknown name as it answers a known one; random per server run.
    secret: Key,
}

impl fmt::Debug for Users {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Keys and salts stay out of logs.
        f.debug_struct("Users")
            .field("count", &self.by_name.len())
            .finish_non_exhaustive()
    }
}

impl Users {
    /// Reads an auth file. The error says what is wrong, and on which line.
    pub fn load(path: &Path) -> Result<Users, String> {
        let bytes = std::fs::read(path).map_err(|e| format!("cannot read the auth file: {e}"))?;
        let mut text = String::with_capacity(bytes.len());
        for (i, line) in bytes.split(|b| *b == b'\n').enumerate() {
            let line =
                std::str::from_utf8(line).map_err(|_| format!("line {}: not UTF-8", i + 1))?;
            if i > 0 {
                text.push('\n');
            }
            text.push_str(line);
        }
        Users::parse(&text)
    }

    /// Reads the text of an auth file. The error says what is wrong, and on which line.
    pub fn parse(text: &str) -> Result<Users, String> {
        let mut by_name = HashMap::new();
        let mut first_line = HashMap::new();
        for (i, line) in text.split('\n').enumerate() {
            let n = i + 1;
            let line = line.strip_suffix('\r').unwrap_or(line);
            if line.trim().is_empty() || line.trim_start().starts_with('#') {
                continue;
            }
            let (user, cred) = parse_line(line).map_err(|e| format!("line {n}: {e}"))?;
            if let Some(earlier) = first_line.insert(user.clone(), n) {
                return Err(format!(
                    "line {n}: user '{user}' is already on line {earlier}"
                ));
            }
            by_name.insert(user, cred);
        }
        if by_name.is_empty() {
            return Err("the auth file has no users".into());
        }
        let mut secret = [0; 32];
        getrandom::fill(&mut secret)
            .map_err(|e| format!("no random numbers from the system: {e}"))?;
        Ok(Users { by_name, secret })
    }

    /// How many users there are.
    pub fn len(&self) -> usize {
        self.by_name.len()
    }

    /// Whether there are none (never, for users read from a file).
    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    /// Whether `user` is one of them.
    pub fn contains(&self, user: &str) -> bool {
        self.by_name.contains_key(user)
    }

    /// The auth-file line for `user` and `password`: the same as [`entry`].
    pub fn entry(user: &str, password: &str) -> Result<String, String> {
        entry(user, password)
    }

    /// The credential to run a conversation against, and whether the user exists. For an
    /// unknown user the salt is derived from the name, so that asking twice answers the same.
    fn credential(&self, user: &str) -> (Credential, bool) {
        match self.by_name.get(user) {
            Some(c) => (c.clone(), true),
            None => {
                let mut msg = b"salt:".to_vec();
                msg.extend_from_slice(user.as_bytes());
                let salt = hmac(&self.secret, &msg);
                (
                    Credential {
                        iterations: DEFAULT_ITERATIONS,
                        salt: salt.iter().copied().take(SALT_BYTES).collect(),
                        stored_key: hmac(&self.secret, b"stored"),
                        server_key: hmac(&self.secret, b"server"),
                    },
                    false,
                )
            }
        }
    }
}

/// The auth-file line (without a line break) for `user` with `password`: a fresh random
/// 28-byte salt, 15000 iterations, the password prepared with SASLprep (RFC 4013), as
/// MongoDB's drivers prepare it. Refuses a user name the file cannot hold and a password that
/// SASLprep rejects or that is empty.
pub fn entry(user: &str, password: &str) -> Result<String, String> {
    check_user(user)?;
    let prepared = stringprep::saslprep(password)
        .map_err(|e| format!("the password is not allowed by SASLprep (RFC 4013): {e}"))?;
    if prepared.is_empty() {
        return Err("the password is empty".into());
    }
    let mut salt = [0; SALT_BYTES];
    getrandom::fill(&mut salt).map_err(|e| format!("no random numbers from the system: {e}"))?;
    Ok(Credential::derive(&prepared, &salt, DEFAULT_ITERATIONS).line(user))
}

fn check_user(user: &str) -> Result<(), String> {
    if user.is_empty() {
        Err("the user name is empty".into())
    } else if user.contains([':', '\n', '\r']) {
        Err(format!(
            "the user name {user:?} contains ':' or a line break"
        ))
    } else if user.trim_start().starts_with('#') {
        Err(format!(
            "the user name {user:?} starts with '#', which marks a comment"
        ))
    } else {
        Ok(())
    }
}

fn parse_line(line: &str) -> Result<(String, Credential), String> {
    let fields: Vec<&str> = line.split(':').collect();
    let [user, mechanism, iterations, salt, stored_key, server_key] = fields.as_slice() else {
        return Err(format!(
            "expected USER:{MECHANISM}:ITERATIONS:SALT:STOREDKEY:SERVERKEY (6 fields separated by ':'), found {} fields",
            fields.len()
        ));
    };
    check_user(user)?;
    if *mechanism != MECHANISM {
        return Err(format!("mechanism '{mechanism}' is not {MECHANISM}"));
    }
    let iterations: u32 = iterations
        .parse()
        .map_err(|_| format!("iteration count '{iterations}' is not a number"))?;
    if iterations < MIN_ITERATIONS {
        return Err(format!(
            "iteration count {iterations} is below {MIN_ITERATIONS}"
        ));
    }
    let salt = B64
        .decode(salt)
        .map_err(|e| format!("the salt is not base64: {e}"))?;
    if salt.is_empty() {
        return Err("the salt is empty".into());
    }
    let key = |name: &str, text: &str| -> Result<Key, String> {
        let bytes = B64
            .decode(text)
            .map_err(|e| format!("the {name} is not base64: {e}"))?;
        Key::try_from(bytes.as_slice())
            .map_err(|_| format!("the {name} is {} bytes, not 32", bytes.len()))
    };
    let cred = Credential {
        iterations,
        salt,
        stored_key: key("stored key", stored_key)?,
        server_key: key("server key", server_key)?,
    };
    Ok((user.to_string(), cred))
}

/// A SCRAM conversation in progress on a connection.
pub struct Conversation {
    state: State,
    /// Whether the client asked to be told `done` with the server's signature, rather than
    /// after one more, empty, round.
    skip_empty_exchange: bool,
}

enum State {
    /// The server-first message was sent; the client's proof is next.
    Proof(Box<Pending>),
    /// The proof was right and the signature sent; the client's empty message is next.
    Empty { user: String },
}

struct Pending {
    user: String,
    known: bool,
    gs2_header: String,
    client_first_bare: String,
    server_first: String,
    nonce: String,
    stored_key: Key,
    server_key: Key,
}

impl fmt::Debug for Conversation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let stage = match &self.state {
            State::Proof(_) => "proof",
            State::Empty { .. } => "empty",
        };
        f.debug_struct("Conversation")
            .field("awaiting", &stage)
            .finish_non_exhaustive()
    }
}

impl Conversation {
    /// Starts a conversation with a client-first message; returns it and the server-first
    /// message. An unknown user is not refused here but at the proof, as a wrong password is.
    pub fn start(users: &Users, client_first: &[u8]) -> CmdResult<(Conversation, Vec<u8>)> {
        let mut random = [0; NONCE_BYTES];
        getrandom::fill(&mut random).map_err(|e| {
            CommandError::new(
                INTERNAL_ERROR,
                format!("no random numbers from the system: {e}"),
            )
        })?;
        Conversation::start_with_nonce(users, client_first, &B64.encode(random))
    }

    /// [`Conversation::start`] with the server's part of the nonce given, for test vectors.
    fn start_with_nonce(
        users: &Users,
        client_first: &[u8],
        server_nonce: &str,
    ) -> CmdResult<(Conversation, Vec<u8>)> {
        let msg = utf8(client_first)?;
        let first = parse_client_first(msg)?;
        let (cred, known) = users.credential(&first.user);
        let nonce = format!("{}{server_nonce}", first.nonce);
        let server_first = format!(
            "r={nonce},s={},i={}",
            B64.encode(&cred.salt),
            cred.iterations
        );
        let conv = Conversation {
            state: State::Proof(Box::new(Pending {
                user: first.user,
                known,
                gs2_header: first.gs2_header,
                client_first_bare: first.bare,
                server_first: server_first.clone(),
                nonce,
                stored_key: cred.stored_key,
                server_key: cred.server_key,
            })),
            skip_empty_exchange: false,
        };
        Ok((conv, server_first.into_bytes()))
    }

    /// Checks the client-final message; on a right proof returns the user and the
    /// server-final message (the server's signature). A wrong proof, and any user who does
    /// not exist, fail with `AuthenticationFailed` and MongoDB's message.
    pub fn finish(self, client_final: &[u8]) -> CmdResult<(String, Vec<u8>)> {
        match self.state {
            State::Proof(p) => p.finish(client_final),
            State::Empty { .. } => Err(protocol("the SCRAM proof was already checked")),
        }
    }
}

impl Pending {
    fn finish(self, client_final: &[u8]) -> CmdResult<(String, Vec<u8>)> {
        let msg = utf8(client_final)?;
        // The proof is the last attribute and base64 has no ',', so the last ",p=" starts it.
        let (without_proof, proof) = msg
            .rsplit_once(",p=")
            .ok_or_else(|| protocol("the client-final message has no proof"))?;
        let mut attrs = without_proof.split(',');
        let binding = attrs
            .next()
            .and_then(|a| a.strip_prefix("c="))
            .ok_or_else(|| protocol("the client-final message does not start with c="))?;
        let nonce = attrs
            .next()
            .and_then(|a| a.strip_prefix("r="))
            .ok_or_else(|| protocol("the client-final message has no nonce after c="))?;
        // Later attributes are extensions, which RFC 5802 lets a server ignore.
        let binding = B64
            .decode(binding)
            .map_err(|_| protocol("the channel binding c= is not base64"))?;
        if binding != self.gs2_header.as_bytes() {
            return Err(protocol(
                "the channel binding c= does not match the gs2 header",
            ));
        }
        if nonce != self.nonce {
            return Err(protocol("the nonce does not match the server's"));
        }
        let proof = B64
            .decode(proof)
            .map_err(|_| protocol("the proof p= is not base64"))?;
        let proof = Key::try_from(proof.as_slice())
            .map_err(|_| protocol("the proof p= is not 32 bytes"))?;

        let auth_message = format!(
            "{},{},{without_proof}",
            self.client_first_bare, self.server_first
        );
        let signature = hmac(&self.stored_key, auth_message.as_bytes());
        let mut client_key: Key = [0; 32];
        for ((k, p), s) in client_key.iter_mut().zip(proof).zip(signature) {
            *k = p ^ s;
        }
        // Constant time, and the same work for an unknown user, so that neither the time nor
        // the answer tells how much of a proof was right or whether the user exists.
        let matches = sha256(&client_key).ct_eq(&self.stored_key)
            & subtle::Choice::from(u8::from(self.known));
        if !bool::from(matches) {
            return Err(failed());
        }
        let server_signature = hmac(&self.server_key, auth_message.as_bytes());
        Ok((
            self.user,
            format!("v={}", B64.encode(server_signature)).into_bytes(),
        ))
    }
}

/// The parts of a client-first message the server uses.
struct ClientFirst {
    gs2_header: String,
    bare: String,
    user: String,
    nonce: String,
}

fn parse_client_first(msg: &str) -> CmdResult<ClientFirst> {
    let (flag, rest) = msg
        .split_once(',')
        .ok_or_else(|| protocol("the client-first message has no gs2 header"))?;
    match flag {
        // "y": the client could bind a channel but thinks the server cannot; it is right.
        "n" | "y" => {}
        f if f.starts_with("p=") => {
            return Err(protocol(
                "channel binding is not supported: use SCRAM-SHA-256 without it",
            ))
        }
        _ => return Err(protocol("the gs2 header does not start with n, y or p=")),
    }
    let (authzid_field, bare) = rest
        .split_once(',')
        .ok_or_else(|| protocol("the client-first message has no gs2 header"))?;
    let authzid = match authzid_field {
        "" => None,
        a => Some(
            a.strip_prefix("a=")
                .and_then(unescape)
                .ok_or_else(|| protocol("the gs2 header's authorization identity is malformed"))?,
        ),
    };
    let mut attrs = bare.split(',');
    let user = match attrs.next() {
        Some(a) if a.starts_with("m=") => {
            return Err(protocol("SCRAM mandatory extensions are not supported"))
        }
        Some(a) => a
            .strip_prefix("n=")
            .ok_or_else(|| protocol("the client-first message has no user name n="))?,
        None => return Err(protocol("the client-first message has no user name n=")),
    };
    let user =
        unescape(user).ok_or_else(|| protocol("the user name has '=' not followed by 2C or 3D"))?;
    if user.is_empty() {
        return Err(protocol("the user name is empty"));
    }
    if authzid.as_deref().is_some_and(|a| a != user) {
        return Err(protocol(
            "the authorization identity must be the user's name",
        ));
    }
    let nonce = attrs
        .next()
        .and_then(|a| a.strip_prefix("r="))
        .ok_or_else(|| protocol("the client-first message has no nonce r="))?;
    if nonce.is_empty() || !nonce.bytes().all(|b| (0x21..=0x7e).contains(&b)) {
        return Err(protocol("the client nonce is empty or not printable ASCII"));
    }
    Ok(ClientFirst {
        gs2_header: format!("{flag},{authzid_field},"),
        bare: bare.to_string(),
        user,
        nonce: nonce.to_string(),
    })
}

/// A saslname with `=2C` and `=3D` turned back into `,` and `=`; None for any other `=`.
fn unescape(name: &str) -> Option<String> {
    let mut out = String::with_capacity(name.len());
    let mut rest = name;
    while let Some((head, tail)) = rest.split_once('=') {
        out.push_str(head);
        if let Some(t) = tail.strip_prefix("2C") {
            out.push(',');
            rest = t;
        } else if let Some(t) = tail.strip_prefix("3D") {
            out.push('=');
            rest = t;
        } else {
            return None;
        }
    }
    out.push_str(rest);
    Some(out)
}

fn hmac(key: &Key, msg: &[u8]) -> Key {
    // HMAC pads a key shorter than the hash's block with zeros (RFC 2104), so padding it here
    // is the same HMAC, and a whole block is a key that cannot be refused.
    let mut block = [0u8; 64];
    for (b, k) in block.iter_mut().zip(key) {
        *b = *k;
    }
    let mut mac = <Hmac<Sha256> as KeyInit>::new(&block.into());
    mac.update(msg);
    mac.finalize().into_bytes().into()
}

fn sha256(data: &[u8]) -> Key {
    Sha256::digest(data).into()
}

fn utf8(payload: &[u8]) -> CmdResult<&str> {
    std::str::from_utf8(payload).map_err(|_| protocol("the SCRAM message is not UTF-8"))
}

fn failed() -> CommandError {
    CommandError::new(AUTHENTICATION_FAILED, FAILED)
}

fn protocol(what: &str) -> CommandError {
    CommandError::new(BAD_VALUE, format!("SCRAM-SHA-256: {what}"))
}

/// What a connection knows of its login: who it authenticated as, and a SCRAM conversation
/// in progress.
#[derive(Default)]
pub struct Login {
    /// The user the connection authenticated as, if any.
    pub user: Option<String>,
    /// A conversation between `saslStart` and its last `saslContinue`.
    pub sasl: Option<Conversation>,
}

/// `saslStart`: begins a SCRAM-SHA-256 conversation. Any conversation the connection had
/// in progress is dropped.
pub fn sasl_start(users: Option<&Users>, login: &mut Login, body: &Document) -> CmdResult<Vec<u8>> {
    start_command(users, login, body)
}

/// `saslContinue`: the client's proof, and, unless the client asked for
/// `skipEmptyExchange`, its empty last message. Sets the session's user when the
/// conversation is done. Any error ends the conversation.
pub fn sasl_continue(login: &mut Login, body: &Document) -> CmdResult<Vec<u8>> {
    continue_command(login, body)
}

fn start_command(
    users: Option<&Users>,
    session: &mut Login,
    body: &Document,
) -> CmdResult<Vec<u8>> {
    session.sasl = None;
    let Some(users) = users else {
        return Err(CommandError::new(
            AUTHENTICATION_FAILED,
            "authentication is not enabled on this server",
        ));
    };
    match body.get("mechanism") {
        Some(Bson::String(m)) if m == MECHANISM => {}
        Some(Bson::String(m)) => {
            return Err(CommandError::new(
                MECHANISM_UNAVAILABLE,
                format!(
                    "Received authentication for mechanism {m} which is unknown or not enabled"
                ),
            ))
        }
        _ => {
            return Err(CommandError::bad_value(
                "saslStart needs a mechanism, a string",
            ))
        }
    }
    let (payload, as_text) = payload(body)?;
    let skip = match body.get("options") {
        Some(Bson::Document(o)) => o.get("skipEmptyExchange").is_some_and(truthy),
        _ => false,
    };
    let (mut conv, server_first) = Conversation::start(users, &payload)?;
    conv.skip_empty_exchange = skip;
    session.sasl = Some(conv);
    reply(false, server_first, as_text)
}

fn continue_command(session: &mut Login, body: &Document) -> CmdResult<Vec<u8>> {
    // Taken out, so that whatever fails below leaves no conversation behind.
    let conv = session.sasl.take().ok_or_else(|| {
        CommandError::new(
            AUTHENTICATION_FAILED,
            "no SASL conversation is in progress: send saslStart first",
        )
    })?;
    match body.get("conversationId") {
        None => {}
        Some(id) if as_i64(id) == Some(i64::from(CONVERSATION_ID)) => {}
        Some(id) => {
            return Err(CommandError::bad_value(format!(
                "no SASL conversation with id {id}"
            )))
        }
    }
    let (payload, as_text) = payload(body)?;
    let skip = conv.skip_empty_exchange;
    match conv.state {
        State::Proof(p) => {
            let (user, server_final) = p.finish(&payload)?;
            if skip {
                session.user = Some(user);
                reply(true, server_final, as_text)
            } else {
                session.sasl = Some(Conversation {
                    state: State::Empty { user },
                    skip_empty_exchange: false,
                });
                reply(false, server_final, as_text)
            }
        }
        State::Empty { user } => {
            if !payload.is_empty() {
                return Err(protocol("the last message must be empty"));
            }
            session.user = Some(user);
            reply(true, Vec::new(), as_text)
        }
    }
}

/// The command's payload, and whether it came as a string. MongoDB takes a string as base64
/// (older shells send that); a SCRAM message always has a ',' and so is never base64, which
/// lets a client that sends the message itself as a string be understood too.
fn payload(body: &Document) -> CmdResult<(Vec<u8>, bool)> {
    match body.get("payload") {
        Some(Bson::Binary(b)) => Ok((b.bytes.clone(), false)),
        Some(Bson::String(s)) => Ok((
            B64.decode(s).unwrap_or_else(|_| s.as_bytes().to_vec()),
            true,
        )),
        Some(_) => Err(CommandError::type_mismatch(
            "the payload must be BinData or a string",
        )),
        None => Err(CommandError::bad_value(format!(
            "{} needs a payload",
            body.keys().next().map_or("the command", String::as_str)
        ))),
    }
}

fn reply(done: bool, payload: Vec<u8>, as_text: bool) -> CmdResult<Vec<u8>> {
    let payload = if as_text {
        Bson::String(B64.encode(&payload))
    } else {
        Bson::Binary(Binary {
            subtype: BinarySubtype::Generic,
            bytes: payload,
        })
    };
    Ok(crate::reply::bson_bytes(&doc! {
        "conversationId": CONVERSATION_ID,
        "done": done,
        "payload": payload,
        "ok": 1.0,
    }))
}

fn as_i64(v: &Bson) -> Option<i64> {
    match v {
        Bson::Int32(n) => Some(i64::from(*n)),
        Bson::Int64(n) => Some(*n),
        Bson::Double(d) if d.fract() == 0.0 && d.abs() < 9.0e18 => Some(*d as i64),
        _ => None,
    }
}

fn truthy(v: &Bson) -> bool {
    match v {
        Bson::Boolean(b) => *b,
        Bson::Null => false,
        Bson::Double(d) => *d != 0.0,
        other => as_i64(other).is_some_and(|n| n != 0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::Document;

    /// The client's side of SCRAM-SHA-256, as a driver does it.
    struct Client {
        user: String,
        password: String,
        nonce: String,
        first_bare: String,
    }

    impl Client {
        fn new(user: &str, password: &str, nonce: &str) -> Client {
            let escaped = user.replace('=', "=3D").replace(',', "=2C");
            Client {
                user: user.into(),
                password: password.into(),
                nonce: nonce.into(),
                first_bare: format!("n={escaped},r={nonce}"),
            }
        }

        fn first(&self) -> String {
            format!("n,,{}", self.first_bare)
        }

        /// The client-final message, and the server signature it expects back.
        fn final_message(&self, server_first: &str) -> (String, String) {
            let mut nonce = "";
            let mut salt = Vec::new();
            let mut iterations = 0;
            for attr in server_first.split(',') {
                let (k, v) = attr.split_once('=').unwrap();
                match k {
                    "r" => nonce = v,
                    "s" => salt = B64.decode(v).unwrap(),
                    "i" => iterations = v.parse().unwrap(),
                    _ => panic!("unexpected attribute {attr}"),
                }
            }
            assert!(nonce.starts_with(&self.nonce), "{nonce}");
            let prepared = stringprep::saslprep(&self.password).unwrap();
            let mut salted = [0u8; 32];
            pbkdf2::pbkdf2_hmac::<Sha256>(prepared.as_bytes(), &salt, iterations, &mut salted);
            let client_key = hmac(&salted, b"Client Key");
            let stored_key = sha256(&client_key);
            let server_key = hmac(&salted, b"Server Key");
            let without_proof = format!("c=biws,r={nonce}");
            let auth = format!("{},{server_first},{without_proof}", self.first_bare);
            let signature = hmac(&stored_key, auth.as_bytes());
            let proof: Vec<u8> = client_key
                .iter()
                .zip(signature)
                .map(|(k, s)| k ^ s)
                .collect();
            let server_signature = hmac(&server_key, auth.as_bytes());
            (
                format!("{without_proof},p={}", B64.encode(proof)),
                format!("v={}", B64.encode(server_signature)),
            )
        }
    }

    fn users(lines: &[String]) -> Users {
        Users::parse(&lines.join("\n")).unwrap()
    }

    fn line(user: &str, password: &str) -> String {
        Credential::derive(password, b"some salt of 28 bytes.......", MIN_ITERATIONS).line(user)
    }

    fn run(
        f: impl FnOnce(&mut Login, &Document) -> CmdResult<Vec<u8>>,
        session: &mut Login,
        body: Document,
    ) -> CmdResult<Document> {
        f(session, &body).map(|bytes| Document::from_reader(bytes.as_slice()).unwrap())
    }

    fn bin(bytes: impl Into<Vec<u8>>) -> Binary {
        Binary {
            subtype: BinarySubtype::Generic,
            bytes: bytes.into(),
        }
    }

    fn payload_of(reply: &Document) -> String {
        String::from_utf8(reply.get_binary_generic("payload").unwrap().clone()).unwrap()
    }

    /// A whole exchange through the commands; the error of the first step that fails.
    fn login(
        users: &Users,
        session: &mut Login,
        user: &str,
        password: &str,
        skip: bool,
    ) -> CmdResult<()> {
        let client = Client::new(user, password, "fyko+d2lbbFgONRv9qkxdawL");
        let start = doc! {
            "saslStart": 1, "mechanism": "SCRAM-SHA-256", "payload": bin(client.first()),
            "autoAuthorize": 1, "options": {"skipEmptyExchange": skip}, "$db": "admin",
        };
        let r = run(|s, q| start_command(Some(users), s, q), session, start)?;
        assert_eq!(r.get_i32("conversationId").unwrap(), 1);
        assert!(!r.get_bool("done").unwrap());
        assert_eq!(r.get_f64("ok").unwrap(), 1.0);
        let (fin, expected_v) = client.final_message(&payload_of(&r));
        let cont =
            doc! {"saslContinue": 1, "conversationId": 1, "payload": bin(fin), "$db": "admin"};
        let r = run(continue_command, session, cont)?;
        assert_eq!(payload_of(&r), expected_v);
        assert_eq!(r.get_bool("done").unwrap(), skip);
        if !skip {
            assert!(session.user.is_none(), "not done yet");
            let cont = doc! {"saslContinue": 1, "conversationId": 1, "payload": bin(Vec::new()), "$db": "admin"};
            let r = run(continue_command, session, cont)?;
            assert!(r.get_bool("done").unwrap());
            assert_eq!(payload_of(&r), "");
        }
        assert!(session.sasl.is_none());
        assert_eq!(session.user.as_deref(), Some(client.user.as_str()));
        Ok(())
    }

    #[test]
    fn rfc7677_test_vector() {
        let salt = B64.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
        let users = users(&[Credential::derive("pencil", &salt, 4096).line("user")]);
        let client = Client::new("user", "pencil", "rOprNGfwEbeRWgbNEkqO");
        assert_eq!(client.first(), "n,,n=user,r=rOprNGfwEbeRWgbNEkqO");
        let (conv, server_first) = Conversation::start_with_nonce(
            &users,
            client.first().as_bytes(),
            "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",
        )
        .unwrap();
        let server_first = String::from_utf8(server_first).unwrap();
        assert_eq!(
            server_first,
            "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
        );
        let (client_final, expected_v) = client.final_message(&server_first);
        assert_eq!(
            client_final,
            "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
        );
        let (user, server_final) = conv.finish(client_final.as_bytes()).unwrap();
        assert_eq!(user, "user");
        let server_final = String::from_utf8(server_final).unwrap();
        assert_eq!(
            server_final,
            "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
        );
        assert_eq!(server_final, expected_v);
    }

    #[test]
    fn a_wrong_proof_fails() {
        let salt = B64.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
        let users = users(&[Credential::derive("pencil", &salt, 4096).line("user")]);
        let (conv, _) = Conversation::start_with_nonce(
            &users,
            b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO",
            "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",
        )
        .unwrap();
        let tampered = "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=eHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
        assert_eq!(conv.finish(tampered.as_bytes()).unwrap_err(), failed());
    }

    #[test]
    fn full_exchange_through_the_commands() {
        let users = users(&[line("alice", "secret"), line("b,o=b", "pässwörd")]);
        for skip in [true, false] {
            let mut session = Login::default();
            login(&users, &mut session, "alice", "secret", skip).unwrap();
            let mut session = Login::default();
            login(&users, &mut session, "b,o=b", "pässwörd", skip).unwrap();
        }

        // A wrong password and an unknown user fail alike, and leave nothing behind.
        let mut session = Login::default();
        let wrong = login(&users, &mut session, "alice", "Secret", true).unwrap_err();
        assert_eq!(
            wrong,
            CommandError::new(AUTHENTICATION_FAILED, "Authentication failed.")
        );
        assert_eq!(wrong.to_document().get_i32("code").unwrap(), 18);
        assert!(session.user.is_none() && session.sasl.is_none());
        let unknown = login(&users, &mut session, "mallory", "secret", true).unwrap_err();
        assert_eq!(unknown, wrong);
        assert!(session.user.is_none() && session.sasl.is_none());

        // A later saslContinue without saslStart is refused.
        let cont = doc! {"saslContinue": 1, "conversationId": 1, "payload": bin(Vec::new())};
        assert_eq!(
            run(continue_command, &mut session, cont).unwrap_err().code,
            AUTHENTICATION_FAILED
        );

        // A failed re-authentication keeps the user a connection already has.
        login(&users, &mut session, "alice", "secret", true).unwrap();
        assert!(login(&users, &mut session, "alice", "nope", false).is_err());
        assert_eq!(session.user.as_deref(), Some("alice"));
    }

    #[test]
    fn an_unknown_user_gets_a_stable_salt() {
        let users = users(&[line("alice", "secret")]);
        let first = |user: &str| {
            let msg = format!("n,,n={user},r=abc");
            String::from_utf8(
                Conversation::start_with_nonce(&users, msg.as_bytes(), "xyz")
                    .unwrap()
                    .1,
            )
            .unwrap()
        };
        assert_eq!(first("mallory"), first("mallory"));
        assert_ne!(first("mallory"), first("trudy"));
        assert!(first("mallory").ends_with(&format!(",i={DEFAULT_ITERATIONS}")));
    }

    #[test]
    fn string_payloads_are_base64_and_answered_so() {
        let users = users(&[line("alice", "secret")]);
        let client = Client::new("alice", "secret", "abcdef");
        let mut session = Login::default();
        let start = doc! {"saslStart": 1, "mechanism": "SCRAM-SHA-256", "payload": B64.encode(client.first())};
        let r = run(
            |s, q| start_command(Some(&users), s, q),
            &mut session,
            start,
        )
        .unwrap();
        let server_first =
            String::from_utf8(B64.decode(r.get_str("payload").unwrap()).unwrap()).unwrap();
        // The message itself as a string is understood as well.
        let (fin, expected_v) = client.final_message(&server_first);
        let cont = doc! {"saslContinue": 1, "conversationId": 1i64, "payload": fin};
        let r = run(continue_command, &mut session, cont).unwrap();
        assert_eq!(
            B64.decode(r.get_str("payload").unwrap()).unwrap(),
            expected_v.as_bytes()
        );
        let cont = doc! {"saslContinue": 1, "conversationId": 1.0, "payload": ""};
        let r = run(continue_command, &mut session, cont).unwrap();
        assert!(r.get_bool("done").unwrap());
        assert_eq!(session.user.as_deref(), Some("alice"));
    }

    #[test]
    fn refusals() {
        let users = users(&[line("alice", "secret")]);
        let start = |users: Option<&Users>, body: Document| {
            let mut session = Login::default();
            let r = run(|s, q| start_command(users, s, q), &mut session, body);
            assert!(session.sasl.is_none());
            r.unwrap_err()
        };
        let with = |payload: &str| doc! {"saslStart": 1, "mechanism": "SCRAM-SHA-256", "payload": bin(payload)};

        let off = start(None, with("n,,n=alice,r=abc"));
        assert_eq!(
            off,
            CommandError::new(
                AUTHENTICATION_FAILED,
                "authentication is not enabled on this server"
            )
        );
        let sha1 = start(
            Some(&users),
            doc! {"saslStart": 1, "mechanism": "SCRAM-SHA-1", "payload": bin("n,,n=alice,r=abc")},
        );
        assert_eq!(sha1.code, MECHANISM_UNAVAILABLE);
        assert_eq!(
            start(Some(&users), doc! {"saslStart": 1, "payload": bin("x")}).code,
            BAD_VALUE
        );
        assert_eq!(
            start(
                Some(&users),
                doc! {"saslStart": 1, "mechanism": "SCRAM-SHA-256"}
            )
            .code,
            BAD_VALUE
        );
        for bad in [
            "p=tls-unique,,n=alice,r=abc",
            "n,,m=ext,n=alice,r=abc",
            "n,,n=al=ice,r=abc",
            "n,,n=,r=abc",
            "n,,n=alice",
            "n,,n=alice,r=",
            "n,a=bob,n=alice,r=abc",
            "x,,n=alice,r=abc",
            "n=alice,r=abc",
        ] {
            let e = start(Some(&users), with(bad));
            assert_eq!(e.code, BAD_VALUE, "{bad}: {e:?}");
        }
        // An authorization identity that is the user is fine, and so is "y".
        for good in ["n,a=alice,n=alice,r=abc", "y,,n=alice,r=abc"] {
            let mut session = Login::default();
            run(
                |s, q| start_command(Some(&users), s, q),
                &mut session,
                with(good),
            )
            .unwrap();
            assert!(session.sasl.is_some());
        }

        // A proof step that breaks the protocol ends the conversation.
        let client = Client::new("alice", "secret", "abc");
        for tamper in [
            |m: String| m.replace("c=biws", "c=eSws"),
            |m: String| m.replace(",r=abc", ",r=abd"),
            |m: String| m.replace(",p=", ",q="),
            |m: String| format!("{m}AAAA"),
        ] {
            let mut session = Login::default();
            let r = run(
                |s, q| start_command(Some(&users), s, q),
                &mut session,
                with(&client.first()),
            )
            .unwrap();
            let (fin, _) = client.final_message(&payload_of(&r));
            let cont = doc! {"saslContinue": 1, "conversationId": 1, "payload": bin(tamper(fin))};
            assert!(run(continue_command, &mut session, cont).is_err());
            assert!(session.sasl.is_none() && session.user.is_none());
        }
        // So does a conversation id that is not 1, or a last message that is not empty.
        let mut session = Login::default();
        let r = run(
            |s, q| start_command(Some(&users), s, q),
            &mut session,
            with(&client.first()),
        )
        .unwrap();
        let (fin, _) = client.final_message(&payload_of(&r));
        let cont = doc! {"saslContinue": 1, "conversationId": 2, "payload": bin(fin)};
        assert_eq!(
            run(continue_command, &mut session, cont).unwrap_err().code,
            BAD_VALUE
        );
        assert!(session.sasl.is_none());
        let r = run(
            |s, q| start_command(Some(&users), s, q),
            &mut session,
            with(&client.first()),
        )
        .unwrap();
        let (fin, _) = client.final_message(&payload_of(&r));
        run(
            continue_command,
            &mut session,
            doc! {"saslContinue": 1, "payload": bin(fin)},
        )
        .unwrap();
        let cont = doc! {"saslContinue": 1, "payload": bin("more")};
        assert_eq!(
            run(continue_command, &mut session, cont).unwrap_err().code,
            BAD_VALUE
        );
        assert!(session.sasl.is_none() && session.user.is_none());
    }

    fn temp_file(name: &str, text: &str) -> std::path::PathBuf {
        let path =
            std::env::temp_dir().join(format!("tsbucket-auth-{}-{name}", std::process::id()));
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn entry_then_load() {
        let alice = entry("alice", "secret").unwrap();
        let bob = Users::entry("bob", "I\u{00AD}X").unwrap(); // SASLprep maps the soft hyphen away.
        assert_ne!(
            entry("alice", "secret").unwrap(),
            alice,
            "a fresh salt each time"
        );
        let fields: Vec<&str> = alice.split(':').collect();
        assert_eq!(fields.len(), 6);
        assert_eq!(fields[0..3], ["alice", "SCRAM-SHA-256", "15000"]);
        assert_eq!(B64.decode(fields[3]).unwrap().len(), 28);
        assert!(!alice.contains("secret"));

        let path = temp_file("ok", &format!("# users\n\n{alice}\r\n  # bob:\n{bob}\n"));
        let users = Users::load(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(users.len(), 2);
        assert!(users.contains("alice") && users.contains("bob") && !users.contains("carol"));
        login(&users, &mut Login::default(), "alice", "secret", true).unwrap();
        let mut session = Login::default();
        login(&users, &mut session, "bob", "IX", false).unwrap();
        assert!(login(&users, &mut session, "bob", "I\u{00AD}X!", true).is_err());
    }

    #[test]
    fn entry_refusals() {
        assert!(entry("a:b", "pw").unwrap_err().contains("':'"));
        assert!(entry("a\nb", "pw").is_err());
        assert!(entry("", "pw").is_err());
        assert!(entry("#a", "pw").is_err());
        // SASLprep prohibits control characters, and leaves nothing of a soft hyphen.
        assert!(entry("a", "pass\u{0007}word")
            .unwrap_err()
            .contains("SASLprep"));
        assert!(entry("a", "\u{00AD}").unwrap_err().contains("empty"));
        assert!(entry("a", "").is_err());
    }

    #[test]
    fn load_errors_name_the_line() {
        let good = line("alice", "secret");
        let parse_err = |text: String| Users::parse(&text).unwrap_err();
        let e = parse_err(format!("# c\n\n{good}\nbob:SCRAM-SHA-256:4096:c2FsdA==\n"));
        assert!(
            e.starts_with("line 4: ") && e.contains("found 4 fields"),
            "{e}"
        );
        let e = parse_err(format!("{good}\n{good}"));
        assert_eq!(e, "line 2: user 'alice' is already on line 1");
        let fields: Vec<&str> = good.split(':').collect();
        let with = |i: usize, v: &str| {
            let mut f = fields.clone();
            f[i] = v;
            f.join(":")
        };
        for (i, v, what) in [
            (0, "", "empty"),
            (1, "SCRAM-SHA-1", "mechanism"),
            (2, "many", "not a number"),
            (2, "4095", "below 4096"),
            (3, "!!", "salt is not base64"),
            (3, "", "salt is empty"),
            (4, "c2FsdA==", "4 bytes, not 32"),
            (5, "?", "server key is not base64"),
        ] {
            let e = parse_err(format!("\n{}\n", with(i, v)));
            assert!(e.starts_with("line 2: ") && e.contains(what), "{e}");
        }
        assert!(parse_err("# nobody\n".into()).contains("no users"));

        let path = temp_file("latin1", "");
        std::fs::write(&path, [good.as_bytes(), b"\n\ncaf\xE9:\n"].concat()).unwrap();
        let e = Users::load(&path).unwrap_err();
        std::fs::remove_file(&path).unwrap();
        assert!(e.starts_with("line 3: ") && e.contains("UTF-8"), "{e}");
        let e = Users::load(Path::new("/nonexistent/tsbucket-users")).unwrap_err();
        assert!(e.contains("cannot read"), "{e}");
    }
}
