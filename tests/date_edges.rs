//! Reads of measurements at the edges of the BSON date range: the earliest and latest dates,
//! either side of 1970, and either side of the 32-bit seconds an ObjectId's time prefix holds.
//! Bucket starts, `_id` ranges and time bounds are derived from times by arithmetic that must
//! neither overflow nor wrap there.

use tsbucket::bson::{doc, Bson, DateTime, Document};
use tsbucket::{Database, Granularity, TimeseriesOptions};

fn at(ms: i64) -> DateTime {
    DateTime::from_millis(ms)
}

/// One measurement at `i64::MIN + 1` ms: found by equality in an open bucket, once flushed
/// and after a reopen, with and without a meta field.
#[test]
fn a_measurement_just_after_the_earliest_date_is_found_by_equality() {
    let t = at(-9_223_372_036_854_775_807);
    for meta in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let opts = match meta {
            false => TimeseriesOptions::new("t"),
            true => TimeseriesOptions::new("t").meta_field("m"),
        };
        {
            let db = Database::open(dir.path()).unwrap();
            let c = db.create_collection("c", opts).unwrap();
            let mut d = doc! {"t": t, "v": 1};
            if meta {
                d.insert("m", "a");
            }
            c.insert_one(&d).unwrap();
            for flush in [false, true] {
                if flush {
                    db.flush().unwrap();
                }
                let e = c.explain(doc! {"t": {"$eq": t}}).unwrap();
                assert_eq!(e.buckets_pruned_by_id, 0, "meta {meta}, flushed {flush}");
                assert_eq!(c.count_documents(doc! {"t": {"$eq": t}}).unwrap(), 1);
                assert_eq!(c.find(doc! {"t": t}).unwrap().count(), 1);
            }
        }
        let db = Database::open(dir.path()).unwrap();
        let c = db.collection("c").unwrap();
        assert_eq!(c.count_documents(doc! {"t": {"$eq": t}}).unwrap(), 1);
    }
}

/// Bounds past either end of the date range select nothing: `$gt` the latest date and `$lt`
/// the earliest were taken as `$gte`/`$lte` of them.
#[test]
fn strict_bounds_past_the_ends_of_the_date_range_match_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let c = db
        .create_collection("c", TimeseriesOptions::new("t"))
        .unwrap();
    c.insert_many(&[
        doc! {"t": at(i64::MIN), "v": 1},
        doc! {"t": at(i64::MAX), "v": 2},
    ])
    .unwrap();
    for flush in [false, true] {
        if flush {
            db.flush().unwrap();
        }
        let n = |f: Document| c.count_documents(f).unwrap();
        assert_eq!(n(doc! {"t": {"$gt": at(i64::MAX)}}), 0);
        assert_eq!(n(doc! {"t": {"$lt": at(i64::MIN)}}), 0);
        assert_eq!(n(doc! {"t": {"$gte": at(i64::MAX)}}), 1);
        assert_eq!(n(doc! {"t": {"$lte": at(i64::MIN)}}), 1);
        assert_eq!(n(doc! {"t": {"$gte": at(i64::MIN)}}), 2);
        assert_eq!(n(doc! {"t": {"$lte": at(i64::MAX)}}), 2);
        let found: Vec<Bson> = c
            .find(doc! {"t": {"$gt": at(i64::MAX)}})
            .unwrap()
            .map(|d| d.unwrap().get("v").cloned().unwrap())
            .collect();
        assert!(found.is_empty());
    }
}

/// Points near the earliest date at granularity hours, whose one-day rounding puts their
/// bucket start below what an `i64` holds, queried by ranges.
#[test]
fn ranges_near_the_earliest_date_at_granularity_hours() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let c = db
        .create_collection(
            "c",
            TimeseriesOptions::new("t").granularity(Granularity::Hours),
        )
        .unwrap();
    let times: Vec<i64> = (0..200).map(|i| i64::MIN + i * 7_919_000).collect();
    let docs: Vec<Document> = times.iter().map(|&ms| doc! {"t": at(ms)}).collect();
    c.insert_many(&docs).unwrap();
    for flush in [false, true] {
        if flush {
            db.flush().unwrap();
        }
        for (k, &lo) in times.iter().enumerate().step_by(17) {
            let hi = times[(k + 40).min(times.len() - 1)];
            let want = times.iter().filter(|&&t| t > lo && t <= hi).count() as u64;
            let f = doc! {"t": {"$gt": at(lo), "$lte": at(hi)}};
            assert_eq!(c.count_documents(f).unwrap(), want, "({lo}, {hi}]");
            assert_eq!(c.count_documents(doc! {"t": at(lo)}).unwrap(), 1, "{lo}");
        }
    }
}

/// `$first` after a descending sort on time visits buckets latest first; the key it sorted
/// them by negated the latest time, which overflows for the earliest date.
#[test]
fn first_and_last_by_time_over_the_earliest_and_latest_dates() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let c = db
        .create_collection("c", TimeseriesOptions::new("t").meta_field("m"))
        .unwrap();
    c.insert_many(&[
        doc! {"t": at(i64::MIN), "m": 1, "v": "earliest"},
        doc! {"t": at(0), "m": 2, "v": "epoch"},
        doc! {"t": at(i64::MAX), "m": 3, "v": "latest"},
    ])
    .unwrap();
    for flush in [false, true] {
        if flush {
            db.flush().unwrap();
        }
        for (dir, first, last) in [(1, "earliest", "latest"), (-1, "latest", "earliest")] {
            let pipeline = vec![
                doc! {"$sort": {"t": dir}},
                doc! {"$group": {"_id": null, "f": {"$first": "$v"}, "l": {"$last": "$v"}}},
            ];
            let out: Vec<Document> = c.aggregate(pipeline).unwrap().map(|d| d.unwrap()).collect();
            assert_eq!(
                out,
                [doc! {"_id": null, "f": first, "l": last}],
                "sort {dir}"
            );
        }
    }
}

mod prop {
    use super::at;
    use proptest::prelude::*;
    use proptest::sample::Index;
    use std::collections::BTreeSet;
    use tsbucket::bson::{doc, Bson, Document};
    use tsbucket::{Collection, Database, Granularity, TimeseriesOptions};

    /// `default` unless `PROPTEST_CASES` says otherwise.
    fn cases(default: u32) -> u32 {
        std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(default)
    }

    /// 2^31 and 2^32 seconds in milliseconds: where a signed or unsigned 32-bit seconds
    /// prefix (an ObjectId's) wraps.
    const S31: i64 = (1 << 31) * 1000;
    const S32: i64 = (1 << 32) * 1000;

    /// Times where arithmetic on dates overflows or wraps, and the milliseconds, rounding
    /// steps and spans either side of them.
    fn edge_ms() -> impl Strategy<Value = i64> {
        let anchor = prop::sample::select(vec![i64::MIN, i64::MAX, 0, S31, -S31, S32, -S32]);
        let step = prop::sample::select(vec![
            0i64,
            1_000,
            60_000,
            3_600_000,
            86_400_000,
            2_592_000_000,
        ]);
        let near = (anchor, -2i64..=2, step, any::<bool>()).prop_map(|(a, d, s, down)| {
            let s = if down { -s } else { s };
            a.saturating_add(s).saturating_add(d)
        });
        prop_oneof![4 => near, 1 => any::<i64>()]
    }

    /// How a collection buckets its measurements.
    #[derive(Debug, Clone)]
    enum Bucketing {
        Preset(Granularity),
        /// `bucketMaxSpanSeconds` = `bucketRoundingSeconds`.
        Custom(u32),
    }

    fn bucketing() -> impl Strategy<Value = Bucketing> {
        prop_oneof![
            prop::sample::select(vec![
                Granularity::Seconds,
                Granularity::Minutes,
                Granularity::Hours
            ])
            .prop_map(Bucketing::Preset),
            prop::sample::select(vec![1u32, 7, 3_600, 31_536_000]).prop_map(Bucketing::Custom),
        ]
    }

    /// A query operand: one of the inserted times (or a millisecond either side), else any
    /// edge time.
    #[derive(Debug, Clone)]
    enum Operand {
        Inserted(Index, i64),
        Edge(i64),
    }

    impl Operand {
        fn ms(&self, times: &[i64]) -> i64 {
            match self {
                Operand::Inserted(i, d) if !times.is_empty() => {
                    times[i.index(times.len())].saturating_add(*d)
                }
                Operand::Inserted(_, d) => *d,
                Operand::Edge(t) => *t,
            }
        }
    }

    fn operand() -> impl Strategy<Value = Operand> {
        prop_oneof![
            (any::<Index>(), -1i64..=1).prop_map(|(i, d)| Operand::Inserted(i, d)),
            edge_ms().prop_map(Operand::Edge),
        ]
    }

    const OPS: [&str; 5] = ["$eq", "$gt", "$gte", "$lt", "$lte"];

    /// A filter on the time field: one comparison, two (a range, possibly empty), or `$in`.
    #[derive(Debug, Clone)]
    enum Query {
        Cmp(usize, Operand),
        Range(usize, Operand, usize, Operand),
        In(Vec<Operand>),
    }

    fn query() -> impl Strategy<Value = Query> {
        prop_oneof![
            (0..OPS.len(), operand()).prop_map(|(o, a)| Query::Cmp(o, a)),
            (1..OPS.len(), operand(), 1..OPS.len(), operand())
                .prop_map(|(o, a, p, b)| Query::Range(o, a, p, b)),
            prop::collection::vec(operand(), 1..4).prop_map(Query::In),
        ]
    }

    fn holds(op: usize, t: i64, x: i64) -> bool {
        match OPS[op] {
            "$eq" => t == x,
            "$gt" => t > x,
            "$gte" => t >= x,
            "$lt" => t < x,
            _ => t <= x,
        }
    }

    impl Query {
        /// The filter, and whether a measurement at `t` matches it.
        fn build(&self, times: &[i64]) -> (Document, Box<dyn Fn(i64) -> bool>) {
            match self {
                Query::Cmp(o, a) => {
                    let (o, x) = (*o, a.ms(times));
                    (
                        doc! {"t": {OPS[o]: at(x)}},
                        Box::new(move |t| holds(o, t, x)),
                    )
                }
                Query::Range(o, a, p, b) => {
                    let (o, x, p, y) = (*o, a.ms(times), *p, b.ms(times));
                    // Two operators on one field; the same operator twice goes in `$and`.
                    let f = if o == p {
                        doc! {"$and": [{"t": {OPS[o]: at(x)}}, {"t": {OPS[p]: at(y)}}]}
                    } else {
                        doc! {"t": {OPS[o]: at(x), OPS[p]: at(y)}}
                    };
                    (f, Box::new(move |t| holds(o, t, x) && holds(p, t, y)))
                }
                Query::In(xs) => {
                    let xs: Vec<i64> = xs.iter().map(|x| x.ms(times)).collect();
                    let list: Vec<Bson> = xs.iter().map(|&x| Bson::DateTime(at(x))).collect();
                    (
                        doc! {"t": {"$in": list}},
                        Box::new(move |t| xs.contains(&t)),
                    )
                }
            }
        }
    }

    fn options(b: &Bucketing, meta: bool) -> TimeseriesOptions {
        let o = TimeseriesOptions::new("t");
        let o = if meta { o.meta_field("m") } else { o };
        match *b {
            Bucketing::Preset(g) => o.granularity(g),
            Bucketing::Custom(s) => o.bucket_span(s, s),
        }
    }

    /// Every query's `count_documents` and `find` against a scan of the first `n` times.
    fn check(
        c: &Collection,
        times: &[i64],
        n: usize,
        queries: &[Query],
        when: &str,
    ) -> Result<(), TestCaseError> {
        for q in queries {
            let (filter, matches) = q.build(times);
            let want: BTreeSet<i32> = (0..n)
                .filter(|&i| matches(times[i]))
                .map(|i| i as i32)
                .collect();
            let count = c.count_documents(filter.clone()).unwrap();
            prop_assert_eq!(count, want.len() as u64, "count {} {}", filter, when);
            let mut got = BTreeSet::new();
            for d in c.find(filter.clone()).unwrap() {
                let d = d.unwrap();
                let id = d.get_i32("_id").unwrap();
                prop_assert_eq!(d.get_datetime("t").unwrap(), &at(times[id as usize]));
                prop_assert!(got.insert(id), "_id {} twice: {} {}", id, filter, when);
            }
            prop_assert_eq!(got, want, "find {} {}", filter, when);
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(cases(48)))]

        /// Times and bounds from the whole date range, edges weighted, checked with the first
        /// `split` measurements flushed and the rest open, all flushed, and after a reopen.
        #[test]
        fn time_bounds_over_the_whole_date_range_match_a_scan(
            b in bucketing(),
            meta in any::<bool>(),
            times in prop::collection::vec(edge_ms(), 1..24),
            split in any::<Index>(),
            queries in prop::collection::vec(query(), 1..10),
        ) {
            let split = split.index(times.len() + 1);
            let docs: Vec<Document> = times
                .iter()
                .enumerate()
                .map(|(i, &t)| {
                    let mut d = doc! {"_id": i as i32, "t": at(t)};
                    if meta {
                        d.insert("m", (i % 2) as i32);
                    }
                    d
                })
                .collect();
            let dir = tempfile::tempdir().unwrap();
            {
                let db = Database::open(dir.path()).unwrap();
                let c = db.create_collection("c", options(&b, meta)).unwrap();
                if split > 0 {
                    c.insert_many(&docs[..split]).unwrap();
                    check(&c, &times, split, &queries, "open")?;
                    db.flush().unwrap();
                }
                if split < docs.len() {
                    c.insert_many(&docs[split..]).unwrap();
                }
                check(&c, &times, times.len(), &queries, "some flushed, some open")?;
                db.flush().unwrap();
                check(&c, &times, times.len(), &queries, "flushed")?;
            }
            let db = Database::open(dir.path()).unwrap();
            let c = db.collection("c").unwrap();
            check(&c, &times, times.len(), &queries, "reopened")?;
        }
    }
}
