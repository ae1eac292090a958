//! SQLite as a row store: one row per measurement, the meta values in their own columns
//! before the time, an index on (meta, time), WAL journal. Queries are plain SQL with GROUP BY
//! on integer time buckets.

use crate::answer::Answer;
use crate::engine::{unknown, Engine, Res};
use crate::workload::{DevopsParams, Workload, HOUR_MS, MINUTE_MS};
use rusqlite::types::Value;
use rusqlite::{params_from_iter, Connection};
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tsbucket::bson::{Bson, Document};
use tsbucket_workload::devops::FIELDS;

/// The devops tags, as columns.
const TAGS: [&str; 10] = [
    "hostname",
    "region",
    "datacenter",
    "rack",
    "os",
    "arch",
    "team",
    "service",
    "service_version",
    "service_environment",
];

/// SQLite in one file of `dir`.
pub struct Sqlite {
    path: PathBuf,
    synchronous: &'static str,
    conn: Option<Connection>,
    work: Workload,
}

impl Sqlite {
    /// Creates the table and its index; `synchronous` is `FULL` (an fsync per commit, as
    /// tsbucket's default) unless relaxed.
    pub fn create(dir: PathBuf, work: &Workload, synchronous: &'static str) -> Res<Sqlite> {
        std::fs::create_dir_all(&dir)?;
        let mut s = Sqlite {
            path: dir.join("data.sqlite"),
            synchronous,
            conn: None,
            work: work.clone(),
        };
        s.open()?;
        let ddl = match work {
            Workload::Devops(cfg) => {
                let ty = if cfg.float { "REAL" } else { "INTEGER" };
                let tags: Vec<String> = TAGS.iter().map(|t| format!("{t} TEXT NOT NULL")).collect();
                let fields: Vec<String> = FIELDS.iter().map(|f| format!("{f} {ty}")).collect();
                format!(
                    "CREATE TABLE cpu ({}, time INTEGER NOT NULL, {});
                     CREATE INDEX cpu_meta_time ON cpu (hostname, time);",
                    tags.join(", "),
                    fields.join(", ")
                )
            }
            Workload::Seed004(_) => "CREATE TABLE s004 (iResult INTEGER NOT NULL, \
                 vCmdid TEXT NOT NULL, vAppid TEXT NOT NULL, time INTEGER NOT NULL, \
                 totalCount INTEGER, dProcessTime REAL);
                 CREATE INDEX s004_meta_time ON s004 (iResult, vCmdid, vAppid, time);"
                .to_string(),
        };
        s.conn()?.execute_batch(&ddl)?;
        Ok(s)
    }

    fn open(&mut self) -> Res<()> {
        let conn = Connection::open(&self.path)?;
        conn.execute_batch(&format!(
            "PRAGMA journal_mode = WAL; PRAGMA synchronous = {};",
            self.synchronous
        ))?;
        self.conn = Some(conn);
        Ok(())
    }

    fn conn(&self) -> Res<&Connection> {
        self.conn.as_ref().ok_or_else(|| "sqlite: closed".into())
    }

    /// One row of `d` as SQL values, in column order.
    fn row(&self, d: &Document) -> Res<Vec<Value>> {
        let text = |v: Option<&Bson>| match v {
            Some(Bson::String(s)) => Value::Text(s.clone()),
            _ => Value::Null,
        };
        let num = |v: Option<&Bson>| match v {
            Some(Bson::Int32(i)) => Value::Integer(i64::from(*i)),
            Some(Bson::Int64(i)) => Value::Integer(*i),
            Some(Bson::Double(f)) => Value::Real(*f),
            _ => Value::Null,
        };
        match &self.work {
            Workload::Devops(_) => {
                let tags = d.get_document("tags")?;
                let mut row: Vec<Value> = TAGS.iter().map(|t| text(tags.get(t))).collect();
                row.push(Value::Integer(d.get_datetime("time")?.timestamp_millis()));
                row.extend(FIELDS.iter().map(|f| num(d.get(f))));
                Ok(row)
            }
            Workload::Seed004(_) => {
                let dims = d.get_document("dims")?;
                Ok(vec![
                    num(dims.get("iResult")),
                    text(dims.get("vCmdid")),
                    text(dims.get("vAppid")),
                    Value::Integer(d.get_datetime("timestamp")?.timestamp_millis()),
                    num(d.get("totalCount")),
                    num(d.get("dProcessTime")),
                ])
            }
        }
    }

    /// Runs `sql` and reduces its rows: every numeric column is summed except the first
    /// `skip` (group keys).
    fn answer(&self, sql: &str, params: &[&dyn rusqlite::ToSql], skip: usize) -> Res<Answer> {
        let conn = self.conn()?;
        let mut stmt = conn.prepare_cached(sql)?;
        let cols = stmt.column_count();
        let mut rows = stmt.query(params)?;
        let mut a = Answer::default();
        while let Some(r) = rows.next()? {
            a.rows += 1;
            for i in skip..cols {
                a.total += match r.get_ref(i)? {
                    rusqlite::types::ValueRef::Integer(v) => v as f64,
                    rusqlite::types::ValueRef::Real(v) => v,
                    _ => 0.0,
                };
            }
        }
        Ok(a)
    }

    fn devops(&self, cfg: &tsbucket_workload::Devops, name: &str) -> Res<Answer> {
        let p = DevopsParams::new(cfg);
        let max_all: Vec<String> = FIELDS.iter().map(|f| format!("max({f})")).collect();
        let all: Vec<String> = FIELDS.iter().map(|f| format!("c.{f}")).collect();
        let (e_lo, e_hi) = p.eight_hours();
        let (t_lo, t_hi) = p.twelve_hours();
        let (h_lo, h_hi) = p.hour;
        let (f_lo, f_hi) = p.first_hour;
        match name {
            "cpu-max-all-1" => self.answer(
                &format!(
                    "SELECT time / {HOUR_MS} AS hour, {} FROM cpu \
                     WHERE hostname = ?1 AND time >= ?2 AND time < ?3 GROUP BY hour ORDER BY hour",
                    max_all.join(", ")
                ),
                &[&p.host, &e_lo, &e_hi],
                1,
            ),
            "double-groupby-1" => self.answer(
                &format!(
                    "SELECT hostname, time / {HOUR_MS} AS hour, avg(usage_user) FROM cpu \
                     WHERE time >= ?1 AND time < ?2 GROUP BY hostname, hour"
                ),
                &[&t_lo, &t_hi],
                2,
            ),
            "high-cpu-all" => self.answer(
                "SELECT count(*) FROM cpu WHERE usage_user > 90 AND time >= ?1 AND time < ?2",
                &[&t_lo, &t_hi],
                0,
            ),
            // The latest row per host through the (hostname, time) index, as TimescaleDB's
            // TSBS query does with a lateral join.
            "lastpoint" => self.answer(
                &format!(
                    "SELECT h.hostname, {} FROM (SELECT DISTINCT hostname FROM cpu) h \
                     JOIN cpu c ON c.rowid = (SELECT rowid FROM cpu WHERE hostname = h.hostname \
                     ORDER BY time DESC LIMIT 1)",
                    all.join(", ")
                ),
                &[],
                1,
            ),
            "single-groupby-1-1-1" => self.answer(
                &format!(
                    "SELECT time / {MINUTE_MS} AS minute, max(usage_user) FROM cpu \
                     WHERE hostname = ?1 AND time >= ?2 AND time < ?3 \
                     GROUP BY minute ORDER BY minute"
                ),
                &[&p.host, &h_lo, &h_hi],
                1,
            ),
            "find-host-hour" => self.answer(
                &format!(
                    "SELECT {}, time, {} FROM cpu WHERE hostname = ?1 AND time >= ?2 AND time < ?3",
                    TAGS.join(", "),
                    FIELDS.join(", ")
                ),
                &[&p.host, &f_lo, &f_hi],
                TAGS.len() + 1,
            ),
            _ => Err(unknown("sqlite", name)),
        }
    }

    fn seed004(&self, name: &str) -> Res<Answer> {
        match name {
            "count-per-period" => self.answer(
                &format!(
                    "SELECT time / {MINUTE_MS} AS period, count(*) FROM s004 \
                     GROUP BY period ORDER BY period"
                ),
                &[],
                1,
            ),
            "sum-per-period-cmd" => self.answer(
                &format!(
                    "SELECT time / {MINUTE_MS} AS period, vCmdid, sum(totalCount) FROM s004 \
                     WHERE vAppid <> '' GROUP BY period, vCmdid"
                ),
                &[],
                2,
            ),
            _ => Err(unknown("sqlite", name)),
        }
    }
}

impl Engine for Sqlite {
    fn name(&self) -> &'static str {
        "sqlite"
    }

    fn insert(&mut self, docs: &[Document]) -> Res<Duration> {
        let rows = docs.iter().map(|d| self.row(d)).collect::<Res<Vec<_>>>()?;
        let sql = match self.work {
            Workload::Devops(_) => format!(
                "INSERT INTO cpu VALUES ({})",
                vec!["?"; TAGS.len() + 1 + FIELDS.len()].join(", ")
            ),
            Workload::Seed004(_) => "INSERT INTO s004 VALUES (?, ?, ?, ?, ?, ?)".to_string(),
        };
        let conn = self.conn.as_mut().ok_or("sqlite: closed")?;
        let t = Instant::now();
        let tx = conn.transaction()?;
        {
            let mut stmt = tx.prepare_cached(&sql)?;
            for r in &rows {
                stmt.execute(params_from_iter(r.iter()))?;
            }
        }
        tx.commit()?;
        Ok(t.elapsed())
    }

    fn close(&mut self) -> Res<Duration> {
        let conn = self.conn.take().ok_or("sqlite: closed twice")?;
        let t = Instant::now();
        // Moves the log into the database file; the last close removes the -wal file.
        conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE);")?;
        conn.close().map_err(|(_, e)| e)?;
        Ok(t.elapsed())
    }

    fn reopen(&mut self) -> Res<Duration> {
        let t = Instant::now();
        self.open()?;
        // Opening is lazy; reading the schema is what a first query would pay.
        self.conn()?
            .query_row("SELECT count(*) FROM sqlite_master", [], |r| {
                r.get::<_, i64>(0)
            })?;
        Ok(t.elapsed())
    }

    fn query(&mut self, name: &str) -> Res<Answer> {
        match self.work.clone() {
            Workload::Devops(cfg) => self.devops(&cfg, name),
            Workload::Seed004(_) => self.seed004(name),
        }
    }

    fn note(&self, _name: &str) -> Option<&'static str> {
        None
    }
}
