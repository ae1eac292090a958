//! The formulation matrix: each benchmark question written in the ways MongoDB users write it
//! (sort before or after, `$first` against `$last` with the opposite sort, a `$project` or not,
//! a `$limit` or not, `find` against `aggregate`, `$top`/`$bottom` against a sort and
//! `$first`/`$last`). Every form of a question must give the same
//! answer; the benchmark times each form, and a test checks the answers on small data.
//!
//! Devops: the 15 TSBS cpu-only query types, with fixed windows (within the data) and fixed
//! hosts instead of TSBS's random ones. Seed 004: its two questions, plus the sorted report.

use super::devops::{Devops, FIELDS};
use tsbucket::bson::{doc, Bson, DateTime, Document};
use tsbucket::{Collection, FindOptions, Result};

const MINUTE_MS: i64 = 60_000;
const HOUR_MS: i64 = 3_600_000;

/// One way of asking a question.
#[derive(Debug, Clone)]
pub enum Form {
    /// `Collection::aggregate` with this pipeline.
    Aggregate(Vec<Document>),
    /// `Collection::find_with` with this filter and these options.
    Find(Document, Box<FindOptions>),
    /// [`Form::Find`] with the documents taken as BSON bytes appended to one buffer
    /// (`Cursor::next_into`), as a server or an export takes them.
    FindBson(Document, Box<FindOptions>),
    /// [`Form::Aggregate`] with the documents taken as BSON bytes, as [`Form::FindBson`].
    AggregateBson(Vec<Document>),
}

/// What a form returned.
#[derive(Debug)]
pub enum Answer {
    /// Documents.
    Docs(Vec<Document>),
    /// BSON documents one after another, and how many.
    Bson(Vec<u8>, usize),
}

impl Default for Answer {
    fn default() -> Answer {
        Answer::Docs(Vec::new())
    }
}

impl Answer {
    /// Number of documents.
    pub fn len(&self) -> usize {
        match self {
            Answer::Docs(d) => d.len(),
            Answer::Bson(_, n) => *n,
        }
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The documents.
    pub fn into_documents(self) -> Result<Vec<Document>> {
        match self {
            Answer::Docs(d) => Ok(d),
            Answer::Bson(bytes, _) => {
                let mut out = Vec::new();
                let mut rest = bytes.as_slice();
                while !rest.is_empty() {
                    out.push(
                        Document::from_reader(&mut rest)
                            .map_err(|e| tsbucket::Error::Internal(e.to_string()))?,
                    );
                }
                Ok(out)
            }
        }
    }
}

/// A question and its forms.
#[derive(Debug, Clone)]
pub struct Question {
    /// Which data it reads: "devops" or "seed004".
    pub data: &'static str,
    /// The question's name (TSBS's name for the devops ones).
    pub name: String,
    /// Whether the answer's order is part of it (every form sorts the same way).
    pub ordered: bool,
    /// (form name, form).
    pub forms: Vec<(&'static str, Form)>,
}

impl Form {
    /// True for the forms that take documents as BSON bytes rather than `Document`s: a
    /// different product of the same query, compared among themselves.
    pub fn returns_bson(&self) -> bool {
        matches!(self, Form::FindBson(..) | Form::AggregateBson(..))
    }

    /// Runs the form.
    pub fn run(&self, c: &Collection) -> Result<Answer> {
        match self {
            Form::Aggregate(p) => Ok(Answer::Docs(
                c.aggregate(p.clone())?.collect::<Result<_>>()?,
            )),
            Form::Find(f, o) => Ok(Answer::Docs(
                c.find_with(f.clone(), (**o).clone())?
                    .collect::<Result<_>>()?,
            )),
            Form::FindBson(f, o) => bson(c.find_with(f.clone(), (**o).clone())?),
            Form::AggregateBson(p) => bson(c.aggregate(p.clone())?),
        }
    }
}

/// Every document `cursor` gives, as BSON bytes one after another.
fn bson(mut cursor: tsbucket::Cursor) -> Result<Answer> {
    let (mut bytes, mut n) = (Vec::new(), 0);
    while cursor.next_into(&mut bytes)? {
        n += 1;
    }
    Ok(Answer::Bson(bytes, n))
}

/// An answer in a form that compares across formulations: documents as text with doubles to
/// 12 significant digits (sums in another order may differ in the last bits), in order when
/// `ordered`, else sorted.
pub fn canonical(docs: &[Document], ordered: bool) -> Vec<String> {
    fn value(v: &Bson, out: &mut String) {
        match v {
            Bson::Double(d) => out.push_str(&format!("{d:.11e}")),
            // An integral double and an integer are the same number to a user.
            Bson::Int32(i) => out.push_str(&format!("{:.11e}", f64::from(*i))),
            Bson::Int64(i) => out.push_str(&format!("{:.11e}", *i as f64)),
            Bson::Document(d) => document(d, out),
            Bson::Array(a) => {
                out.push('[');
                for x in a {
                    value(x, out);
                    out.push(',');
                }
                out.push(']');
            }
            other => out.push_str(&other.to_string()),
        }
    }
    fn document(d: &Document, out: &mut String) {
        out.push('{');
        for (k, v) in d {
            out.push_str(k);
            out.push(':');
            value(v, out);
            out.push(',');
        }
        out.push('}');
    }
    let mut v: Vec<String> = docs
        .iter()
        .map(|d| {
            let mut s = String::new();
            document(d, &mut s);
            s
        })
        .collect();
    if !ordered {
        v.sort();
    }
    v
}

fn trunc(date: &str, unit: &str) -> Bson {
    Bson::Document(doc! {"$dateTrunc": {"date": date, "unit": unit}})
}

fn window(lo: i64, hi: i64) -> Document {
    doc! {"$gte": DateTime::from_millis(lo), "$lt": DateTime::from_millis(hi)}
}

fn host_name(i: usize) -> String {
    format!("host_{i}")
}

/// `n` hosts spread over the data's hosts.
fn hosts(cfg: &Devops, n: usize) -> Vec<String> {
    (0..n)
        .map(|i| host_name((i * cfg.hosts.max(1) / n.max(1) + cfg.hosts / 2) % cfg.hosts.max(1)))
        .collect()
}

fn host_match(hosts: &[String]) -> Bson {
    match hosts {
        [one] => Bson::String(one.clone()),
        many => Bson::Document(doc! {"$in": many.to_vec()}),
    }
}

/// A window of `hours` ending at the data's last full minute (clamped to the data), so that
/// windows of different lengths share their end, as in TSBS.
fn window_of(cfg: &Devops, hours: f64) -> (i64, i64) {
    let span = (cfg.hours * HOUR_MS as f64) as i64;
    let end = cfg.start_ms + span;
    let end = end - end.rem_euclid(MINUTE_MS) - 7 * MINUTE_MS;
    let lo = (end - (hours * HOUR_MS as f64) as i64).max(cfg.start_ms);
    (lo, end)
}

fn inclusion(fields: &[&str], extra: &[&str]) -> Document {
    let mut d = doc! {"_id": 0};
    for f in extra.iter().chain(fields) {
        d.insert(*f, 1);
    }
    d
}

/// `single-groupby-M-H-T` and `cpu-max-all-H`: the max of `metrics` per `unit` for `hosts`
/// over the last `hours`, sorted by time.
fn max_per_period(
    cfg: &Devops,
    name: String,
    metrics: &[&str],
    nhosts: usize,
    hours: f64,
    unit: &str,
) -> Question {
    let (lo, hi) = window_of(cfg, hours);
    let m =
        doc! {"$match": {"tags.hostname": host_match(&hosts(cfg, nhosts)), "time": window(lo, hi)}};
    let mut group = doc! {"_id": trunc("$time", unit)};
    for f in metrics {
        group.insert(format!("max_{f}"), doc! {"$max": format!("${f}")});
    }
    let group = doc! {"$group": group};
    let sort = doc! {"$sort": {"_id": 1}};
    Question {
        data: "devops",
        name,
        ordered: true,
        forms: vec![
            (
                "match-group-sort",
                Form::Aggregate(vec![m.clone(), group.clone(), sort.clone()]),
            ),
            (
                "project-first",
                Form::Aggregate(vec![
                    m.clone(),
                    doc! {"$project": inclusion(metrics, &["time"])},
                    group.clone(),
                    sort.clone(),
                ]),
            ),
            (
                "sort-time-first",
                Form::Aggregate(vec![
                    doc! {"$sort": {"time": 1}},
                    m.clone(),
                    group.clone(),
                    sort.clone(),
                ]),
            ),
        ],
    }
}

/// `double-groupby-M`: the average of `metrics` per host and hour over 12 hours.
fn double_groupby(cfg: &Devops, name: &str, metrics: &[&str]) -> Question {
    let (lo, hi) = window_of(cfg, 12.0);
    let m = doc! {"$match": {"time": window(lo, hi)}};
    let mut group = doc! {"_id": {"host": "$tags.hostname", "hour": trunc("$time", "hour")}};
    for f in metrics {
        group.insert(format!("avg_{f}"), doc! {"$avg": format!("${f}")});
    }
    let group = doc! {"$group": group};
    Question {
        data: "devops",
        name: name.to_string(),
        ordered: false,
        forms: vec![
            ("unsorted", Form::Aggregate(vec![m.clone(), group.clone()])),
            (
                "sorted-host-hour",
                Form::Aggregate(vec![
                    m.clone(),
                    group.clone(),
                    doc! {"$sort": {"_id.host": 1, "_id.hour": 1}},
                ]),
            ),
            (
                "project-first",
                Form::Aggregate(vec![
                    m.clone(),
                    doc! {"$project": inclusion(metrics, &["time", "tags.hostname"])},
                    group.clone(),
                ]),
            ),
        ],
    }
}

/// `high-cpu-all` and `high-cpu-1`: the measurements with usage_user > 90 over 12 hours,
/// returned with a projection.
fn high_cpu(cfg: &Devops, name: &str, one_host: bool) -> Question {
    let (lo, hi) = window_of(cfg, 12.0);
    let mut filter = doc! {"usage_user": {"$gt": 90}, "time": window(lo, hi)};
    if one_host {
        filter.insert("tags.hostname", host_match(&hosts(cfg, 1)));
    }
    let project = inclusion(&["usage_user", "usage_system"], &["time", "tags.hostname"]);
    let projected = Box::new(FindOptions {
        projection: Some(project.clone()),
        ..FindOptions::default()
    });
    Question {
        data: "devops",
        name: name.to_string(),
        ordered: false,
        forms: vec![
            ("find", Form::Find(filter.clone(), projected.clone())),
            ("find-bson", Form::FindBson(filter.clone(), projected)),
            (
                "match-project",
                Form::Aggregate(vec![
                    doc! {"$match": filter.clone()},
                    doc! {"$project": project.clone()},
                ]),
            ),
            (
                "match-project-bson",
                Form::AggregateBson(vec![
                    doc! {"$match": filter.clone()},
                    doc! {"$project": project.clone()},
                ]),
            ),
            (
                "project-match",
                Form::Aggregate(vec![
                    doc! {"$project": inclusion(&["usage_user", "usage_system"], &["time", "tags.hostname"])},
                    doc! {"$match": filter.clone()},
                ]),
            ),
        ],
    }
}

/// `lastpoint`: each host's newest measurement of every metric.
fn lastpoint() -> Question {
    let acc = |op: &str| {
        let mut g = doc! {"_id": "$tags.hostname", "time": {op: "$time"}};
        for f in FIELDS {
            g.insert(f, doc! {op: format!("${f}")});
        }
        doc! {"$group": g}
    };
    Question {
        data: "devops",
        name: "lastpoint".into(),
        ordered: false,
        forms: vec![
            (
                "sort-time-asc-last",
                Form::Aggregate(vec![doc! {"$sort": {"time": 1}}, acc("$last")]),
            ),
            (
                "sort-time-desc-first",
                Form::Aggregate(vec![doc! {"$sort": {"time": -1}}, acc("$first")]),
            ),
            (
                "sort-host-asc-time-desc-first",
                Form::Aggregate(vec![
                    doc! {"$sort": {"tags.hostname": 1, "time": -1}},
                    acc("$first"),
                ]),
            ),
            (
                "sort-host-asc-time-asc-last",
                Form::Aggregate(vec![
                    doc! {"$sort": {"tags.hostname": 1, "time": 1}},
                    acc("$last"),
                ]),
            ),
            ("top-time-desc", Form::Aggregate(vec![top("$top", -1)])),
            ("bottom-time-asc", Form::Aggregate(vec![top("$bottom", 1)])),
        ],
    }
}

/// The last point per host with `$top`/`$bottom` (MongoDB 5.2 on): each field the output
/// of the document first (last) by time in direction `dir`.
fn top(op: &str, dir: i32) -> Document {
    let by = doc! {"time": dir};
    let mut g =
        doc! {"_id": "$tags.hostname", "time": {op: {"sortBy": by.clone(), "output": "$time"}}};
    for f in FIELDS {
        g.insert(
            f,
            doc! {op: {"sortBy": by.clone(), "output": format!("${f}")}},
        );
    }
    doc! {"$group": g}
}

/// `groupby-orderby-limit`: the 5 latest minutes' max usage_user before a time.
fn groupby_orderby_limit(cfg: &Devops) -> Question {
    let (_, hi) = window_of(cfg, 1.0);
    let m = doc! {"$match": {"time": {"$lt": DateTime::from_millis(hi)}}};
    let group = doc! {"$group": {"_id": trunc("$time", "minute"), "max_usage_user": {"$max": "$usage_user"}}};
    let tail = [doc! {"$sort": {"_id": -1}}, doc! {"$limit": 5}];
    Question {
        data: "devops",
        name: "groupby-orderby-limit".into(),
        ordered: true,
        forms: vec![
            (
                "match-group-sort-limit",
                Form::Aggregate([vec![m.clone(), group.clone()], tail.to_vec()].concat()),
            ),
            (
                "project-first",
                Form::Aggregate(
                    [
                        vec![
                            m.clone(),
                            doc! {"$project": inclusion(&["usage_user"], &["time"])},
                            group.clone(),
                        ],
                        tail.to_vec(),
                    ]
                    .concat(),
                ),
            ),
        ],
    }
}

/// One host's latest 10 measurements: not a TSBS type, but the query `find` streams and
/// `aggregate` must too.
fn host_latest(cfg: &Devops) -> Question {
    let host = host_match(&hosts(cfg, 1));
    let latest = Box::new(FindOptions {
        sort: Some(doc! {"time": -1}),
        limit: Some(10),
        ..FindOptions::default()
    });
    Question {
        data: "devops",
        name: "host-latest-10".into(),
        ordered: true,
        forms: vec![
            (
                "find",
                Form::Find(doc! {"tags.hostname": host.clone()}, latest.clone()),
            ),
            (
                "find-bson",
                Form::FindBson(doc! {"tags.hostname": host.clone()}, latest),
            ),
            (
                "match-sort-limit",
                Form::Aggregate(vec![
                    doc! {"$match": {"tags.hostname": host.clone()}},
                    doc! {"$sort": {"time": -1}},
                    doc! {"$limit": 10},
                ]),
            ),
            (
                "sort-match-limit",
                Form::Aggregate(vec![
                    doc! {"$sort": {"time": -1}},
                    doc! {"$match": {"tags.hostname": host}},
                    doc! {"$limit": 10},
                ]),
            ),
        ],
    }
}

/// The ten highest `usage_user` readings: a sort on a measurement field with a limit, which
/// the buckets' bounds of the field let the engine answer from the few buckets that can win.
fn top_usage() -> Question {
    let top = Box::new(FindOptions {
        sort: Some(doc! {"usage_user": -1}),
        limit: Some(10),
        ..FindOptions::default()
    });
    Question {
        data: "devops",
        name: "top-usage-10".into(),
        ordered: true,
        forms: vec![
            ("find", Form::Find(Document::new(), top.clone())),
            ("find-bson", Form::FindBson(Document::new(), top)),
            (
                "sort-limit",
                Form::Aggregate(vec![
                    doc! {"$sort": {"usage_user": -1}},
                    doc! {"$limit": 10},
                ]),
            ),
            (
                "limit-after-skip-0",
                Form::Aggregate(vec![
                    doc! {"$sort": {"usage_user": -1}},
                    doc! {"$skip": 0},
                    doc! {"$limit": 10},
                ]),
            ),
        ],
    }
}

/// How many measurements have each value of `usage_user`: a group keyed on a measurement
/// field rather than the meta value or time.
fn usage_histogram() -> Question {
    let group = |n: Bson| doc! {"$group": {"_id": "$usage_user", "n": n}};
    let sort = doc! {"$sort": {"_id": 1}};
    Question {
        data: "devops",
        name: "usage-histogram".into(),
        ordered: true,
        forms: vec![
            (
                "sum-1",
                Form::Aggregate(vec![group(doc! {"$sum": 1}.into()), sort.clone()]),
            ),
            (
                "count",
                Form::Aggregate(vec![group(doc! {"$count": {}}.into()), sort.clone()]),
            ),
            (
                "project-first",
                Form::Aggregate(vec![
                    doc! {"$project": {"usage_user": 1, "_id": 0}},
                    group(doc! {"$count": {}}.into()),
                    sort,
                ]),
            ),
        ],
    }
}

/// When each host was busiest: the earliest time of its highest `usage_user`, by a sort on
/// a measurement field rather than time.
fn busiest_time() -> Question {
    let out = Bson::Array(vec!["$time".into(), "$usage_user".into()]);
    let group = |acc: Document| doc! {"$group": {"_id": "$tags.hostname", "m": acc}};
    let pick = |op: &str, by: Document| doc! {op: {"sortBy": by, "output": out.clone()}};
    let (desc, asc) = (
        doc! {"usage_user": -1, "time": 1},
        doc! {"usage_user": 1, "time": -1},
    );
    Question {
        data: "devops",
        name: "busiest-time".into(),
        ordered: false,
        forms: vec![
            (
                "top",
                Form::Aggregate(vec![group(pick("$top", desc.clone()))]),
            ),
            (
                "bottom",
                Form::Aggregate(vec![group(pick("$bottom", asc.clone()))]),
            ),
            (
                "sort-first",
                Form::Aggregate(vec![
                    doc! {"$sort": desc},
                    group(doc! {"$first": out.clone()}),
                ]),
            ),
            (
                "sort-last",
                Form::Aggregate(vec![
                    doc! {"$sort": asc},
                    group(doc! {"$last": out.clone()}),
                ]),
            ),
        ],
    }
}

/// The devops questions: the 15 TSBS cpu-only query types, then `host-latest-10`,
/// `top-usage-10`, `usage-histogram` and `busiest-time`.
pub fn devops_matrix(cfg: &Devops) -> Vec<Question> {
    let mut out = Vec::new();
    for (m, h, t) in [
        (1, 1, 1),
        (1, 1, 12),
        (1, 8, 1),
        (5, 1, 1),
        (5, 1, 12),
        (5, 8, 1),
    ] {
        let metrics = FIELDS.get(..m).unwrap_or(&FIELDS);
        out.push(max_per_period(
            cfg,
            format!("single-groupby-{m}-{h}-{t}"),
            metrics,
            h,
            t as f64,
            "minute",
        ));
    }
    for h in [1, 8] {
        out.push(max_per_period(
            cfg,
            format!("cpu-max-all-{h}"),
            &FIELDS,
            h,
            8.0,
            "hour",
        ));
    }
    out.push(double_groupby(cfg, "double-groupby-1", &FIELDS[..1]));
    out.push(double_groupby(cfg, "double-groupby-5", &FIELDS[..5]));
    out.push(double_groupby(cfg, "double-groupby-all", &FIELDS));
    out.push(high_cpu(cfg, "high-cpu-all", false));
    out.push(high_cpu(cfg, "high-cpu-1", true));
    out.push(lastpoint());
    out.push(groupby_orderby_limit(cfg));
    out.push(host_latest(cfg));
    out.push(top_usage());
    out.push(usage_histogram());
    out.push(busiest_time());
    out
}

/// The seed 004 questions: count per period, and the sum per (period, vCmdid) with and
/// without the sort a report has.
pub fn seed004_matrix() -> Vec<Question> {
    let count =
        |acc: Document| doc! {"$group": {"_id": trunc("$timestamp", "minute"), "count": acc}};
    let sum_group = doc! {"$group": {
        "_id": {"period": trunc("$timestamp", "minute"), "cmd": "$dims.vCmdid"},
        "total": {"$sum": "$totalCount"},
    }};
    let m = doc! {"$match": {"dims.vAppid": {"$ne": ""}}};
    vec![
        Question {
            data: "seed004",
            name: "count-per-period".into(),
            ordered: true,
            forms: vec![
                (
                    "count",
                    Form::Aggregate(vec![count(doc! {"$count": {}}), doc! {"$sort": {"_id": 1}}]),
                ),
                (
                    "sum-1",
                    Form::Aggregate(vec![count(doc! {"$sum": 1}), doc! {"$sort": {"_id": 1}}]),
                ),
                (
                    "project-first",
                    Form::Aggregate(vec![
                        doc! {"$project": {"timestamp": 1}},
                        count(doc! {"$count": {}}),
                        doc! {"$sort": {"_id": 1}},
                    ]),
                ),
            ],
        },
        Question {
            data: "seed004",
            name: "sum-per-period-cmd".into(),
            ordered: false,
            forms: vec![
                (
                    "unsorted",
                    Form::Aggregate(vec![m.clone(), sum_group.clone()]),
                ),
                (
                    "sorted-period-cmd",
                    Form::Aggregate(vec![
                        m.clone(),
                        sum_group.clone(),
                        doc! {"$sort": {"_id.period": 1, "_id.cmd": 1}},
                    ]),
                ),
                (
                    "sorted-id",
                    Form::Aggregate(vec![
                        m.clone(),
                        sum_group.clone(),
                        doc! {"$sort": {"_id": 1}},
                    ]),
                ),
                (
                    "project-first",
                    Form::Aggregate(vec![
                        m.clone(),
                        doc! {"$project": {"timestamp": 1, "dims.vCmdid": 1, "totalCount": 1}},
                        sum_group.clone(),
                    ]),
                ),
            ],
        },
    ]
}
