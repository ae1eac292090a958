//! Soundness of bucket verdicts: buckets built by the catalog from random rows, judged by
//! [`Plan::verdict`] with the statistics a reader has (in memory, and from a segment's
//! directory), against every row matched one by one. A bucket judged `None` holds no match; one
//! judged `All` holds nothing else. The rows the column-wise filter selects from only the
//! filter's columns, read back from a segment or from memory, are exactly those whose full
//! documents match.

use super::filter::Filter;
use super::plan::{BucketStats, Plan, Verdict};
use super::columns::Col;
use super::source;
use crate::query::row_filter::RowFilter;
use crate::query::source::{MemBucket, Source};
use super::unpack::row_document;
use crate::bucket::{BucketData, META_COLUMN};
use crate::catalog::{CollCatalog, FitLimits, OpenCopy};
use crate::ingest::prepare_batch;
use crate::schema::Schema;
use crate::segment::{write_segment, Segment, SegmentHeaderInfo};
use crate::vfs::MemFs;
use bson::{doc, Bson, DateTime, Document};
use proptest::prelude::*;
use std::path::Path;
use std::sync::Arc;

const BASE: i64 = 1_700_000_040_000;

fn date(off_s: i64) -> Bson {
    Bson::DateTime(DateTime::from_millis(BASE + off_s * 1000))
}

/// Values of one type class, from small domains so that operands hit the bounds.
fn value(class: u8, k: i64) -> Bson {
    match class {
        0 => Bson::Int32(k as i32),
        1 => Bson::Double(k as f64 / 2.0),
        2 => {
            if k == 0 {
                Bson::Double(f64::NAN)
            } else {
                Bson::Int64(k)
            }
        }
        3 => Bson::String(["a", "b", "c", "d", "e", "f", "g"][k as usize % 7].into()),
        4 => Bson::Boolean(k % 2 == 0),
        5 => Bson::Null,
        6 => date(k * 100),
        7 => Bson::Array(vec![Bson::Int32(k as i32), Bson::Int32(6 - k as i32)]),
        _ => Bson::Document(doc! {"y": k as i32}),
    }
}

/// Operands: every class's values and the special ones.
fn operand() -> impl Strategy<Value = Bson> {
    prop_oneof![
        (0u8..9, 0i64..7).prop_map(|(c, k)| value(c, k)),
        Just(Bson::MinKey),
        Just(Bson::MaxKey),
        Just(Bson::Null),
        Just(Bson::Double(f64::NAN)),
        (0i64..40).prop_map(|s| date(s * 100)),
        // The meta value in both field orders rows may use.
        Just(Bson::Document(doc! {"h": "a", "r": 1})),
        Just(Bson::Document(doc! {"r": 1, "h": "a"})),
    ]
}

fn leaf() -> impl Strategy<Value = Document> {
    let path = prop::sample::select(vec!["x", "y", "t", "m", "m.h", "z", "x.y", "x.0"]);
    let op = prop::sample::select(vec![
        "$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$in", "$nin", "$exists", "$not",
    ]);
    (path, op, operand(), operand()).prop_map(|(p, op, a, b)| {
        let cond = match op {
            "$in" | "$nin" => doc! {op: [a, b]},
            "$exists" => doc! {op: matches!(a, Bson::Int32(_) | Bson::Int64(_))},
            "$not" => doc! {op: {"$gte": a}},
            _ => doc! {op: a},
        };
        doc! {p: cond}
    })
}

fn filter() -> impl Strategy<Value = Document> {
    let list = || prop::collection::vec(leaf(), 1..4);
    prop_oneof![
        3 => leaf(),
        2 => list().prop_map(|v| doc! {"$and": v}),
        1 => list().prop_map(|v| doc! {"$or": v}),
        1 => list().prop_map(|v| doc! {"$nor": v}),
        1 => (leaf(), leaf()).prop_map(|(a, b)| {
            let mut d = a;
            d.extend(b);
            d
        }),
    ]
}

/// Rows: a time offset, a class and value for `x` (or none), a value for `y` (or none), and
/// whether the meta is written in the other field order.
type RowSpec = (i64, Option<(u8, i64)>, Option<i64>, bool);

fn rows() -> impl Strategy<Value = (u8, Vec<RowSpec>)> {
    let row = (
        0i64..3000,
        prop::option::weighted(0.8, (0u8..9, 0i64..7)),
        prop::option::weighted(0.9, 0i64..7),
        prop::bool::weighted(0.1),
    );
    (0u8..9, prop::collection::vec(row, 1..12))
}

fn catalog() -> CollCatalog {
    CollCatalog::new(
        Schema::new("t", Some("m"), 3600, 60),
        FitLimits {
            max_count: 1000,
            max_size: 1 << 20,
            min_count: 10,
            large_max_size: 12 << 20,
        },
    )
}

/// The buckets the catalog makes of these rows (several when `x` changes class).
fn buckets(main_class: u8, spec: &[RowSpec]) -> Vec<BucketData> {
    let mut spec = spec.to_vec();
    spec.sort_by_key(|r| r.0);
    let docs: Vec<Document> = spec
        .iter()
        .map(|(off, x, y, flip)| {
            let mut d = doc! {"t": date(*off)};
            d.insert(
                "m",
                if *flip {
                    doc! {"r": 1, "h": "a"}
                } else {
                    doc! {"h": "a", "r": 1}
                },
            );
            if let Some((c, k)) = x {
                // Mostly one class, so buckets hold several rows.
                let c = if *c < 6 { main_class } else { *c };
                d.insert("x", value(c, *k));
            }
            if let Some(y) = y {
                d.insert("y", *y as i32);
            }
            d
        })
        .collect();
    let fields = Schema::new("t", Some("m"), 3600, 60);
    let (prepared, payload, _) = prepare_batch(1, &docs, &fields).unwrap();
    let mut c = catalog();
    c.begin_batch();
    for (i, p) in prepared.iter().enumerate() {
        c.insert(p, p.raw(&payload).unwrap(), 1, i as u32);
    }
    c.close_all();
    c.take_closed()
        .iter()
        .map(|b| (**b.data()).clone())
        .collect()
}

fn dense_in_memory(b: &BucketData, f: &str) -> bool {
    b.columns
        .iter()
        .any(|c| c.name == f && c.values.iter().all(Option::is_some))
}

/// The rows of the bucket at `src` that `rf` selects from the columns it reads (and the rows'
/// own meta values), and how many it counts; with `settle`, conjuncts the statistics prove
/// are not tested.
fn selected(src: &Source, rf: &RowFilter, settle: bool) -> (Vec<u32>, usize) {
    let st = source::stats(src).unwrap();
    let settled = if settle { rf.settled(&st, "t") } else { 0 };
    let names: Vec<&str> = rf.columns.iter().map(String::as_str).collect();
    let cols = source::load(src, &names).unwrap();
    let refs: Vec<&Col> = cols.iter().collect();
    let own = source::load(src, &[META_COLUMN]).unwrap().pop();
    let rows = st.count as usize;
    (
        rf.select(st.meta, own.as_ref(), &refs, rows, settled),
        rf.count(st.meta, own.as_ref(), &refs, rows, settled),
    )
}

fn check(verdict: Verdict, hits: usize, rows: usize, what: &str) -> Result<(), TestCaseError> {
    match verdict {
        Verdict::None => prop_assert_eq!(hits, 0, "{} judged None", what),
        Verdict::All => prop_assert_eq!(hits, rows, "{} judged All", what),
        Verdict::Some => {}
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn verdicts_are_sound((class, spec) in rows(), f in filter()) {
        let filter = Filter::parse(&f).unwrap();
        let plan = Plan::new(filter.clone(), "t", Some("m"));
        let bs = buckets(class, &spec);
        let fs = Arc::new(MemFs::new());
        let path = Path::new("/s.seg");
        let info = SegmentHeaderInfo { collection_id: 1, time_field: "t".into() };
        let refs: Vec<&BucketData> = bs.iter().collect();
        write_segment(fs.as_ref(), path, &info, &refs).unwrap();
        let seg = Arc::new(Segment::open(fs.as_ref(), path).unwrap());
        let rf = RowFilter::new(&filter, Some("m"));
        for (i, b) in bs.iter().enumerate() {
            let docs: Vec<Document> = (0..b.count as usize)
                .map(|r| row_document(b, r, Some("m")).unwrap())
                .collect();
            let hits: Vec<bool> = docs.iter().map(|d| filter.matches(d)).collect();
            let n = hits.iter().filter(|&&h| h).count();
            let what = format!("{f} over {docs:?} (min {}, max {})", b.min, b.max);
            let mem = |x: &str| dense_in_memory(b, x);
            let stats = BucketStats::new(b.meta.as_ref(), &b.min, &b.max, b.count);
            check(plan.verdict(&stats.with_dense(&mem)), n, docs.len(), &what)?;
            let s = &seg.buckets()[i];
            let on_disk = |x: &str| seg.column_in_every_row(i, x);
            for x in ["t", "x", "y", "z"] {
                prop_assert_eq!(on_disk(x), mem(x), "dense {}", x);
            }
            let ms = |d: &Document| d.get_datetime("t").unwrap().timestamp_millis();
            let ctl = seg.control(i).unwrap();
            prop_assert_eq!(s.time_range(), (ms(&ctl.min), ms(&ctl.max)));
            let stats = BucketStats::of_segment(&seg, i, s);
            check(plan.verdict(&stats.with_dense(&on_disk)), n, docs.len(), &what)?;
            // The rows the column-wise evaluator selects, from the segment and from memory,
            // testing every conjunct or taking those the statistics settle as held.
            let want: Vec<u32> = (0..hits.len() as u32).filter(|&r| hits[r as usize]).collect();
            let closed = Arc::new(MemBucket::closed(Arc::new(b.clone())));
            let open = Arc::new(MemBucket::open(OpenCopy::of_values(b.clone())));
            for src in [Source::Seg(&seg, i as u32), Source::Mem(&closed), Source::Mem(&open)] {
                for settle in [false, true] {
                    let (got, counted) = selected(&src, &rf, settle);
                    prop_assert_eq!(&got, &want, "{} (settled: {})", what, settle);
                    prop_assert_eq!(counted, want.len(), "count of {}", what);
                }
            }
        }
    }
}

#[test]
fn verdicts_decide_buckets_in_practice() {
    // The property above holds trivially for a planner that always says Some: check that
    // common filters over a dense numeric bucket are decided.
    let spec: Vec<RowSpec> = (0..10)
        .map(|i| (i * 100, Some((0, 2 + i % 3)), Some(i), false))
        .collect();
    let b = &buckets(0, &spec)[0];
    let dense = |x: &str| dense_in_memory(b, x);
    let judge = |f: Document| {
        let plan = Plan::new(Filter::parse(&f).unwrap(), "t", Some("m"));
        plan.verdict(&BucketStats::new(b.meta.as_ref(), &b.min, &b.max, b.count).with_dense(&dense))
    };
    assert_eq!(judge(doc! {"x": {"$gt": 4}}), Verdict::None);
    assert_eq!(judge(doc! {"x": {"$gte": 2}}), Verdict::All);
    assert_eq!(judge(doc! {"x": {"$in": [0, 1, 7]}}), Verdict::None);
    assert_eq!(
        judge(doc! {"x": {"$exists": true}, "m.h": "a"}),
        Verdict::All
    );
    assert_eq!(judge(doc! {"x": 3}), Verdict::Some);
    assert_eq!(
        judge(doc! {"$or": [{"x": {"$lt": 3}}, {"x": {"$gte": 3}}]}),
        Verdict::Some
    );
    assert_eq!(
        judge(doc! {"$or": [{"x": {"$lt": 0}}, {"y": {"$gte": 0}}]}),
        Verdict::All
    );
    assert_eq!(judge(doc! {"z": {"$exists": true}}), Verdict::None);
}
