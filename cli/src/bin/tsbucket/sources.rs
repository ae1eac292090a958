//! Readers of import files: each yields its documents with where they came from, so that a bad
//! one can be reported by line (BSON: document number and byte offset). A record that cannot
//! be turned into a document is an `Err` item that the importer may skip; an error that stops
//! the file (I/O, broken BSON framing) is an `Err` of the iterator item itself. Readers are
//! `Send` so that parsing can run on its own thread while the previous batch is written.

use crate::chunks::{parallel, Ends, ParseChunk};
use crate::common::{is_std, Format};
use crate::csvdoc::{CsvOptions, RowSchema};
use crate::json::parse_doc;
use crate::jsonbson::transcode;
use crate::lineproto::LineSchema;
use std::fmt;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tsbucket::bson::{Document, RawDocumentBuf};

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

/// One record: where it was, and its document (as BSON bytes) or why there is none.
pub type Record = (Loc, Result<RawDocumentBuf, String>);

/// The records of a file.
pub type Records = Box<dyn Iterator<Item = Result<Record, String>> + Send>;

/// Opens `path` (`-` for stdin) as `format`; `Format::Auto` goes by the extension, else by
/// the first bytes. Input compressed with gzip or zstd is decompressed, found by its first
/// bytes; a `.gz` or `.zst` ending is looked through for the format.
/// `read` counts the bytes taken from the file (before decompression).
pub fn open(
    path: &Path,
    format: Format,
    csv: &CsvOptions,
    read: &Arc<AtomicU64>,
) -> Result<Records, String> {
    let (name, file): (Arc<str>, Box<dyn Read + Send>) = if is_std(path) {
        ("<stdin>".into(), Box::new(io::stdin()))
    } else {
        let f = File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
        (path.display().to_string().into(), Box::new(f))
    };
    let read = Box::new(Counted {
        inner: file,
        n: read.clone(),
    });
    let mut input: Box<dyn BufRead + Send> = Box::new(BufReader::with_capacity(1 << 16, read));
    input = decompressed(input).map_err(|e| format!("{name}: {e}"))?;
    let format = match format {
        Format::Auto => match path
            .to_str()
            .map(without_compression)
            .and_then(Format::from_extension)
        {
            Some(f) => f,
            None => sniff(&mut input).map_err(|e| format!("{name}: {e}"))?,
        },
        f => f,
    };
    if let (Some(_), Format::Bson) = (crate::dump::buckets_of(path), format) {
        return Ok(Box::new(Buckets {
            docs: BsonDocs {
                name,
                input,
                number: 0,
                offset: 0,
                done: false,
            },
            time_field: csv.time_field.clone(),
            meta_field: csv.meta_field.clone(),
            pending: std::collections::VecDeque::new(),
        }));
    }
    Ok(match format {
        Format::Jsonl | Format::Auto => match json_layout(&mut input) {
            Ok(JsonLayout::Lines) => {
                in_chunks(name, input, Ends::Newline, 0, |name, input, line| {
                    JsonLines {
                        name,
                        input,
                        line,
                        buf: Vec::new(),
                    }
                })
            }
            Ok(JsonLayout::Free { array }) => Box::new(JsonValues {
                name,
                input,
                line: 1,
                array,
                started: false,
                done: false,
                buf: Vec::new(),
            }),
            Err(e) => return Err(format!("{name}: {e}")),
        },
        Format::Bson => Box::new(BsonDocs {
            name,
            input,
            number: 0,
            offset: 0,
            done: false,
        }),
        Format::Csv => csv_rows(name, input, csv)?,
        Format::LineProtocol => {
            let meta_field = csv.meta_field.clone().ok_or_else(|| {
                format!(
                    "{name}: line protocol needs a collection with a meta field: the \
                     measurement and tags become it"
                )
            })?;
            let mut times = csv.times.clone();
            // The protocol's own default.
            times.unit = times.unit.or(Some(crate::times::TimeUnit::Ns));
            let schema = Arc::new(LineSchema {
                time_field: csv.time_field.clone(),
                meta_field,
                times,
            });
            in_chunks(name, input, Ends::Newline, 0, move |name, input, line| {
                LineRecords {
                    name,
                    input,
                    line,
                    text: String::new(),
                    schema: schema.clone(),
                }
            })
        }
    })
}

/// The measurements of the buckets of a mongodump of a time-series collection (see
/// [`crate::dump`]), each reported at its bucket's place in the file.
struct Buckets {
    docs: BsonDocs,
    time_field: String,
    meta_field: Option<String>,
    pending: std::collections::VecDeque<Record>,
}

impl Iterator for Buckets {
    type Item = Result<Record, String>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(r) = self.pending.pop_front() {
                return Some(Ok(r));
            }
            let (loc, bucket) = match self.docs.next()? {
                Ok(r) => r,
                Err(e) => return Some(Err(e)),
            };
            let measurements = bucket
                .and_then(|b| {
                    Document::from_reader(b.as_bytes()).map_err(|e| format!("invalid BSON: {e}"))
                })
                .and_then(|b| {
                    crate::dump::unpack(&b, &self.time_field, self.meta_field.as_deref())
                });
            match measurements {
                Ok(ms) => self
                    .pending
                    .extend(ms.iter().map(|m| (loc.clone(), raw(m)))),
                Err(e) => return Some(Ok((loc, Err(format!("bucket: {e}"))))),
            }
        }
    }
}

/// The points of a line protocol file.
struct LineRecords {
    name: Arc<str>,
    input: Box<dyn BufRead + Send>,
    line: u64,
    text: String,
    schema: Arc<LineSchema>,
}

impl Iterator for LineRecords {
    type Item = Result<Record, String>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            self.text.clear();
            match self.input.read_line(&mut self.text) {
                Ok(0) => return None,
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::InvalidData => {
                    self.line += 1;
                    return Some(Err(format!(
                        "{}, line {}: the line is not valid UTF-8",
                        self.name, self.line
                    )));
                }
                Err(e) => return Some(Err(format!("{}: {e}", self.name))),
            }
            self.line += 1;
            let mut bytes = Vec::with_capacity(2 * self.text.len() + 64);
            let doc = match self.schema.line_bson(&self.text, &mut bytes) {
                Ok(false) => continue,
                Ok(true) => {
                    RawDocumentBuf::from_bytes(bytes).map_err(|e| format!("invalid BSON: {e}"))
                }
                Err(e) => Err(e),
            };
            let loc = Loc {
                file: self.name.clone(),
                pos: Pos::Line(self.line),
            };
            return Some(Ok((loc, doc)));
        }
    }
}

/// A reader that adds the bytes it gives to a counter, for the progress shown.
struct Counted {
    inner: Box<dyn Read + Send>,
    n: Arc<AtomicU64>,
}

impl Read for Counted {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let k = self.inner.read(buf)?;
        self.n.fetch_add(k as u64, Ordering::Relaxed);
        Ok(k)
    }
}

/// `input` decompressed when its first bytes are gzip's or zstd's magic number.
fn decompressed(mut input: Box<dyn BufRead + Send>) -> io::Result<Box<dyn BufRead + Send>> {
    let head = input.fill_buf()?;
    if head.starts_with(&[0x1f, 0x8b]) {
        // Several gzip members one after another are one stream, as `gzip -c a b` writes.
        let gz = flate2::bufread::MultiGzDecoder::new(input);
        return Ok(Box::new(BufReader::with_capacity(1 << 16, gz)));
    }
    if head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        let z = zstd::stream::read::Decoder::with_buffer(input)?;
        return Ok(Box::new(BufReader::with_capacity(1 << 16, z)));
    }
    Ok(input)
}

/// `path` without a compression suffix (`d.jsonl.gz` is JSON Lines).
fn without_compression(path: &str) -> &str {
    [".gz", ".zst", ".zstd"]
        .iter()
        .find_map(|s| path.strip_suffix(s))
        .unwrap_or(path)
}

/// A JSON record as BSON bytes: written as it is parsed where [`transcode`] takes it, else
/// through a `Document`, which also says what is wrong with a bad one.
fn json_record(text: &str) -> Result<RawDocumentBuf, String> {
    // A document's BSON is about as long as its JSON: one allocation, not one per doubling.
    let mut bytes = Vec::with_capacity(text.len() + 16);
    match transcode(text, &mut bytes) {
        Some(()) => RawDocumentBuf::from_bytes(bytes).map_err(|e| format!("invalid BSON: {e}")),
        None => parse_doc(text).and_then(|d| raw(&d)),
    }
}

/// `d` as BSON bytes.
pub fn raw(d: &Document) -> Result<RawDocumentBuf, String> {
    RawDocumentBuf::try_from(d).map_err(|e| format!("the document makes no BSON: {e}"))
}

/// Guesses the format from the first bytes: a BSON document starts with its length, whose
/// fourth byte is zero for any document under 16 MiB, which no text has; JSON starts with `{`
/// or `[`; anything else is taken for CSV.
fn sniff(input: &mut Box<dyn BufRead + Send>) -> io::Result<Format> {
    let head = input.fill_buf()?;
    if head.len() >= 5 && head.get(3) == Some(&0) {
        return Ok(Format::Bson);
    }
    // Line protocol: `measurement,tag=v field=v ...`, a space then an `=`, which a CSV header
    // seldom has.
    let first = head
        .split(|&b| b == b'\n')
        .find(|l| !l.trim_ascii().is_empty() && !l.starts_with(b"#"))
        .unwrap_or_default();
    let line_protocol = first
        .iter()
        .position(|&b| b == b' ')
        .is_some_and(|sp| first.get(sp..).is_some_and(|rest| rest.contains(&b'=')));
    Ok(match head.iter().find(|b| !b.is_ascii_whitespace()) {
        Some(b'{' | b'[') | None => Format::Jsonl,
        _ if line_protocol => Format::LineProtocol,
        Some(_) => Format::Csv,
    })
}

/// How the documents of a JSON file are laid out.
enum JsonLayout {
    /// One per line (JSON Lines, as mongoexport writes by default).
    Lines,
    /// Anywhere: pretty-printed over several lines, or in a JSON array (`array`), as
    /// mongoexport's `--jsonArray` and `--pretty` write.
    Free { array: bool },
}

/// The layout of a JSON file, from its first line: a `[` starts an array, and a first
/// document that does not end on its line is pretty-printed.
fn json_layout(input: &mut Box<dyn BufRead + Send>) -> io::Result<JsonLayout> {
    let head = input.fill_buf()?;
    let start = head.iter().position(|b| !b.is_ascii_whitespace());
    let Some(rest) = start.and_then(|i| head.get(i..)) else {
        return Ok(JsonLayout::Lines);
    };
    if rest.first() == Some(&b'[') {
        return Ok(JsonLayout::Free { array: true });
    }
    // A first line longer than the buffer is taken for a long document on one line.
    let Some(end) = rest.iter().position(|&b| b == b'\n') else {
        return Ok(JsonLayout::Lines);
    };
    let line = rest.get(..end).unwrap_or_default().trim_ascii_end();
    Ok(match line.last() {
        Some(b'}') => JsonLayout::Lines,
        _ => JsonLayout::Free { array: false },
    })
}

/// Largest JSON text of one document: a 16 MiB BSON document written as Extended JSON.
const MAX_JSON_DOC: usize = 64 * 1024 * 1024;

/// Documents anywhere in a JSON text: one after another, or the elements of one array.
/// Each is found by matching its braces outside strings, then parsed alone, so that a bad
/// one is reported by the line it starts on and the next one is still read.
struct JsonValues {
    name: Arc<str>,
    input: Box<dyn BufRead + Send>,
    /// The line the input is at, from 1.
    line: u64,
    array: bool,
    /// The array's `[` was read.
    started: bool,
    done: bool,
    buf: Vec<u8>,
}

impl JsonValues {
    /// Passes over whitespace, and in an array the `[`, commas and the closing `]`;
    /// returns the next byte, `None` at the end.
    fn skip_between(&mut self) -> Result<Option<u8>, String> {
        loop {
            let head = self
                .input
                .fill_buf()
                .map_err(|e| format!("{}: {e}", self.name))?;
            let Some(&b) = head.first() else {
                return match self.array && !self.done {
                    true => Err(format!(
                        "{}: the file ends inside the JSON array",
                        self.name
                    )),
                    false => Ok(None),
                };
            };
            match b {
                b'\n' => self.line += 1,
                b' ' | b'\t' | b'\r' => {}
                b'[' if self.array && !self.started => self.started = true,
                b',' if self.array && self.started && !self.done => {}
                b']' if self.array && self.started && !self.done => self.done = true,
                _ if self.done => {
                    return Err(format!(
                        "{}, line {}: text after the end of the JSON array",
                        self.name, self.line
                    ))
                }
                _ => return Ok(Some(b)),
            }
            self.input.consume(1);
        }
    }

    /// Reads one object, from its `{` to the matching `}`, into `buf`.
    fn read_object(&mut self) -> Result<(), String> {
        self.buf.clear();
        let (mut depth, mut in_str, mut escaped) = (0usize, false, false);
        loop {
            let head = self
                .input
                .fill_buf()
                .map_err(|e| format!("{}: {e}", self.name))?;
            if head.is_empty() {
                return Err("the file ends inside the document".to_string());
            }
            let mut used = 0;
            let mut closed = false;
            for &b in head {
                used += 1;
                if b == b'\n' {
                    self.line += 1;
                }
                if in_str {
                    match (escaped, b) {
                        (true, _) => escaped = false,
                        (false, b'\\') => escaped = true,
                        (false, b'"') => in_str = false,
                        _ => {}
                    }
                    continue;
                }
                match b {
                    b'"' => in_str = true,
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth = depth.saturating_sub(1);
                        if depth == 0 {
                            closed = true;
                            break;
                        }
                    }
                    _ => {}
                }
            }
            self.buf
                .extend_from_slice(head.get(..used).unwrap_or_default());
            self.input.consume(used);
            if closed {
                return Ok(());
            }
            if self.buf.len() > MAX_JSON_DOC {
                return Err(format!(
                    "a document longer than {} MiB of JSON",
                    MAX_JSON_DOC >> 20
                ));
            }
        }
    }
}

impl Iterator for JsonValues {
    type Item = Result<Record, String>;

    fn next(&mut self) -> Option<Self::Item> {
        let first = match self.skip_between() {
            Ok(Some(b)) => b,
            Ok(None) => return None,
            Err(e) => {
                self.array = false;
                self.done = true;
                return Some(Err(e));
            }
        };
        let loc = Loc {
            file: self.name.clone(),
            pos: Pos::Line(self.line),
        };
        if first != b'{' || (self.array && !self.started) {
            let what = match self.array {
                true => "an element of the JSON array",
                false => "the text",
            };
            // Where the next document starts is unknown.
            self.array = false;
            self.done = true;
            return Some(Err(format!(
                "{loc}: {what} is not a document (it starts with {:?})",
                char::from(first)
            )));
        }
        if let Err(e) = self.read_object() {
            self.array = false;
            self.done = true;
            return Some(Err(format!("{loc}: {e}")));
        }
        let doc = std::str::from_utf8(&self.buf)
            .map_err(|_| "the document is not valid UTF-8".to_string())
            .and_then(json_record);
        Some(Ok((loc, doc)))
    }
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
                .and_then(json_record);
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
                // The engine checks every byte of it when it is inserted.
                RawDocumentBuf::from_bytes(bytes).map_err(|e| format!("invalid BSON: {e}"))
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
    schema: Arc<RowSchema>,
    /// Fields the header has: every row must have as many.
    fields: usize,
    /// Lines of the file before the chunk being read.
    before: u64,
    rec: csv::StringRecord,
    bytes: Vec<u8>,
    /// The last row's length in BSON.
    last_len: usize,
}

/// The rows of a CSV file, after its header, parsed on every core.
fn csv_rows(
    name: Arc<str>,
    mut input: Box<dyn BufRead + Send>,
    o: &CsvOptions,
) -> Result<Records, String> {
    // The header is read here, up to the first newline outside quotes; the rest goes to the
    // workers in chunks.
    let mut head = Vec::new();
    loop {
        match input.read_until(b'\n', &mut head) {
            Ok(0) => break,
            Ok(_) if head.iter().filter(|&&b| b == b'"').count() % 2 == 0 => break,
            Ok(_) => {}
            Err(e) => return Err(format!("{name}: cannot read the CSV header: {e}")),
        }
    }
    let header_lines = head.iter().filter(|&&b| b == b'\n').count() as u64;
    let mut reader = csv::ReaderBuilder::new()
        .delimiter(o.delimiter)
        .from_reader(head.as_slice());
    let header = reader
        .headers()
        .map_err(|e| format!("{name}: cannot read the CSV header: {e}"))?;
    if header.iter().all(str::is_empty) {
        return Err(format!(
            "{name}: the file is empty: a CSV file starts with a header line"
        ));
    }
    let schema = RowSchema::new(header, o).map_err(|e| {
        // One column whose name holds another separator: the file is separated by it.
        let other = match header.len() {
            1 => [';', '\t', '|', ','].into_iter().find(|&c| {
                u8::try_from(c).is_ok_and(|b| b != o.delimiter)
                    && header.get(0).is_some_and(|h| h.contains(c))
            }),
            _ => None,
        };
        match other {
            Some(c) => format!(
                "{name}: {e}; the header is one column, {:?}: if the file is separated by {c:?}, \
                 pass --delimiter {}",
                header.get(0).unwrap_or_default(),
                match c {
                    '\t' => "tab".to_string(),
                    c => format!("'{c}'"),
                }
            ),
            None => format!("{name}: {e}"),
        }
    })?;
    let (schema, fields, delimiter) = (Arc::new(schema), header.len(), o.delimiter);
    let rows = in_chunks(
        name,
        input,
        Ends::CsvNewline,
        header_lines,
        move |name, input, before| CsvRows {
            name,
            reader: csv::ReaderBuilder::new()
                .delimiter(delimiter)
                .has_headers(false)
                .flexible(true)
                .from_reader(input),
            schema: schema.clone(),
            fields,
            before,
            rec: csv::StringRecord::new(),
            bytes: Vec::new(),
            last_len: 0,
        },
    );
    Ok(rows)
}

/// The records of a file of lines (its first `lines` already read), parsed on every core:
/// `reader` reads one chunk, given the lines of the file before it.
fn in_chunks<R>(
    name: Arc<str>,
    input: Box<dyn BufRead + Send>,
    ends: Ends,
    lines: u64,
    reader: impl Fn(Arc<str>, Box<dyn BufRead + Send>, u64) -> R + Send + Sync + 'static,
) -> Records
where
    R: Iterator<Item = Result<Record, String>>,
{
    let file = name.clone();
    let parse: ParseChunk<Record> = Arc::new(move |bytes, before| {
        reader(file.clone(), Box::new(io::Cursor::new(bytes)), before).collect()
    });
    parallel(name, input, ends, lines, crate::ordered::cores(), parse)
}

impl Iterator for CsvRows {
    type Item = Result<Record, String>;

    fn next(&mut self) -> Option<Self::Item> {
        let (line, doc) = match self.reader.read_record(&mut self.rec) {
            Ok(false) => return None,
            Ok(true) if self.rec.len() != self.fields => (
                self.rec.position().map_or(0, csv::Position::line),
                Err(format!(
                    "the row has {} fields, the header {}",
                    self.rec.len(),
                    self.fields
                )),
            ),
            Ok(true) => {
                // Each row's bytes move into its document: the next row's buffer starts at
                // the size of this one, one allocation instead of one per doubling.
                self.bytes.reserve(self.last_len + 16);
                let doc = self.schema.row_bson(&self.rec, &mut self.bytes);
                self.last_len = self.bytes.len();
                (
                    self.rec.position().map_or(0, csv::Position::line),
                    doc.and_then(|()| {
                        RawDocumentBuf::from_bytes(std::mem::take(&mut self.bytes))
                            .map_err(|e| format!("the row makes no document: {e}"))
                    }),
                )
            }
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
            pos: Pos::Line(self.before + line),
        };
        Some(Ok((loc, doc)))
    }
}
