//! What a query answered, reduced to numbers every engine can produce: the number of result
//! rows and the sum of the numeric values in them. Engines agree when both match.

use tsbucket::bson::{Bson, Document};

/// A query's answer in comparable form.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Answer {
    /// Result rows (groups, documents, or 1 for a count).
    pub rows: u64,
    /// Sum of the numeric values in the result, `_id` and times excluded.
    pub total: f64,
}

impl Answer {
    /// Whether `other` is the same answer, up to floating-point summation order.
    pub fn agrees(&self, other: &Answer) -> bool {
        let scale = self.total.abs().max(other.total.abs()).max(1.0);
        self.rows == other.rows && (self.total - other.total).abs() <= 1e-9 * scale
    }

    /// The answer of result documents: top-level numbers, `_id` excluded.
    pub fn of_documents<'a>(docs: impl IntoIterator<Item = &'a Document>) -> Answer {
        let mut a = Answer::default();
        for d in docs {
            a.rows += 1;
            for (k, v) in d {
                if k != "_id" {
                    a.total += number(v).unwrap_or(0.0);
                }
            }
        }
        a
    }

    /// The answer of a count: one row holding `n`.
    pub fn count(n: u64) -> Answer {
        Answer {
            rows: 1,
            total: n as f64,
        }
    }
}

/// A BSON number as `f64`.
pub fn number(v: &Bson) -> Option<f64> {
    match v {
        Bson::Int32(i) => Some(f64::from(*i)),
        Bson::Int64(i) => Some(*i as f64),
        Bson::Double(f) => Some(*f),
        _ => None,
    }
}
