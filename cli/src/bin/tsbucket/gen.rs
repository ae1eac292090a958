//! `tsbucket gen`: a seeded workload written as JSON Lines, BSON, CSV or InfluxDB line
//! protocol. The same flags give the same bytes.

use crate::common::{is_std, CliResult, Format, Workload};
use crate::csvdoc::flatten;
use crate::json::to_relaxed;
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::PathBuf;
use tsbucket::bson::{Bson, Document};
use tsbucket_workload::{Devops, Seed004};

/// Flags of `tsbucket gen`.
#[derive(Args)]
pub struct GenArgs {
    /// Workload to generate.
    #[arg(value_enum)]
    workload: Workload,
    /// devops: number of hosts (series).
    #[arg(long, default_value_t = 100)]
    hosts: usize,
    /// devops: hours of data at one measurement per host every 10 s.
    #[arg(long, default_value_t = 1.0)]
    hours: f64,
    /// seed004: size (1.0 = 8.4 M rows).
    #[arg(long, default_value_t = 0.05)]
    scale: f64,
    /// devops: fields as doubles with 2 decimals instead of int64.
    #[arg(long)]
    float: bool,
    /// PRNG seed (default: the workload's own).
    #[arg(long)]
    seed: Option<u64>,
    /// Output file; `-` writes stdout.
    #[arg(long)]
    out: PathBuf,
    /// Output format; auto goes by the file extension, else JSON Lines.
    #[arg(long, value_enum, default_value_t = Format::Auto)]
    format: Format,
}

/// Runs `gen`.
pub fn run(a: GenArgs) -> CliResult {
    // The measurement name, time field and meta field of the workload's line protocol.
    let names = match a.workload {
        Workload::Devops => ("cpu", "time", "tags"),
        Workload::Seed004 => ("seed004", "timestamp", "dims"),
    };
    let (total, docs): (u64, Box<dyn Iterator<Item = Document>>) = match a.workload {
        Workload::Devops => {
            let mut cfg = Devops {
                hosts: a.hosts,
                hours: a.hours,
                float: a.float,
                ..Devops::default()
            };
            if let Some(s) = a.seed {
                cfg.seed = s;
            }
            (cfg.measurements(), Box::new(cfg.generate()))
        }
        Workload::Seed004 => {
            let mut cfg = Seed004 {
                scale: a.scale,
                ..Seed004::default()
            };
            if let Some(s) = a.seed {
                cfg.seed = s;
            }
            (cfg.rows(), Box::new(cfg.generate()))
        }
    };
    let format = match a.format {
        Format::Auto => a
            .out
            .to_str()
            .and_then(Format::from_extension)
            .unwrap_or(Format::Jsonl),
        f => f,
    };
    let sink: Box<dyn Write> = if is_std(&a.out) {
        Box::new(io::stdout().lock())
    } else {
        let f = File::create(&a.out).map_err(|e| format!("{}: {e}", a.out.display()))?;
        Box::new(f)
    };
    let mut sink = match format {
        Format::Csv => Sink::Csv(Box::new(csv::Writer::from_writer(sink)), None),
        Format::Bson => Sink::Bson(BufWriter::with_capacity(1 << 16, sink)),
        Format::LineProtocol => Sink::Lines(BufWriter::with_capacity(1 << 16, sink), names),
        _ => Sink::Jsonl(BufWriter::with_capacity(1 << 16, sink)),
    };
    let pb = ProgressBar::new(total);
    pb.set_style(ProgressStyle::with_template(
        "gen {bar:40} {human_pos}/{human_len} {per_sec} eta {eta}",
    )?);
    for (i, doc) in docs.enumerate() {
        sink.write(doc)?;
        if i % 4096 == 0 {
            pb.set_position(i as u64);
        }
    }
    sink.flush()?;
    pb.finish_and_clear();
    Ok(())
}

/// Output in one format.
enum Sink {
    Jsonl(BufWriter<Box<dyn Write>>),
    Bson(BufWriter<Box<dyn Write>>),
    /// The writer and the columns, which the first document fixes.
    Csv(Box<csv::Writer<Box<dyn Write>>>, Option<Vec<String>>),
    /// The writer, and the measurement name, time field and meta field.
    Lines(
        BufWriter<Box<dyn Write>>,
        (&'static str, &'static str, &'static str),
    ),
}

impl Sink {
    fn write(&mut self, doc: Document) -> CliResult {
        match self {
            Sink::Jsonl(w) => {
                // As io::Error, so that a closed pipe is recognised as such.
                serde_json::to_writer(&mut *w, &to_relaxed(doc)).map_err(io::Error::from)?;
                w.write_all(b"\n")?;
            }
            Sink::Bson(w) => w.write_all(&doc.to_vec()?)?,
            Sink::Lines(w, names) => {
                let line = line_of(&doc, *names)?;
                w.write_all(line.as_bytes())?;
            }
            Sink::Csv(w, header) => {
                let flat = flatten(&doc);
                let header = match header {
                    Some(h) => h,
                    None => {
                        let h: Vec<String> = flat.iter().map(|(k, _)| k.clone()).collect();
                        w.write_record(&h).map_err(csv_io)?;
                        header.insert(h)
                    }
                };
                let mut cells: HashMap<String, String> = flat.into_iter().collect();
                let row: Vec<String> = header
                    .iter()
                    .map(|h| cells.remove(h).unwrap_or_default())
                    .collect();
                if let Some(extra) = cells.keys().next() {
                    return Err(format!(
                        "field '{extra}' is not among the CSV columns, which the first \
                         document fixes"
                    )
                    .into());
                }
                w.write_record(&row).map_err(csv_io)?;
            }
        }
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Sink::Jsonl(w) | Sink::Bson(w) | Sink::Lines(w, _) => w.flush(),
            Sink::Csv(w, _) => w.flush(),
        }
    }
}

/// The I/O error inside a csv error, so that a closed pipe is recognised as such.
fn csv_io(e: csv::Error) -> io::Error {
    let msg = e.to_string();
    match e.into_kind() {
        csv::ErrorKind::Io(io) => io,
        _ => io::Error::other(msg),
    }
}

/// A generated document as one line of line protocol: the measurement `name`, the meta
/// document's fields as tags (their values as text: line protocol's tags are strings), the
/// other fields as fields (`i` after an integer), the time in nanoseconds.
fn line_of(doc: &Document, (name, time, meta): (&str, &str, &str)) -> Result<String, String> {
    use std::fmt::Write as _;
    let mut line = escape(name, &[',', ' ']);
    let mut fields = String::new();
    let mut ns = None;
    for (k, v) in doc {
        match v {
            Bson::DateTime(t) if k == time => {
                ns = t.timestamp_millis().checked_mul(1_000_000);
            }
            Bson::Document(tags) if k == meta => {
                for (tk, tv) in tags {
                    let text = match tv {
                        Bson::String(s) => s.clone(),
                        other => other.to_string(),
                    };
                    let _ = write!(
                        line,
                        ",{}={}",
                        escape(tk, &[',', '=', ' ']),
                        escape(&text, &[',', '=', ' '])
                    );
                }
            }
            _ => {
                if !fields.is_empty() {
                    fields.push(',');
                }
                let k = escape(k, &[',', '=', ' ']);
                let _ = match v {
                    Bson::Int32(x) => write!(fields, "{k}={x}i"),
                    Bson::Int64(x) => write!(fields, "{k}={x}i"),
                    // Debug keeps a decimal point, which tells readers it is a float.
                    Bson::Double(x) => write!(fields, "{k}={x:?}"),
                    Bson::Boolean(b) => write!(fields, "{k}={b}"),
                    Bson::String(s) => write!(fields, "{k}=\"{}\"", escape(s, &['"', '\\'])),
                    other => {
                        return Err(format!(
                            "field '{k}' holds {other}: line protocol has no such value"
                        ))
                    }
                };
            }
        }
    }
    let ns = ns.ok_or_else(|| format!("a document has no date in '{time}'"))?;
    Ok(format!("{line} {fields} {ns}\n"))
}

/// `s` with a backslash before each of `special` (line protocol escapes nothing else in
/// names and tags; in a string field, backslashes too, which `special` then names).
fn escape(s: &str, special: &[char]) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if special.contains(&c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}
