//! Filters and pipelines derived from fuzz input, built from the operators the engine knows
//! and the fixture's field names, so most inputs parse and reach evaluation.

use super::fixture::{FIELDS, T0};
use super::values;
use super::Input;
use tsbucket::bson::{Bson, DateTime, Document};

/// A value to compare a field with: usually one of the fixture's kinds of values.
fn operand(inp: &mut Input<'_>) -> Bson {
    match inp.u8() % 8 {
        0 => Bson::DateTime(DateTime::from_millis(
            T0 + i64::from(inp.u32() as i32) * 100,
        )),
        1 => Bson::Int32(i32::from(inp.u8() as i8)),
        2 => Bson::Double(values::double(inp, 0.0)),
        3 => Bson::String(["x", "y", "zz", "eu", "us", ""][inp.below(6)].into()),
        4 => Bson::Int64(values::int64(inp, 0)),
        5 => Bson::Null,
        _ => values::any(inp, 1),
    }
}

fn field(inp: &mut Input<'_>) -> String {
    if inp.one_in(8) {
        values::key(inp)
    } else {
        FIELDS[inp.below(FIELDS.len())].to_string()
    }
}

fn predicate(inp: &mut Input<'_>, depth: u8) -> Bson {
    let mut d = Document::new();
    for _ in 0..1 + inp.below(2) {
        match inp.u8() % 11 {
            0 => d.insert("$eq", operand(inp)),
            1 => d.insert("$ne", operand(inp)),
            2 => d.insert("$gt", operand(inp)),
            3 => d.insert("$gte", operand(inp)),
            4 => d.insert("$lt", operand(inp)),
            5 => d.insert("$lte", operand(inp)),
            6 | 7 => {
                let n = inp.below(4);
                let list: Vec<Bson> = (0..n).map(|_| operand(inp)).collect();
                d.insert(if inp.one_in(2) { "$in" } else { "$nin" }, list)
            }
            8 => d.insert("$exists", inp.one_in(2)),
            9 if depth > 0 => d.insert("$not", predicate(inp, depth - 1)),
            _ => d.insert(values::key(inp), operand(inp)),
        };
    }
    Bson::Document(d)
}

/// A filter document.
pub fn filter(inp: &mut Input<'_>, depth: u8) -> Document {
    let mut d = Document::new();
    for _ in 0..inp.below(3) {
        match inp.u8() % 8 {
            0..=2 => {
                let f = field(inp);
                d.insert(f, predicate(inp, 2))
            }
            3 => {
                let f = field(inp);
                d.insert(f, operand(inp))
            }
            4 if depth > 0 => {
                let n = inp.below(3);
                let list: Vec<Bson> = (0..n)
                    .map(|_| Bson::Document(filter(inp, depth - 1)))
                    .collect();
                d.insert(["$and", "$or", "$nor"][inp.below(3)], list)
            }
            5 => d.insert("$comment", "c"),
            _ => {
                let k = values::key(inp);
                d.insert(k, values::any(inp, 1))
            }
        };
    }
    d
}

/// An expression: a field path, a constant, or one of the operators the engine evaluates.
fn expr(inp: &mut Input<'_>, depth: u8) -> Bson {
    match inp.u8() % 6 {
        0 | 1 => Bson::String(format!("${}", field(inp))),
        2 => operand(inp),
        3 => {
            let mut d = Document::new();
            d.insert("$literal", operand(inp));
            Bson::Document(d)
        }
        4 if depth > 0 => {
            let mut a = Document::new();
            a.insert("date", expr(inp, depth - 1));
            let units = [
                "millisecond",
                "second",
                "minute",
                "hour",
                "day",
                "week",
                "month",
                "quarter",
                "year",
                "fortnight",
            ];
            a.insert("unit", units[inp.below(units.len())]);
            if inp.one_in(2) {
                a.insert("binSize", operand(inp));
            }
            if inp.one_in(4) {
                a.insert(
                    "timezone",
                    ["UTC", "+02:00", "Europe/Paris", "bad"][inp.below(4)],
                );
            }
            if inp.one_in(4) {
                a.insert("startOfWeek", ["monday", "sun", "x"][inp.below(3)]);
            }
            let mut d = Document::new();
            d.insert("$dateTrunc", a);
            Bson::Document(d)
        }
        _ => values::any(inp, 1),
    }
}

fn group(inp: &mut Input<'_>) -> Document {
    let mut g = Document::new();
    let id = match inp.u8() % 4 {
        0 => Bson::Null,
        1 => expr(inp, 2),
        _ => {
            let mut d = Document::new();
            for _ in 0..1 + inp.below(3) {
                let k = values::key(inp);
                d.insert(k, expr(inp, 2));
            }
            Bson::Document(d)
        }
    };
    g.insert("_id", id);
    for _ in 0..inp.below(4) {
        let ops = [
            "$sum", "$avg", "$min", "$max", "$first", "$last", "$count", "$push",
        ];
        let op = ops[inp.below(ops.len())];
        let arg = if op == "$count" && !inp.one_in(4) {
            Bson::Document(Document::new())
        } else {
            expr(inp, 1)
        };
        let mut acc = Document::new();
        acc.insert(op, arg);
        let name = values::key(inp);
        g.insert(name, acc);
    }
    g
}

fn projection(inp: &mut Input<'_>) -> Document {
    let mut p = Document::new();
    for _ in 0..1 + inp.below(3) {
        let f = field(inp);
        let v = match inp.u8() % 4 {
            0 => Bson::Int32(0),
            1 => Bson::Int32(1),
            2 => Bson::Boolean(true),
            _ => expr(inp, 1),
        };
        p.insert(f, v);
    }
    p
}

/// A pipeline of up to four stages.
pub fn pipeline(inp: &mut Input<'_>) -> Vec<Document> {
    (0..1 + inp.below(4))
        .map(|_| {
            let mut st = Document::new();
            match inp.u8() % 10 {
                0 | 1 => st.insert("$match", filter(inp, 2)),
                2 | 3 => st.insert("$group", group(inp)),
                4 => st.insert("$project", projection(inp)),
                5 => {
                    let mut s = Document::new();
                    for _ in 0..1 + inp.below(2) {
                        let f = field(inp);
                        s.insert(f, if inp.one_in(2) { 1 } else { -1 });
                    }
                    st.insert("$sort", s)
                }
                6 => st.insert("$limit", operand(inp)),
                7 => st.insert("$skip", operand(inp)),
                8 => st.insert("$count", values::key(inp)),
                _ => {
                    let name = ["$unwind", "$bucket", "$lookup", "$set", "$bogus"][inp.below(5)];
                    st.insert(name, values::any(inp, 2))
                }
            };
            st
        })
        .collect()
}
