//! Column codecs: turn one column of a bucket (a value or a gap per row) into bytes and back.
//!
//! PLACEHOLDER: this first version stores a column as a BSON document keyed by row index
//! (MongoDB's v1 bucket layout) behind codec id 0. It is replaced by the type-specific codecs
//! described in `format-spec/codecs.md`.

use bson::{Bson, Document};

/// A decoding failure, with the offset inside the encoded column where it was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodecError {
    /// Byte offset within the encoded column.
    pub offset: usize,
    /// What was wrong.
    pub detail: String,
}

impl CodecError {
    /// Builds an error at `offset`.
    pub fn new(offset: usize, detail: impl Into<String>) -> CodecError {
        CodecError {
            offset,
            detail: detail.into(),
        }
    }
}

/// Encodes a column (one entry per row, `None` = field absent at that row), appending to `out`.
pub fn encode_column(values: &[Option<Bson>], out: &mut Vec<u8>) {
    out.push(0);
    let mut d = Document::new();
    for (i, v) in values.iter().enumerate() {
        if let Some(v) = v {
            d.insert(i.to_string(), v.clone());
        }
    }
    // Writing a Document to a Vec cannot fail except for absurd sizes.
    let _ = d.to_writer(&mut *out);
}

/// Decodes a column of exactly `rows` entries.
pub fn decode_column(data: &[u8], rows: usize) -> Result<Vec<Option<Bson>>, CodecError> {
    let (&id, rest) = data
        .split_first()
        .ok_or_else(|| CodecError::new(0, "empty column"))?;
    if id != 0 {
        return Err(CodecError::new(0, format!("unknown codec id {id}")));
    }
    let d = Document::from_reader(rest).map_err(|e| CodecError::new(1, e.to_string()))?;
    let mut out = vec![None; rows];
    for (k, v) in d {
        let i: usize = k
            .parse()
            .map_err(|_| CodecError::new(1, format!("bad row key {k:?}")))?;
        let slot = out
            .get_mut(i)
            .ok_or_else(|| CodecError::new(1, format!("row {i} out of range")))?;
        *slot = Some(v);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_with_gaps() {
        let col = vec![Some(Bson::Int32(1)), None, Some(Bson::String("x".into()))];
        let mut buf = Vec::new();
        encode_column(&col, &mut buf);
        assert_eq!(decode_column(&buf, 3).unwrap(), col);
    }
}
