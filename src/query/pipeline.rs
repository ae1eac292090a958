//! Parsing an aggregation pipeline into typed stages.
//!
//! Supported: `$match $project $group $sort $skip $limit $count`. The `$match` stages before
//! any other stage are merged into one filter, which is pushed down to bucket selection;
//! `$count: name` becomes `$group {_id: null, name: {$sum: 1}}` plus `$project {_id: 0}`, as
//! MongoDB defines it (so an empty input gives no document).

use crate::query::aggregate::accumulators::{AccOp, AccSpec};
use super::expr::Expr;
use super::filter::Filter;
use crate::query::aggregate::table::GroupSpec;
use super::options::parse_sort;
use super::project::Project;
use crate::error::{Error, Result};
use bson::{doc, Bson, Document};

/// One stage after the leading `$match` stages.
#[derive(Debug, Clone)]
pub enum Stage {
    /// `$match`
    Match(Filter),
    /// `$project`
    Project(Project),
    /// `$group`
    Group(GroupSpec),
    /// `$sort`: (path, ascending).
    Sort(Vec<(String, bool)>),
    /// `$skip`
    Skip(u64),
    /// `$limit`
    Limit(u64),
}

/// A parsed pipeline.
#[derive(Debug, Clone)]
pub struct Pipeline {
    /// The leading `$match` stages, merged.
    pub filter: Filter,
    /// The remaining stages.
    pub stages: Vec<Stage>,
}

fn bad(msg: impl Into<String>) -> Error {
    Error::BadValue(msg.into())
}

/// A non-negative integral count (`$skip`, `$limit`).
fn count(stage: &str, v: &Bson) -> Result<u64> {
    let n = match v {
        Bson::Int32(i) => Some(i64::from(*i)),
        Bson::Int64(i) => Some(*i),
        Bson::Double(d) if d.fract() == 0.0 && d.abs() < 9.2e18 => Some(*d as i64),
        _ => None,
    };
    match n {
        Some(n) if n >= 0 => Ok(n as u64),
        _ => Err(bad(format!(
            "{stage} must be a non-negative 64-bit integer, got {v}"
        ))),
    }
}

fn parse_group(v: &Bson) -> Result<GroupSpec> {
    let Bson::Document(d) = v else {
        return Err(bad(
            "a $group stage's fields must be specified in an object",
        ));
    };
    let id = d
        .get("_id")
        .ok_or_else(|| bad("a $group specification must include an _id"))?;
    let id = Expr::parse(id)?;
    let mut accs = Vec::new();
    for (name, spec) in d.iter().filter(|(k, _)| k.as_str() != "_id") {
        if name.starts_with('$') || name.contains('.') || name.is_empty() {
            return Err(bad(format!("$group: invalid output field name '{name}'")));
        }
        let acc = match spec {
            Bson::Document(a) if a.len() == 1 => a,
            _ => {
                return Err(bad(format!(
                    "$group: field '{name}' must be an object with one accumulator, \
                     e.g. {{$sum: 1}}"
                )))
            }
        };
        let Some((op, arg)) = acc.iter().next() else {
            return Err(bad(format!("$group: field '{name}' has no accumulator")));
        };
        let (op, arg) = match op.as_str() {
            "$sum" => (AccOp::Sum, Expr::parse(arg)?),
            "$avg" => (AccOp::Avg, Expr::parse(arg)?),
            "$min" => (AccOp::Min, Expr::parse(arg)?),
            "$max" => (AccOp::Max, Expr::parse(arg)?),
            "$first" => (AccOp::First, Expr::parse(arg)?),
            "$last" => (AccOp::Last, Expr::parse(arg)?),
            "$top" | "$bottom" => parse_top(name, op, arg)?,
            "$count" => match arg {
                Bson::Document(x) if x.is_empty() => (AccOp::Sum, Expr::Const(Bson::Int32(1))),
                _ => return Err(bad("$count takes no arguments, i.e. $count: {}")),
            },
            other => {
                return Err(bad(format!(
                    "unknown or unsupported group accumulator '{other}' \
                     (supported: $sum $avg $min $max $first $last $top $bottom $count)"
                )))
            }
        };
        accs.push(AccSpec {
            name: name.clone(),
            op,
            arg,
        });
    }
    Ok(GroupSpec { id, accs })
}

/// `$top`/`$bottom`: `{sortBy: {path: 1 | -1, ...}, output: <expression>}`, as an operator
/// and the array expression of its sort keys' paths and output.
fn parse_top(name: &str, op: &str, arg: &Bson) -> Result<(AccOp, Expr)> {
    let Bson::Document(d) = arg else {
        return Err(bad(format!(
            "$group: '{name}': {op} takes an object {{sortBy, output}}"
        )));
    };
    if let Some(k) = d.keys().find(|k| *k != "sortBy" && *k != "output") {
        return Err(bad(format!("$group: '{name}': unknown field '{k}' in {op}")));
    }
    let (Some(Bson::Document(sort)), Some(output)) = (d.get("sortBy"), d.get("output")) else {
        return Err(bad(format!(
            "$group: '{name}': {op} needs 'sortBy' (an object) and 'output'"
        )));
    };
    let keys = parse_sort(sort)?;
    if keys.is_empty() || keys.len() > 32 {
        return Err(bad(format!(
            "$group: '{name}': {op} needs 1 to 32 sortBy keys"
        )));
    }
    let mut descending = 0u32;
    let mut items = Vec::with_capacity(keys.len() + 1);
    for (i, (path, asc)) in keys.into_iter().enumerate() {
        if !asc {
            descending |= 1 << i;
        }
        items.push(Expr::Path(path));
    }
    items.push(Expr::parse(output)?);
    Ok((
        AccOp::Top {
            descending,
            bottom: op == "$bottom",
        },
        Expr::Array(items),
    ))
}

fn parse_count(v: &Bson) -> Result<[Stage; 2]> {
    let name = match v {
        Bson::String(s) if !s.is_empty() && !s.starts_with('$') && !s.contains('.') => s,
        _ => {
            return Err(bad(
                "$count must be a non-empty string not starting with '$' and without '.'",
            ))
        }
    };
    Ok([
        Stage::Group(GroupSpec {
            id: Expr::Const(Bson::Null),
            accs: vec![AccSpec {
                name: name.clone(),
                op: AccOp::Sum,
                arg: Expr::Const(Bson::Int32(1)),
            }],
        }),
        Stage::Project(Project::parse(&doc! {"_id": 0})?),
    ])
}

impl Pipeline {
    /// Parses the stage documents.
    pub fn parse(stages: &[Document]) -> Result<Pipeline> {
        let mut leading = Vec::new();
        let mut out = Vec::new();
        for (i, s) in stages.iter().enumerate() {
            crate::depth::check(s, &format!("pipeline stage {i}"))?;
            let mut it = s.iter();
            let (Some((name, arg)), None) = (it.next(), it.next()) else {
                return Err(bad(format!(
                    "pipeline stage {i} must be an object with exactly one field, got {s}"
                )));
            };
            let stage = match name.as_str() {
                "$match" => {
                    let Bson::Document(f) = arg else {
                        return Err(bad("the $match filter must be an object"));
                    };
                    let f = Filter::parse_checked(f)?;
                    if out.is_empty() {
                        leading.push(f);
                        continue;
                    }
                    Stage::Match(f)
                }
                "$project" => match arg {
                    Bson::Document(p) => Stage::Project(Project::parse(p)?),
                    _ => return Err(bad("$project specification must be an object")),
                },
                "$group" => Stage::Group(parse_group(arg)?),
                "$sort" => match arg {
                    Bson::Document(k) if !k.is_empty() => Stage::Sort(parse_sort(k)?),
                    _ => return Err(bad("$sort must be a non-empty object")),
                },
                "$skip" => Stage::Skip(count("$skip", arg)?),
                "$limit" => match count("$limit", arg)? {
                    0 => return Err(bad("the $limit must be positive")),
                    n => Stage::Limit(n),
                },
                "$count" => {
                    out.extend(parse_count(arg)?);
                    continue;
                }
                other => {
                    return Err(bad(format!(
                        "unsupported pipeline stage '{other}' (supported: $match $project \
                         $group $sort $skip $limit $count)"
                    )))
                }
            };
            out.push(stage);
        }
        let filter = match leading.len() {
            0 => Filter::True,
            1 => leading.pop().unwrap_or(Filter::True),
            _ => Filter::And(leading),
        };
        Ok(Pipeline {
            filter,
            stages: out,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leading_matches_merge_and_count_desugars() {
        let p = Pipeline::parse(&[
            doc! {"$match": {"a": 1}},
            doc! {"$match": {"b": 2}},
            doc! {"$count": "n"},
            doc! {"$match": {"n": 3}},
        ])
        .unwrap();
        assert_eq!(p.filter.conjuncts().len(), 2);
        assert!(matches!(
            p.stages.as_slice(),
            [Stage::Group(_), Stage::Project(_), Stage::Match(_)]
        ));
    }

    #[test]
    fn malformed_or_unsupported_stages_are_bad_value() {
        for s in [
            doc! {"$lookup": {"from": "x"}},
            doc! {"$unwind": "$a"},
            doc! {"$bucket": {}},
            doc! {"$match": {"a": 1}, "$limit": 1},
            doc! {"$match": 1},
            doc! {"$group": {"n": {"$sum": 1}}},
            doc! {"$group": {"_id": null, "n": {"$push": "$a"}}},
            doc! {"$group": {"_id": null, "n": {"$sum": 1, "$avg": 1}}},
            doc! {"$group": {"_id": null, "n": 1}},
            doc! {"$group": {"_id": null, "n": {"$top": {"output": "$a"}}}},
            doc! {"$group": {"_id": null, "n": {"$top": {"sortBy": {}, "output": "$a"}}}},
            doc! {"$group": {"_id": null, "n": {"$top": {"sortBy": {"t": 2}, "output": "$a"}}}},
            doc! {"$group": {"_id": null, "n": {"$bottom": {"sortBy": {"t": 1}}}}},
            doc! {"$group": {"_id": null, "n": {"$bottom": {"sortBy": {"t": 1}, "output": 1, "n": 2}}}},
            doc! {"$group": {"_id": null, "n": {"$top": "$a"}}},
            doc! {"$group": {"_id": null, "n": {"$count": 1}}},
            doc! {"$group": {"_id": {"$add": [1]}}},
            doc! {"$sort": {}},
            doc! {"$sort": {"a": 2}},
            doc! {"$skip": -1},
            doc! {"$limit": 0},
            doc! {"$limit": "a"},
            doc! {"$count": ""},
            doc! {"$count": "$n"},
            doc! {"$count": "a.b"},
        ] {
            let e = Pipeline::parse(std::slice::from_ref(&s)).unwrap_err();
            assert_eq!(e.code(), Some(2), "{s}");
        }
    }
}
