//! Random filters from the grammar the engine supports, and random find options.

use super::data::{string, Ctx, Val, FIELDS, NEAR_2106, NEAR_EPOCH, TIME_RANGE};
use super::matcher::lookup;
use proptest::prelude::*;
use std::fmt;
use tsbucket::bson::{doc, Bson, Document};
use tsbucket::FindOptions;

/// Paths filters and options use: the time field, the meta field and its subfields, every
/// measurement field, a subfield of the embedded document, array positions, `_id`, and a
/// field nobody has.
pub const PATHS: [&str; 16] = [
    "t", "m", "m.a", "m.b", "m.c", "x", "y", "z", "s", "e", "e.a", "arr", "arr.0", "arr.1", "_id",
    "nope",
];

/// A query operator.
#[derive(Clone, Debug)]
pub enum Op {
    Eq(Val),
    Ne(Val),
    Gt(Val),
    Gte(Val),
    Lt(Val),
    Lte(Val),
    In(Vec<Val>),
    Nin(Vec<Val>),
    Exists(bool),
    Not(Vec<Op>),
}

/// The condition on one path.
#[derive(Clone, Debug)]
pub enum Cond {
    /// `{path: value}`
    Implicit(Val),
    /// `{path: {$op: .., ..}}`
    Ops(Vec<Op>),
}

/// One entry of a filter document.
#[derive(Clone)]
pub enum Clause {
    Field(&'static str, Cond),
    And(Vec<Vec<Clause>>),
    Or(Vec<Vec<Clause>>),
    Nor(Vec<Vec<Clause>>),
}

impl fmt::Debug for Clause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Clause::Field(p, c) => write!(f, "{p}: {c:?}"),
            Clause::And(v) => write!(f, "$and: {v:?}"),
            Clause::Or(v) => write!(f, "$or: {v:?}"),
            Clause::Nor(v) => write!(f, "$nor: {v:?}"),
        }
    }
}

/// A time operand: anywhere in the data's range, or on a bucket boundary.
pub fn time() -> BoxedStrategy<u32> {
    prop_oneof![
        3 => 0..TIME_RANGE + 200,
        1 => (0..=TIME_RANGE / 1000).prop_map(|k| k * 1000),
        1 => (0..=TIME_RANGE / 250).prop_map(|k| k * 250),
        1 => (0..TIME_RANGE).prop_map(|t| NEAR_EPOCH + t),
        1 => (0..TIME_RANGE).prop_map(|t| NEAR_2106 + t),
    ]
    .boxed()
}

fn operand(path: &'static str) -> BoxedStrategy<Val> {
    prop_oneof![3 => literal(path), 2 => any::<u16>().prop_map(Val::Pick)].boxed()
}

fn literal(path: &'static str) -> BoxedStrategy<Val> {
    use super::data::{field_value, meta_value, number, scalar};
    match path {
        "t" => prop_oneof![
            8 => time().prop_map(Val::Date),
            1 => number(),
            1 => string(),
            1 => Just(Val::Null),
        ]
        .boxed(),
        "_id" => prop_oneof![
            4 => (0u16..220).prop_map(Val::Oid),
            1 => (1000u16..1003).prop_map(Val::Oid),
            1 => scalar(),
        ]
        .boxed(),
        "m" => prop_oneof![
            3 => meta_value().prop_map(|m| m.unwrap_or(Val::Null)),
            1 => scalar(),
        ]
        .boxed(),
        "m.a" | "m.b" | "m.c" => prop_oneof![
            4 => (0i32..3).prop_map(Val::I32),
            1 => (0i64..3).prop_map(Val::I64),
            1 => prop::sample::select(vec![0.0, 1.0, 1.5, 2.0]).prop_map(Val::F64),
            2 => prop::sample::select(vec!["h1", "h2", "h"]).prop_map(Val::Str),
            1 => scalar(),
        ]
        .boxed(),
        "e.a" | "nope" | "_id.a" | "arr.0" | "arr.1" => scalar(),
        "_id.t" => time().prop_map(Val::Date).boxed(),
        "n" => prop_oneof![3 => (0i32..6).prop_map(Val::I32), 1 => number()].boxed(),
        p => {
            let i = FIELDS
                .iter()
                .position(|f| *f == p)
                .expect("a measurement field");
            prop_oneof![3 => field_value(i), 1 => scalar()].boxed()
        }
    }
}

fn op(path: &'static str, allow_not: bool) -> BoxedStrategy<Op> {
    let v = operand(path);
    let list = prop::collection::vec(operand(path), 0..=3);
    let base = prop_oneof![
        3 => v.clone().prop_map(Op::Eq),
        2 => v.clone().prop_map(Op::Ne),
        2 => v.clone().prop_map(Op::Gt),
        2 => v.clone().prop_map(Op::Gte),
        2 => v.clone().prop_map(Op::Lt),
        2 => v.prop_map(Op::Lte),
        2 => list.clone().prop_map(Op::In),
        1 => list.prop_map(Op::Nin),
        1 => any::<bool>().prop_map(Op::Exists),
    ];
    if allow_not {
        prop_oneof![
            8 => base,
            1 => prop::collection::vec(op(path, false), 1..=2).prop_map(Op::Not),
        ]
        .boxed()
    } else {
        base.boxed()
    }
}

/// Mostly one operator; two on one path make a range or a contradiction.
fn ops(path: &'static str) -> BoxedStrategy<Cond> {
    prop_oneof![
        3 => op(path, true).prop_map(|o| Cond::Ops(vec![o])),
        1 => prop::collection::vec(op(path, true), 2..=2).prop_map(Cond::Ops),
    ]
    .boxed()
}

fn field_clause() -> BoxedStrategy<Clause> {
    field_clause_on(PATHS.to_vec())
}

/// A predicate on one of `paths`.
pub fn field_clause_on(paths: Vec<&'static str>) -> BoxedStrategy<Clause> {
    prop::sample::select(paths)
        .prop_flat_map(|p| {
            let cond = prop_oneof![
                1 => operand(p).prop_map(Cond::Implicit),
                2 => ops(p),
            ];
            (Just(p), cond)
        })
        .prop_map(|(p, c)| Clause::Field(p, c))
        .boxed()
}

/// One filter entry, possibly a logical operator over sub-filters (two levels at most).
pub fn clause() -> BoxedStrategy<Clause> {
    clause_at(2)
}

fn clause_at(depth: u32) -> BoxedStrategy<Clause> {
    if depth == 0 {
        return field_clause();
    }
    let sub = prop_oneof![
        3 => prop::collection::vec(clause_at(depth - 1), 1..=1),
        1 => prop::collection::vec(clause_at(depth - 1), 2..=2),
    ];
    let list = prop::collection::vec(sub, 1..=3);
    prop_oneof![
        8 => field_clause(),
        1 => list.clone().prop_map(Clause::And),
        2 => list.clone().prop_map(Clause::Or),
        1 => list.prop_map(Clause::Nor),
    ]
    .boxed()
}

/// A whole filter: mostly one or two entries (later duplicates of a key replace earlier ones).
pub fn filter() -> BoxedStrategy<Vec<Clause>> {
    prop_oneof![
        1 => Just(Vec::new()),
        6 => prop::collection::vec(clause(), 1..=1),
        3 => prop::collection::vec(clause(), 2..=3),
    ]
    .boxed()
}

/// Turns operands into BSON: literals through the context, picks from the documents.
pub struct Operands<'a> {
    pub ctx: &'a Ctx,
    /// The documents inserted so far.
    pub docs: &'a [Document],
}

impl Operands<'_> {
    /// Operand `v` of a predicate on `path`.
    pub fn bson(&self, path: &str, v: &Val) -> Bson {
        let Val::Pick(n) = v else {
            return self.ctx.bson(v);
        };
        if self.docs.is_empty() {
            return Bson::Null;
        }
        let d = &self.docs[usize::from(*n) % self.docs.len()];
        match lookup(d, path).first() {
            // Odd picks take an element of an array, so element matching is exercised too.
            Some(Bson::Array(a)) if n % 2 == 1 && !a.is_empty() => {
                a[usize::from(*n / 2) % a.len()].clone()
            }
            Some(v) => (*v).clone(),
            None => Bson::Null,
        }
    }

    fn op_entry(&self, path: &str, o: &Op) -> (&'static str, Bson) {
        let list = |vs: &[Val]| Bson::Array(vs.iter().map(|v| self.bson(path, v)).collect());
        match o {
            Op::Eq(v) => ("$eq", self.bson(path, v)),
            Op::Ne(v) => ("$ne", self.bson(path, v)),
            Op::Gt(v) => ("$gt", self.bson(path, v)),
            Op::Gte(v) => ("$gte", self.bson(path, v)),
            Op::Lt(v) => ("$lt", self.bson(path, v)),
            Op::Lte(v) => ("$lte", self.bson(path, v)),
            Op::In(vs) => ("$in", list(vs)),
            Op::Nin(vs) => ("$nin", list(vs)),
            Op::Exists(b) => ("$exists", Bson::Boolean(*b)),
            Op::Not(ops) => ("$not", Bson::Document(self.ops_doc(path, ops))),
        }
    }

    fn ops_doc(&self, path: &str, ops: &[Op]) -> Document {
        let mut d = Document::new();
        for o in ops {
            let (k, v) = self.op_entry(path, o);
            d.insert(k, v);
        }
        d
    }

    /// The filter document.
    pub fn filter(&self, clauses: &[Clause]) -> Document {
        filter_doc(self, clauses)
    }
}

fn filter_doc(ops: &Operands<'_>, clauses: &[Clause]) -> Document {
    let mut d = Document::new();
    for c in clauses {
        let list = |fs: &[Vec<Clause>]| {
            Bson::Array(
                fs.iter()
                    .map(|f| Bson::Document(filter_doc(ops, f)))
                    .collect(),
            )
        };
        match c {
            Clause::Field(p, Cond::Implicit(v)) => {
                let v = ops.bson(p, v);
                // An operand document whose first field starts with '$' would read as
                // operators; an explicit $eq keeps it an equality.
                let dollar = |x: &Document| x.keys().next().is_some_and(|k| k.starts_with('$'));
                if matches!(&v, Bson::Document(x) if dollar(x)) {
                    d.insert(*p, doc! {"$eq": v});
                } else {
                    d.insert(*p, v);
                }
            }
            Clause::Field(p, Cond::Ops(o)) => {
                d.insert(*p, Bson::Document(ops.ops_doc(p, o)));
            }
            Clause::And(fs) => {
                d.insert("$and", list(fs));
            }
            Clause::Or(fs) => {
                d.insert("$or", list(fs));
            }
            Clause::Nor(fs) => {
                d.insert("$nor", list(fs));
            }
        }
    }
    d
}

/// Find options in abstract form.
#[derive(Clone, Default)]
pub struct Find {
    /// Projected paths and whether they are included (all the same) .
    pub projection: Vec<&'static str>,
    pub include: bool,
    /// `_id: 0/1` in the projection.
    pub id: Option<bool>,
    /// Sort keys (path, ascending).
    pub sort: Vec<(&'static str, bool)>,
    /// `_id` as the last sort key, which makes the order total.
    pub tiebreak: bool,
    pub skip: Option<u64>,
    pub limit: Option<i64>,
}

/// Groups of paths a projection may name: at most one per group, since MongoDB refuses a path
/// and its parent together.
const PROJECTION_GROUPS: [&[&str]; 8] = [
    &["x"],
    &["y"],
    &["t"],
    &["s"],
    &["m", "m.a", "m.b"],
    &["e", "e.a"],
    &["arr"],
    &["nope"],
];

const SORT_PATHS: [&str; 9] = ["t", "x", "y", "z", "m", "m.a", "s", "e", "arr"];

/// A projection: paths (at most one per group), inclusion or exclusion, and `_id: 0/1`.
pub fn projection() -> BoxedStrategy<(Vec<&'static str>, bool, Option<bool>)> {
    let paths =
        prop::collection::vec((0..PROJECTION_GROUPS.len(), 0usize..3), 0..=3).prop_map(|picks| {
            let mut seen = Vec::new();
            let mut out = Vec::new();
            for (g, c) in picks {
                if !seen.contains(&g) {
                    seen.push(g);
                    let group = PROJECTION_GROUPS[g];
                    out.push(group[c % group.len()]);
                }
            }
            out
        });
    (
        paths,
        any::<bool>(),
        prop::option::weighted(0.3, any::<bool>()),
    )
        .boxed()
}

/// Random find options.
pub fn find() -> BoxedStrategy<Find> {
    let sort = prop::collection::vec(
        (prop::sample::select(SORT_PATHS.to_vec()), any::<bool>()),
        0..=2,
    )
    .prop_map(|keys| {
        let mut out: Vec<(&'static str, bool)> = Vec::new();
        for (p, asc) in keys {
            let clash = |q: &str| {
                q == p || q.starts_with(&format!("{p}.")) || p.starts_with(&format!("{q}."))
            };
            if !out.iter().any(|(q, _)| clash(q)) {
                out.push((p, asc));
            }
        }
        out
    });
    (
        projection(),
        sort,
        any::<bool>(),
        prop::option::weighted(0.4, 0u64..12),
        prop::option::weighted(0.4, -4i64..12),
    )
        .prop_map(
            |((projection, include, id), sort, tiebreak, skip, limit)| Find {
                projection,
                include,
                id,
                sort,
                tiebreak,
                skip,
                limit,
            },
        )
        .boxed()
}

impl Find {
    /// The projection document, if any.
    pub fn projection_doc(&self) -> Option<Document> {
        if self.projection.is_empty() && self.id.is_none() {
            return None;
        }
        let mut d = Document::new();
        if let Some(id) = self.id {
            d.insert("_id", i32::from(id));
        }
        for p in &self.projection {
            d.insert(*p, i32::from(self.include));
        }
        Some(d)
    }

    /// The sort document, if any.
    pub fn sort_doc(&self) -> Option<Document> {
        let mut d = Document::new();
        for (p, asc) in &self.sort {
            d.insert(*p, if *asc { 1 } else { -1 });
        }
        if self.tiebreak {
            d.insert("_id", 1);
        }
        (!d.is_empty()).then_some(d)
    }

    /// The engine's options.
    pub fn options(&self) -> FindOptions {
        FindOptions {
            projection: self.projection_doc(),
            sort: self.sort_doc(),
            skip: self.skip,
            limit: self.limit,
        }
    }
}

impl fmt::Debug for Find {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let show = |d: Option<Document>| d.map_or("-".to_string(), |d| d.to_string());
        write!(
            f,
            "projection {} sort {} skip {:?} limit {:?}",
            show(self.projection_doc()),
            show(self.sort_doc()),
            self.skip,
            self.limit
        )
    }
}

/// A filter and find options to try it with.
#[derive(Clone)]
pub struct Query {
    pub filter: Vec<Clause>,
    pub find: Find,
}

impl fmt::Debug for Query {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "filter {:?}, {:?}", self.filter, self.find)
    }
}

/// A random query.
pub fn query() -> BoxedStrategy<Query> {
    (filter(), find())
        .prop_map(|(filter, find)| Query { filter, find })
        .boxed()
}
