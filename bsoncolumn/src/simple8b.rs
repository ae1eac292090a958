//! Simple-8b: 64-bit little-endian words, each packing a run of unsigned slots.
//!
//! The low 4 bits of a word select how the other 60 are cut. Selectors 1 to 14 cut them into
//! equal slots (60 of 1 bit down to 1 of 60 bits); selectors 7 and 8 give up 4 of those bits to
//! an extension nibble (bits 4 to 7) which, when not zero, picks a layout where each slot ends
//! with a count of trailing zeros to shift the slot's value left by. Selector 15 repeats the
//! slot before it 120 to 1920 times. A slot of all ones is a missing value.

/// A decoded slot: `None` is a missing value.
pub(crate) type Slot = Option<u128>;

/// How many slots a run-length word repeats per unit of its count nibble.
const RLE_UNIT: u16 = 120;

/// The cut of a non-repeating word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Layout {
    /// Bit where the first slot starts.
    start: u8,
    /// Bits of a slot's value.
    value_bits: u8,
    /// Bits of a slot's trailing-zero count (0 when the layout has none).
    count_bits: u8,
    /// Zeros per unit of the count.
    count_unit: u8,
    /// Slots in the word.
    slots: u8,
}

impl Layout {
    const fn plain(start: u8, bits: u8) -> Layout {
        Layout {
            start,
            value_bits: bits,
            count_bits: 0,
            count_unit: 0,
            slots: (64 - start) / bits,
        }
    }

    const fn shifted(value_bits: u8, count_bits: u8, count_unit: u8) -> Layout {
        Layout {
            start: 8,
            value_bits,
            count_bits,
            count_unit,
            slots: 56 / (value_bits + count_bits),
        }
    }
}

/// What one word holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Word {
    Slots(Layout),
    /// Repeats the slot before it this many times.
    Repeat(u16),
}

/// Reads a word's selector (and extension): which layout, or how long a repeat.
pub(crate) fn classify(word: u64) -> Result<Word, String> {
    let selector = (word & 0xF) as u8;
    let extension = ((word >> 4) & 0xF) as u8;
    let plain_bits: [u8; 15] = [0, 1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 15, 20, 30, 60];
    Ok(Word::Slots(match (selector, extension) {
        (0, _) => return Err("Simple-8b selector 0 is not used by the format".into()),
        (15, n) => return Ok(Word::Repeat((u16::from(n) + 1) * RLE_UNIT)),
        // The plain layouts of 7 and 8 leave the extension nibble zero and start after it.
        (7, 0) => Layout::plain(8, 7),
        (8, 0) => Layout::plain(8, 8),
        (7, n @ 1..=9) => {
            let bits: [u8; 9] = [2, 3, 4, 5, 7, 10, 14, 24, 52];
            Layout::shifted(pick(&bits, n - 1), 4, 1)
        }
        (8, n @ 1..=7) => {
            let bits: [u8; 7] = [4, 5, 7, 10, 14, 24, 52];
            Layout::shifted(pick(&bits, n - 1), 4, 4)
        }
        (8, n @ 8..=13) => {
            let bits: [u8; 6] = [4, 6, 9, 13, 23, 51];
            Layout::shifted(pick(&bits, n - 8), 5, 4)
        }
        (7 | 8, n) => {
            return Err(format!(
                "Simple-8b selector {selector} has no extension {n} (word {word:#018x})"
            ))
        }
        (s, _) => Layout::plain(4, pick(&plain_bits, s)),
    }))
}

/// A table entry the match arms above keep in range.
fn pick(table: &[u8], i: u8) -> u8 {
    table.get(usize::from(i)).copied().unwrap_or(1)
}

/// Slot `i` of a word cut by `layout`. `wide` streams (128-bit values) shift trailing zeros in
/// 128 bits; 64-bit streams shift in 64 bits, modulo 64, as the reference decoder does for
/// counts no sane encoder writes.
pub(crate) fn slot(word: u64, layout: Layout, i: u8, wide: bool) -> Slot {
    let width = u32::from(layout.value_bits) + u32::from(layout.count_bits);
    let at = u32::from(layout.start) + u32::from(i) * width;
    let mask = low_bits(width);
    let raw = word.checked_shr(at).unwrap_or(0) & mask;
    if raw == mask {
        return None;
    }
    let count = raw & low_bits(u32::from(layout.count_bits));
    let value = raw.checked_shr(u32::from(layout.count_bits)).unwrap_or(0);
    // count < 32 and count_unit <= 4, so the shift is below 128.
    let zeros = (count as u32) * u32::from(layout.count_unit);
    Some(if wide {
        u128::from(value) << zeros
    } else {
        u128::from(value << (zeros % 64))
    })
}

fn low_bits(n: u32) -> u64 {
    if n >= 64 {
        u64::MAX
    } else {
        (1u64 << n) - 1
    }
}

/// A cursor over the words of one control block, yielding their slots in order.
#[derive(Clone, Debug)]
pub(crate) struct Cursor {
    /// Offset of the next word to load.
    next: usize,
    /// Offset just past the last word.
    end: usize,
    wide: bool,
    current: Current,
}

#[derive(Clone, Copy, Debug)]
enum Current {
    Done,
    Slots { word: u64, layout: Layout, i: u8 },
    Repeat { left: u16 },
}

impl Cursor {
    /// A cursor over `input[start..end]`, a whole number of words the caller has bounds-checked.
    pub(crate) fn new(start: usize, end: usize, wide: bool) -> Cursor {
        Cursor {
            next: start,
            end,
            wide,
            current: Current::Done,
        }
    }

    /// Offset of the word the last slot came from.
    pub(crate) fn word_at(&self) -> usize {
        self.next.saturating_sub(8)
    }

    /// Whether a slot is left.
    pub(crate) fn has_more(&self) -> bool {
        match self.current {
            Current::Done => self.next < self.end,
            Current::Slots { layout, i, .. } => i < layout.slots || self.next < self.end,
            Current::Repeat { left } => left > 0 || self.next < self.end,
        }
    }

    /// The next slot, `Ok(None)` once the block is done. `prev` is the slot a repeat repeats; it
    /// is updated with every slot given.
    pub(crate) fn next_slot(
        &mut self,
        input: &[u8],
        prev: &mut Slot,
    ) -> Result<Option<Slot>, (usize, String)> {
        loop {
            match &mut self.current {
                Current::Slots { word, layout, i } if *i < layout.slots => {
                    let s = slot(*word, *layout, *i, self.wide);
                    *i += 1;
                    *prev = s;
                    return Ok(Some(s));
                }
                Current::Repeat { left } if *left > 0 => {
                    *left -= 1;
                    return Ok(Some(*prev));
                }
                _ => {}
            }
            if self.next >= self.end {
                self.current = Current::Done;
                return Ok(None);
            }
            let at = self.next;
            let bytes: [u8; 8] = input
                .get(at..at + 8)
                .and_then(|b| b.try_into().ok())
                .ok_or_else(|| (at, "Simple-8b word cut short".to_string()))?;
            let word = u64::from_le_bytes(bytes);
            self.next = at + 8;
            self.current = match classify(word).map_err(|e| (at, e))? {
                Word::Slots(layout) => Current::Slots { word, layout, i: 0 },
                Word::Repeat(n) => Current::Repeat { left: n },
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// All the slots of a run of words, starting from the default repeat value (zero).
    fn slots(bytes: &[u8], wide: bool) -> Vec<Slot> {
        let mut c = Cursor::new(0, bytes.len(), wide);
        let mut prev = Some(0);
        let mut out = Vec::new();
        while let Some(s) = c.next_slot(bytes, &mut prev).unwrap() {
            out.push(s);
        }
        assert!(!c.has_more());
        out
    }

    fn u(v: &[u64]) -> Vec<Slot> {
        v.iter().map(|&x| Some(u128::from(x))).collect()
    }

    // The words below are the reference implementation's own test vectors for its encoder;
    // each comment names the values it encodes.

    #[test]
    fn plain_selectors() {
        // One skip, selector 14.
        assert_eq!(
            slots(&[0xFE, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF], false),
            vec![None]
        );
        // One 1; the largest 60-bit value.
        assert_eq!(slots(&[0x1E, 0, 0, 0, 0, 0, 0, 0], false), u(&[1]));
        assert_eq!(
            slots(&[0xEE, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF], false),
            u(&[0xFFF_FFFF_FFFF_FFFE])
        );
        // 1, 2, 3 in three 20-bit slots.
        assert_eq!(
            slots(&[0x1C, 0x0, 0x0, 0x2, 0x0, 0x30, 0x0, 0x0], false),
            u(&[1, 2, 3])
        );
        // Seven 1s in selector 8 (4 bits unused at the top).
        assert_eq!(slots(&[0x08, 1, 1, 1, 1, 1, 1, 1], false), u(&[1; 7]));
        // 57 ones then 15: 30 + 20 + (7 ones and 15 in selector 7).
        let mut bytes = vec![0x52, 0x55, 0x55, 0x55, 0x55, 0x55, 0x55, 0x55];
        bytes.extend([0x93, 0x24, 0x49, 0x92, 0x24, 0x49, 0x92, 0x24]);
        bytes.extend([0x07, 0x81, 0x40, 0x20, 0x10, 0x08, 0x04, 0x1E]);
        let mut want = vec![1u64; 57];
        want.push(15);
        assert_eq!(slots(&bytes, false), u(&want));
        // 3, 3, 3, skip, 7 in 12-bit slots; two skips then 3, 8, 13.
        assert_eq!(
            slots(&[0x3A, 0x0, 0x3, 0x30, 0x0, 0xFF, 0x7F, 0x0], false),
            vec![Some(3), Some(3), Some(3), None, Some(7)]
        );
        assert_eq!(
            slots(&[0xFA, 0xFF, 0xFF, 0x3F, 0x0, 0x8, 0xD0, 0x0], false),
            vec![None, None, Some(3), Some(8), Some(13)]
        );
        // 48 ones then two skips.
        let mut bytes = vec![0x52, 0x55, 0x55, 0x55, 0x55, 0x55, 0x55, 0x55];
        bytes.extend([0x93, 0x24, 0x49, 0x92, 0x24, 0x49, 0x92, 0xFC]);
        let mut want = u(&[1; 48]);
        want.extend([None, None]);
        assert_eq!(slots(&bytes, false), want);
    }

    #[test]
    fn extended_selectors() {
        // Ten times (skip, 64) in selector 7 extension 1, then selector 13.
        let bytes = [
            0x17, 0xBF, 0xF5, 0x5B, 0xBF, 0xF5, 0x5B, 0x3F, 0x17, 0xD6, 0x6F, 0xFD, 0xD6, 0x6F,
            0xFD, 0x16, 0xFD, 0xFF, 0xFF, 0xFF, 0x03, 0x01, 0x0, 0x0,
        ];
        let want: Vec<Slot> = (0..20).map(|i| (i % 2 == 1).then_some(64)).collect();
        assert_eq!(slots(&bytes, false), want);
        // 57344 (3 bits, 13 zeros) eight times; alternating with skips.
        let b = [0x27, 0xFD, 0x7E, 0xBF, 0xDF, 0xEF, 0xF7, 0xFB];
        assert_eq!(slots(&b, false), u(&[57344; 8]));
        assert_eq!(slots(&b, true), u(&[57344; 8]));
        let b = [0x27, 0xFD, 0x7F, 0xFF, 0xDF, 0xFF, 0xF7, 0xFF];
        let want: Vec<Slot> = (0..8).map(|i| (i % 2 == 0).then_some(57344)).collect();
        assert_eq!(slots(&b, false), want);
        // 30 twelve times stays in plain selector 5.
        let b = [0xE5, 0xBD, 0xF7, 0xDE, 0x7B, 0xEF, 0xBD, 0xF7];
        assert_eq!(slots(&b, false), u(&[30; 12]));
        // 229376 seven times (extension 3 of selector 7).
        let b = [0x37, 0x7F, 0x7F, 0x7F, 0x7F, 0x7F, 0x7F, 0x7F];
        assert_eq!(slots(&b, false), u(&[229376; 7]));
        // 11, 11, 12615680, 12615680 and the opposite order.
        let b = [0x67, 0xB0, 0x00, 0x2C, 0xF0, 0x81, 0x7D, 0x60];
        assert_eq!(slots(&b, false), u(&[11, 11, 12615680, 12615680]));
        let b = [0x67, 0x1F, 0xD8, 0x07, 0x06, 0x0B, 0xC0, 0x02];
        assert_eq!(slots(&b, false), u(&[12615680, 12615680, 11, 11]));
        // Selector 8, nibble counts: 0x500000 seven times.
        let b = [0x18, 0x55, 0x55, 0x55, 0x55, 0x55, 0x55, 0x55];
        assert_eq!(slots(&b, false), u(&[0x500000; 7]));
        // 7340032 then (skip, 7340032) three times.
        let b = [0x18, 0x75, 0xFF, 0x75, 0xFF, 0x75, 0xFF, 0x75];
        let want: Vec<Slot> = (0..7).map(|i| (i % 2 == 0).then_some(7340032)).collect();
        assert_eq!(slots(&b, false), want);
        // 0xF000000000000000 and skip, three times.
        let b = [0x28, 0xFF, 0xFE, 0xFF, 0xFB, 0xFF, 0xEF, 0x3F];
        let want: Vec<Slot> = (0..6)
            .map(|i| (i % 2 == 0).then_some(0xF000_0000_0000_0000))
            .collect();
        assert_eq!(slots(&b, false), want);
        // 7864320 five times; 549789368320 twice.
        let b = [0x38, 0x84, 0x27, 0x3C, 0xE1, 0x09, 0x4F, 0x78];
        assert_eq!(slots(&b, false), u(&[7864320; 5]));
        let b = [0x68, 0x26, 0x00, 0x08, 0x60, 0x02, 0x80, 0x00];
        assert_eq!(slots(&b, false), u(&[549789368320; 2]));
        // Mixed widths in one selector-8 word: 4 × 57344 then 3 × 7340032, and so on.
        let b = [0x18, 0xE3, 0xE3, 0xE3, 0xE3, 0x75, 0x75, 0x75];
        assert_eq!(
            slots(&b, false),
            u(&[57344, 57344, 57344, 57344, 7340032, 7340032, 7340032])
        );
        let b = [0x18, 0x60, 0xE3, 0xE3, 0xE3, 0xE3, 0x75, 0x75];
        assert_eq!(
            slots(&b, false),
            u(&[6, 57344, 57344, 57344, 57344, 7340032, 7340032])
        );
    }

    #[test]
    fn wide_selectors() {
        let big = 0x70000u128 << 64;
        // 111 followed by 80 zeros, six times (selector 8 extension 8).
        let b = [0x88, 0xF4, 0xE8, 0xD1, 0xA3, 0x47, 0x8F, 0x1E];
        assert_eq!(slots(&b, true), vec![Some(big); 6]);
        // Then four zeros (extension 9).
        let b = [0x98, 0xF4, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00];
        assert_eq!(
            slots(&b, true),
            vec![Some(big), Some(0), Some(0), Some(0), Some(0)]
        );
        // Alternating with skips.
        let b = [0x88, 0xF4, 0xFE, 0xD3, 0xFB, 0x4F, 0xEF, 0x3F];
        let want: Vec<Slot> = (0..6).map(|i| (i % 2 == 0).then_some(big)).collect();
        assert_eq!(slots(&b, true), want);
        // 1111 followed by 124 zeros; 1 followed by 127 zeros.
        let b = [0x98, 0xFF, 0xF9, 0xCF, 0x7F, 0xFE, 0xF3, 0x1F];
        assert_eq!(slots(&b, true), vec![Some(0xFu128 << 124); 5]);
        let b = [0x88, 0x1F, 0x3F, 0x7E, 0xFC, 0xF8, 0xF1, 0x23];
        assert_eq!(slots(&b, true), vec![Some(1u128 << 127); 6]);
    }

    #[test]
    fn counts_beyond_64_bits_wrap_in_narrow_streams() {
        // Selector 8 extension 13 with a count of 17 (68 zeros): shifted by 68 % 64.
        let b = 0x55E6_E5D4_E9F2_B1D8u64.to_le_bytes();
        assert_eq!(slots(&b, false), u(&[12089623907203408]));
    }

    #[test]
    fn run_length_words() {
        // 1920 zeros (a repeat first in a stream repeats zero), 30 ones, 240 ones.
        let mut b = vec![0xFF, 0, 0, 0, 0, 0, 0, 0];
        b.extend([0x52, 0x55, 0x55, 0x55, 0x55, 0x55, 0x55, 0x55]);
        b.extend([0x1F, 0, 0, 0, 0, 0, 0, 0]);
        let mut want = u(&[0; 1920]);
        want.extend(u(&[1; 270]));
        assert_eq!(slots(&b, false), want);
        // 240 skips: 60, a repeat of 120, 60.
        let mut b = vec![0xF1, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF];
        b.extend([0x0F, 0, 0, 0, 0, 0, 0, 0]);
        b.extend([0xF1, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF]);
        assert_eq!(slots(&b, false), vec![None; 240]);
        // 136 × 57344 in a wide stream: 8, a repeat of 120, 8.
        let mut b = vec![0x27, 0xFD, 0x7E, 0xBF, 0xDF, 0xEF, 0xF7, 0xFB];
        b.extend([0x0F, 0, 0, 0, 0, 0, 0, 0]);
        b.extend([0x27, 0xFD, 0x7E, 0xBF, 0xDF, 0xEF, 0xF7, 0xFB]);
        assert_eq!(slots(&b, true), u(&[57344; 136]));
    }

    #[test]
    fn bad_selectors_are_refused() {
        for word in [0u64, 0xA7, 0xF7, 0xE8, 0xF8] {
            let b = word.to_le_bytes();
            let mut c = Cursor::new(0, 8, false);
            let e = c.next_slot(&b, &mut Some(0)).unwrap_err();
            assert_eq!(e.0, 0);
            assert!(e.1.contains("selector"), "{}", e.1);
        }
    }

    #[test]
    fn every_layout_fills_at_most_64_bits() {
        for sel in 0u64..16 {
            for ext in 0u64..16 {
                if let Ok(Word::Slots(l)) = classify(sel | ext << 4) {
                    let width = u32::from(l.value_bits + l.count_bits);
                    assert!(l.slots >= 1);
                    assert!(u32::from(l.start) + u32::from(l.slots) * width <= 64);
                    assert!(u32::from(l.start) + u32::from(l.slots + 1) * width > 64);
                }
            }
        }
    }
}
