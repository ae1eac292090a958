//! Random aggregation pipelines.
//!
//! A pipeline is generated as a list of intents ([`Step`]) and realised against the model's
//! stream stage by stage ([`build`]): an intent that makes no sense where it lands (a `$skip`
//! on an unordered stream, a `$first` after an unordered stage, a sort with no unique key) is
//! turned into its nearest sensible form or dropped. This keeps every pipeline valid and
//! deterministic while proptest shrinks the intent list freely.

use super::data::{Ctx, FIELDS};
use super::filters::{self, field_clause_on, Clause, Operands};
use super::pipeline::eval_stage;
use proptest::prelude::*;
use std::fmt;
use tsbucket::bson::{doc, Bson, Document};

/// `$dateTrunc` units the model knows.
const UNITS: [&str; 4] = ["second", "minute", "hour", "day"];
/// Paths a group key or an accumulator reads.
const INPUTS: [&str; 10] = ["x", "y", "z", "s", "e.a", "arr", "m", "m.a", "t", "nope"];
/// Paths whose values are sometimes arrays.
const ARRAY_PATHS: [&str; 4] = ["x", "y", "z", "arr"];
/// Paths a `$match` after `$group` filters on.
const GROUP_PATHS: [&str; 4] = ["_id", "_id.a", "_id.t", "n"];

/// A `$group` key.
#[derive(Clone, Debug)]
pub enum Key {
    Null,
    Path(&'static str),
    /// `{a: "$path", t: {$dateTrunc: {date: "$t", unit, binSize}}}`, either part optional.
    Object(Option<&'static str>, Option<(&'static str, i32)>),
}

/// An accumulator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Acc {
    Sum,
    /// `{$sum: 1}`
    SumOne,
    Avg,
    Min,
    Max,
    First,
    Last,
    /// `$top` by the input (ascending when the flag is set), then `_id`.
    Top(bool),
    /// `$bottom`, likewise.
    Bottom(bool),
}

/// A step the pipeline means to take.
#[derive(Clone)]
pub enum Step {
    Match(Vec<Clause>),
    /// `$match` on the group fields.
    MatchGroups(Vec<Clause>),
    /// Projection: paths (or, after `$group`, field indexes), inclusion, `_id`.
    Project(Vec<&'static str>, bool, Option<bool>),
    /// Sort by time (or count, after `$group`) then `_id`, or by `_id` alone; on measurements,
    /// `meta_first` puts the meta path `m.a` first (the shape of MongoDB's documented last
    /// point per series, when a `$group` on `m.a` follows); otherwise `field_first` puts a
    /// measurement field of [`FIELDS`] first (a top by a field: sparse, of mixed types, arrays).
    Sort {
        by_time_or_count: bool,
        ascending: bool,
        meta_first: bool,
        field_first: Option<u8>,
    },
    Skip(u8),
    Limit(u8),
    Group {
        key: Key,
        accs: Vec<(Acc, &'static str)>,
        count: bool,
    },
    Count,
}

impl fmt::Debug for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Step::Match(c) => write!(f, "Match {c:?}"),
            Step::MatchGroups(c) => write!(f, "MatchGroups {c:?}"),
            Step::Project(p, inc, id) => write!(f, "Project {p:?} include {inc} _id {id:?}"),
            Step::Sort {
                by_time_or_count,
                ascending,
                meta_first,
                field_first,
            } => {
                write!(
                    f,
                    "Sort by_time_or_count {by_time_or_count} asc {ascending} meta_first \
                     {meta_first} field_first {field_first:?}"
                )
            }
            Step::Skip(n) => write!(f, "Skip {n}"),
            Step::Limit(n) => write!(f, "Limit {n}"),
            Step::Group { key, accs, count } => write!(f, "Group {key:?} {accs:?} count {count}"),
            Step::Count => write!(f, "Count"),
        }
    }
}

fn key() -> BoxedStrategy<Key> {
    let trunc = (
        prop::sample::select(UNITS.to_vec()),
        prop::sample::select(vec![1, 2, 5, 7, 15]),
    );
    prop_oneof![
        1 => Just(Key::Null),
        3 => prop::sample::select(INPUTS.to_vec()).prop_map(Key::Path),
        3 => (
            prop::option::of(prop::sample::select(INPUTS.to_vec())),
            prop::option::weighted(0.8, trunc),
        )
            .prop_map(|(a, t)| Key::Object(a, t)),
    ]
    .boxed()
}

fn acc() -> BoxedStrategy<Acc> {
    prop::sample::select(vec![
        Acc::Sum,
        Acc::SumOne,
        Acc::Avg,
        Acc::Min,
        Acc::Max,
        Acc::First,
        Acc::Last,
        Acc::Top(true),
        Acc::Top(false),
        Acc::Bottom(true),
        Acc::Bottom(false),
    ])
    .boxed()
}

fn step() -> BoxedStrategy<Step> {
    let projection = filters::projection();
    prop_oneof![
        3 => filters::filter().prop_map(Step::Match),
        1 => prop::collection::vec(field_clause_on(GROUP_PATHS.to_vec()), 1..=2)
            .prop_map(Step::MatchGroups),
        1 => projection.prop_map(|(p, inc, id)| Step::Project(p, inc, id)),
        3 => (
            any::<bool>(),
            any::<bool>(),
            prop::bool::weighted(0.3),
            prop::option::weighted(0.3, 0u8..FIELDS.len() as u8),
        )
            .prop_map(|(by_time_or_count, ascending, meta_first, field_first)| Step::Sort {
                by_time_or_count,
                ascending,
                meta_first,
                field_first,
            }),
        1 => (0u8..20).prop_map(Step::Skip),
        1 => (1u8..20).prop_map(Step::Limit),
        4 => (
            key(),
            prop::collection::vec((acc(), prop::sample::select(INPUTS.to_vec())), 0..=4),
            any::<bool>(),
        )
            .prop_map(|(key, accs, count)| Step::Group { key, accs, count }),
        1 => Just(Step::Count),
    ]
    .boxed()
}

/// A pipeline of 1-6 intended steps.
pub fn pipeline() -> BoxedStrategy<Vec<Step>> {
    prop::collection::vec(step(), 1..=6).boxed()
}

/// What the realised pipeline's stream looks like at a point.
struct Shape {
    /// Measurements (false after `$group`).
    measurements: bool,
    /// Every document has a distinct `_id`.
    unique_id: bool,
    /// The order is fixed by a sort on a unique key.
    ordered: bool,
    /// Fields of group documents besides `_id`.
    fields: Vec<String>,
}

/// A realised pipeline, the model's answer, and whether that answer's order is fixed.
pub struct Built {
    pub stages: Vec<Document>,
    pub want: Vec<Document>,
    pub ordered: bool,
}

impl fmt::Debug for Built {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[")?;
        for (i, s) in self.stages.iter().enumerate() {
            write!(f, "{}{s}", if i > 0 { ", " } else { "" })?;
        }
        write!(f, "]")
    }
}

fn key_doc(k: &Key) -> Bson {
    let path = |p: &str| Bson::String(format!("${p}"));
    match k {
        Key::Null => Bson::Null,
        Key::Path(p) => path(p),
        Key::Object(a, t) => {
            let mut d = Document::new();
            if let Some(a) = a {
                d.insert("a", path(a));
            }
            if let Some((unit, bin)) = t {
                d.insert(
                    "t",
                    doc! {"$dateTrunc": {"date": "$t", "unit": *unit, "binSize": *bin}},
                );
            }
            Bson::Document(d)
        }
    }
}

fn group_doc(
    key: &Key,
    accs: &[(Acc, &str)],
    count: bool,
    ordered: bool,
    unique_id: bool,
) -> (Document, Vec<String>) {
    let mut g = doc! {"_id": key_doc(key)};
    let mut fields = Vec::new();
    for (i, (acc, input)) in accs.iter().enumerate() {
        // $first/$last are only deterministic on an ordered stream, $top/$bottom when their
        // sort ends on a unique `_id`.
        let acc = match (acc, ordered) {
            (Acc::First, false) => Acc::Min,
            (Acc::Last, false) => Acc::Max,
            (Acc::Top(_), _) if !unique_id => Acc::Min,
            (Acc::Bottom(_), _) if !unique_id => Acc::Max,
            (a, _) => *a,
        };
        let top = |op: &str, asc: bool| {
            doc! {op: {
                "sortBy": {*input: if asc { 1 } else { -1 }, "_id": 1},
                "output": format!("${}", INPUTS[(i + 3) % INPUTS.len()]),
            }}
        };
        let (name, op, arg) = match acc {
            Acc::Sum => ("sum", "$sum", Bson::String(format!("${input}"))),
            Acc::SumOne => ("sum", "$sum", Bson::Int32(1)),
            Acc::Avg => ("avg", "$avg", Bson::String(format!("${input}"))),
            Acc::Min => ("min", "$min", Bson::String(format!("${input}"))),
            Acc::Max => ("max", "$max", Bson::String(format!("${input}"))),
            Acc::First => ("first", "$first", Bson::String(format!("${input}"))),
            Acc::Last => ("last", "$last", Bson::String(format!("${input}"))),
            Acc::Top(asc) => {
                let field = format!("top_{i}");
                g.insert(field.clone(), top("$top", asc));
                fields.push(field);
                continue;
            }
            Acc::Bottom(asc) => {
                let field = format!("bottom_{i}");
                g.insert(field.clone(), top("$bottom", asc));
                fields.push(field);
                continue;
            }
        };
        let field = format!("{name}_{i}");
        g.insert(field.clone(), doc! {op: arg});
        fields.push(field);
    }
    if count {
        g.insert("n", doc! {"$count": {}});
        fields.push("n".to_string());
    }
    (g, fields)
}

/// Realises `steps` against `docs` (the collection's measurements), evaluating the model as
/// it goes so operands can be picked from the stream each stage sees.
pub fn build(steps: &[Step], ctx: &Ctx, docs: &[Document]) -> Built {
    let mut shape = Shape {
        measurements: true,
        unique_id: true,
        ordered: false,
        fields: Vec::new(),
    };
    let mut stream: Vec<Document> = docs.to_vec();
    let mut stages = Vec::new();
    for step in steps {
        let stage = match step {
            Step::Match(f) if shape.measurements => {
                Some(doc! {"$match": Operands { ctx, docs: &stream }.filter(f)})
            }
            Step::MatchGroups(f) if !shape.measurements => {
                Some(doc! {"$match": Operands { ctx, docs: &stream }.filter(f)})
            }
            Step::Project(paths, include, id) => {
                let mut p = Document::new();
                if let Some(id) = id {
                    p.insert("_id", i32::from(*id));
                }
                if shape.measurements {
                    for path in paths {
                        p.insert(*path, i32::from(*include));
                    }
                } else {
                    // After $group, the paths' positions pick group fields.
                    for path in paths {
                        if !shape.fields.is_empty() {
                            let f = &shape.fields[path.len() % shape.fields.len()];
                            p.insert(f.clone(), i32::from(*include));
                        }
                    }
                }
                if p.is_empty() {
                    None
                } else {
                    if matches!(p.get("_id"), Some(Bson::Int32(0))) {
                        shape.unique_id = false;
                    }
                    if !shape.measurements {
                        let inclusion = p.iter().any(|(k, v)| k != "_id" && v == &Bson::Int32(1))
                            || (p.len() == 1 && p.get("_id") == Some(&Bson::Int32(1)));
                        shape
                            .fields
                            .retain(|f| p.contains_key(f.as_str()) == inclusion);
                    }
                    Some(doc! {"$project": p})
                }
            }
            Step::Sort {
                by_time_or_count,
                ascending,
                meta_first,
                field_first,
            } if shape.unique_id => {
                let dir = if *ascending { 1 } else { -1 };
                let mut s = Document::new();
                if *meta_first && shape.measurements {
                    s.insert("m.a", 1);
                } else if let (Some(i), true) = (field_first, shape.measurements) {
                    s.insert(FIELDS[usize::from(*i) % FIELDS.len()], dir);
                }
                if *by_time_or_count && shape.measurements {
                    s.insert("t", dir);
                } else if *by_time_or_count && shape.fields.iter().any(|f| f == "n") {
                    s.insert("n", dir);
                }
                s.insert("_id", if s.is_empty() { dir } else { 1 });
                shape.ordered = true;
                Some(doc! {"$sort": s})
            }
            Step::Skip(n) if shape.ordered => Some(doc! {"$skip": i64::from(*n)}),
            // Drivers send small counts as int32 or int64: both must work.
            Step::Limit(n) if shape.ordered => Some(doc! {"$limit": i32::from(*n)}),
            Step::Group { key, accs, count } if shape.measurements => {
                let (g, fields) = group_doc(key, accs, *count, shape.ordered, shape.unique_id);
                shape = Shape {
                    measurements: false,
                    // Array keys sort by an element, so `[1]` and `1` are two groups that tie.
                    unique_id: !matches!(key, Key::Path(p) if ARRAY_PATHS.contains(p)),
                    ordered: false,
                    fields,
                };
                Some(doc! {"$group": g})
            }
            Step::Count => Some(doc! {"$count": "total"}),
            _ => None,
        };
        if let Some(stage) = stage {
            stream = eval_stage(&stage, stream);
            let done = stage.contains_key("$count");
            stages.push(stage);
            if done {
                shape.ordered = true;
                break;
            }
        }
    }
    Built {
        stages,
        want: stream,
        ordered: shape.ordered,
    }
}
