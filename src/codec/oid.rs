//! ObjectId and Timestamp columns, split into their parts so each part gets its own integer
//! sequence. For engine-generated `_id`s the seconds part is (near) constant, the 5-byte
//! process part is constant and the counter advances by a constant step, so the whole column
//! costs a couple of dozen bytes whatever the row count.
#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

use bson::oid::ObjectId;
use bson::Timestamp;

use super::bits::Reader;
use super::{int, CodecError};

const MID_CONST: u8 = 0;
const MID_EACH: u8 = 1;

fn split(o: &ObjectId) -> (i64, [u8; 5], i64) {
    let b = o.bytes();
    let [t0, t1, t2, t3, m0, m1, m2, m3, m4, c0, c1, c2] = b;
    (
        i64::from(u32::from_be_bytes([t0, t1, t2, t3])),
        [m0, m1, m2, m3, m4],
        i64::from(u32::from_be_bytes([0, c0, c1, c2])),
    )
}

/// Appends an OBJECTID body. `last`: nothing follows the body.
pub(crate) fn encode(vals: &[ObjectId], out: &mut Vec<u8>, last: bool) {
    let parts: Vec<_> = vals.iter().map(split).collect();
    let ts: Vec<i64> = parts.iter().map(|p| p.0).collect();
    let cs: Vec<i64> = parts.iter().map(|p| p.2).collect();
    int::encode(&ts, out);
    match parts.split_first() {
        Some((first, rest)) if rest.iter().all(|p| p.1 == first.1) => {
            out.push(MID_CONST);
            out.extend_from_slice(&first.1);
        }
        _ => {
            out.push(MID_EACH);
            for p in &parts {
                out.extend_from_slice(&p.1);
            }
        }
    }
    if last {
        int::encode_last(&cs, out);
    } else {
        int::encode(&cs, out);
    }
}

/// Decodes an OBJECTID body of `n` values.
pub(crate) fn decode(r: &mut Reader, n: usize) -> Result<Vec<ObjectId>, CodecError> {
    if n == 0 {
        return Ok(Vec::new());
    }
    let ts_at = r.offset();
    let ts = int::decode(r, n)?;
    let mid_at = r.offset();
    let mids: Vec<[u8; 5]> = match r.u8()? {
        MID_CONST => vec![r.array()?; n],
        MID_EACH => {
            let b = r.bytes(n.checked_mul(5).ok_or_else(|| r.err("too many values"))?)?;
            b.chunks_exact(5)
                .map(|c| {
                    let mut a = [0u8; 5];
                    a.copy_from_slice(c);
                    a
                })
                .collect()
        }
        m => {
            return Err(CodecError::new(
                mid_at,
                format!("unknown ObjectId middle mode {m}"),
            ))
        }
    };
    let cs_at = r.offset();
    let cs = int::decode(r, n)?;
    ts.iter()
        .zip(&mids)
        .zip(&cs)
        .map(|((&t, m), &c)| {
            let t = u32::try_from(t)
                .map_err(|_| CodecError::new(ts_at, "ObjectId seconds out of range"))?;
            let c = u32::try_from(c)
                .ok()
                .filter(|&c| c < 1 << 24)
                .ok_or_else(|| CodecError::new(cs_at, "ObjectId counter out of range"))?;
            let [t0, t1, t2, t3] = t.to_be_bytes();
            let [m0, m1, m2, m3, m4] = *m;
            let [_, c0, c1, c2] = c.to_be_bytes();
            Ok(ObjectId::from_bytes([
                t0, t1, t2, t3, m0, m1, m2, m3, m4, c0, c1, c2,
            ]))
        })
        .collect()
}

/// Appends a TIMESTAMP body: the seconds, then the increments. `last`: nothing follows.
pub(crate) fn encode_ts(vals: &[Timestamp], out: &mut Vec<u8>, last: bool) {
    let t: Vec<i64> = vals.iter().map(|x| i64::from(x.time)).collect();
    let i: Vec<i64> = vals.iter().map(|x| i64::from(x.increment)).collect();
    int::encode(&t, out);
    if last {
        int::encode_last(&i, out);
    } else {
        int::encode(&i, out);
    }
}

/// Decodes a TIMESTAMP body of `n` values.
pub(crate) fn decode_ts(r: &mut Reader, n: usize) -> Result<Vec<Timestamp>, CodecError> {
    let at = r.offset();
    let t = int::decode(r, n)?;
    let i = int::decode(r, n)?;
    t.iter()
        .zip(&i)
        .map(|(&t, &i)| {
            Ok(Timestamp {
                time: u32::try_from(t)
                    .map_err(|_| CodecError::new(at, "timestamp out of range"))?,
                increment: u32::try_from(i)
                    .map_err(|_| CodecError::new(at, "timestamp out of range"))?,
            })
        })
        .collect()
}

#[cfg(test)]
// Tests may panic: a panic is how a test fails.
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;

    #[test]
    fn generated_ids_cost_a_few_bytes() {
        let vals: Vec<ObjectId> = (0..360u32)
            .map(|i| {
                let c = (0xfff000 + i * 1000) & 0xffffff;
                let [_, c0, c1, c2] = c.to_be_bytes();
                let [t0, t1, t2, t3] = (1_451_606_400u32 + i / 100).to_be_bytes();
                ObjectId::from_bytes([t0, t1, t2, t3, 1, 2, 3, 4, 5, c0, c1, c2])
            })
            .collect();
        let mut buf = Vec::new();
        encode(&vals, &mut buf, true);
        let mut r = Reader::new(&buf, 0);
        assert_eq!(decode(&mut r, vals.len()).ok(), Some(vals));
        assert!(r.finish().is_ok());
        assert!(buf.len() < 40, "{}", buf.len());
    }
}
