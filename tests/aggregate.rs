//! `Collection::aggregate` through the public API: the workload queries against brute-force
//! answers computed from the generated documents, the columnar path against the document path
//! on random data, each stage and accumulator, and malformed pipelines.
//!
//! Data sits in three places in every test: flushed segments, open buckets written before a
//! reopen (rebuilt from the log), and open buckets written after it.

mod common;
use common::load_split;
use std::cmp::Ordering;
use std::collections::BTreeMap;
use tsbucket::bson::{doc, Bson, DateTime, Document};
use tsbucket::order::cmp_bson;
use tsbucket::segment::Segment;
use tsbucket::vfs::RealFs;
use tsbucket::{Collection, Database, DbOptions, FindOptions, Result, TimeseriesOptions};
use tsbucket_workload::devops::FIELDS;
use tsbucket_workload::queries::{
    devops_host, devops_hour_window, devops_queries, devops_scan_query, seed004_queries,
};
use tsbucket_workload::rng::Rng;
use tsbucket_workload::{Devops, Seed004};

/// [`load_split`] into a fresh directory, time field `t` and meta field `m`.
fn load_tm(docs: &[Document]) -> (tempfile::TempDir, Database, Collection) {
    let dir = tempfile::tempdir().unwrap();
    let (db, c) = load_split(
        dir.path(),
        TimeseriesOptions::new("t").meta_field("m"),
        docs,
    );
    (dir, db, c)
}

fn run(c: &Collection, p: &[Document]) -> Vec<Document> {
    c.aggregate(p.to_vec())
        .unwrap()
        .collect::<Result<Vec<_>>>()
        .unwrap()
}

fn run_unpacked(c: &Collection, p: &[Document]) -> Vec<Document> {
    c.aggregate_unpacked(p.to_vec())
        .unwrap()
        .collect::<Result<Vec<_>>>()
        .unwrap()
}

fn ms(v: &Bson) -> i64 {
    match v {
        Bson::DateTime(t) => t.timestamp_millis(),
        other => panic!("not a date: {other}"),
    }
}

fn date(t: i64) -> Bson {
    Bson::DateTime(DateTime::from_millis(t))
}

fn by_id(docs: Vec<Document>) -> BTreeMap<String, Document> {
    docs.into_iter()
        .map(|d| (format!("{:?}", d.get("_id")), d))
        .collect()
}

fn close(a: f64, b: f64) -> bool {
    a == b || (a - b).abs() <= 1e-9 * a.abs().max(b.abs()) || (a.is_nan() && b.is_nan())
}

fn devops_check(float: bool) {
    let cfg = Devops {
        hosts: 12,
        hours: 2.5,
        float,
        ..Devops::default()
    };
    let docs: Vec<Document> = cfg.generate().collect();
    let dir = tempfile::tempdir().unwrap();
    let (_db, c) = load_split(
        dir.path(),
        TimeseriesOptions::new("time").meta_field("tags"),
        &docs,
    );
    let host = devops_host(&cfg);
    let hostname = |d: &Document| {
        d.get_document("tags")
            .unwrap()
            .get_str("hostname")
            .unwrap()
            .to_string()
    };
    let t = |d: &Document| ms(d.get("time").unwrap());
    let num = |d: &Document, f: &str| match d.get(f).unwrap() {
        Bson::Int64(x) => *x as f64,
        Bson::Double(x) => *x,
        other => panic!("{other}"),
    };
    let queries: BTreeMap<&str, Vec<Document>> = devops_queries(&cfg).into_iter().collect();
    let start = cfg.start_ms;

    // cpu-max-all-1: max of every field per hour for one host.
    let mut want: BTreeMap<i64, Document> = BTreeMap::new();
    for d in docs
        .iter()
        .filter(|d| hostname(d) == host && t(d) < start + 8 * 3_600_000)
    {
        let hour = t(d) - t(d).rem_euclid(3_600_000);
        let e = want.entry(hour).or_insert_with(|| {
            let mut e = doc! {"_id": date(hour)};
            for f in FIELDS {
                e.insert(format!("max_{f}"), d.get(f).unwrap().clone());
            }
            e
        });
        for f in FIELDS {
            let k = format!("max_{f}");
            if cmp_bson(d.get(f).unwrap(), e.get(&k).unwrap()) == Ordering::Greater {
                e.insert(k, d.get(f).unwrap().clone());
            }
        }
    }
    let got = run(&c, &queries["cpu-max-all-1"]);
    assert_eq!(got, want.into_values().collect::<Vec<_>>());
    let ex = c
        .explain_aggregate(queries["cpu-max-all-1"].clone())
        .unwrap();
    assert!(ex.buckets_from_stats > 0, "{ex:?}");

    // double-groupby-1: avg(usage_user) per host and hour.
    let mut sums: BTreeMap<(String, i64), (f64, u64)> = BTreeMap::new();
    for d in &docs {
        let e = sums
            .entry((hostname(d), t(d) - t(d).rem_euclid(3_600_000)))
            .or_default();
        e.0 += num(d, "usage_user");
        e.1 += 1;
    }
    let got = run(&c, &queries["double-groupby-1"]);
    assert_eq!(got.len(), sums.len());
    for g in got {
        let id = g.get_document("_id").unwrap();
        let key = (
            id.get_str("host").unwrap().to_string(),
            ms(id.get("hour").unwrap()),
        );
        let (s, n) = sums[&key];
        assert!(
            close(g.get_f64("avg_usage_user").unwrap(), s / n as f64),
            "{g}"
        );
    }

    // high-cpu-all: rows with usage_user > 90.
    let n = docs.iter().filter(|d| num(d, "usage_user") > 90.0).count();
    let got = run(&c, &queries["high-cpu-all"]);
    let want = if n == 0 {
        vec![]
    } else {
        vec![doc! {"n": n as i32}]
    };
    assert_eq!(got, want);
    let ex = c
        .explain_aggregate(queries["high-cpu-all"].clone())
        .unwrap();
    assert!(ex.buckets_pruned_by_stats > 0, "{ex:?}");

    // lastpoint: the latest row of each host.
    let mut last: BTreeMap<String, &Document> = BTreeMap::new();
    for d in &docs {
        let e = last.entry(hostname(d)).or_insert(d);
        if t(d) >= t(e) {
            *e = d;
        }
    }
    let got = by_id(run(&c, &queries["lastpoint"]));
    assert_eq!(got.len(), last.len());
    for (h, d) in &last {
        let mut w = doc! {"_id": h.as_str(), "time": d.get("time").unwrap().clone()};
        for f in FIELDS {
            w.insert(f, d.get(f).unwrap().clone());
        }
        assert_eq!(got[&format!("{:?}", Some(&Bson::String(h.clone())))], w);
    }
    let ex = c.explain_aggregate(queries["lastpoint"].clone()).unwrap();
    assert!(
        ex.buckets_pruned_by_stats > 0,
        "older buckets are skipped: {ex:?}"
    );

    // single-groupby-1-1-1: max(usage_user) per minute for one host over an hour.
    let (lo, hi) = devops_hour_window(&cfg);
    let mut want: BTreeMap<i64, Bson> = BTreeMap::new();
    for d in docs
        .iter()
        .filter(|d| hostname(d) == host && t(d) >= lo && t(d) < hi)
    {
        let v = d.get("usage_user").unwrap();
        let e = want
            .entry(t(d) - t(d).rem_euclid(60_000))
            .or_insert(v.clone());
        if cmp_bson(v, e) == Ordering::Greater {
            *e = v.clone();
        }
    }
    let want: Vec<Document> = want
        .into_iter()
        .map(|(m, v)| doc! {"_id": date(m), "max_usage_user": v})
        .collect();
    assert_eq!(run(&c, &queries["single-groupby-1-1-1"]), want);

    // The scan query: usage_user summed per minute over every host.
    let mut per_minute: BTreeMap<i64, f64> = BTreeMap::new();
    for d in &docs {
        *per_minute
            .entry(t(d) - t(d).rem_euclid(60_000))
            .or_default() += num(d, "usage_user");
    }
    let (scan_name, scan) = devops_scan_query();
    let got = run(&c, &scan);
    assert_eq!(got.len(), per_minute.len(), "{scan_name}");
    for (g, (m, s)) in got.iter().zip(&per_minute) {
        assert_eq!(ms(g.get("_id").unwrap()), *m, "{g}");
        let v = match g.get("s").unwrap() {
            Bson::Int64(x) => *x as f64,
            Bson::Double(x) => *x,
            other => panic!("{other}"),
        };
        assert!(close(v, *s), "{g}: want {s}");
    }

    for (name, p) in devops_queries(&cfg)
        .into_iter()
        .chain([devops_scan_query()])
    {
        same_answers(&run(&c, &p), &run_unpacked(&c, &p), name);
    }
}

#[test]
fn devops_queries_match_brute_force() {
    devops_check(false);
}

#[test]
fn devops_float_queries_match_brute_force() {
    devops_check(true);
}

#[test]
fn seed004_queries_match_brute_force() {
    let cfg = Seed004 {
        scale: 0.002,
        seed: 7,
    };
    let docs: Vec<Document> = cfg.generate().collect();
    let dir = tempfile::tempdir().unwrap();
    let (_db, c) = load_split(
        dir.path(),
        TimeseriesOptions::new("timestamp").meta_field("dims"),
        &docs,
    );
    let queries: BTreeMap<&str, Vec<Document>> = seed004_queries().into_iter().collect();
    let t = |d: &Document| ms(d.get("timestamp").unwrap());

    let mut counts: BTreeMap<i64, i32> = BTreeMap::new();
    for d in &docs {
        *counts.entry(t(d) - t(d).rem_euclid(60_000)).or_default() += 1;
    }
    let want: Vec<Document> = counts
        .into_iter()
        .map(|(p, n)| doc! {"_id": date(p), "count": n})
        .collect();
    assert_eq!(run(&c, &queries["count-per-period"]), want);
    let ex = c
        .explain_aggregate(queries["count-per-period"].clone())
        .unwrap();
    assert!(ex.buckets_from_stats > 0, "{ex:?}");

    let mut sums: BTreeMap<(i64, String), i64> = BTreeMap::new();
    for d in &docs {
        let dims = d.get_document("dims").unwrap();
        if dims.get_str("vAppid").unwrap().is_empty() {
            continue;
        }
        let key = (
            t(d) - t(d).rem_euclid(60_000),
            dims.get_str("vCmdid").unwrap().to_string(),
        );
        *sums.entry(key).or_default() += i64::from(d.get_i32("totalCount").unwrap());
    }
    let got = run(&c, &queries["sum-per-period-cmd"]);
    assert_eq!(got.len(), sums.len());
    for g in got {
        let id = g.get_document("_id").unwrap();
        let key = (
            ms(id.get("period").unwrap()),
            id.get_str("cmd").unwrap().to_string(),
        );
        let want = sums[&key];
        let want = i32::try_from(want).map_or(Bson::Int64(want), Bson::Int32);
        assert_eq!(g.get("total"), Some(&want), "{g}");
    }
    for (name, p) in seed004_queries() {
        same_answers(&run(&c, &p), &run_unpacked(&c, &p), name);
    }
}

/// Equal values, where doubles may differ in the last bits (sums taken in another order) and,
/// under `loose`, numbers of different types may stand for each other (`$min`/`$max` keep the
/// first of equal values seen, and a bucket's statistics saw its rows in arrival order).
fn same_value(a: &Bson, b: &Bson, loose: bool) -> bool {
    match (a, b) {
        (Bson::Double(x), Bson::Double(y)) => close(*x, *y),
        (Bson::Document(x), Bson::Document(y)) => {
            x.len() == y.len()
                && x.iter().zip(y).all(|((ka, va), (kb, vb))| {
                    let loose = loose || ka.starts_with("min") || ka.starts_with("max");
                    ka == kb && same_value(va, vb, loose)
                })
        }
        (Bson::Array(x), Bson::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| same_value(p, q, loose))
        }
        _ if loose => cmp_bson(a, b) == Ordering::Equal,
        _ => a == b,
    }
}

fn same_answers(fast: &[Document], slow: &[Document], what: &str) {
    let sorted = |v: &[Document]| {
        let mut v = v.to_vec();
        v.sort_by(|a, b| cmp_bson(&Bson::Document(a.clone()), &Bson::Document(b.clone())));
        v
    };
    let (f, s) = (sorted(fast), sorted(slow));
    assert_eq!(f.len(), s.len(), "{what}: {f:?}\nvs\n{s:?}");
    for (a, b) in f.iter().zip(&s) {
        assert!(
            same_value(
                &Bson::Document(a.clone()),
                &Bson::Document(b.clone()),
                false
            ),
            "{what}:\n{a}\nvs\n{b}"
        );
    }
}

const BASE: i64 = 1_700_000_000_000;

/// Random measurements: five series with document meta values (sometimes written with their
/// fields in another order, sometimes absent), numbers of mixed types, missing fields,
/// strings, NaN, and times out of order.
fn random_docs(rng: &mut Rng, n: usize, grid_ms: i64) -> Vec<Document> {
    (0..n)
        .map(|i| {
            let s = rng.below(5) as i32;
            // Half the times on a grid, so that rows of a series share times (often, with
            // a coarse grid).
            let t = if rng.below(2) == 0 {
                BASE + rng.below(6 * 3_600_000 / grid_ms as u64) as i64 * grid_ms
            } else {
                BASE + rng.below(6 * 3_600_000) as i64
            };
            let mut d = doc! {"t": date(t)};
            match rng.below(10) {
                0 => {}
                1 => {
                    d.insert("m", doc! {"z": s % 2, "h": format!("h{s}")});
                }
                _ => {
                    d.insert("m", doc! {"h": format!("h{s}"), "z": s % 2});
                }
            }
            let small = rng.below(20) as i64 - 5;
            match rng.below(6) {
                0 => {}
                1 => {
                    d.insert("a", Bson::Int64(small));
                }
                2 => {
                    d.insert("a", Bson::Double(small as f64 + 0.25));
                }
                3 if i % 97 == 0 => {
                    d.insert("a", Bson::Double(f64::NAN));
                }
                _ => {
                    d.insert("a", Bson::Int32(small as i32));
                }
            }
            d.insert("c", Bson::Int64(rng.below(1000) as i64));
            if rng.below(3) == 0 {
                d.insert("b", format!("s{}", rng.below(4)));
            }
            if rng.below(4) == 0 {
                d.insert("x", Bson::Double((rng.below(1000) as f64) / 7.0));
            }
            d
        })
        .collect()
}

/// A filter for the `$top` pipelines: none, or a time window.
fn f_top(dir: i32) -> Document {
    if dir > 0 {
        doc! {}
    } else {
        doc! {"t": {"$gte": date(BASE + 1_234_567)}}
    }
}

fn random_pipelines() -> Vec<Vec<Document>> {
    let trunc =
        |unit: &str, bin: i32| doc! {"$dateTrunc": {"date": "$t", "unit": unit, "binSize": bin}};
    let accs = doc! {
        "_id": "$m.h",
        "n": {"$count": {}},
        "sa": {"$sum": "$a"}, "sc": {"$sum": "$c"}, "sx": {"$sum": "$x"}, "sb": {"$sum": "$b"},
        "aa": {"$avg": "$a"}, "ax": {"$avg": "$x"}, "ab": {"$avg": "$b"},
        "mina": {"$min": "$a"}, "maxa": {"$max": "$a"}, "minb": {"$min": "$b"}, "maxt": {"$max": "$t"},
        "mint": {"$min": "$t"},
        "fa": {"$first": "$a"}, "la": {"$last": "$a"}, "ft": {"$first": "$t"}, "lb": {"$last": "$b"},
        "k": {"$sum": 2.5}, "fm": {"$first": "$m.z"}, "sz": {"$sum": "$m.z"},
    };
    let window = doc! {"$gte": date(BASE + 1_234_567), "$lt": date(BASE + 4 * 3_600_000 + 77)};
    let with_key = |key: Bson| {
        let mut g = accs.clone();
        g.insert("_id", key);
        vec![doc! {"$group": g}]
    };
    // Filters that read the meta value of rows that carry their own (the meta field in the
    // other order), and `$or`s tested row by row, before groups on the columnar path.
    let counted = |f: Document, key: Bson| {
        vec![
            doc! {"$match": f},
            doc! {"$group": {"_id": key, "n": {"$count": {}}, "sc": {"$sum": "$c"}}},
        ]
    };
    let mut ps = vec![
        counted(doc! {"m": {"z": 1, "h": "h1"}}, Bson::Null),
        counted(
            doc! {"m": {"h": "h1", "z": 1}},
            Bson::Document(trunc("hour", 1)),
        ),
        counted(
            doc! {"$or": [{"m": {"z": 1, "h": "h3"}}, {"a": {"$gt": 10}}]},
            Bson::Document(trunc("hour", 2)),
        ),
        counted(
            doc! {"$or": [{"m.h": "h2"}, {"b": "s1"}]},
            Bson::String("$b".into()),
        ),
        counted(doc! {"$nor": [{"m.z": 1}, {"x": {"$lt": 50}}]}, Bson::Null),
        with_key(Bson::String("$m.h".into())),
        with_key(Bson::Null),
        with_key(Bson::String("$m".into())),
        with_key(Bson::Document(doc! {"h": "$m.h", "t": trunc("hour", 1)})),
        with_key(Bson::Document(trunc("minute", 7))),
        with_key(Bson::Document(
            doc! {"z": "$m.z", "d": trunc("day", 1), "w": trunc("week", 1)},
        )),
        with_key(Bson::String("$t".into())),
    ];
    for f in [
        doc! {"t": window.clone()},
        doc! {"a": {"$gt": 3}},
        doc! {"a": {"$lte": 2.5}, "m.h": "h2"},
        doc! {"m.z": 1, "t": window.clone()},
        doc! {"$or": [{"a": 1}, {"b": "s1"}]},
        doc! {"b": {"$exists": false}, "c": {"$in": [1, 2, 3, 500]}},
        doc! {"x": {"$ne": 3.0}},
    ] {
        let mut g = accs.clone();
        g.insert(
            "_id",
            Bson::Document(doc! {"h": "$m.h", "t": trunc("hour", 2)}),
        );
        ps.push(vec![doc! {"$match": f.clone()}, doc! {"$group": g}]);
        ps.push(vec![doc! {"$match": f}, doc! {"$count": "n"}]);
    }
    for dir in [1, -1] {
        for f in [doc! {}, doc! {"t": window.clone()}, doc! {"a": {"$gt": 0}}] {
            ps.push(vec![
                doc! {"$match": f},
                doc! {"$sort": {"t": dir}},
                doc! {"$group": {
                    "_id": "$m.h",
                    "ft": {"$first": "$t"}, "lt": {"$last": "$t"},
                    "fa": {"$first": "$a"}, "la": {"$last": "$a"}, "lc": {"$last": "$c"},
                    "fz": {"$first": "$m.z"}, "one": {"$last": 1},
                }},
            ]);
            ps.push(vec![
                doc! {"$sort": {"t": dir}},
                doc! {"$group": {
                    "_id": {"h": "$m.h", "t": trunc("hour", 1)},
                    "fa": {"$first": "$a"}, "la": {"$last": "$a"}, "lc": {"$last": "$c"},
                }},
            ]);
            // `$top`/`$bottom` by time (the last point in MongoDB's newer form), alone and
            // after a sort, and by other keys (ties, arrays of mixed types).
            let tops = |by: Document| {
                doc! {"$group": {
                    "_id": "$m.h",
                    "ta": {"$top": {"sortBy": by.clone(), "output": "$a"}},
                    "bc": {"$bottom": {"sortBy": by.clone(), "output": "$c"}},
                    "tt": {"$top": {"sortBy": by.clone(), "output": ["$t", "$b"]}},
                    "n": {"$count": {}}, "mx": {"$max": "$c"},
                }}
            };
            ps.push(vec![doc! {"$match": f_top(dir)}, tops(doc! {"t": dir})]);
            ps.push(vec![
                doc! {"$sort": {"m.h": 1, "t": -dir}},
                tops(doc! {"t": dir}),
            ]);
            ps.push(vec![tops(doc! {"a": dir})]);
            // Only `$top`/`$bottom`: a bucket whose first sort value cannot beat what its
            // group holds is passed over, by its bounds (rows without the field sort as null).
            for by in [doc! {"a": dir}, doc! {"c": dir, "t": 1}, doc! {"b": -dir}] {
                ps.push(vec![
                    doc! {"$match": f_top(dir)},
                    doc! {"$group": {
                        "_id": "$m.h",
                        "ta": {"$top": {"sortBy": by.clone(), "output": "$c"}},
                        "bt": {"$bottom": {"sortBy": by.clone(), "output": ["$t", "$a"]}},
                    }},
                ]);
            }
            ps.push(vec![tops(doc! {"b": dir, "t": -dir})]);
            ps.push(vec![doc! {"$sort": {"c": dir}}, tops(doc! {"m.z": dir})]);
        }
    }
    // Keys and arguments that read measurement fields, found and evaluated row by row on the
    // decoded columns: numbers of three types that compare equal are one group, a missing
    // key is null, and NaN is one group.
    ps.push(with_key(Bson::String("$a".into())));
    ps.push(with_key(Bson::Document(doc! {"b": "$b", "h": "$m.h"})));
    ps.push(with_key(Bson::Document(
        doc! {"a": "$a", "t": trunc("hour", 1)},
    )));
    // Keys read row by row whose arguments have one value per bucket: each group's rows are
    // counted, and the arguments fed once per group and bucket.
    let consts = |key: Bson| {
        doc! {"$group": {
            "_id": key, "n": {"$count": {}}, "k": {"$sum": 2.5}, "fm": {"$first": "$m.z"},
            "lm": {"$last": "$m.h"}, "am": {"$avg": "$m.z"}, "mm": {"$max": "$m.h"},
        }}
    };
    ps.push(vec![consts(Bson::String("$a".into()))]);
    ps.push(vec![
        doc! {"$match": {"a": {"$gt": 3}}},
        consts(Bson::String("$x".into())),
    ]);
    ps.push(vec![
        doc! {"$match": {"t": window.clone()}},
        consts(Bson::Document(doc! {"b": "$b", "h": "$m.h"})),
    ]);
    ps.push(vec![
        doc! {"$match": {"t": window.clone()}},
        doc! {"$group": {
            "_id": "$b",
            "d": {"$max": {"a": "$a", "c": "$c"}},
            "h": {"$min": trunc("hour", 1)},
            "arr": {"$first": ["$a", "$m.h"]},
        }},
    ]);
    for dir in [1, -1] {
        // A sort on other keys than time before `$first`/`$last`: `$top`/`$bottom` by them.
        ps.push(vec![
            doc! {"$sort": {"a": dir, "m.z": -dir, "t": 1}},
            doc! {"$group": {
                "_id": "$m.h",
                "f": {"$first": "$c"}, "l": {"$last": ["$t", "$b"]}, "n": {"$count": {}},
            }},
        ]);
        ps.push(vec![
            doc! {"$sort": {"a": dir}},
            doc! {"$group": {"_id": "$b", "f": {"$first": "$t"}, "l": {"$last": "$x"}}},
        ]);
        ps.push(vec![
            doc! {"$sort": {"t": dir}},
            doc! {"$group": {
                "_id": "$b",
                "f": {"$first": {"a": "$a"}}, "l": {"$last": "$c"}, "lm": {"$last": "$m.h"},
            }},
        ]);
    }
    // A `$project` of computed fields before a `$group`: folded into it.
    ps.push(vec![
        doc! {"$project": {"h": "$m.h", "v": "$a", "k": "const", "c": 1}},
        doc! {"$group": {
            "_id": {"h": "$h", "k": "$k"},
            "s": {"$sum": "$v"}, "mx": {"$max": "$c"}, "n": {"$count": {}},
        }},
    ]);
    ps.push(vec![
        doc! {"$project": {"_id": 0, "w": "$b", "t": 1}},
        doc! {"$group": {"_id": "$w", "t": {"$max": "$t"}, "i": {"$max": "$_id"}}},
    ]);
    // The engine's bookkeeping columns are not fields of the measurements.
    ps.push(vec![
        doc! {"$match": {"\u{1}seq": {"$gte": 0}}},
        doc! {"$group": {"_id": null, "n": {"$sum": 1}, "s": {"$max": "$\u{1}seq"}}},
    ]);
    ps.push(vec![
        doc! {"$group": {"_id": null, "s": {"$max": "$\u{1}seq"}}},
    ]);
    ps.push(vec![
        doc! {"$group": {"_id": trunc("hour", 1), "s": {"$sum": "$c"}}},
        doc! {"$match": {"s": {"$gt": 0}}},
        doc! {"$sort": {"_id": -1}},
        doc! {"$skip": 1},
        doc! {"$limit": 2},
        doc! {"$project": {"_id": 0, "hour": "$_id", "s": 1}},
    ]);
    ps
}

/// A `$match` after a `$project` that renames the fields it reads, which the rewrite moves
/// before the project under the stored names, or after one that leaves other paths out; and
/// ones it must leave where they are.
fn renamed_matches() -> Vec<Vec<Document>> {
    let count = doc! {"$count": "n"};
    vec![
        vec![
            doc! {"$project": {"_id": 0}},
            doc! {"$match": {"a": {"$gt": 3}}},
            count.clone(),
        ],
        vec![
            doc! {"$project": {"m": 0, "b": 0}},
            doc! {"$match": {"c": {"$lt": 100}}},
        ],
        vec![
            doc! {"$project": {"m.z": 0}},
            doc! {"$match": {"m": {"h": "h1"}}},
            count.clone(),
        ],
        vec![
            doc! {"$project": {"u": "$a", "t": 1, "m": 1}},
            doc! {"$match": {"u": {"$gt": 3}}},
        ],
        vec![
            doc! {"$project": {"u": "$a", "v": "$b"}},
            doc! {"$match": {"$or": [{"u": {"$lt": 0}}, {"v": "s1"}]}},
            count.clone(),
        ],
        vec![
            doc! {"$project": {"u": "$a"}},
            doc! {"$match": {"u": {"$exists": false}}},
            count.clone(),
        ],
        vec![
            doc! {"$project": {"mm": "$m", "c": 1}},
            doc! {"$match": {"mm": {"h": "h1", "z": 1}, "c": {"$lt": 500}}},
        ],
        vec![
            doc! {"$project": {"a": "$c", "c": "$a"}},
            doc! {"$match": {"a": {"$gt": 500}, "c": {"$lt": 0}}},
        ],
        // Not moved: a path below a renamed field, and a field the project drops.
        vec![
            doc! {"$project": {"u": "$m"}},
            doc! {"$match": {"u.h": "h2"}},
            count.clone(),
        ],
        vec![
            doc! {"$project": {"u": "$a"}},
            doc! {"$match": {"c": {"$gt": 1}}},
            count,
        ],
    ]
}

#[test]
fn matches_on_renamed_fields_give_the_document_paths_answers() {
    let mut rng = Rng::new(7);
    let docs = random_docs(&mut rng, 3000, 10_000);
    let (_dir, _db, c) = load_tm(&docs);
    for p in renamed_matches() {
        let what = format!("{p:?}");
        same_answers(&run(&c, &p), &run_unpacked(&c, &p), &what);
    }
    // The rewrite says what it did, and the match reaches bucket selection.
    let ex = c
        .explain_aggregate(vec![
            doc! {"$project": {"u": "$a", "t": 1, "m": 1}},
            doc! {"$match": {"u": {"$gt": 3}}},
        ])
        .unwrap();
    assert!(
        ex.rewrites.iter().any(|r| r.contains("renames")),
        "{:?}",
        ex.rewrites
    );
    assert!(ex.buckets_pruned_by_stats > 0, "{ex:?}");
}

/// A `$match` on fields a `$project` sets from dotted paths (`{h: "$m.h"}`) puts a looser
/// match on the stored paths before the project, and the answers stay those of the pipeline
/// as written, whatever the paths go through: documents, arrays of documents, nested arrays,
/// arrays of scalars, missing fields.
#[test]
fn matches_on_fields_set_from_dotted_paths_give_the_document_paths_answers() {
    let mut rng = Rng::new(11);
    let mut docs = random_docs(&mut rng, 3000, 10_000);
    for (i, d) in docs.iter_mut().enumerate() {
        let k = (i % 7) as i32;
        match i % 6 {
            0 => {}
            1 => {
                d.insert("arr", doc! {"k": k});
            }
            2 => {
                d.insert("arr", vec![doc! {"k": k}, doc! {"k": k + 3}]);
            }
            3 => {
                d.insert(
                    "arr",
                    vec![Bson::Array(vec![Bson::Document(doc! {"k": k})])],
                );
            }
            4 => {
                d.insert("arr", vec![k, k + 1]);
            }
            _ => {
                d.insert("arr", vec![doc! {"j": 1}, doc! {"k": k}]);
            }
        }
    }
    let (_dir, _db, c) = load_tm(&docs);
    let count = doc! {"$count": "n"};
    let project = doc! {"$project": {"h": "$m.h", "v": "$arr.k", "t": 1, "c": 1}};
    let matches = [
        doc! {"h": "h1"},
        doc! {"h": {"$in": ["h1", "h3"]}, "c": {"$lt": 500}},
        doc! {"v": 3},
        doc! {"v": {"$gt": 4}},
        doc! {"v": {"$gte": 2, "$lt": 4}},
        doc! {"v": {"$in": [0, 6]}},
        // Not implied at the stored path: these stay after the project alone.
        doc! {"v": [2, 5]},
        doc! {"v": {"$ne": 3}},
        doc! {"v": {"$exists": true}},
        doc! {"v": null},
        doc! {"h": {"$nin": ["h1"]}},
    ];
    for m in matches {
        for tail in [
            vec![count.clone()],
            vec![doc! {"$sort": {"t": -1}}, doc! {"$limit": 5}],
        ] {
            let mut p = vec![project.clone(), doc! {"$match": m.clone()}];
            p.extend(tail);
            let what = format!("{p:?}");
            same_answers(&run(&c, &p), &run_unpacked(&c, &p), &what);
        }
    }
    // The looser match reaches bucket selection.
    let ex = c
        .explain_aggregate(vec![project.clone(), doc! {"$match": {"h": "h1"}}])
        .unwrap();
    assert!(
        ex.rewrites.iter().any(|r| r.contains("looser")),
        "{:?}",
        ex.rewrites
    );
    assert!(
        ex.buckets_pruned_by_stats + ex.buckets_pruned_by_id > 0,
        "{ex:?}"
    );
}

/// Stages that replace the measurements (`$group`, `$count`, `$project`) after a scan the
/// columnar group path does not take make the scan build only the paths they read, and the
/// answers stay those of the pipeline as written.
#[test]
fn scans_build_only_the_paths_later_stages_read() {
    let mut rng = Rng::new(13);
    let docs = random_docs(&mut rng, 3000, 10_000);
    let (_dir, _db, c) = load_tm(&docs);
    let pipelines = [
        vec![
            doc! {"$sort": {"a": -1}},
            doc! {"$limit": 700},
            doc! {"$count": "n"},
        ],
        vec![
            doc! {"$sort": {"c": 1}},
            doc! {"$skip": 100},
            doc! {"$limit": 50},
            doc! {"$group": {"_id": "$m.h", "n": {"$sum": 1}, "f": {"$first": "$b"}, "x": {"$max": "$x"}}},
        ],
        vec![
            doc! {"$sort": {"x": -1, "t": 1}},
            doc! {"$limit": 40},
            doc! {"$project": {"u": "$a", "t": 1}},
        ],
        vec![
            doc! {"$sort": {"b": 1, "a": -1}},
            doc! {"$limit": 900},
            // After a limit, a match stays where it is and reads its path from the scan.
            doc! {"$match": {"c": {"$gt": 100}}},
            doc! {"$group": {"_id": null, "top": {"$top": {"sortBy": {"x": 1}, "output": "$t"}}}},
        ],
    ];
    for p in pipelines {
        let what = format!("{p:?}");
        same_answers(&run(&c, &p), &run_unpacked(&c, &p), &what);
    }
    let ex = c
        .explain_aggregate(vec![
            doc! {"$sort": {"a": -1}},
            doc! {"$limit": 700},
            doc! {"$count": "n"},
        ])
        .unwrap();
    assert!(
        ex.operators
            .iter()
            .any(|o| o.contains("columns: only") && o.contains("(none)")),
        "{:?}",
        ex.operators
    );
}

/// Tops by sorts the buckets' statistics bound (fields sparse, of mixed types, with NaN; the
/// time; meta paths, with rows of their own meta values) come out as a full sort of every
/// document gives them, ties in the same order.
#[test]
fn tops_come_out_as_a_full_sort_orders_them() {
    for (seed, grid_ms) in [(4u64, 10_000), (5, 600_000)] {
        let mut rng = Rng::new(seed);
        let docs = random_docs(&mut rng, 3000, grid_ms);
        let (_dir, _db, c) = load_tm(&docs);
        let sorts = [
            (doc! {"a": -1}, 0, 7),
            (doc! {"x": 1}, 0, 5),
            (doc! {"b": -1, "c": 1}, 0, 9),
            (doc! {"m.h": 1, "t": -1}, 0, 4),
            (doc! {"m": -1}, 2, 3),
            (doc! {"t": -1, "a": 1}, 0, 6),
            (doc! {"a": 1, "t": 1}, 3, 4),
            (doc! {"c": 1}, 0, 40),
            // Windows past many kept rows: the kept keys are cut several times, and only the
            // rows past the skip are built.
            (doc! {"a": -1, "x": 1}, 1100, 10),
            (doc! {"m.h": -1}, 300, 500),
            (doc! {"b": 1}, 2900, 400),
        ];
        for (k, (sort, skip, limit)) in sorts.into_iter().enumerate() {
            let mut p = vec![
                doc! {"$sort": sort.clone()},
                doc! {"$skip": skip},
                doc! {"$limit": limit},
            ];
            // A projection first, which moves after the sort, skip and limit when it passes
            // the sort's paths.
            match k % 4 {
                1 => p.insert(0, doc! {"$project": {"_id": 0, "b": 0}}),
                2 => p.insert(
                    0,
                    doc! {"$project": {"a": 1, "b": 1, "c": 1, "x": 1, "t": 1, "m": 1}},
                ),
                // Computed fields beside the sort's paths.
                3 => p.insert(
                    0,
                    doc! {"$project": {"a": 1, "b": 1, "c": 1, "x": 1, "t": 1, "m": 1, "h": "$m.h"}},
                ),
                _ => {}
            }
            let (fast, slow) = (run(&c, &p), run_unpacked(&c, &p));
            let what = format!("seed {seed}: {p:?}");
            assert_eq!(fast.len(), slow.len(), "{what}");
            for (a, b) in fast.iter().zip(&slow) {
                let same = same_value(
                    &Bson::Document(a.clone()),
                    &Bson::Document(b.clone()),
                    false,
                );
                assert!(same, "{what}:\n{a}\nvs\n{b}");
            }
        }
    }
}

/// Keys that normalised bytes cannot tell apart exactly (integers past 2^53, decimals) take
/// the top's other way, by the values of documents of the key fields: the same rows, ties in
/// scan order.
#[test]
fn tops_by_keys_past_exact_bytes_come_out_as_a_full_sort_orders_them() {
    let big = 1i64 << 60;
    let docs: Vec<Document> = (0..2000i64)
        .map(|i| {
            let mut d = doc! {"t": date(BASE + i * 7_000), "m": i % 4, "u": i % 13};
            match i % 3 {
                0 => d.insert("d", Bson::Int64(big + (i * 7919) % 50)),
                1 => d.insert("d", Bson::Decimal128("1.5".parse().unwrap())),
                _ => d.insert("d", Bson::Double(i as f64)),
            };
            d
        })
        .collect();
    let (_dir, _db, c) = load_tm(&docs);
    for (sort, skip, limit) in [
        (doc! {"d": -1}, 0, 10),
        (doc! {"d": 1, "u": -1}, 600, 700),
        (doc! {"u": 1, "d": -1}, 5, 30),
    ] {
        let p = vec![
            doc! {"$sort": sort},
            doc! {"$skip": skip},
            doc! {"$limit": limit},
        ];
        // The reference sorts documents: a leading projection keeps the sort from the scan.
        let mut as_docs = p.clone();
        as_docs.insert(0, doc! {"$project": {"t": 1, "m": 1, "d": 1, "u": 1}});
        let want = run_unpacked(&c, &as_docs);
        assert_eq!(want.len() as i64, limit, "{p:?}");
        assert_eq!(run(&c, &p), want, "{p:?}");
    }
}

/// Tops over enough buckets to run on several threads (a stretch of buckets each, the
/// smallest `n`th of any thread barring rows on all of them, the threads' keepers merged) keep
/// the rows a full sort of every document gives, ties in scan order, with one thread or more,
/// and when the memory lets each thread keep only part of the rows.
#[test]
fn tops_on_several_threads_keep_what_a_full_sort_gives() {
    let mut rng = Rng::new(21);
    let mut docs = Vec::new();
    for i in 0..24_000i64 {
        let mut d = doc! {"t": date(BASE + (i / 200) * 60_000 + rng.below(1000) as i64), "m": {"h": i % 200}};
        // Few distinct values, so that most rows tie on a key and their places decide.
        d.insert("a", Bson::Int32(rng.below(7) as i32));
        if rng.below(4) > 0 {
            d.insert("b", Bson::Double((rng.below(50) as f64) / 4.0));
        }
        docs.push(d);
    }
    let dir = tempfile::tempdir().unwrap();
    {
        let (db, c) = load_split(
            dir.path(),
            TimeseriesOptions::new("t").meta_field("m"),
            &docs,
        );
        drop(c);
        db.close().unwrap();
    }
    let sorts = [
        (doc! {"a": -1}, 0, 10),
        (doc! {"a": 1}, 3000, 25),
        (doc! {"b": 1, "a": -1}, 0, 2000),
        (doc! {"b": -1}, 11_000, 7),
        (doc! {"m.h": -1, "t": 1}, 100, 300),
        (doc! {"t": -1, "b": 1}, 0, 40),
        (doc! {"a": 1, "t": -1}, 5000, 20),
    ];
    for (threads, memory) in [(1, None), (2, None), (3, None), (2, Some(100_000))] {
        let opts = DbOptions {
            query_threads: threads,
            sort_memory_limit: memory.unwrap_or(DbOptions::default().sort_memory_limit),
            ..DbOptions::default()
        };
        let db = Database::open_with(dir.path(), opts).unwrap();
        let c = db.collection("c").unwrap();
        for (sort, skip, limit) in &sorts {
            let p = vec![
                doc! {"$sort": sort.clone()},
                doc! {"$skip": *skip},
                doc! {"$limit": *limit},
            ];
            // The reference sorts documents: a leading projection keeps the sort from the scan.
            let mut as_docs = p.clone();
            as_docs.insert(0, doc! {"$project": {"t": 1, "m": 1, "a": 1, "b": 1}});
            let want = run_unpacked(&c, &as_docs);
            assert_eq!(want.len() as i64, *limit, "{p:?}");
            assert_eq!(
                run(&c, &p),
                want,
                "{threads} threads, memory {memory:?}: {p:?}"
            );
        }
        db.close().unwrap();
    }
}

#[test]
fn columnar_path_gives_the_document_paths_answers() {
    for (seed, grid_ms) in [(1u64, 10_000), (2, 1000), (3, 600_000)] {
        let mut rng = Rng::new(seed);
        let docs = random_docs(&mut rng, 3000, grid_ms);
        let (_dir, _db, c) = load_tm(&docs);
        for p in random_pipelines() {
            let what = format!("seed {seed}: {p:?}");
            same_answers(&run(&c, &p), &run_unpacked(&c, &p), &what);
        }
    }
}

/// Enough buckets that the columnar group runs on several threads where the machine has
/// several cores (from 1024 buckets per thread; most series here hold one or two rows, as
/// seed 004's one-offs do): the parts' tables merge into the document path's answer, groups
/// that several parts saw included, and the explain counters still add up.
#[test]
fn groups_over_many_buckets_merge_the_parts() {
    let mut rng = Rng::new(11);
    let mut docs = Vec::new();
    for i in 0..4000i64 {
        for r in 0..1 + rng.below(3) as i64 {
            let t = BASE + (i % 240) * 15_000 + r * 61_000;
            let x = match rng.below(3) {
                0 => Bson::Int32(rng.below(100) as i32),
                1 => Bson::Int64(rng.below(1000) as i64 - 500),
                _ => Bson::Double(rng.f64() * 10.0),
            };
            docs.push(doc! {"t": date(t), "m": {"k": i, "g": i % 7}, "x": x, "y": rng.f64()});
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let (db, c) = load_split(
        dir.path(),
        TimeseriesOptions::new("t").meta_field("m"),
        &docs,
    );
    let minute = doc! {"$dateTrunc": {"date": "$t", "unit": "minute"}};
    let pipelines = [
        vec![doc! {"$group": {"_id": minute.clone(), "n": {"$sum": 1}}}],
        vec![doc! {"$group": {
            "_id": {"p": {"$dateTrunc": {"date": "$t", "unit": "minute", "binSize": 5}}, "g": "$m.g"},
            "s": {"$sum": "$x"}, "a": {"$avg": "$y"}, "min": {"$min": "$x"}, "max": {"$max": "$y"},
        }}],
        vec![
            doc! {"$match": {"m.g": {"$ne": 3}, "x": {"$gte": 10}}},
            doc! {"$group": {"_id": "$m.g", "n": {"$sum": 1}, "s": {"$sum": "$y"}}},
            doc! {"$sort": {"_id": 1}},
        ],
        // A group per series: each stretch of buckets makes groups of its own.
        vec![doc! {"$group": {"_id": "$m.k", "n": {"$sum": 1}, "s": {"$sum": "$x"}}}],
        vec![doc! {"$group": {"_id": "$m.g", "f": {"$first": "$x"}, "l": {"$last": "$x"}}}],
    ];
    for p in &pipelines {
        same_answers(&run(&c, p), &run_unpacked(&c, p), &format!("{p:?}"));
        let ex = c.explain_aggregate(p.clone()).unwrap();
        assert_eq!(
            ex.buckets_examined + ex.buckets_pruned_by_stats + ex.buckets_pruned_by_id,
            ex.buckets_total,
            "{p:?}: {ex:?}"
        );
        assert_eq!(
            ex.buckets_examined,
            ex.buckets_taken_whole + ex.buckets_unpacked,
            "{ex:?}"
        );
    }
    let counted: i32 = run(&c, &pipelines[0])
        .iter()
        .map(|d| d.get_i32("n").unwrap())
        .sum();
    assert_eq!(counted as usize, docs.len());
    // Counting tests the rows of every bucket the statistics leave undecided, a stretch of
    // buckets per thread.
    let want = counted_big(&docs);
    let filter = doc! {"x": {"$gte": 50}};
    assert_eq!(c.count_documents(filter.clone()).unwrap() as usize, want);
    let p = vec![doc! {"$match": filter}, doc! {"$count": "n"}];
    assert_eq!(run(&c, &p), vec![doc! {"n": want as i32}]);
    // One thread, or more threads than cores, give the same answers (`$first`/`$last`
    // without a sort aside: closing flushes the open buckets, which changes arrival order).
    let pipelines = &pipelines[..4];
    let answers: Vec<Vec<Document>> = pipelines.iter().map(|p| run(&c, p)).collect();
    drop(c);
    db.close().unwrap();
    // Threads take stretches of buckets as they come free, yet groups still come out in order
    // of first appearance, whichever thread saw them: as one thread gives them, each time the
    // database opens (the buckets rebuilt from the log included).
    let ids = |d: &[Document]| d.iter().map(|d| d.get("_id").cloned()).collect::<Vec<_>>();
    let mut order: Option<Vec<Vec<Option<Bson>>>> = None;
    for threads in [1, 2, 3] {
        let opts = tsbucket::DbOptions {
            query_threads: threads,
            ..tsbucket::DbOptions::default()
        };
        let db = Database::open_with(dir.path(), opts).unwrap();
        let c = db.collection("c").unwrap();
        let mut seen = Vec::new();
        for (p, want) in pipelines.iter().zip(&answers) {
            let got = run(&c, p);
            same_answers(&got, want, &format!("{threads} threads: {p:?}"));
            seen.push(ids(&got));
        }
        match &order {
            None => order = Some(seen),
            Some(one) => assert_eq!(&seen, one, "{threads} threads"),
        }
        assert_eq!(
            c.count_documents(doc! {"x": {"$gte": 50}}).unwrap() as usize,
            counted_big(&docs)
        );
        db.close().unwrap();
    }
}

fn counted_big(docs: &[Document]) -> usize {
    docs.iter()
        .filter(|d| match d.get("x") {
            Some(Bson::Int32(x)) => *x >= 50,
            Some(Bson::Int64(x)) => *x >= 50,
            Some(Bson::Double(x)) => *x >= 50.0,
            _ => false,
        })
        .count()
}

/// Rows stamped in batches, several per timestamp (the seed-004 shape): flushed time columns
/// are stored as runs of equal times, and a `$group` on time bins that counts, sums constants
/// or reads the meta value is fed a run at a time (or, reading constants only, a bucket within
/// one bin at a time). Bins cut runs, runs span bins, and periods
/// are skipped.
#[test]
fn groups_on_time_bins_over_runs_of_equal_times() {
    let mut rng = Rng::new(11);
    let mut docs = Vec::new();
    for period in 0..400i64 {
        if rng.below(7) == 0 {
            continue;
        }
        // Mostly whole minutes, sometimes 20 s into one.
        let t = BASE + period * 60_000 + if rng.below(5) == 0 { 20_000 } else { 0 };
        for s in 0..3 {
            for _ in 0..rng.below(12 * (s + 1)) {
                let mut d = doc! {"t": date(t), "c": rng.below(100) as i32};
                if s > 0 {
                    d.insert("m", doc! {"h": format!("h{s}"), "z": s as i32});
                }
                docs.push(d);
            }
        }
    }
    let (_dir, _db, c) = load_tm(&docs);
    let trunc =
        |unit: &str, bin: i32| doc! {"$dateTrunc": {"date": "$t", "unit": unit, "binSize": bin}};
    let accs = |id: Bson| {
        doc! {"_id": id, "n": {"$count": {}}, "two": {"$sum": 2}, "half": {"$sum": 0.5},
        "hi": {"$max": "$m.h"}, "first": {"$min": "$m.z"}, "avg": {"$avg": "$m.z"}}
    };
    // Constants only: whole buckets within one bin, and the runs of the others, are counted
    // per group and fed once at the end.
    let counts = |id: Bson| {
        doc! {"_id": id, "n": {"$count": {}}, "two": {"$sum": 2}, "mx": {"$max": "x"},
        "mn": {"$min": 3}, "avg": {"$avg": 4}}
    };
    let mut pipelines = Vec::new();
    let mut ids = vec![
        Bson::Null,
        Bson::String("k".into()),
        Bson::String("$t".into()),
    ];
    for (unit, bin) in [("minute", 1), ("minute", 7), ("second", 45), ("day", 1)] {
        ids.push(Bson::Document(trunc(unit, bin)));
    }
    for id in ids {
        pipelines.push(vec![doc! {"$group": counts(id.clone())}]);
        let mut big = counts(id.clone());
        big.insert("big", doc! {"$sum": 1i64 << 40});
        pipelines.push(vec![doc! {"$group": big}]);
        pipelines.push(vec![
            doc! {"$match": {"t": {"$gte": date(BASE + 3_630_000)}}},
            doc! {"$group": counts(id)},
        ]);
    }
    for (unit, bin) in [("minute", 1), ("minute", 2), ("second", 45), ("hour", 1)] {
        let by_time = Bson::Document(trunc(unit, bin));
        let by_both = Bson::Document(doc! {"t": trunc(unit, bin), "h": "$m.h"});
        for id in [by_time, by_both] {
            pipelines.push(vec![doc! {"$group": accs(id.clone())}]);
            pipelines.push(vec![
                doc! {"$match": {"m.h": "h2"}},
                doc! {"$group": accs(id.clone())},
            ]);
            pipelines.push(vec![
                doc! {"$match": {"t": {"$gte": date(BASE + 3_600_000)}}},
                doc! {"$group": accs(id)},
            ]);
        }
    }
    for p in pipelines {
        same_answers(&run(&c, &p), &run_unpacked(&c, &p), &format!("{p:?}"));
    }
}

/// Rows inserted out of time order, grouped by time bins over a column: the answers do not
/// depend on arrival order, in flushed and in open buckets.
#[test]
fn groups_on_time_bins_over_rows_out_of_time_order() {
    let mut rng = Rng::new(5);
    let docs: Vec<Document> = (0..3000)
        .map(|_| {
            let t = BASE + rng.below(2 * 3_600_000) as i64;
            doc! {"t": date(t), "m": format!("s{}", rng.below(3)), "v": rng.below(1000) as i64}
        })
        .collect();
    let (_dir, _db, c) = load_tm(&docs);
    for unit in ["second", "minute", "hour"] {
        let p = vec![doc! {"$group": {
            "_id": {"$dateTrunc": {"date": "$t", "unit": unit, "binSize": 7}},
            "n": {"$count": {}}, "s": {"$sum": "$v"}, "hi": {"$max": "$v"},
        }}];
        let got = run(&c, &p);
        same_answers(&got, &run_unpacked(&c, &p), &format!("{p:?}"));
        let total: i64 = got.iter().map(|d| d.get_i64("s").unwrap()).sum();
        let want: i64 = docs.iter().map(|d| d.get_i64("v").unwrap()).sum();
        assert_eq!(total, want, "{unit}");
        // Constants only: counted per bin from times that are not stored as runs.
        let p = vec![doc! {"$group": {
            "_id": {"$dateTrunc": {"date": "$t", "unit": unit, "binSize": 7}},
            "n": {"$count": {}}, "two": {"$sum": 2},
        }}];
        let got = run(&c, &p);
        same_answers(&got, &run_unpacked(&c, &p), &format!("{p:?}"));
        let n: i32 = got.iter().map(|d| d.get_i32("n").unwrap()).sum();
        assert_eq!(n as usize, docs.len(), "{unit}");
    }
}

fn small() -> (tempfile::TempDir, Database, Collection) {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let c = db
        .create_collection("s", TimeseriesOptions::new("t").meta_field("m"))
        .unwrap();
    let docs = vec![
        doc! {"t": date(BASE), "m": "a", "v": 1, "w": "x"},
        doc! {"t": date(BASE + 1000), "m": "a", "v": 2_i64},
        doc! {"t": date(BASE + 2000), "m": "b", "v": 2.5, "w": Bson::Null},
        doc! {"t": date(BASE + 3000), "m": "b"},
    ];
    c.insert_many(&docs).unwrap();
    (dir, db, c)
}

#[test]
fn accumulators_follow_mongodb_value_rules() {
    let (_dir, db, c) = small();
    let p = vec![
        doc! {"$group": {
            "_id": "$m",
            "sum": {"$sum": "$v"}, "avg": {"$avg": "$v"}, "min": {"$min": "$w"}, "max": {"$max": "$v"},
            "first": {"$first": "$w"}, "last": {"$last": "$w"}, "n": {"$count": {}}, "none": {"$avg": "$w"},
        }},
        doc! {"$sort": {"_id": 1}},
    ];
    let want = vec![
        doc! {"_id": "a", "sum": 3_i64, "avg": 1.5, "min": "x", "max": 2_i64, "first": "x", "last": null, "n": 2, "none": null},
        doc! {"_id": "b", "sum": 2.5, "avg": 2.5, "min": null, "max": 2.5, "first": null, "last": null, "n": 2, "none": null},
    ];
    assert_eq!(run(&c, &p), want);
    db.flush().unwrap();
    assert_eq!(run(&c, &p), want);
    assert_eq!(run_unpacked(&c, &p), want);
}

#[test]
fn stages_after_group_and_on_measurements() {
    let (_dir, _db, c) = small();
    let out = run(
        &c,
        &[
            doc! {"$project": {"_id": 0, "t": 0}},
            doc! {"$match": {"v": {"$gte": 2}}},
            doc! {"$sort": {"v": -1}},
            doc! {"$skip": 1},
            doc! {"$limit": 5},
        ],
    );
    assert_eq!(out, vec![doc! {"m": "a", "v": 2_i64}]);
    let out = run(
        &c,
        &[
            doc! {"$group": {"_id": {"k": "$m"}, "s": {"$sum": 1}}},
            doc! {"$project": {"_id": 0, "key": "$_id.k", "s": 1}},
            doc! {"$sort": {"key": -1}},
        ],
    );
    assert_eq!(
        out,
        vec![doc! {"s": 2, "key": "b"}, doc! {"s": 2, "key": "a"}]
    );
    assert_eq!(
        run(&c, &[doc! {"$match": {"m": "a"}}, doc! {"$count": "n"}]),
        vec![doc! {"n": 2}]
    );
    assert!(run(&c, &[doc! {"$match": {"m": "zz"}}, doc! {"$count": "n"}]).is_empty());
    assert!(run(
        &c,
        &[
            doc! {"$match": {"v": 99}},
            doc! {"$group": {"_id": null, "n": {"$sum": 1}}}
        ]
    )
    .is_empty());
}

#[test]
fn date_trunc_groups_by_calendar_bins() {
    let (_dir, _db, c) = small();
    let out = run(
        &c,
        &[
            doc! {"$group": {
                "_id": {"$dateTrunc": {"date": "$t", "unit": "second", "binSize": 2, "timezone": "UTC"}},
                "n": {"$count": {}},
            }},
            doc! {"$sort": {"_id": 1}},
        ],
    );
    // Two-second bins count from 2000-01-01; BASE is an even number of seconds after it.
    assert_eq!(
        out,
        vec![
            doc! {"_id": date(BASE), "n": 2},
            doc! {"_id": date(BASE + 2000), "n": 2}
        ]
    );
}

#[test]
fn malformed_pipelines_are_bad_value() {
    let (_dir, _db, c) = small();
    for p in [
        vec![doc! {"$lookup": {"from": "x", "as": "y"}}],
        vec![doc! {"$unwind": "$v"}],
        vec![doc! {"$bucket": {"groupBy": "$v", "boundaries": [0, 1]}}],
        vec![doc! {"$group": {"_id": null, "x": {"$push": "$v"}}}],
        vec![doc! {"$group": {"_id": {"$toUpper": "$m"}}}],
        vec![
            doc! {"$group": {"_id": {"$dateTrunc": {"date": "$t", "unit": "hour", "timezone": "Asia/Tokyo"}}}},
        ],
        vec![doc! {"$project": {"x": {"$add": ["$v", 1]}}}],
        vec![doc! {"$match": {"v": {"$regex": "a"}}}],
        vec![doc! {"$limit": -1}],
        vec![doc! {"$sort": {"v": 1}, "$limit": 1}],
    ] {
        let Err(e) = c.aggregate(p.clone()) else {
            panic!("{p:?} was accepted");
        };
        assert_eq!(e.code(), Some(2), "{p:?}: {e}");
        assert!(c.explain_aggregate(p).is_err());
    }
    // A date that is not a date fails when it is evaluated.
    let bad_date = vec![doc! {"$group": {"_id": {"$dateTrunc": {"date": "$w", "unit": "hour"}}}}];
    let Err(e) = c.aggregate(bad_date) else {
        panic!("a string date was accepted");
    };
    assert_eq!(e.code(), Some(2));
}

/// Pages decompressed for one read are kept for the next (`DbOptions::page_cache_bytes`):
/// answers with the cache, warm or under a budget of about one page, are those without it.
#[test]
fn kept_pages_give_the_answers_of_pages_read_afresh() {
    // Many small buckets repeating long strings: pages that zstd shrinks.
    let msgs: Vec<String> = (0..3)
        .map(|k| format!("{k}: the quick brown fox jumps over the lazy dog again and again"))
        .collect();
    let t0 = 1_700_000_000_000i64;
    let docs: Vec<Document> = (0..3000i64)
        .flat_map(|s| {
            let msgs = &msgs;
            (0..3i64).map(move |r| {
                doc! {
                    "t": DateTime::from_millis(t0 + (s % 50) * 60_000 + r * 7_000),
                    "m": {"series": s},
                    "msg": msgs[((s + r) % 3) as usize].clone(),
                    "v": s * 3 + r,
                }
            })
        })
        .collect();
    let dir = tempfile::tempdir().unwrap();
    {
        let db = Database::open(dir.path()).unwrap();
        let c = db
            .create_collection("c", TimeseriesOptions::new("t").meta_field("m"))
            .unwrap();
        for chunk in docs.chunks(1000) {
            c.insert_many(chunk).unwrap();
        }
        db.flush().unwrap();
        db.close().unwrap();
    }
    let zstd: u64 = std::fs::read_dir(dir.path().join("seg"))
        .unwrap()
        .map(|e| {
            let seg = Segment::open(&RealFs, &e.unwrap().path()).unwrap();
            seg.stats().zstd_page_count
        })
        .sum();
    assert!(zstd > 1, "{zstd} zstd pages");
    let pipelines = [
        vec![
            doc! {"$group": {"_id": {"$dateTrunc": {"date": "$t", "unit": "minute"}}, "s": {"$sum": "$v"}, "n": {"$count": {}}}},
            doc! {"$sort": {"_id": 1}},
        ],
        vec![
            doc! {"$match": {"msg": &msgs[1]}},
            doc! {"$group": {"_id": "$m.series", "hi": {"$max": "$v"}}},
            doc! {"$sort": {"_id": 1}},
        ],
        vec![doc! {"$match": {"v": {"$gt": 4000}}}, doc! {"$count": "n"}],
    ];
    let answers = |budget: usize, rounds: usize| {
        let db = Database::open_with(
            dir.path(),
            DbOptions {
                page_cache_bytes: budget,
                ..DbOptions::default()
            },
        )
        .unwrap();
        let c = db.collection("c").unwrap();
        let mut out = Vec::new();
        for _ in 0..rounds {
            for p in &pipelines {
                out.push(run(&c, p));
            }
            let found = c.find(doc! {"msg": &msgs[2], "v": {"$lt": 600}}).unwrap();
            out.push(found.map(Result::unwrap).collect());
        }
        db.close().unwrap();
        out
    };
    let fresh = answers(0, 1);
    assert!(fresh.iter().all(|a| !a.is_empty()));
    let twice = [fresh.clone(), fresh.clone()].concat();
    assert_eq!(answers(64 << 20, 2), twice);
    assert_eq!(answers(70_000, 2), twice);
}

/// A group on one time bin that reads no meta value feeds whole buckets run by run, reading
/// regular times as a first time and a step: every accumulator over every kind of input,
/// the time field itself included, against the document path.
#[test]
fn groups_on_time_bins_over_regular_times() {
    let mut rng = Rng::new(5);
    let mut docs = Vec::new();
    for s in 0..8i64 {
        // Steps that divide a minute, steps that do not, and one series going back in time
        // (rows are sorted at close; open buckets keep them as inserted). The last two share
        // the first one's minutes, one of them starting within its first minute's first step.
        let step = [
            10_000, 7_000, 60_000, 1_000, 45_000, -13_000, 20_000, 10_000,
        ][s as usize];
        let start = match s {
            6 => BASE + 5_000,
            7 => BASE + 1_800_000,
            _ => BASE + s * 3_600_000 + if step < 0 { 5_000_000 } else { 0 },
        };
        for r in 0..400i64 {
            let mut d = doc! {
                "t": date(start + r * step),
                "m": {"s": s},
                "i": (rng.below(1000) as i64) - 300,
                "f": rng.below(10_000) as f64 / 100.0,
                "n": (rng.below(50) as i32),
                // Near a quarter of the int64 range: four rows of a bin overflow a 64-bit sum.
                "w": i64::MAX / 4 - (rng.below(1000) as i64) * r,
            };
            if s == 3 && r % 5 == 0 {
                d.remove("i");
            }
            docs.push(d);
        }
    }
    let (_dir, _db, c) = load_tm(&docs);
    // With the time field read by an accumulator (the times are decoded) and without.
    let with_times = doc! {
        "si": {"$sum": "$i"}, "sf": {"$sum": "$f"}, "sn": {"$sum": "$n"},
        "ai": {"$avg": "$i"}, "af": {"$avg": "$f"},
        "lo": {"$min": "$i"}, "hi": {"$max": "$f"},
        "t0": {"$min": "$t"}, "t1": {"$max": "$t"},
        "c": {"$count": {}}, "half": {"$sum": 0.5}, "none": {"$sum": "$absent"},
    };
    let mut without = with_times.clone();
    without.remove("t0");
    without.remove("t1");
    // A lone integer sum or average takes the runs of whole bins in one loop where the step
    // divides the bin, and from the second bucket on finds their groups by number alone.
    let lone = [
        doc! {"s": {"$sum": "$i"}},
        doc! {"s": {"$sum": "$n"}},
        doc! {"a": {"$avg": "$n"}},
        doc! {"w": {"$sum": "$w"}},
    ];
    for accs in [with_times, without].into_iter().chain(lone) {
        for (unit, bin) in [("minute", 1), ("minute", 7), ("hour", 1), ("second", 90)] {
            let mut group =
                doc! {"_id": {"$dateTrunc": {"date": "$t", "unit": unit, "binSize": bin}}};
            group.extend(accs.clone());
            let p = vec![doc! {"$group": group}, doc! {"$sort": {"_id": 1}}];
            let what = format!("{unit} x{bin}, {:?}", accs.keys().collect::<Vec<_>>());
            let fast = run(&c, &p);
            assert!(fast.len() > 5, "{what}: {} groups", fast.len());
            // Sums of doubles may round differently: the document path reads buckets in
            // `_id` order, the columnar one in file order.
            same_answers(&fast, &run_unpacked(&c, &p), &what);
        }
    }
}

/// A `$group` past the memory limit for a blocking stage fails with MongoDB's code 292 on
/// both paths, and leaves the database usable; a `$sort` of the same documents spills
/// instead.
#[test]
fn a_group_past_the_memory_limit_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let opts = DbOptions {
        sort_memory_limit: 256 << 10,
        ..DbOptions::default()
    };
    let db = Database::open_with(dir.path(), opts).unwrap();
    let c = db
        .create_collection("c", TimeseriesOptions::new("t").meta_field("m"))
        .unwrap();
    let docs: Vec<Document> = (0..30_000i64)
        .map(|i| doc! {"t": date(BASE + i * 1000), "m": i % 3, "u": i, "s": format!("s{i}")})
        .collect();
    for chunk in docs.chunks(5000) {
        c.insert_many(chunk).unwrap();
    }
    db.flush().unwrap();
    let many = vec![doc! {"$group": {"_id": "$u", "n": {"$sum": 1}}}];
    let refused = |r: Result<Vec<Document>>| match r {
        Err(e) => assert_eq!(e.code(), Some(292), "{e}"),
        Ok(d) => panic!("{} groups within 256 KiB", d.len()),
    };
    refused(c.aggregate(many.clone()).and_then(|c| c.collect()));
    refused(c.aggregate_unpacked(many).and_then(|c| c.collect()));
    // Few groups fit; a sort of every document spills to disk and succeeds.
    let few = run(&c, &[doc! {"$group": {"_id": "$m", "n": {"$sum": 1}}}]);
    assert_eq!(few.len(), 3);
    let sorted = run(&c, &[doc! {"$sort": {"s": -1}}]);
    assert_eq!(sorted.len(), docs.len());
    // A sorted find without a limit sorts the rows as bytes, in runs on disk past the limit:
    // the same order as the pipeline's sort of documents, with a projection that keeps the
    // key's field (applied as rows are written) or not (applied as they come out), and past a
    // skip.
    for (sort, projection, skip) in [
        (doc! {"s": -1, "t": 1}, None, 0),
        (doc! {"m": 1, "s": 1}, Some(doc! {"s": 1, "u": 1}), 0),
        (doc! {"m": -1, "s": 1}, Some(doc! {"u": 1}), 0),
        (doc! {"s": 1}, None, 29_990),
        // Ties, across runs: they keep the scan's order.
        (doc! {"m": -1}, Some(doc! {"u": 1}), 0),
    ] {
        let opts = FindOptions {
            sort: Some(sort.clone()),
            projection: projection.clone(),
            skip: Some(skip),
            ..FindOptions::default()
        };
        let got: Vec<Document> = c
            .find_with(doc! {}, opts)
            .unwrap()
            .collect::<Result<_>>()
            .unwrap();
        let mut p = vec![doc! {"$sort": sort}, doc! {"$skip": skip as i64}];
        if let Some(pr) = projection {
            p.push(doc! {"$project": pr});
        }
        let want = run_unpacked(&c, &p);
        assert_eq!(got.len(), want.len(), "{p:?}");
        assert!(got == want, "{p:?}: the sorted rows differ");
    }
    db.close().unwrap();
}
