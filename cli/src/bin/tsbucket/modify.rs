//! Commands that change a collection after its data is in: `update`, `delete`, `sweep`,
//! `coll-mod`, `index` and `drop`. Each prints what it changed, one line, and leaves the
//! database closed cleanly.

use crate::admin::GranularityArg;
use crate::common::{open_existing, CliResult};
use crate::json::doc_arg;
use crate::out::Out;
use clap::{Args, Subcommand};
use std::path::PathBuf;
use tsbucket::bson::DateTime;
use tsbucket::CollMod;

/// Flags of `tsbucket update`.
#[derive(Args)]
pub struct UpdateArgs {
    /// Database directory.
    dir: PathBuf,
    /// Collection name.
    coll: String,
    /// Filter on the meta field only, e.g. '{"tags.hostname": "host_1"}'.
    filter: String,
    /// Update operators on the meta field only, e.g. '{"$set": {"tags.rack": "r2"}}'.
    update: String,
}

/// Flags of `tsbucket delete`.
#[derive(Args)]
pub struct DeleteArgs {
    /// Database directory.
    dir: PathBuf,
    /// Collection name.
    coll: String,
    /// Filter on the meta field only; '{}' deletes every measurement.
    filter: String,
}

/// Flags of `tsbucket sweep`.
#[derive(Args)]
pub struct SweepArgs {
    /// Database directory.
    dir: PathBuf,
    /// The time to judge expiry at, RFC 3339 (default: the system clock).
    #[arg(long)]
    now: Option<String>,
}

/// Flags of `tsbucket coll-mod`.
#[derive(Args)]
pub struct CollModArgs {
    /// Database directory.
    dir: PathBuf,
    /// Collection name.
    coll: String,
    /// A coarser preset granularity.
    #[arg(long, value_enum, conflicts_with = "bucket_span")]
    granularity: Option<GranularityArg>,
    /// Custom bucketing, bucketMaxSpanSeconds = bucketRoundingSeconds = SECS (may only grow).
    #[arg(long, value_name = "SECS")]
    bucket_span: Option<u32>,
    /// Delete buckets once all their measurements are older than SECS seconds.
    #[arg(long, value_name = "SECS", conflicts_with = "no_expiry")]
    expire_after: Option<u64>,
    /// Remove expireAfterSeconds.
    #[arg(long)]
    no_expiry: bool,
}

/// Flags of `tsbucket index`.
#[derive(Args)]
pub struct IndexArgs {
    /// Database directory.
    dir: PathBuf,
    /// Collection name.
    coll: String,
    #[command(subcommand)]
    op: IndexOp,
}

/// What `tsbucket index` does.
#[derive(Subcommand)]
pub enum IndexOp {
    /// Create an index and print its name, e.g. '{"tags.hostname": 1, "time": -1}'.
    Create {
        /// Index keys, 1 ascending and -1 descending.
        keys: String,
        /// Index options as MongoDB's createIndexes takes them, e.g. '{"name": "by_host"}'.
        #[arg(long)]
        options: Option<String>,
    },
    /// Print the indexes in the user's form, one JSON document per line.
    List {
        /// Print them in bucket form instead (as stored on the bucket collection).
        #[arg(long)]
        buckets: bool,
    },
    /// Drop the index with this name.
    Drop {
        /// Index name, as `list` prints it.
        name: String,
    },
}

/// Flags of `tsbucket drop`.
#[derive(Args)]
pub struct DropArgs {
    /// Database directory.
    dir: PathBuf,
    /// Collection name.
    coll: String,
}

/// Runs `update`.
pub fn update(a: UpdateArgs) -> CliResult {
    let filter = doc_arg("filter", &a.filter)?;
    let update = doc_arg("update", &a.update)?;
    let db = open_existing(&a.dir)?;
    let r = crate::common::collection(&db, &a.coll)?.update_many(filter, update)?;
    db.close()?;
    say(&format!(
        "matched {} measurements, modified {}",
        r.matched_count, r.modified_count
    ))?;
    Ok(())
}

/// Runs `delete`.
pub fn delete(a: DeleteArgs) -> CliResult {
    let filter = doc_arg("filter", &a.filter)?;
    let db = open_existing(&a.dir)?;
    let r = crate::common::collection(&db, &a.coll)?.delete_many(filter)?;
    db.close()?;
    say(&format!("deleted {} measurements", r.deleted_count))?;
    Ok(())
}

/// Runs `sweep`.
pub fn sweep(a: SweepArgs) -> CliResult {
    let now = match &a.now {
        Some(s) => DateTime::parse_rfc3339_str(s)
            .map_err(|e| format!("--now: not an RFC 3339 time: {s}: {e}"))?,
        None => DateTime::now(),
    };
    let db = open_existing(&a.dir)?;
    let r = db.sweep_expired(now)?;
    db.close()?;
    say(&format!(
        "deleted {} buckets ({} measurements), reclaimed {} bytes",
        r.buckets_deleted, r.measurements_deleted, r.bytes_reclaimed
    ))?;
    Ok(())
}

/// Runs `coll-mod`.
pub fn coll_mod(a: CollModArgs) -> CliResult {
    let mut m = CollMod::default();
    if let Some(g) = a.granularity {
        m = m.granularity(g.into());
    }
    if let Some(s) = a.bucket_span {
        m = m.bucket_span(s, s);
    }
    if let Some(e) = a.expire_after {
        m = m.expire_after_seconds(Some(e));
    }
    if a.no_expiry {
        m = m.expire_after_seconds(None);
    }
    if m == CollMod::default() {
        return Err("coll-mod: nothing to change (see --help)".into());
    }
    let db = open_existing(&a.dir)?;
    db.coll_mod(&a.coll, m)?;
    let opts = crate::common::collection(&db, &a.coll)?.options()?;
    db.close()?;
    say(&format!(
        "{}: {}",
        a.coll,
        crate::admin::describe_options(&opts)
    ))?;
    Ok(())
}

/// Runs `index`.
pub fn index(a: IndexArgs) -> CliResult {
    let db = open_existing(&a.dir)?;
    let c = crate::common::collection(&db, &a.coll)?;
    match a.op {
        IndexOp::Create { keys, options } => {
            let keys = doc_arg("keys", &keys)?;
            let options = options
                .map(|o| doc_arg("--options", &o))
                .transpose()?
                .unwrap_or_default();
            say(&c.create_index_with(keys, options)?)?;
        }
        IndexOp::List { buckets } => {
            let list = if buckets {
                c.list_bucket_indexes()?
            } else {
                c.list_indexes()?
            };
            for d in list {
                say(&crate::json::to_relaxed(d).to_string())?;
            }
        }
        IndexOp::Drop { name } => {
            c.drop_index(&name)?;
            say(&format!("dropped {name}"))?;
        }
    }
    db.close()?;
    Ok(())
}

/// Runs `drop`.
pub fn drop(a: DropArgs) -> CliResult {
    let db = open_existing(&a.dir)?;
    let dropped = db.drop_collection(&a.coll)?;
    db.close()?;
    if !dropped {
        return Err(format!("no collection named {}", a.coll).into());
    }
    say(&format!("dropped {}", a.coll))?;
    Ok(())
}

/// Prints one line; a closed pipe is not an error (see `main`).
fn say(line: &str) -> CliResult {
    let mut out = Out::new();
    out.line(line)?;
    Ok(out.finish()?)
}
