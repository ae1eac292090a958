//! Line-based input (JSON Lines, CSV, line protocol) parsed on every core. One thread cuts the
//! input into chunks of whole records, a worker per core parses chunks into BSON documents,
//! and the records come out in the file's order with their line numbers, as a sequential
//! reader gives them: only the speed differs.
//!
//! The channels between them are bounded, so the memory held is a few chunks per worker
//! whatever the input's size; dropping the records stops every thread at its next hand-over.

use crate::ordered::{ordered, Feed};
use std::io::{self, BufRead};
use std::sync::Arc;

/// Bytes of input per chunk: enough records to make a hand-over's cost negligible, few enough
/// that every worker has one early.
const CHUNK_BYTES: usize = 1 << 20;

/// Parses one chunk of whole records, given the lines of the file before it: a record each, or
/// why one cannot be read.
pub type ParseChunk<R> = Arc<dyn Fn(Vec<u8>, u64) -> Vec<Result<R, String>> + Send + Sync>;

/// Where a record may end.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Ends {
    /// At any newline (JSON Lines: a JSON string holds no raw newline; line protocol).
    Newline,
    /// At a newline outside double quotes (CSV, whose quoted cells may hold newlines; a quote
    /// inside one is doubled, which keeps the count of quotes even).
    CsvNewline,
}

/// What the splitting thread hands to the workers.
enum Job {
    /// A chunk of whole records and the lines of the file before it.
    Parse(Vec<u8>, u64),
    /// The input cannot be read on: this error is the last record.
    Failed(String),
}

/// The records of `input` (whose first `lines` lines were already read), parsed by `parse` on
/// `workers` threads.
pub fn parallel<R: Send + 'static>(
    name: Arc<str>,
    mut input: Box<dyn BufRead + Send>,
    ends: Ends,
    lines: u64,
    workers: usize,
    parse: ParseChunk<R>,
) -> Box<dyn Iterator<Item = Result<R, String>> + Send> {
    let (mut feed, records) = ordered(
        workers,
        Arc::new(move |job| match job {
            Job::Parse(bytes, lines) => parse(bytes, lines),
            Job::Failed(e) => vec![Err(e)],
        }),
    );
    std::thread::spawn(move || split(&name, &mut *input, ends, lines, &mut feed));
    Box::new(records.flatten())
}

/// Cuts `input` into chunks that end where a record ends, and hands them out in order.
fn split(name: &str, input: &mut dyn BufRead, ends: Ends, mut lines: u64, feed: &mut Feed<Job>) {
    let mut carry = Vec::new();
    loop {
        let mut buf = std::mem::take(&mut carry);
        let (mut eof, mut cut) = (false, None);
        while cut.is_none() && !eof {
            match fill(input, &mut buf, CHUNK_BYTES) {
                Ok(more) => eof = !more,
                Err(e) => {
                    feed.send(Job::Failed(format!("{name}: {e}")));
                    return;
                }
            }
            cut = match eof {
                true => Some(buf.len()),
                false => last_end(&buf, ends).map(|at| at + 1),
            };
        }
        let cut = cut.unwrap_or(buf.len());
        carry = buf.split_off(cut);
        if buf.is_empty() && eof {
            return;
        }
        let n = memchr::memchr_iter(b'\n', &buf).count() as u64;
        if !feed.send(Job::Parse(buf, lines)) {
            return;
        }
        lines += n;
        if eof {
            return;
        }
    }
}

/// Reads into `buf` until it holds `want` more bytes than it did, or the input ends; false at
/// the end of the input.
fn fill(input: &mut dyn BufRead, buf: &mut Vec<u8>, want: usize) -> io::Result<bool> {
    let goal = buf.len() + want;
    while buf.len() < goal {
        let got = match input.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if got.is_empty() {
            return Ok(false);
        }
        let k = got.len().min(goal - buf.len());
        buf.extend_from_slice(got.get(..k).unwrap_or_default());
        input.consume(k);
    }
    Ok(true)
}

/// The place of the last newline in `buf` where a record may end, if any.
fn last_end(buf: &[u8], ends: Ends) -> Option<usize> {
    match ends {
        Ends::Newline => memchr::memrchr(b'\n', buf),
        Ends::CsvNewline => {
            // `buf` starts where a record starts, outside quotes. Without quotes, the last
            // newline; else a pass over the quotes and newlines only.
            let last = memchr::memrchr(b'\n', buf)?;
            if memchr::memchr(b'"', buf).is_none() {
                return Some(last);
            }
            let (mut quoted, mut last) = (false, None);
            for i in memchr::memchr2_iter(b'"', b'\n', buf) {
                match buf.get(i) {
                    Some(b'"') => quoted = !quoted,
                    _ if !quoted => last = Some(i),
                    _ => {}
                }
            }
            last
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A record per line: its number and its text.
    fn lines_of(bytes: Vec<u8>, before: u64) -> Vec<Result<(u64, String), String>> {
        let text = String::from_utf8(bytes).unwrap();
        text.lines()
            .enumerate()
            .map(|(i, l)| Ok((before + i as u64 + 1, l.to_string())))
            .collect()
    }

    fn run(text: &str, ends: Ends, workers: usize) -> Vec<(u64, String)> {
        let input: Box<dyn BufRead + Send> = Box::new(io::Cursor::new(text.as_bytes().to_vec()));
        parallel("f".into(), input, ends, 0, workers, Arc::new(lines_of))
            .map(Result::unwrap)
            .collect()
    }

    #[test]
    fn csv_records_end_only_at_newlines_outside_quotes() {
        let b = b"a,\"x\ny\"\nb,\"q\"\"\n\"\nc\n";
        assert_eq!(last_end(b, Ends::Newline), Some(b.len() - 1));
        assert_eq!(last_end(b, Ends::CsvNewline), Some(b.len() - 1));
        let cut = b"a,\"x\ny";
        assert_eq!(last_end(cut, Ends::CsvNewline), None);
        assert_eq!(last_end(cut, Ends::Newline), Some(4));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(16))]
        /// Records come out in order with their line numbers, whatever the chunks and workers.
        #[test]
        fn records_come_out_in_the_files_order(
            lens in proptest::collection::vec(0usize..3000, 0..2000),
            workers in 1usize..4,
        ) {
            let lines: Vec<String> = lens.iter().enumerate()
                .map(|(i, &n)| format!("{i}:{}", "x".repeat(n)))
                .collect();
            let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
            let got = run(&text, Ends::Newline, workers);
            let want: Vec<(u64, String)> = lines.into_iter().enumerate()
                .map(|(i, l)| (i as u64 + 1, l))
                .collect();
            prop_assert_eq!(got, want);
        }
    }

    #[test]
    fn a_last_line_without_newline_and_an_empty_input() {
        assert_eq!(
            run("a\nb", Ends::Newline, 2),
            [(1, "a".to_string()), (2, "b".to_string())]
        );
        assert!(run("", Ends::CsvNewline, 2).is_empty());
    }
}
