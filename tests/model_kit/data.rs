//! Random collections: series with scalar, document or no meta values; sparse measurement
//! fields of mixed types; times in and out of order, spread over several buckets per series;
//! batches with flushes and reopens between them.
//!
//! Values are generated abstractly ([`Val`]) and turned into BSON once the bucket span is
//! known, so times scale with the span and a shrunk case prints as small numbers.

use proptest::prelude::*;
use std::fmt;
use tsbucket::bson::{oid::ObjectId, Bson, DateTime, Document};
use tsbucket::TimeseriesOptions;

/// The time and meta fields of every model collection.
pub const TIME: &str = "t";
pub const META: &str = "m";
/// Measurement times start here (2023-11-14T22:13:20Z).
pub const BASE_MS: i64 = 1_700_000_000_000;
/// Measurement fields. `x`, `y` and `z` are mostly numbers, `s` mostly strings, `e` mostly an
/// embedded document, `arr` mostly an array.
pub const FIELDS: [&str; 6] = ["x", "y", "z", "s", "e", "arr"];
/// Times span this many bucket spans (in thousandths of a span).
pub const TIME_RANGE: u32 = 6_000;
/// Times from here on lie around the Unix epoch instead of [`BASE_MS`] (extended range).
pub const NEAR_EPOCH: u32 = 1_000_000;
/// Times from here on lie around 2^32 seconds, where 4-byte ObjectId times end.
pub const NEAR_2106: u32 = 2_000_000;

/// A measurement time: mostly in the main range (sometimes on a grid, so equal times recur),
/// rarely across the epoch or the 2106 boundary.
pub fn time() -> BoxedStrategy<u32> {
    prop_oneof![
        30 => 0..TIME_RANGE,
        10 => (0..TIME_RANGE / 250).prop_map(|k| k * 250),
        1 => (0..TIME_RANGE).prop_map(|t| NEAR_EPOCH + t),
        1 => (0..TIME_RANGE).prop_map(|t| NEAR_2106 + t),
    ]
    .boxed()
}

/// A value before it is made BSON.
#[derive(Clone, PartialEq)]
pub enum Val {
    I32(i32),
    I64(i64),
    F64(f64),
    Str(&'static str),
    Bool(bool),
    Null,
    /// A time, in thousandths of the bucket span after [`BASE_MS`].
    Date(u32),
    Arr(Vec<Val>),
    Doc(Vec<(&'static str, Val)>),
    /// The explicit `_id` of row `n`.
    Oid(u16),
    /// Filters only: the value the filtered path has in inserted document `n` (modulo their
    /// number; null when it has none), so that operands hit the data.
    Pick(u16),
}

impl fmt::Debug for Val {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Val::I32(i) => write!(f, "{i}"),
            Val::I64(i) => write!(f, "{i}L"),
            Val::F64(d) => write!(f, "{d:?}f"),
            Val::Str(s) => write!(f, "{s:?}"),
            Val::Bool(b) => write!(f, "{b}"),
            Val::Null => write!(f, "null"),
            Val::Date(t) => write!(f, "{}", show_time(*t)),
            Val::Arr(a) => f.debug_list().entries(a).finish(),
            Val::Doc(d) => {
                let mut m = f.debug_map();
                for (k, v) in d {
                    m.entry(&format_args!("{k}"), v);
                }
                m.finish()
            }
            Val::Oid(n) => write!(f, "Oid({n})"),
            Val::Pick(n) => write!(f, "Pick({n})"),
        }
    }
}

/// How abstract values become BSON for one case.
#[derive(Debug, Clone, Copy)]
pub struct Ctx {
    /// Bucket span in milliseconds.
    pub span_ms: i64,
}

impl Ctx {
    /// The time of [`Val::Date`] `t`. The extended ranges start three spans before their
    /// boundary, so buckets straddle it.
    pub fn time(&self, t: u32) -> DateTime {
        let (base, t) = if t >= NEAR_2106 {
            ((1i64 << 32) * 1000 - 3 * self.span_ms, t - NEAR_2106)
        } else if t >= NEAR_EPOCH {
            (-3 * self.span_ms, t - NEAR_EPOCH)
        } else {
            (BASE_MS, t)
        };
        DateTime::from_millis(base + i64::from(t) * self.span_ms / 1000)
    }

    /// `v` as BSON.
    pub fn bson(&self, v: &Val) -> Bson {
        match v {
            Val::I32(i) => Bson::Int32(*i),
            Val::I64(i) => Bson::Int64(*i),
            Val::F64(d) => Bson::Double(*d),
            Val::Str(s) => Bson::String((*s).to_string()),
            Val::Bool(b) => Bson::Boolean(*b),
            Val::Null => Bson::Null,
            Val::Date(t) => Bson::DateTime(self.time(*t)),
            Val::Arr(a) => Bson::Array(a.iter().map(|x| self.bson(x)).collect()),
            Val::Doc(d) => Bson::Document(
                d.iter()
                    .map(|(k, x)| (k.to_string(), self.bson(x)))
                    .collect(),
            ),
            Val::Oid(n) => Bson::ObjectId(oid(*n)),
            Val::Pick(_) => panic!("Pick is resolved against the inserted documents"),
        }
    }
}

/// The explicit `_id` of row `n`: distinct per row and far from generated ids.
pub fn oid(n: u16) -> ObjectId {
    let mut b = [0u8; 12];
    b[0] = 0x10;
    b[10..].copy_from_slice(&n.to_be_bytes());
    ObjectId::from_bytes(b)
}

/// Numbers of every type around the interesting points: zero and -0.0, small values that
/// collide across types, and large ones where doubles lose integer precision.
pub fn number() -> BoxedStrategy<Val> {
    const TWO_53: i64 = 9_007_199_254_740_992;
    prop_oneof![
        4 => (-3i32..=3).prop_map(Val::I32),
        3 => (-3i64..=3).prop_map(Val::I64),
        4 => prop::sample::select(vec![-2.5, -1.0, -0.0, 0.0, 0.5, 1.0, 1.5, 2.0, 3.0])
            .prop_map(Val::F64),
        1 => prop::sample::select(vec![i32::MIN, i32::MAX]).prop_map(Val::I32),
        1 => prop::sample::select(vec![TWO_53, TWO_53 + 1, -TWO_53 - 1, i64::MAX, i64::MIN])
            .prop_map(Val::I64),
        1 => prop::sample::select(vec![
            9_007_199_254_740_992.0,
            9_223_372_036_854_775_808.0,
            -9_223_372_036_854_775_808.0,
            1e300,
            -1e300,
        ])
        .prop_map(Val::F64),
    ]
    .boxed()
}

/// Short strings that collide often.
pub fn string() -> BoxedStrategy<Val> {
    prop::sample::select(vec!["", "a", "ab", "b"])
        .prop_map(Val::Str)
        .boxed()
}

/// A scalar of any generated type.
pub fn scalar() -> BoxedStrategy<Val> {
    prop_oneof![
        6 => number(),
        2 => string(),
        1 => any::<bool>().prop_map(Val::Bool),
        1 => Just(Val::Null),
        1 => time().prop_map(Val::Date),
    ]
    .boxed()
}

fn small_array() -> BoxedStrategy<Val> {
    prop::collection::vec(
        prop_oneof![3 => number(), 1 => string(), 1 => Just(Val::Null)],
        0..=3,
    )
    .prop_map(Val::Arr)
    .boxed()
}

fn small_doc() -> BoxedStrategy<Val> {
    (number(), prop::option::of(string()))
        .prop_map(|(a, b)| {
            let mut d = vec![("a", a)];
            if let Some(b) = b {
                d.push(("b", b));
            }
            Val::Doc(d)
        })
        .boxed()
}

/// The value of measurement field `i` of [`FIELDS`].
pub fn field_value(i: usize) -> BoxedStrategy<Val> {
    match FIELDS[i] {
        "s" => prop_oneof![
            6 => string(),
            2 => any::<bool>().prop_map(Val::Bool),
            1 => Just(Val::Null),
            1 => number(),
        ]
        .boxed(),
        "e" => prop_oneof![4 => small_doc(), 1 => number(), 1 => Just(Val::Null)].boxed(),
        "arr" => prop_oneof![4 => small_array(), 1 => number(), 1 => string()].boxed(),
        _ => prop_oneof![20 => number(), 1 => string(), 1 => any::<bool>().prop_map(Val::Bool),
            1 => Just(Val::Null), 1 => small_array(), 1 => small_doc(),
            1 => time().prop_map(Val::Date)]
        .boxed(),
    }
}

/// A series' meta value: `None` for measurements without the meta field.
pub fn meta_value() -> BoxedStrategy<Option<Val>> {
    let sub = prop_oneof![
        (0i32..3).prop_map(Val::I32),
        prop::sample::select(vec!["h1", "h2"]).prop_map(Val::Str)
    ];
    let doc = prop::sample::subsequence(vec!["a", "b", "c"], 1..=3)
        .prop_flat_map(move |keys| {
            let n = keys.len();
            (
                Just(keys),
                prop::collection::vec(sub.clone(), n),
                any::<bool>(),
            )
        })
        .prop_map(|(keys, vals, reversed)| {
            let mut d: Vec<(&'static str, Val)> = keys.into_iter().zip(vals).collect();
            if reversed {
                d.reverse();
            }
            Val::Doc(d)
        });
    prop_oneof![
        5 => doc.prop_map(Some),
        2 => prop_oneof![
            (0i32..3).prop_map(Val::I32),
            Just(Val::F64(1.0)),
            Just(Val::Str("h1")),
        ]
        .prop_map(Some),
        1 => Just(Some(Val::Null)),
        1 => Just(None),
    ]
    .boxed()
}

/// `T<thousandths of a span>`, with `E` (epoch) or `F` (2106) for the extended ranges.
pub fn show_time(t: u32) -> String {
    if t >= NEAR_2106 {
        format!("F{}", t - NEAR_2106)
    } else if t >= NEAR_EPOCH {
        format!("E{}", t - NEAR_EPOCH)
    } else {
        format!("T{t}")
    }
}

/// Where a measurement's `_id` comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Id {
    /// None given: the engine generates one.
    Generated,
    /// The row's own [`oid`].
    Unique,
    /// One of three ids shared by other rows (MongoDB does not enforce unique `_id`s in
    /// time-series collections).
    Shared,
}

/// One measurement.
#[derive(Clone)]
pub struct Row {
    /// Index into the case's series (modulo their number).
    pub series: usize,
    /// Time in thousandths of the bucket span.
    pub time: u32,
    /// Present fields as (index into [`FIELDS`], value); repeats keep the last.
    pub fields: Vec<(usize, Val)>,
    pub id: Id,
    /// The meta document written with its fields reversed (same series, other field order).
    pub meta_reversed: bool,
    /// The meta field before the time field.
    pub meta_first: bool,
}

impl fmt::Debug for Row {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "s{} {}", self.series, show_time(self.time))?;
        for (i, v) in &self.fields {
            write!(f, " {}={v:?}", FIELDS[*i])?;
        }
        if self.id != Id::Unique {
            write!(f, " ({:?} _id)", self.id)?;
        }
        if self.meta_reversed {
            write!(f, " (meta reversed)")?;
        }
        if self.meta_first {
            write!(f, " (meta first)")?;
        }
        Ok(())
    }
}

fn row(shared_ids: bool) -> impl Strategy<Value = Row> {
    let field = (0..FIELDS.len()).prop_flat_map(|i| (Just(i), field_value(i)));
    let id = if shared_ids {
        prop_oneof![6 => Just(Id::Unique), 3 => Just(Id::Generated), 1 => Just(Id::Shared)].boxed()
    } else {
        prop_oneof![7 => Just(Id::Unique), 3 => Just(Id::Generated)].boxed()
    };
    (
        0usize..6,
        time(),
        prop::collection::vec(field, 0..=6),
        id,
        prop::bool::weighted(0.2),
        prop::bool::weighted(0.1),
    )
        .prop_map(
            |(series, time, fields, id, meta_reversed, meta_first)| Row {
                series,
                time,
                fields,
                id,
                meta_reversed,
                meta_first,
            },
        )
}

/// What happens after a batch is inserted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum After {
    Nothing,
    Flush,
    Reopen,
    FlushReopen,
}

/// One insert batch and what follows it.
#[derive(Debug, Clone)]
pub struct Batch {
    /// Rows in the batch (the last batch takes what is left).
    pub len: usize,
    pub after: After,
    /// Run the queries once this step is done.
    pub check: bool,
}

fn batch() -> impl Strategy<Value = Batch> {
    (
        1usize..=40,
        prop_oneof![
            4 => Just(After::Nothing),
            2 => Just(After::Flush),
            1 => Just(After::Reopen),
            1 => Just(After::FlushReopen),
        ],
        prop::bool::weighted(0.25),
    )
        .prop_map(|(len, after, check)| Batch { len, after, check })
}

/// Bucketing of the collection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bucketing {
    /// `bucket_span(60, 60)`.
    Minute,
    /// `bucket_span(1, 1)`: a bucket per second.
    Second,
    /// The default granularity (an hour's span, minute rounding).
    Default,
}

/// A random collection and how it is loaded.
#[derive(Clone)]
pub struct Collection {
    pub bucketing: Bucketing,
    /// Small bucket count limit, to force more buckets.
    pub max_count: Option<u32>,
    /// 2-6 series.
    pub series: Vec<Option<Val>>,
    pub rows: Vec<Row>,
    /// Insert rows sorted by time instead of in generated order.
    pub in_order: bool,
    pub batches: Vec<Batch>,
}

impl fmt::Debug for Collection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "Collection {{ bucketing: {:?}, max_count: {:?}, in_order: {}",
            self.bucketing, self.max_count, self.in_order
        )?;
        for (i, s) in self.series.iter().enumerate() {
            writeln!(f, "  series {i}: meta {s:?}")?;
        }
        for (i, r) in self.rows.iter().enumerate() {
            writeln!(f, "  row {i}: {r:?}")?;
        }
        writeln!(f, "  batches: {:?} }}", self.batches)
    }
}

/// Strategy for a whole collection with at most `max_rows` rows; `shared_ids` lets rows share
/// explicit `_id`s.
pub fn collection(max_rows: usize, shared_ids: bool) -> impl Strategy<Value = Collection> {
    (
        prop_oneof![
            3 => Just(Bucketing::Minute),
            1 => Just(Bucketing::Second),
            2 => Just(Bucketing::Default),
        ],
        prop::option::weighted(0.3, 2u32..=8),
        prop::collection::vec(meta_value(), 2..=6),
        prop::collection::vec(row(shared_ids), 0..=max_rows),
        prop::bool::weighted(0.3),
        prop::collection::vec(batch(), 1..=8),
    )
        .prop_map(
            |(bucketing, max_count, series, rows, in_order, batches)| Collection {
                bucketing,
                max_count,
                series,
                rows,
                in_order,
                batches,
            },
        )
}

impl Collection {
    /// The collection's options.
    pub fn options(&self) -> TimeseriesOptions {
        let o = TimeseriesOptions::new(TIME).meta_field(META);
        match self.bucketing {
            Bucketing::Minute => o.bucket_span(60, 60),
            Bucketing::Second => o.bucket_span(1, 1),
            Bucketing::Default => o,
        }
    }

    /// The value context.
    pub fn ctx(&self) -> Ctx {
        let span_s = match self.bucketing {
            Bucketing::Minute => 60,
            Bucketing::Second => 1,
            Bucketing::Default => 3600,
        };
        Ctx {
            span_ms: span_s * 1000,
        }
    }

    /// Rows in insertion order, each with its number (for its explicit `_id`).
    pub fn insertion_order(&self) -> Vec<(u16, &Row)> {
        let mut rows: Vec<(u16, &Row)> = self
            .rows
            .iter()
            .enumerate()
            .map(|(i, r)| (i as u16, r))
            .collect();
        if self.in_order {
            rows.sort_by_key(|(_, r)| r.time);
        }
        rows
    }

    /// Row `n` as the document to insert.
    pub fn document(&self, n: u16, r: &Row) -> Document {
        let ctx = self.ctx();
        let mut d = Document::new();
        match r.id {
            Id::Generated => {}
            Id::Unique => {
                d.insert("_id", oid(n));
            }
            Id::Shared => {
                d.insert("_id", oid(1000 + n % 3));
            }
        }
        let meta = self.series[r.series % self.series.len()].as_ref().map(|m| {
            let mut v = ctx.bson(m);
            if let (true, Bson::Document(doc)) = (r.meta_reversed, &v) {
                let mut fields: Vec<(String, Bson)> =
                    doc.iter().map(|(k, x)| (k.clone(), x.clone())).collect();
                fields.reverse();
                v = Bson::Document(fields.into_iter().collect());
            }
            v
        });
        if let (true, Some(m)) = (r.meta_first, &meta) {
            d.insert(META, m.clone());
        }
        d.insert(TIME, ctx.time(r.time));
        if let (false, Some(m)) = (r.meta_first, meta) {
            d.insert(META, m);
        }
        for (i, v) in &r.fields {
            d.insert(FIELDS[*i], ctx.bson(v));
        }
        d
    }
}
