//! A brute-force evaluator of aggregation pipelines ($match $project $group $sort $skip
//! $limit $count) over in-memory documents, and the comparison of an engine's answer with it.
//!
//! `$group` follows MongoDB: `_id` is null, a field path (missing groups with null) or an
//! object of expressions (missing fields left out); groups are equal under BSON equality
//! (`1`, `1.0` and `NumberLong(1)` together). `$sum` adds the numbers only, its type the
//! widest seen (int -> long -> double) unless the exact total does not fit it; `$avg` is a
//! double or null; `$min`/`$max` skip null and missing and compare across types in BSON order;
//! `$first`/`$last` take the stream order (missing is null); `$count` counts. `$dateTrunc`
//! bins from 2000-01-01T00:00:00Z, which matters when `binSize > 1`.
//!
//! Double results can be summed in any order, so the model returns them as a marker
//! `{"$approx": value, "$tol": tolerance}` that [`same_results`] accepts within the tolerance.

use super::matcher::matches;
use super::order::{canonical_type, cmp, equal};
use super::project::{cmp_keys, parse_sort, project, sort, sort_keys};
use std::cmp::Ordering;
use tsbucket::bson::{doc, Bson, DateTime, Document};

/// Runs `pipeline` over `docs`.
pub fn eval(pipeline: &[Document], docs: Vec<Document>) -> Vec<Document> {
    pipeline.iter().fold(docs, |d, s| eval_stage(s, d))
}

fn int_arg(v: &Bson) -> i64 {
    match v {
        Bson::Int32(i) => i64::from(*i),
        Bson::Int64(i) => *i,
        Bson::Double(d) => *d as i64,
        other => panic!("expected a number, not {other}"),
    }
}

/// Runs one stage.
pub fn eval_stage(stage: &Document, mut docs: Vec<Document>) -> Vec<Document> {
    let (name, arg) = stage.iter().next().expect("a stage has one field");
    let spec = || match arg {
        Bson::Document(d) => d,
        other => panic!("{name} takes a document, not {other}"),
    };
    match name.as_str() {
        "$match" => docs.into_iter().filter(|d| matches(spec(), d)).collect(),
        "$project" => docs.iter().map(|d| project(spec(), d)).collect(),
        "$sort" => {
            sort(&parse_sort(spec()), &mut docs);
            docs
        }
        "$skip" => docs.into_iter().skip(int_arg(arg) as usize).collect(),
        "$limit" => docs.into_iter().take(int_arg(arg) as usize).collect(),
        "$count" => {
            let Bson::String(field) = arg else {
                panic!("$count takes a field name");
            };
            if docs.is_empty() {
                Vec::new()
            } else {
                vec![doc! {field.clone(): int_or_long(docs.len() as i128)}]
            }
        }
        "$group" => group(spec(), &docs),
        other => panic!("stage {other} is outside the model"),
    }
}

/// The values an aggregation field path reaches: through arrays, the values of their
/// document elements as an array. `None` when missing.
fn field_path(d: &Document, path: &str) -> Option<Bson> {
    let mut parts = path.split('.');
    let first = d.get(parts.next()?)?.clone();
    parts.try_fold(first, |v, p| descend(&v, p))
}

fn descend(v: &Bson, p: &str) -> Option<Bson> {
    match v {
        Bson::Document(d) => d.get(p).cloned(),
        Bson::Array(a) => Some(Bson::Array(
            a.iter().filter_map(|e| descend(e, p)).collect(),
        )),
        _ => None,
    }
}

/// 2000-01-01T00:00:00Z, from which `$dateTrunc` counts bins.
const TRUNC_REFERENCE_MS: i64 = 946_684_800_000;

fn date_trunc(spec: &Document, d: &Document) -> Option<Bson> {
    let date = match expr(spec.get("date").expect("$dateTrunc needs date"), d) {
        Some(Bson::DateTime(t)) => t.timestamp_millis(),
        // A missing or null date gives null.
        None | Some(Bson::Null) => return Some(Bson::Null),
        Some(other) => panic!("$dateTrunc of {other} is outside the model"),
    };
    let unit_ms: i64 = match spec.get_str("unit").expect("$dateTrunc needs unit") {
        "millisecond" => 1,
        "second" => 1_000,
        "minute" => 60_000,
        "hour" => 3_600_000,
        "day" => 86_400_000,
        other => panic!("unit {other} is outside the model"),
    };
    let bin = unit_ms * spec.get("binSize").map_or(1, int_arg);
    let start = TRUNC_REFERENCE_MS + (date - TRUNC_REFERENCE_MS).div_euclid(bin) * bin;
    Some(Bson::DateTime(DateTime::from_millis(start)))
}

/// An aggregation expression: a field path, `$dateTrunc`, an object of expressions, or a
/// literal. `None` is missing.
pub fn expr(e: &Bson, d: &Document) -> Option<Bson> {
    match e {
        Bson::String(s) if s.starts_with('$') => field_path(d, &s[1..]),
        Bson::Document(spec) => match spec.iter().next() {
            Some((k, Bson::Document(args))) if k == "$dateTrunc" => date_trunc(args, d),
            Some((k, _)) if k.starts_with('$') => panic!("operator {k} is outside the model"),
            _ => Some(Bson::Document(
                spec.iter()
                    .filter_map(|(k, x)| expr(x, d).map(|v| (k.clone(), v)))
                    .collect(),
            )),
        },
        literal => Some(literal.clone()),
    }
}

fn int_or_long(n: i128) -> Bson {
    match (i32::try_from(n), i64::try_from(n)) {
        (Ok(i), _) => Bson::Int32(i),
        (_, Ok(l)) => Bson::Int64(l),
        _ => Bson::Double(n as f64),
    }
}

/// A double result that may differ by `tol` when added in another order.
pub fn approx(value: f64, tol: f64) -> Bson {
    Bson::Document(doc! {"$approx": value, "$tol": tol})
}

fn as_approx(v: &Bson) -> Option<(f64, f64)> {
    match v {
        Bson::Document(d) if d.contains_key("$approx") => {
            Some((d.get_f64("$approx").ok()?, d.get_f64("$tol").ok()?))
        }
        _ => None,
    }
}

/// Neumaier's compensated sum: close to exact for the model's values, so the reference is
/// as good as MongoDB's double-double total.
#[derive(Default)]
struct Sum {
    hi: f64,
    lo: f64,
    abs: f64,
}

impl Sum {
    fn add(&mut self, x: f64) {
        let t = self.hi + x;
        if self.hi.abs() >= x.abs() {
            self.lo += (self.hi - t) + x;
        } else {
            self.lo += (x - t) + self.hi;
        }
        self.hi = t;
        self.abs += x.abs();
    }
    fn value(&self) -> f64 {
        self.hi + self.lo
    }
    /// What naive summation in any order may be off by (`n` terms).
    fn tolerance(&self, n: usize) -> f64 {
        4.0 * (n as f64 + 1.0) * f64::EPSILON * self.abs + 1e-300
    }
}

/// `$sum` and `$avg` of `values` (missing as `None`).
fn sum_avg(values: &[Option<Bson>]) -> (Bson, Bson) {
    // 0 int, 1 long, 2 double: the widest numeric type seen.
    let mut widest = 0;
    let mut ints: i128 = 0;
    let mut int_abs = 0.0;
    let mut doubles = Sum::default();
    let mut n = 0usize;
    for v in values.iter().flatten() {
        match v {
            Bson::Int32(i) => {
                ints += i128::from(*i);
                int_abs += f64::from(*i).abs();
            }
            Bson::Int64(i) => {
                ints += i128::from(*i);
                int_abs += (*i as f64).abs();
                widest = widest.max(1);
            }
            Bson::Double(d) => {
                doubles.add(*d);
                widest = 2;
            }
            _ => continue,
        }
        n += 1;
    }
    // The integers' exact total joins the doubles' compensated one.
    let mut total = Sum::default();
    total.add(ints as f64);
    total.add(doubles.hi);
    total.add(doubles.lo);
    total.abs = doubles.abs + int_abs;
    let tol = total.tolerance(n);
    let s = match widest {
        0 if i32::try_from(ints).is_ok() => Bson::Int32(ints as i32),
        0 | 1 if i64::try_from(ints).is_ok() => Bson::Int64(ints as i64),
        _ => approx(total.value(), tol),
    };
    let avg = if n == 0 {
        Bson::Null
    } else {
        approx(total.value() / n as f64, tol / n as f64)
    };
    (s, avg)
}

fn extreme(values: &[Option<Bson>], want: Ordering) -> Bson {
    let mut best: Option<&Bson> = None;
    for v in values.iter().flatten() {
        if matches!(v, Bson::Null | Bson::Undefined) {
            continue;
        }
        // The first of equal values stays.
        if best.is_none_or(|b| cmp(v, b) == want) {
            best = Some(v);
        }
    }
    best.cloned().unwrap_or(Bson::Null)
}

/// The sort and output of a `$top`/`$bottom` argument.
fn top_spec(arg: &Bson) -> (Vec<(String, bool)>, &Bson) {
    let d = arg.as_document().expect("$top takes {sortBy, output}");
    let spec = parse_sort(d.get_document("sortBy").expect("sortBy"));
    (spec, d.get("output").expect("output"))
}

/// `$top`/`$bottom` over rows `[sort keys..., output]` in stream order: the output of the
/// first/last row of a stable sort.
fn top(spec: &[(String, bool)], bottom: bool, rows: &[Option<Bson>]) -> Bson {
    let mut rows: Vec<&Vec<Bson>> = rows
        .iter()
        .filter_map(|r| match r {
            Some(Bson::Array(a)) => Some(a),
            _ => None,
        })
        .collect();
    rows.sort_by(|a, b| cmp_keys(spec, a, b));
    let pick = if bottom { rows.last() } else { rows.first() };
    pick.and_then(|r| r.last()).cloned().unwrap_or(Bson::Null)
}

/// One accumulator over a group's values, in stream order.
fn accumulate(op: &str, values: &[Option<Bson>]) -> Bson {
    match op {
        "$sum" => sum_avg(values).0,
        "$avg" => sum_avg(values).1,
        "$min" => extreme(values, Ordering::Less),
        "$max" => extreme(values, Ordering::Greater),
        "$first" => values.first().cloned().flatten().unwrap_or(Bson::Null),
        "$last" => values.last().cloned().flatten().unwrap_or(Bson::Null),
        "$count" => int_or_long(values.len() as i128),
        other => panic!("accumulator {other} is outside the model"),
    }
}

fn group(spec: &Document, docs: &[Document]) -> Vec<Document> {
    let key_expr = spec.get("_id").expect("$group needs _id");
    let accs: Vec<(&String, &str, &Bson)> = spec
        .iter()
        .filter(|(k, _)| k.as_str() != "_id")
        .map(|(k, v)| match v {
            Bson::Document(d) if d.len() == 1 => {
                let (op, arg) = d.iter().next().expect("one operator");
                (k, op.as_str(), arg)
            }
            other => panic!("accumulator {k} must be {{$op: expr}}, not {other}"),
        })
        .collect();
    // (key, values per accumulator); linear search keeps first-seen order and BSON equality.
    let mut groups: Vec<(Bson, Vec<Vec<Option<Bson>>>)> = Vec::new();
    for d in docs {
        let key = expr(key_expr, d).unwrap_or(Bson::Null);
        let i = match groups
            .iter()
            .position(|(k, _)| canonical_type(k) == canonical_type(&key) && equal(k, &key))
        {
            Some(i) => i,
            None => {
                groups.push((key, vec![Vec::new(); accs.len()]));
                groups.len() - 1
            }
        };
        for (j, (_, op, arg)) in accs.iter().enumerate() {
            // `$count: {}` takes no argument; `$top`/`$bottom` keep [sort keys..., output].
            let v = match *op {
                "$count" => Some(Bson::Null),
                "$top" | "$bottom" => {
                    let (spec, output) = top_spec(arg);
                    let mut row = sort_keys(&spec, d);
                    row.push(expr(output, d).unwrap_or(Bson::Null));
                    Some(Bson::Array(row))
                }
                _ => expr(arg, d),
            };
            groups[i].1[j].push(v);
        }
    }
    groups
        .into_iter()
        .map(|(key, values)| {
            let mut out = doc! {"_id": key};
            for ((name, op, arg), vals) in accs.iter().zip(&values) {
                let v = match *op {
                    "$top" | "$bottom" => top(&top_spec(arg).0, *op == "$bottom", vals),
                    _ => accumulate(op, vals),
                };
                out.insert((*name).clone(), v);
            }
            out
        })
        .collect()
}

fn bytes(v: &Bson) -> Vec<u8> {
    doc! {"": v.clone()}.to_vec().expect("values encode")
}

/// Whether `got` is the model's `want` for field `name`: markers within their tolerance;
/// `_id`, `min_*` and `max_*` (where any of several equal numbers of different types may win)
/// by BSON equality; everything else byte for byte.
fn field_eq(name: &str, got: &Bson, want: &Bson) -> bool {
    if let Some((v, tol)) = as_approx(want) {
        return matches!(got, Bson::Double(g) if (g - v).abs() <= tol);
    }
    if name == "_id" || name.starts_with("min_") || name.starts_with("max_") {
        return canonical_type(got) == canonical_type(want) && equal(got, want);
    }
    bytes(got) == bytes(want)
}

fn doc_eq(got: &Document, want: &Document) -> bool {
    got.len() == want.len()
        && got
            .iter()
            .zip(want)
            .all(|((gk, gv), (wk, wv))| gk == wk && field_eq(gk, gv, wv))
}

fn show(docs: &[Document]) -> String {
    docs.iter().map(|d| format!("\n    {d}")).collect()
}

/// Compares an engine's answer with the model's: in order when the pipeline fixes the order,
/// as multisets otherwise.
pub fn same_results(got: &[Document], want: &[Document], ordered: bool) -> Result<(), String> {
    let ok = if ordered {
        got.len() == want.len() && got.iter().zip(want).all(|(g, w)| doc_eq(g, w))
    } else {
        let mut used = vec![false; want.len()];
        got.len() == want.len()
            && got.iter().all(|g| {
                let hit = (0..want.len()).find(|&i| !used[i] && doc_eq(g, &want[i]));
                hit.map(|i| used[i] = true).is_some()
            })
    };
    if ok {
        return Ok(());
    }
    Err(format!(
        "{} documents returned, {} expected ({})\n  returned:{}\n  expected:{}",
        got.len(),
        want.len(),
        if ordered {
            "in this order"
        } else {
            "in any order"
        },
        show(got),
        show(want)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sum(vals: Vec<Bson>) -> Bson {
        sum_avg(&vals.into_iter().map(Some).collect::<Vec<_>>()).0
    }

    fn accepts(want: &Bson, got: Bson) -> bool {
        field_eq("s", &got, want)
    }

    /// Examples of MongoDB's $sum documentation and server tests.
    #[test]
    fn sum_widens_by_type_and_by_exact_total() {
        use Bson::*;
        assert_eq!(sum(vec![Int32(1), Int32(2)]), Int32(3));
        assert_eq!(sum(vec![Int32(i32::MAX), Int32(1)]), Int64(1 << 31));
        assert_eq!(sum(vec![Int64(1), Int32(2)]), Int64(3));
        assert_eq!(sum(vec![String("a".into()), Null]), Int32(0));
        assert_eq!(sum(vec![Array(vec![Int32(1)])]), Int32(0));
        // Overflow past i64 is a double; an intermediate overflow that comes back is not.
        let big = sum(vec![Int64(i64::MAX), Int64(1)]);
        assert!(accepts(&big, Double(9_223_372_036_854_775_808.0)));
        assert!(!accepts(&big, Int64(i64::MIN)));
        assert_eq!(
            sum(vec![Int64(i64::MAX), Int64(1), Int64(-1)]),
            Int64(i64::MAX)
        );
        let mixed = sum(vec![Int32(1), Double(0.5)]);
        assert!(accepts(&mixed, Double(1.5)));
        assert!(!accepts(&mixed, Int32(1)));
        // Large doubles that cancel: any summation order is within the tolerance.
        let c = sum(vec![Double(1e300), Int32(1), Double(-1e300)]);
        assert!(accepts(&c, Double(0.0)) && accepts(&c, Double(1.0)));
    }

    #[test]
    fn accumulators_follow_mongodb() {
        let d = |v: Bson| doc! {"_id": 0, "v": v};
        let docs = vec![
            d(Bson::Int32(3)),
            doc! {"_id": 1},
            d(Bson::Null),
            d(Bson::String("a".into())),
            d(Bson::Double(1.0)),
        ];
        let out = eval(
            &[
                doc! {"$group": {"_id": null, "avg_0": {"$avg": "$v"}, "min_1": {"$min": "$v"},
                "max_2": {"$max": "$v"}, "first_3": {"$first": "$v"}, "last_4": {"$last": "$v"},
                "n": {"$count": {}}, "last_5": {"$last": "$nope"}}},
            ],
            docs,
        );
        assert_eq!(out.len(), 1);
        let g = &out[0];
        assert!(field_eq(
            "avg_0",
            &Bson::Double(2.0),
            g.get("avg_0").unwrap()
        ));
        assert_eq!(g.get("min_1"), Some(&Bson::Double(1.0)));
        assert_eq!(g.get("max_2"), Some(&Bson::String("a".into())));
        assert_eq!(g.get("first_3"), Some(&Bson::Int32(3)));
        assert_eq!(g.get("last_4"), Some(&Bson::Double(1.0)));
        assert_eq!(g.get("n"), Some(&Bson::Int32(5)));
        assert_eq!(g.get("last_5"), Some(&Bson::Null));
    }

    #[test]
    fn group_keys_follow_mongodb() {
        let docs = vec![
            doc! {"_id": 0, "k": 1},
            doc! {"_id": 1, "k": 1.0},
            doc! {"_id": 2, "k": Bson::Int64(1)},
            doc! {"_id": 3},
            doc! {"_id": 4, "k": null},
            doc! {"_id": 5, "k": {"a": 1, "b": 2}},
            doc! {"_id": 6, "k": {"b": 2, "a": 1}},
        ];
        let out = eval(
            &[doc! {"$group": {"_id": "$k", "n": {"$count": {}}}}],
            docs.clone(),
        );
        let counts: Vec<(String, i32)> = out
            .iter()
            .map(|g| (g.get("_id").unwrap().to_string(), g.get_i32("n").unwrap()))
            .collect();
        assert_eq!(counts.len(), 4, "{counts:?}");
        assert_eq!(counts[0].1, 3);
        assert_eq!(counts[1], ("null".to_string(), 2));
        // Missing fields of an object key are left out.
        let out = eval(
            &[doc! {"$group": {"_id": {"a": "$nope", "k": "$k.a"}}}],
            docs,
        );
        assert!(out
            .iter()
            .any(|g| g.get_document("_id").unwrap().is_empty()));
        assert!(out
            .iter()
            .any(|g| g.get_document("_id").unwrap() == &doc! {"k": 1}));
    }

    #[test]
    fn date_trunc_bins_from_2000() {
        let at = |s: &str| DateTime::parse_rfc3339_str(s).unwrap();
        let d = doc! {"t": at("2021-03-20T11:30:05Z")};
        let trunc = |unit: &str, bin: i32| {
            expr(
                &Bson::Document(doc! {"$dateTrunc": {"date": "$t", "unit": unit, "binSize": bin}}),
                &d,
            )
            .unwrap()
        };
        assert_eq!(trunc("hour", 1), Bson::DateTime(at("2021-03-20T11:00:00Z")));
        assert_eq!(trunc("hour", 2), Bson::DateTime(at("2021-03-20T10:00:00Z")));
        assert_eq!(
            trunc("minute", 15),
            Bson::DateTime(at("2021-03-20T11:30:00Z"))
        );
        let d = doc! {"t": at("2000-01-09T00:00:00Z")};
        let week = expr(
            &Bson::Document(doc! {"$dateTrunc": {"date": "$t", "unit": "day", "binSize": 7}}),
            &d,
        );
        assert_eq!(week, Some(Bson::DateTime(at("2000-01-08T00:00:00Z"))));
        let d = doc! {"t": DateTime::from_millis(-1)};
        let before = expr(
            &Bson::Document(doc! {"$dateTrunc": {"date": "$t", "unit": "second"}}),
            &d,
        );
        assert_eq!(before, Some(Bson::DateTime(DateTime::from_millis(-1000))));
    }

    #[test]
    fn count_of_nothing_is_no_document() {
        assert!(eval(&[doc! {"$count": "n"}], Vec::new()).is_empty());
        assert_eq!(
            eval(&[doc! {"$count": "n"}], vec![doc! {}, doc! {}]),
            vec![doc! {"n": 2}]
        );
    }
}
