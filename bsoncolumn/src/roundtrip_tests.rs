//! Property tests: columns from a small encoder of int64 and date sequences (literals, plain
//! Simple-8b selectors, run-length words, blocks of up to 16 words) decode to what it encoded;
//! arbitrary and cut bytes never panic.

use bson::{Bson, DateTime};
use proptest::prelude::*;

use crate::decode;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Value {
    Int(i64),
    Date(i64),
}

impl Value {
    fn bson(self) -> Bson {
        match self {
            Value::Int(v) => Bson::Int64(v),
            Value::Date(v) => Bson::DateTime(DateTime::from_millis(v)),
        }
    }

    fn literal(self) -> Vec<u8> {
        let (ty, v) = match self {
            Value::Int(v) => (0x12, v),
            Value::Date(v) => (0x09, v),
        };
        let mut out = vec![ty, 0];
        out.extend(v.to_le_bytes());
        out
    }
}

const PLAIN_BITS: [u32; 15] = [0, 1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 15, 20, 30, 60];
const MISSING: u64 = u64::MAX;

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

/// Packs slots (`MISSING` for a missing value) into words and control bytes.
struct Blocks {
    out: Vec<u8>,
    words: Vec<u64>,
    /// The slot a run-length word would repeat.
    prev: u64,
}

impl Blocks {
    fn flush_words(&mut self) {
        for chunk in self.words.chunks(16) {
            self.out.push(0x80 | (chunk.len() as u8 - 1));
            for w in chunk {
                self.out.extend(w.to_le_bytes());
            }
        }
        self.words.clear();
    }

    fn pack(&mut self, slots: &[u64]) {
        let mut i = 0;
        while i < slots.len() {
            let run = slots[i..].iter().take_while(|&&s| s == self.prev).count();
            if run >= 120 {
                let n = (run / 120).min(16);
                self.words.push(((n as u64 - 1) << 4) | 15);
                i += n * 120;
                continue;
            }
            let (selector, n, bits) = (1..15)
                .map(|sel| {
                    let bits = PLAIN_BITS[sel];
                    let start = if sel == 7 || sel == 8 { 8 } else { 4 };
                    (sel as u64, ((64 - start) / bits) as usize, bits)
                })
                .find(|&(_, n, bits)| {
                    n <= slots.len() - i
                        && slots[i..i + n]
                            .iter()
                            .all(|&s| s == MISSING || s < (1u64 << bits) - 1)
                })
                .unwrap();
            let start = if selector == 7 || selector == 8 { 8 } else { 4 };
            let mut word = selector;
            for (k, &s) in slots[i..i + n].iter().enumerate() {
                let s = if s == MISSING { (1u64 << bits) - 1 } else { s };
                word |= s << (start + k as u32 * bits);
            }
            self.words.push(word);
            self.prev = slots[i + n - 1];
            i += n;
        }
    }
}

fn encode(values: &[Option<Value>]) -> Vec<u8> {
    let mut b = Blocks {
        out: Vec::new(),
        words: Vec::new(),
        prev: 0,
    };
    let mut pending: Vec<u64> = Vec::new();
    let mut last: Option<Value> = None;
    let mut prev_delta = 0i64;
    for &v in values {
        let Some(v) = v else {
            pending.push(MISSING);
            continue;
        };
        let slot = match (last, v) {
            (Some(Value::Int(a)), Value::Int(x)) => Some(zigzag(x.wrapping_sub(a))),
            (Some(Value::Date(a)), Value::Date(x)) => {
                let delta = x.wrapping_sub(a);
                let slot = zigzag(delta.wrapping_sub(prev_delta));
                prev_delta = delta;
                Some(slot)
            }
            _ => None,
        };
        match slot.filter(|&s| s < (1u64 << 60) - 1) {
            Some(s) => pending.push(s),
            None => {
                b.pack(&pending);
                b.flush_words();
                pending.clear();
                b.out.extend(v.literal());
                b.prev = 0;
                prev_delta = 0;
            }
        }
        last = Some(v);
    }
    b.pack(&pending);
    b.flush_words();
    b.out.push(0);
    b.out
}

/// Runs of values: missing ones, repeats, arithmetic steps, or random ones.
fn column() -> impl Strategy<Value = Vec<Option<Value>>> {
    let run = (0u8..6, any::<i64>(), -1000i64..1000, 1usize..400);
    prop::collection::vec(run, 0..12).prop_map(|runs| {
        let mut out = Vec::new();
        for (kind, base, step, n) in runs {
            for i in 0..n as i64 {
                out.push(match kind {
                    0 => None,
                    1 => Some(Value::Int(base)),
                    2 => Some(Value::Int(base.wrapping_add(step.wrapping_mul(i)))),
                    3 => Some(Value::Date(base.wrapping_add(step.wrapping_mul(i)))),
                    4 => Some(Value::Int(base.wrapping_mul(i + 1) >> (i % 64))),
                    _ => (i % 3 != 0).then_some(Value::Date(base / 2 + step * i * i)),
                });
            }
        }
        out
    })
}

proptest! {
    #[test]
    fn encoded_columns_decode_to_their_values(values in column()) {
        let bytes = encode(&values);
        let want: Vec<Option<Bson>> = values.iter().map(|v| v.map(Value::bson)).collect();
        prop_assert_eq!(decode(&bytes).unwrap(), want);
        // Cut anywhere, the column errs or decodes, but never panics.
        for cut in (0..bytes.len()).step_by(bytes.len() / 16 + 1) {
            let _ = decode(&bytes[..cut]);
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
        let _ = decode(&bytes);
    }

    #[test]
    fn mutated_columns_never_panic(values in column(), at in any::<usize>(), byte in any::<u8>()) {
        let mut bytes = encode(&values);
        let i = at % bytes.len();
        bytes[i] = byte;
        let _ = decode(&bytes);
    }
}
