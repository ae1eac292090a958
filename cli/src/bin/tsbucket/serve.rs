//! `tsbucket serve`: MongoDB's wire protocol over a directory of databases, for MongoDB's
//! drivers and shell.

use crate::common::{ctrl_c_flag, CliResult};
use clap::Args;
use std::io::{BufRead, Write};
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tsbucket_server::{Server, ServerOptions};

#[derive(Args)]
pub struct ServeArgs {
    /// Directory holding one database directory per MongoDB database (created if missing).
    #[arg(long)]
    dir: PathBuf,
    /// Address to listen on. Anything but loopback needs --auth-file.
    #[arg(long, default_value = "127.0.0.1")]
    bind: IpAddr,
    /// Port to listen on (0 picks a free one and prints it).
    #[arg(long, default_value_t = 27017)]
    port: u16,
    /// Users allowed in with SCRAM-SHA-256, one per line, as --add-user writes them.
    #[arg(long, value_name = "FILE")]
    auth_file: Option<PathBuf>,
    /// Add a user to --auth-file with the password read from standard input, then exit.
    #[arg(long, value_name = "USER", requires = "auth_file")]
    add_user: Option<String>,
    /// Most connections open at once.
    #[arg(long, default_value_t = 1000)]
    max_connections: usize,
    /// Close cursors idle this many seconds.
    #[arg(long, default_value_t = 600)]
    cursor_timeout: u64,
    /// Print each connection's start and end to standard error (protocol errors, which close
    /// a connection, are printed either way).
    #[arg(long)]
    verbose: bool,
}

pub fn run(a: ServeArgs) -> CliResult {
    if let (Some(user), Some(file)) = (&a.add_user, &a.auth_file) {
        return add_user(user, file);
    }
    let mut opts = ServerOptions::new(&a.dir);
    opts.bind = a.bind;
    opts.port = a.port;
    opts.auth_file = a.auth_file.clone();
    opts.max_connections = a.max_connections;
    opts.cursor_timeout = Duration::from_secs(a.cursor_timeout);
    opts.log = a.verbose;
    let stop = ctrl_c_flag()?;
    let server = Server::start(opts).map_err(|e| format!("cannot start the server: {e}"))?;
    let auth = if a.auth_file.is_some() {
        "SCRAM-SHA-256 required"
    } else {
        "no authentication"
    };
    // The address line is what scripts wait for (with --port 0 it carries the port picked).
    println!(
        "tsbucket serve: listening on {} ({auth}); databases in {}",
        server.local_addr(),
        a.dir.display()
    );
    let _ = std::io::stdout().flush();
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!("tsbucket serve: stopping; closing the databases");
    let failed = server.shutdown();
    if let Some((name, e)) = failed.into_iter().next() {
        return Err(format!("database {name} did not close cleanly: {e}").into());
    }
    Ok(())
}

fn add_user(user: &str, file: &std::path::Path) -> CliResult {
    let mut password = String::new();
    std::io::stdin().lock().read_line(&mut password)?;
    let password = password.trim_end_matches(['\n', '\r']);
    if password.is_empty() {
        return Err("no password on standard input".into());
    }
    let line = tsbucket_server::auth::Users::entry(user, password)?;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(file)?;
    writeln!(f, "{line}")?;
    f.sync_all()?;
    eprintln!("added user {user} to {}", file.display());
    Ok(())
}
