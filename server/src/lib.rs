//! `tsbucket-server`: a database that embeds tsbucket and speaks MongoDB's wire protocol, so
//! MongoDB's own drivers and shell use tsbucket's time-series collections unchanged.
//!
//! It is a thin layer over tsbucket's public API: one tsbucket database directory per MongoDB
//! database under one directory, commands mapped to the API's calls, server-side cursors over
//! the API's cursors. `tsbucket serve` runs it; an embedder can run it too:
//!
//! ```no_run
//! let server = tsbucket_server::Server::start(tsbucket_server::ServerOptions::new("data"))?;
//! println!("listening on {}", server.local_addr());
//! server.wait();
//! # Ok::<(), std::io::Error>(())
//! ```

#![deny(missing_docs)]
// Nothing that comes from a client may panic the server.
#![deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]
#![cfg_attr(
    test,
    allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)
)]

pub mod auth;
pub mod commands;
mod connection;
pub mod cursors;
pub mod databases;
pub mod error;
pub mod matcher;
pub mod reply;
pub mod request;
pub mod wire;

use databases::Databases;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tsbucket::DbOptions;

/// How a server runs.
pub struct ServerOptions {
    /// The directory holding one tsbucket database directory per MongoDB database.
    pub dir: PathBuf,
    /// The address to listen on. Loopback unless told otherwise, as mongod.
    pub bind: IpAddr,
    /// The port (27017 by default; 0 picks a free one).
    pub port: u16,
    /// Users allowed in (SCRAM-SHA-256). Without it every client is trusted, so a bind to a
    /// non-loopback address is refused.
    pub auth_file: Option<PathBuf>,
    /// Connections open at once; more are closed as they arrive.
    pub max_connections: usize,
    /// Cursors open at once, over all connections.
    pub max_cursors: usize,
    /// A cursor idle this long is closed (MongoDB: 10 minutes).
    pub cursor_timeout: Duration,
    /// The largest message accepted (MongoDB: 48,000,000 bytes).
    pub max_message_bytes: usize,
    /// Options each database opens with.
    pub db_options: Arc<dyn Fn() -> DbOptions + Send + Sync>,
    /// Print every connection's start and end to standard error. Protocol errors, which
    /// close a connection, are printed either way.
    pub log: bool,
}

impl ServerOptions {
    /// Defaults for a server over `dir`: 127.0.0.1:27017, no users, mongod's limits.
    pub fn new(dir: impl Into<PathBuf>) -> ServerOptions {
        ServerOptions {
            dir: dir.into(),
            bind: IpAddr::from([127, 0, 0, 1]),
            port: 27017,
            auth_file: None,
            max_connections: 1000,
            max_cursors: 10_000,
            cursor_timeout: Duration::from_secs(600),
            max_message_bytes: wire::MAX_MESSAGE_BYTES,
            db_options: Arc::new(DbOptions::default),
            log: false,
        }
    }
}

/// What every connection shares.
pub struct Shared {
    /// The databases.
    pub dbs: Databases,
    /// Open cursors.
    pub cursors: cursors::Cursors,
    /// Users, when authentication is on.
    pub auth: Option<auth::Users>,
    /// The address bound, as `getCmdLineOpts` reports it.
    pub bind: String,
    /// The port bound.
    pub port: u16,
    /// When the server started.
    pub started: Instant,
    /// Identifies this run of the server (`topologyVersion.processId`).
    pub process_id: bson::oid::ObjectId,
    max_message_bytes: usize,
    log: bool,
    connections: AtomicUsize,
    created: AtomicI64,
    sockets: Mutex<HashMap<i64, TcpStream>>,
    stopping: AtomicBool,
}

impl Shared {
    /// Connections open now.
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::Relaxed)
    }

    /// Connections accepted since the server started.
    pub fn connections_created(&self) -> i64 {
        self.created.load(Ordering::Relaxed)
    }

    fn log(&self, msg: std::fmt::Arguments<'_>) {
        if self.log {
            eprintln!("{msg}");
        }
    }

    /// A client broke the protocol: always worth a line, since its driver only sees the
    /// connection close.
    fn warn(&self, msg: std::fmt::Arguments<'_>) {
        eprintln!("{msg}");
    }
}

/// A running server.
pub struct Server {
    shared: Arc<Shared>,
    addr: SocketAddr,
    acceptor: Option<JoinHandle<()>>,
}

impl Server {
    /// Binds and starts accepting connections on a thread of its own.
    pub fn start(opts: ServerOptions) -> io::Result<Server> {
        let users = match &opts.auth_file {
            Some(f) => Some(auth::Users::load(f).map_err(|e| {
                io::Error::new(io::ErrorKind::InvalidInput, format!("{}: {e}", f.display()))
            })?),
            None => None,
        };
        if users.is_none() && !opts.bind.is_loopback() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "refusing to listen on {} without authentication: give an auth file, or bind to a loopback address",
                    opts.bind
                ),
            ));
        }
        let db_options = opts.db_options.clone();
        let dbs = Databases::new(&opts.dir, Box::new(move || db_options()))?;
        let listener = TcpListener::bind((opts.bind, opts.port))?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            dbs,
            cursors: cursors::Cursors::new(opts.cursor_timeout, opts.max_cursors),
            auth: users,
            bind: opts.bind.to_string(),
            port: addr.port(),
            started: Instant::now(),
            process_id: bson::oid::ObjectId::new(),
            max_message_bytes: opts.max_message_bytes,
            log: opts.log,
            connections: AtomicUsize::new(0),
            created: AtomicI64::new(0),
            sockets: Mutex::new(HashMap::new()),
            stopping: AtomicBool::new(false),
        });
        let max_connections = opts.max_connections;
        let s = shared.clone();
        let acceptor = std::thread::Builder::new()
            .name("tsbucket-accept".into())
            .spawn(move || accept_loop(listener, s, max_connections))?;
        Ok(Server {
            shared,
            addr,
            acceptor: Some(acceptor),
        })
    }

    /// The address the server listens on (with the port picked when 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// What the connections share: the databases and cursors.
    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// Blocks until the server stops accepting (after [`Server::shutdown`] from another
    /// thread, or never).
    pub fn wait(mut self) {
        if let Some(a) = self.acceptor.take() {
            let _ = a.join();
        }
    }

    /// Stops accepting, closes every connection, and closes the databases (flushing what
    /// is in memory). Returns the databases that failed to close.
    pub fn shutdown(mut self) -> Vec<(String, tsbucket::Error)> {
        self.stop_accepting();
        self.shared.dbs.close_all()
    }

    fn stop_accepting(&mut self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        // Wake the acceptor, blocked in accept(), with a connection of our own.
        let wake = if self.addr.ip().is_unspecified() {
            SocketAddr::new(IpAddr::from([127, 0, 0, 1]), self.addr.port())
        } else {
            self.addr
        };
        let _ = TcpStream::connect_timeout(&wake, Duration::from_secs(1));
        if let Some(a) = self.acceptor.take() {
            let _ = a.join();
        }
        for (_, s) in self.shared.sockets.lock().drain() {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
        // Connection threads finish their command in flight; wait for them briefly.
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.shared.connections() > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if self.acceptor.is_some() {
            self.stop_accepting();
            self.shared.dbs.close_all();
        }
    }
}

fn accept_loop(listener: TcpListener, shared: Arc<Shared>, max_connections: usize) {
    for stream in listener.incoming() {
        if shared.stopping.load(Ordering::SeqCst) {
            break;
        }
        let stream = match stream {
            Ok(s) => s,
            Err(e) => {
                shared.log(format_args!("accept failed: {e}"));
                // Out of file descriptors and the like: back off instead of spinning.
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        if shared.connections() >= max_connections {
            shared.warn(format_args!(
                "connection refused because too many are open ({max_connections})"
            ));
            drop(stream);
            continue;
        }
        let id = shared.created.fetch_add(1, Ordering::Relaxed) + 1;
        shared.connections.fetch_add(1, Ordering::SeqCst);
        if let Ok(s) = stream.try_clone() {
            shared.sockets.lock().insert(id, s);
        }
        let s = shared.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("tsbucket-conn{id}"))
            .spawn(move || {
                connection::serve(&s, stream, id);
                s.sockets.lock().remove(&id);
                s.connections.fetch_sub(1, Ordering::SeqCst);
            });
        if let Err(e) = spawned {
            shared.log(format_args!("cannot start a connection thread: {e}"));
            shared.sockets.lock().remove(&id);
            shared.connections.fetch_sub(1, Ordering::SeqCst);
        }
    }
}
