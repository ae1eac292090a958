//! Shapes: the top-level field names and types of a measurement, in order.
//!
//! An open bucket keeps rows of one shape as the BSON they arrived in (see
//! `catalog::builder::BucketBuilder`); to take a row it must know that the row has the bucket's
//! shape. Walking every row's elements on the single thread that applies batches to find out
//! was most of that thread's work, yet the inserting thread writes (or reads) those same
//! element headers anyway. So the inserting thread names each row's shape with a [`ShapeId`],
//! and the catalog compares two integers.
//!
//! A shape gets an id only when every element outside the meta field is a scalar the bucket
//! may keep unsplit ([`defers`]); ids come from one process-wide table, so rows inserted by
//! different threads share them, and an id is never given to two different shapes.

use std::cell::RefCell;
use std::sync::Mutex;

/// Names a shape: two rows with the same nonzero id have the same element headers
/// (`{ type | name | 0 }`, in order) and only deferrable scalars outside the meta field;
/// zero means unknown.
pub type ShapeId = u64;

/// Element types a row may hold outside its meta field and still wait unsplit in an open
/// bucket: scalars whose type alone fixes their schema class (documents and arrays need the
/// schema of their insides). Strings must also be well formed, which the caller checks.
pub fn defers(kind: u8) -> bool {
    matches!(kind, 0x01 | 0x02 | 0x07 | 0x08 | 0x09 | 0x0A | 0x10 | 0x12)
}

/// Collects one row's element headers and names its shape; reused from row to row, it
/// remembers the last shape it named, which is usually the next row's.
#[derive(Default)]
pub struct ShapeBuilder {
    /// Room for a generated `_id`'s header, then the row's element headers.
    headers: Vec<u8>,
    /// Where the row's headers start in `headers`: after the room, or at 0 once an `_id` was
    /// put in front.
    start: usize,
    plain: bool,
    last: Vec<u8>,
    last_id: ShapeId,
}

impl ShapeBuilder {
    /// Starts a row.
    pub fn begin(&mut self) {
        self.headers.clear();
        self.headers.extend_from_slice(&ID_HEADER);
        self.start = ID_HEADER.len();
        self.plain = true;
    }

    /// Adds the row's next element; `meta` marks the meta field, whose value may be anything.
    pub fn push(&mut self, kind: u8, name: &[u8], meta: bool) {
        self.plain &= meta || defers(kind);
        self.headers.push(kind);
        self.headers.extend_from_slice(name);
        self.headers.push(0);
    }

    /// The element headers pushed since [`ShapeBuilder::begin`].
    pub fn headers(&self) -> &[u8] {
        self.headers.get(self.start..).unwrap_or_default()
    }

    /// Puts a generated `_id` in front of the elements pushed so far, where the insert path
    /// writes it.
    pub fn prepend_id(&mut self) {
        // The room was filled with this header by `begin`.
        self.start = 0;
    }

    /// Marks the row as one that cannot wait unsplit (a damaged string, for instance).
    pub fn spoil(&mut self) {
        self.plain = false;
    }

    /// The id of the row's shape, or 0 when its elements are not all deferrable.
    pub fn finish(&mut self) -> ShapeId {
        if !self.plain {
            return 0;
        }
        let headers = self.headers.get(self.start..).unwrap_or_default();
        if self.last_id == 0 || headers != self.last {
            self.last_id = intern(headers);
            self.last.clear();
            self.last.extend_from_slice(headers);
        }
        self.last_id
    }
}

/// The element headers of the last row encoded from a `Document`, field by field, with the
/// shape id it got. A row whose fields repeat them one for one (the usual case: a series sends
/// the same fields every time) skips what those names already passed (the NUL and reserved-name
/// checks) and the copy of its headers into the [`ShapeBuilder`], and takes the same id.
#[derive(Default)]
pub struct LastRow {
    /// `{ type | name | 0 }` per field.
    headers: Vec<u8>,
    /// Where each field's header ends in `headers`.
    ends: Vec<usize>,
    /// The shape id the row got.
    id: ShapeId,
}

impl LastRow {
    /// True when field `i` of the last row has type `kind` and name `name`: the same name,
    /// checked when that row was encoded.
    #[inline]
    pub fn repeats(&self, i: usize, kind: u8, name: &[u8]) -> bool {
        let start = match i.checked_sub(1) {
            Some(prev) => self.ends.get(prev).copied(),
            None => Some(0),
        };
        let (Some(start), Some(&end)) = (start, self.ends.get(i)) else {
            return false;
        };
        end - start == name.len() + 2
            && self.headers.get(start) == Some(&kind)
            && self.headers.get(start + 1..end - 1) == Some(name)
    }

    /// Fields of the last row.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// The shape id of the last row.
    pub fn id(&self) -> ShapeId {
        self.id
    }

    /// Pushes the first `n` fields of the last row into `shape`, `meta` naming the meta field:
    /// for a row that repeated them and then went its own way.
    pub fn replay(&self, n: usize, shape: &mut ShapeBuilder, meta: Option<&str>) {
        let mut start = 0;
        for &end in self.ends.iter().take(n) {
            if let (Some(&kind), Some(name)) = (
                self.headers.get(start),
                self.headers.get(start + 1..end.saturating_sub(1)),
            ) {
                shape.push(kind, name, meta.map(str::as_bytes) == Some(name));
            }
            start = end;
        }
    }

    /// Remembers the row whose headers `shape` collected (every name in them checked) and the
    /// id it got.
    pub fn remember(&mut self, shape: &ShapeBuilder, id: ShapeId) {
        let headers = shape.headers();
        self.headers.clear();
        self.headers.extend_from_slice(headers);
        self.ends.clear();
        // Each header is a type byte, then a name without NUL bytes, then a NUL.
        let mut at = 0;
        while at < headers.len() {
            match crate::doc::elements::find_nul(headers.get(at + 1..).unwrap_or_default()) {
                Some(n) => {
                    at += n + 2;
                    self.ends.push(at);
                }
                None => {
                    // Not a whole header: remember nothing rather than a wrong field.
                    self.ends.clear();
                    break;
                }
            }
        }
        self.id = id;
    }
}

/// The header of a generated `_id` element (an ObjectId named `_id`).
const ID_HEADER: [u8; 5] = *b"\x07_id\0";

/// Shapes kept per thread before the process-wide table is asked.
const LOCAL_SHAPES: usize = 4096;
/// Shapes kept process-wide; when full the table starts over, and shapes seen again get new
/// ids (rows of an older id then take the slower path that compares headers).
const GLOBAL_SHAPES: usize = 65_536;

type Table = foldhash::HashMap<Vec<u8>, ShapeId>;

thread_local! {
    static LOCAL: RefCell<Table> = RefCell::new(Table::default());
}

static GLOBAL: Mutex<Option<(Table, ShapeId)>> = Mutex::new(None);

fn intern(headers: &[u8]) -> ShapeId {
    if let Some(id) = LOCAL.with(|t| t.borrow().get(headers).copied()) {
        return id;
    }
    let id = {
        // A poisoned lock only means another thread panicked between two plain map
        // operations; the table is still consistent.
        let mut g = GLOBAL.lock().unwrap_or_else(|e| e.into_inner());
        let (table, next) = g.get_or_insert_with(|| (Table::default(), 1));
        match table.get(headers) {
            Some(&id) => id,
            None => {
                if table.len() >= GLOBAL_SHAPES {
                    table.clear();
                }
                let id = *next;
                *next += 1;
                table.insert(headers.to_vec(), id);
                id
            }
        }
    };
    LOCAL.with(|t| {
        let mut t = t.borrow_mut();
        if t.len() >= LOCAL_SHAPES {
            t.clear();
        }
        t.insert(headers.to_vec(), id);
    });
    id
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(fields: &[(u8, &str)], meta: Option<&str>) -> ShapeId {
        let mut b = ShapeBuilder::default();
        b.begin();
        for &(k, n) in fields {
            b.push(k, n.as_bytes(), Some(n) == meta);
        }
        b.finish()
    }

    #[test]
    fn equal_headers_share_an_id_across_threads() {
        let a = shape(&[(0x09, "t"), (0x01, "x"), (0x03, "m")], Some("m"));
        assert_ne!(a, 0);
        assert_eq!(
            a,
            shape(&[(0x09, "t"), (0x01, "x"), (0x03, "m")], Some("m"))
        );
        let there =
            std::thread::spawn(|| shape(&[(0x09, "t"), (0x01, "x"), (0x03, "m")], Some("m")));
        assert_eq!(there.join().unwrap(), a);
        // Order, names and types all count.
        assert_ne!(
            a,
            shape(&[(0x01, "x"), (0x09, "t"), (0x03, "m")], Some("m"))
        );
        assert_ne!(
            a,
            shape(&[(0x09, "t"), (0x10, "x"), (0x03, "m")], Some("m"))
        );
        assert_ne!(
            a,
            shape(&[(0x09, "t"), (0x01, "y"), (0x03, "m")], Some("m"))
        );
        // A name that ends where another begins is not confused with it.
        assert_ne!(
            shape(&[(0x01, "ab"), (0x01, "c")], None),
            shape(&[(0x01, "a"), (0x01, "bc")], None)
        );
    }

    #[test]
    fn the_last_row_repeats_only_whole_fields() {
        let mut b = ShapeBuilder::default();
        b.begin();
        b.push(0x07, b"_id", false);
        b.push(0x09, b"t", false);
        b.push(0x03, b"m", true);
        let id = b.finish();
        let mut last = LastRow::default();
        last.remember(&b, id);
        assert_eq!((last.len(), last.id()), (3, id));
        assert!(last.repeats(0, 0x07, b"_id") && last.repeats(2, 0x03, b"m"));
        // Another type, a prefix of a name, a name spanning two headers, a field past the end.
        assert!(!last.repeats(1, 0x12, b"t"));
        assert!(!last.repeats(0, 0x07, b"_i"));
        assert!(!last.repeats(0, 0x07, b"_id\0\x09t"));
        assert!(!last.repeats(3, 0x03, b"m"));
        // Replaying a prefix gives the builder what pushing those fields would have.
        let mut again = ShapeBuilder::default();
        again.begin();
        last.replay(3, &mut again, Some("m"));
        assert_eq!(again.headers(), b.headers());
        assert_eq!(again.finish(), id);
    }

    #[test]
    fn nested_values_outside_the_meta_field_have_no_id() {
        assert_eq!(shape(&[(0x09, "t"), (0x03, "d")], Some("m")), 0);
        assert_eq!(shape(&[(0x09, "t"), (0x04, "a")], None), 0);
        assert_eq!(shape(&[(0x09, "t"), (0x13, "dec")], None), 0);
        let mut b = ShapeBuilder::default();
        b.begin();
        b.push(0x02, b"s", false);
        b.spoil();
        assert_eq!(b.finish(), 0);
        // The builder's memory of the last shape does not leak into the next row.
        b.begin();
        b.push(0x02, b"s", false);
        let id = b.finish();
        assert_ne!(id, 0);
        b.begin();
        b.push(0x02, b"s", false);
        b.push(0x01, b"x", false);
        assert_ne!(b.finish(), id);
    }
}
