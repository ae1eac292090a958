//! A typed column's value per row.
//!
//! Most columns have a value in every row, and their decoders produce exactly that: a plain
//! vector. Spreading it out to an `Option` per row doubled its size and cost a copy per
//! decoded column, about a tenth of a query that filters one numeric column; so a column
//! with a value in every row stays [`Slots::Dense`], and only a sparse one is spread out.

use crate::codec::Dense;

/// A value of type `T` per row, or none.
#[derive(Debug, Clone, PartialEq)]
pub enum Slots<T> {
    /// A value in every row.
    Dense(Vec<T>),
    /// `None` where a row has no value.
    Rows(Vec<Option<T>>),
}

/// A decoded column: kept dense when every row has a value.
impl<T> From<Dense<T>> for Slots<T> {
    fn from(d: Dense<T>) -> Slots<T> {
        match d.present {
            None => Slots::Dense(d.values),
            Some(_) => Slots::Rows(d.into_rows()),
        }
    }
}

impl<T> From<Vec<Option<T>>> for Slots<T> {
    fn from(v: Vec<Option<T>>) -> Slots<T> {
        Slots::Rows(v)
    }
}

impl<T: Copy> Slots<T> {
    /// From one entry per row: dense when every row has a value.
    pub fn from_rows(v: Vec<Option<T>>) -> Slots<T> {
        match v.iter().all(Option::is_some) {
            true => Slots::Dense(v.into_iter().flatten().collect()),
            false => Slots::Rows(v),
        }
    }

    /// Borrowed.
    pub fn view(&self) -> SlotsRef<'_, T> {
        match self {
            Slots::Dense(v) => SlotsRef::Dense(v),
            Slots::Rows(v) => SlotsRef::Rows(v),
        }
    }

    /// The value at row `r`; `None` where it has none or past the end.
    pub fn get(&self, r: usize) -> Option<T> {
        self.view().get(r)
    }
}

/// [`Slots`], borrowed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SlotsRef<'a, T> {
    /// A value in every row.
    Dense(&'a [T]),
    /// `None` where a row has no value.
    Rows(&'a [Option<T>]),
}

impl<'a, T: Copy> SlotsRef<'a, T> {
    /// The value at row `r`; `None` where it has none or past the end.
    #[inline]
    pub fn get(&self, r: usize) -> Option<T> {
        match self {
            SlotsRef::Dense(v) => v.get(r).copied(),
            SlotsRef::Rows(v) => v.get(r).copied().flatten(),
        }
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        match self {
            SlotsRef::Dense(v) => v.len(),
            SlotsRef::Rows(v) => v.len(),
        }
    }

    /// True when there are no rows.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Rows `range`; `None` when it reaches past the end.
    pub fn slice(&self, range: std::ops::Range<usize>) -> Option<SlotsRef<'a, T>> {
        Some(match self {
            SlotsRef::Dense(v) => SlotsRef::Dense(v.get(range)?),
            SlotsRef::Rows(v) => SlotsRef::Rows(v.get(range)?),
        })
    }

    /// One entry per row, `None` where a row has no value.
    pub fn to_rows(self) -> Vec<Option<T>> {
        match self {
            SlotsRef::Dense(v) => v.iter().copied().map(Some).collect(),
            SlotsRef::Rows(v) => v.to_vec(),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "test code: a panic is a test failure")]
mod tests {
    use super::*;

    #[test]
    fn dense_and_rows_read_alike() {
        let d = Slots::Dense(vec![1i64, 2, 3]);
        let r: Slots<i64> = vec![Some(1), Some(2), Some(3)].into();
        for s in [&d, &r] {
            assert_eq!(
                (0..4).map(|i| s.get(i)).collect::<Vec<_>>(),
                [Some(1), Some(2), Some(3), None]
            );
            assert_eq!(s.view().len(), 3);
            assert_eq!(s.view().slice(1..3).unwrap().to_rows(), [Some(2), Some(3)]);
            assert!(s.view().slice(2..4).is_none());
        }
        assert_eq!(Slots::from_rows(vec![Some(1i64), Some(2), Some(3)]), d);
        assert_eq!(
            Slots::from_rows(vec![None, Some(5i64)]),
            vec![None, Some(5)].into()
        );
        let sparse: Slots<i64> = vec![None, Some(5)].into();
        assert_eq!(sparse.get(0), None);
        assert_eq!(sparse.view().to_rows(), [None, Some(5)]);
    }
}
