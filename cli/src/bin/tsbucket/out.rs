//! Buffered stdout. `println!` panics when the reader has gone away; writing through this
//! returns the `BrokenPipe` error instead, which `main` treats as success.

use serde_json::Value;
use std::io::{self, BufWriter, StdoutLock, Write};

/// Locked, buffered stdout.
pub struct Out {
    w: BufWriter<StdoutLock<'static>>,
}

impl Write for Out {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.w.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.w.flush()
    }
}

impl Out {
    /// Locks stdout for the rest of the command.
    pub fn new() -> Out {
        Out {
            w: BufWriter::new(io::stdout().lock()),
        }
    }

    /// Writes `v` as indented JSON and a newline.
    pub fn json_pretty(&mut self, v: &Value) -> io::Result<()> {
        serde_json::to_writer_pretty(&mut self.w, v)?;
        self.w.write_all(b"\n")
    }

    /// Writes bytes as they are.
    pub fn bytes(&mut self, b: &[u8]) -> io::Result<()> {
        self.w.write_all(b)
    }

    /// Writes a line of text.
    pub fn line(&mut self, s: &str) -> io::Result<()> {
        self.w.write_all(s.as_bytes())?;
        self.w.write_all(b"\n")
    }

    /// Flushes what is buffered; errors surface here rather than being lost on drop.
    pub fn finish(mut self) -> io::Result<()> {
        self.w.flush()
    }
}
