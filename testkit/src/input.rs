//! A forgiving reader over fuzz input: every read succeeds, yielding zeros once the bytes run
//! out, so a harness can derive any structure from any input.

/// Fuzz input consumed front to back.
#[derive(Debug, Clone)]
pub struct Input<'a> {
    data: &'a [u8],
}

impl<'a> Input<'a> {
    /// Wraps `data`.
    pub fn new(data: &'a [u8]) -> Input<'a> {
        Input { data }
    }

    /// True when every byte has been consumed.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// Number of bytes left.
    pub fn len(&self) -> usize {
        self.data.len()
    }

    /// Next byte, or 0.
    pub fn u8(&mut self) -> u8 {
        match self.data.split_first() {
            Some((&b, rest)) => {
                self.data = rest;
                b
            }
            None => 0,
        }
    }

    /// Next little-endian u16 (missing bytes read as 0).
    pub fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }

    /// Next little-endian u32 (missing bytes read as 0).
    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }

    /// Next little-endian u64 (missing bytes read as 0).
    pub fn u64(&mut self) -> u64 {
        u64::from(self.u32()) | (u64::from(self.u32()) << 32)
    }

    /// A number in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            return 0;
        }
        let x = if n <= 256 {
            usize::from(self.u8())
        } else if n <= 65_536 {
            usize::from(self.u16())
        } else {
            self.u32() as usize
        };
        x % n
    }

    /// True with probability about 1/`n`.
    pub fn one_in(&mut self, n: u8) -> bool {
        n <= 1 || self.u8() % n == 0
    }

    /// Up to `n` next bytes.
    pub fn bytes(&mut self, n: usize) -> &'a [u8] {
        let (a, b) = self.data.split_at(n.min(self.data.len()));
        self.data = b;
        a
    }

    /// A length-prefixed (one byte) slice.
    pub fn short_bytes(&mut self) -> &'a [u8] {
        let n = usize::from(self.u8());
        self.bytes(n)
    }

    /// Everything left.
    pub fn rest(&mut self) -> &'a [u8] {
        let all = self.data;
        self.data = &[];
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_past_the_end_yield_zeros() {
        let mut i = Input::new(&[1, 2, 3]);
        assert_eq!(i.u16(), 0x0201);
        assert_eq!(i.u32(), 3);
        assert!(i.is_empty());
        assert_eq!(i.below(10), 0);
        assert_eq!(i.bytes(5), &[] as &[u8]);
    }
}
