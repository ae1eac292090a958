//! Readers of import files: each yields its documents with where they came from, so that a bad
//! one can be reported by line (BSON: document number and byte offset). A record that cannot
//! be turned into a document is an `Err` item that the importer may skip; an error that stops
//! the file (I/O, broken BSON framing) is an `Err` of the iterator item itself. Readers are
//! `Send` so that parsing can run on its own thread while the previous batch is written.

use crate::csvdoc::{CsvOptions, RowSchema};
use crate::json::parse_doc;
use crate::{is_std, Format};
use std::fmt;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::Path;
use std::sync::Arc;
use tsbucket::bson::Document;

/// Largest BSON document accepted (MongoDB's 16 MiB plus its 16 KiB allowance for overhead).
const MAX_BSON_DOC: usize = 16 * 1024 * 1024 + 16 * 1024;

/// Where a record was read.
#[derive(Clone, Debug)]
pub struct Loc {
    /// File name as given (`<stdin>` for `-`).
    pub file: Arc<str>,
    /// Position in it.
    pub pos: Pos,
}

/// Position of a record in its file.
#[derive(Clone, Copy, Debug)]
pub enum Pos {
    /// Line number, from 1 (CSV: the line the row starts on).
    Line(u64),
    /// BSON document number, from 1, and the byte offset it starts at.
    Doc { number: u64, offset: u64 },
}

impl fmt::Display for Loc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.pos {
            Pos::Line(n) => write!(f, "{}, line {n}", self.file),
            Pos::Doc { number, offset } => {
                write!(
                    f,
                    "{}, document {number} at byte offset {offset}",
                    self.file
                )
            }
        }
    }
}

/// One record: where it was, and its document or why there is none.
pub type Record = (Loc, Result<Document, String>);

/// The records of a file.
pub type Records = Box<dyn Iterator<Item = Result<Record, String>> + Send>;

/// Opens `path` (`-` for stdin) as `format`; `Format::Auto` goes by the extension, else by
/// the first bytes.
pub fn open(path: &Path, format: Format, csv: &CsvOptions) -> Result<Records, String> {
    let (name, read): (Arc<str>, Box<dyn Read + Send>) = if is_std(path) {
        ("<stdin>".into(), Box::new(io::stdin()))
    } else {
        let f = File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
        (path.display().to_string().into(), Box::new(f))
    };
    let mut input: Box<dyn BufRead + Send> = Box::new(BufReader::with_capacity(1 << 16, read));
    let format = match format {
        Format::Auto => match path.to_str().and_then(Format::from_extension) {
            Some(f) => f,
            None => sniff(&mut input).map_err(|e| format!("{name}: {e}"))?,
        },
        f => f,
    };
    Ok(match format {
        Format::Jsonl | Format::Auto => Box::new(JsonLines {
            name,
            input,
            line: 0,
            buf: Vec::new(),
        }),
        Format::Bson => Box::new(BsonDocs {
            name,
            input,
            number: 0,
            offset: 0,
            done: false,
        }),
        Format::Csv => csv_rows(name, input, csv)?,
    })
}

/// Guesses the format from the first bytes: a BSON document starts with its length, whose
/// fourth byte is zero for any document under 16 MiB, which no text has; JSON Lines start with
/// `{`; anything else is taken for CSV.
fn sniff(input: &mut Box<dyn BufRead + Send>) -> io::Result<Format> {
    let head = input.fill_buf()?;
    if head.len() >= 5 && head.get(3) == Some(&0) {
        return Ok(Format::Bson);
    }
    Ok(match head.iter().find(|b| !b.is_ascii_whitespace()) {
        Some(b'{') | None => Format::Jsonl,
        Some(_) => Format::Csv,
    })
}

struct JsonLines {
    name: Arc<str>,
    input: Box<dyn BufRead + Send>,
    line: u64,
    buf: Vec<u8>,
}

impl Iterator for JsonLines {
    type Item = Result<Record, String>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            self.buf.clear();
            match self.input.read_until(b'\n', &mut self.buf) {
                Ok(0) => return None,
                Ok(_) => {}
                Err(e) => return Some(Err(format!("{}: {e}", self.name))),
            }
            self.line += 1;
            if self.buf.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let doc = std::str::from_utf8(&self.buf)
                .map_err(|_| "the line is not valid UTF-8".to_string())
                .and_then(parse_doc);
            let loc = Loc {
                file: self.name.clone(),
                pos: Pos::Line(self.line),
            };
            return Some(Ok((loc, doc)));
        }
    }
}

struct BsonDocs {
    name: Arc<str>,
    input: Box<dyn BufRead + Send>,
    number: u64,
    offset: u64,
    done: bool,
}

impl BsonDocs {
    /// The next document's bytes; `None` at a clean end of file. Damage to the length prefix
    /// or a cut-off document ends the file: where the next document starts is unknown.
    fn next_bytes(&mut self) -> Result<Option<Vec<u8>>, String> {
        let mut len = [0u8; 4];
        let got =
            read_full(&mut self.input, &mut len).map_err(|e| format!("{}: {e}", self.name))?;
        if got == 0 {
            return Ok(None);
        }
        let at = format!(
            "{}, document {} at byte offset {}",
            self.name, self.number, self.offset
        );
        if got < 4 {
            return Err(format!("{at}: the file ends inside a document length"));
        }
        let n = i32::from_le_bytes(len);
        if n < 5 || n as usize > MAX_BSON_DOC {
            return Err(format!(
                "{at}: invalid document length {n}; cannot find where the next document starts"
            ));
        }
        // The length (at least 5) goes first, then the rest of the document after it.
        let mut bytes = len.to_vec();
        bytes.resize(n as usize, 0);
        let rest = bytes.get_mut(4..).unwrap_or_default();
        let got = read_full(&mut self.input, rest).map_err(|e| format!("{at}: {e}"))?;
        if got < n as usize - 4 {
            return Err(format!(
                "{at}: the file ends inside the document ({n} bytes)"
            ));
        }
        Ok(Some(bytes))
    }
}

impl Iterator for BsonDocs {
    type Item = Result<Record, String>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        self.number += 1;
        let bytes = match self.next_bytes() {
            Ok(Some(b)) => b,
            Ok(None) => {
                self.done = true;
                return None;
            }
            Err(e) => {
                self.done = true;
                return Some(Err(e));
            }
        };
        let loc = Loc {
            file: self.name.clone(),
            pos: Pos::Doc {
                number: self.number,
                offset: self.offset,
            },
        };
        self.offset += bytes.len() as u64;
        let doc = match repeated_name(&bytes) {
            Some(path) => Err(format!("field name {path:?} appears more than once")),
            None => {
                Document::from_reader(bytes.as_slice()).map_err(|e| format!("invalid BSON: {e}"))
            }
        };
        Some(Ok((loc, doc)))
    }
}

/// The dotted path of the first name that a document of `bytes` (at any depth) repeats, if it
/// is well formed enough to tell. A `Document` keeps one value per name, so reading the
/// document into one would drop the other value without a word; the engine refuses repeats in
/// raw BSON too. Walked with a list, not recursion: the nesting is the file's to choose.
fn repeated_name(bytes: &[u8]) -> Option<String> {
    use std::collections::HashSet;
    use tsbucket::bson::{RawBsonRef, RawDocument};
    let mut pending: Vec<(&RawDocument, String, bool)> =
        vec![(RawDocument::from_bytes(bytes).ok()?, String::new(), true)];
    while let Some((doc, path, named)) = pending.pop() {
        let mut names = HashSet::new();
        for (i, el) in doc.iter().enumerate() {
            // Malformed bytes are for the conversion to describe.
            let (k, v) = el.ok()?;
            let at = match (path.is_empty(), named) {
                (true, _) => k.as_str().to_string(),
                (false, true) => format!("{path}.{}", k.as_str()),
                (false, false) => format!("{path}.{i}"),
            };
            if named && !names.insert(k.as_str()) {
                return Some(at);
            }
            match v {
                RawBsonRef::Document(d) => pending.push((d, at, true)),
                RawBsonRef::Array(a) => {
                    pending.push((RawDocument::from_bytes(a.as_bytes()).ok()?, at, false))
                }
                RawBsonRef::JavaScriptCodeWithScope(c) => pending.push((c.scope, at, true)),
                _ => {}
            }
        }
    }
    None
}

/// Reads until `buf` is full or the input ends; returns the bytes read.
fn read_full(r: &mut dyn Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while let Some(rest) = buf.get_mut(n..).filter(|b| !b.is_empty()) {
        match r.read(rest) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

struct CsvRows {
    name: Arc<str>,
    reader: csv::Reader<Box<dyn BufRead + Send>>,
    schema: RowSchema,
    rec: csv::StringRecord,
}

fn csv_rows(
    name: Arc<str>,
    input: Box<dyn BufRead + Send>,
    o: &CsvOptions,
) -> Result<Records, String> {
    let mut reader = csv::Reader::from_reader(input);
    let header = reader
        .headers()
        .map_err(|e| format!("{name}: cannot read the CSV header: {e}"))?;
    let schema = RowSchema::new(header, o).map_err(|e| format!("{name}: {e}"))?;
    Ok(Box::new(CsvRows {
        name,
        reader,
        schema,
        rec: csv::StringRecord::new(),
    }))
}

impl Iterator for CsvRows {
    type Item = Result<Record, String>;

    fn next(&mut self) -> Option<Self::Item> {
        let (line, doc) = match self.reader.read_record(&mut self.rec) {
            Ok(false) => return None,
            Ok(true) => (
                self.rec.position().map_or(0, csv::Position::line),
                self.schema.row(&self.rec),
            ),
            Err(e) if e.is_io_error() => return Some(Err(format!("{}: {e}", self.name))),
            Err(e) => {
                let line = e.position().map_or(0, csv::Position::line);
                let why = match e.kind() {
                    csv::ErrorKind::UnequalLengths {
                        expected_len, len, ..
                    } => format!("the row has {len} fields, the header {expected_len}"),
                    csv::ErrorKind::Utf8 { .. } => "the row is not valid UTF-8".to_string(),
                    _ => e.to_string(),
                };
                (line, Err(why))
            }
        };
        let loc = Loc {
            file: self.name.clone(),
            pos: Pos::Line(line),
        };
        Some(Ok((loc, doc)))
    }
}
